"""The batching engine over a Tinker `SamplingClient`: SkyRL's generator sends token ids and gets the
sampled token ids, their logprobs and stop reasons back, exactly as from the in-process engines.

Each wave's prompts go to the server at once (one `sample` each, in the wave's canonical order, each
with a seed drawn from the engine's RNG, so a seeded run asks for the same samples again). A Tinker
sampler has no end-of-sequence stop of its own and cannot mix stop strings with stop token ids, so the
EOS token joins the stop strings as text; SkyRL's local server applies stop strings after generating
`max_tokens` (every turn costs the full budget there), hosted Tinker as it samples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from mcprl.inference.engine import (
    BatchingEngine,
    Completion,
    InferenceError,
    SamplingParams,
    UnsupportedSampling,
    stop_cut,
)

Alive = Callable[[], bool]


class TinkerServerGone(InferenceError, RuntimeError):
    """The server a request waits on stopped (the SDK would retry it for ever)."""


def result(future: Any, alive: Alive | None = None, poll_s: float = 5.0) -> Any:
    """`future.result()`, checking every `poll_s` that a server we started still runs."""
    if alive is None:
        return future.result()
    while True:
        try:
            return future.result(timeout=poll_s)
        except TimeoutError:
            if not alive():
                raise TinkerServerGone("the Tinker server stopped while a request waited on it") from None


class TinkerSamplingEngine(BatchingEngine):
    """`sampling_client` is a `tinker.SamplingClient`; `sync_weights` is not how it follows training:
    the trainer hands it each step's new client with `follow`."""

    def __init__(self, sampling_client: Any, tokenizer: PreTrainedTokenizerBase, *, context: int,
                 alive: Alive | None = None, **options: Any):
        super().__init__(tokenizer, context=context, **options)
        self.client = sampling_client
        self.alive = alive

    def follow(self, sampling_client: Any) -> None:
        self.client = sampling_client

    def sync_weights(self) -> None:  # the trainer's `follow` is the weight sync
        pass

    def tinker_params(self, params: SamplingParams, prompt_len: int) -> dict[str, Any]:
        if params.min_p:
            raise UnsupportedSampling(f"min_p={params.min_p}: the Tinker API has no min_p; set it to 0")
        if params.min_tokens > 1:  # SkyRL asks for 1 (no empty turn); an EOS first is rare enough to allow
            raise UnsupportedSampling(f"min_tokens={params.min_tokens}: the Tinker API has no min_tokens; set it to 0")
        stops = list(params.stop)
        stops += [self.tokenizer.decode([t]) for t in params.stop_token_ids]
        if self.tokenizer.eos_token and self.tokenizer.eos_token not in stops:
            stops.append(self.tokenizer.eos_token)
        room = self._context - prompt_len
        return {"max_tokens": min(params.max_tokens or room, room), "temperature": params.temperature,
                "top_p": params.top_p, "top_k": params.top_k if params.top_k > 0 else -1, "stop": stops}

    def _generate(self, prompts_token_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        from tinker import types

        futures = []
        for prompt in prompts_token_ids:
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator))
            sampling = types.SamplingParams(seed=seed, **self.tinker_params(params, len(prompt)))
            futures.append(self.client.sample(prompt=types.ModelInput.from_ints(list(prompt)), num_samples=1,
                                              sampling_params=sampling))
        return [self._completion(result(future, self.alive).sequences[0], params) for future in futures]

    def _completion(self, sequence: Any, params: SamplingParams) -> Completion:
        ids = list(sequence.tokens)
        text = self.tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens,
                                     clean_up_tokenization_spaces=False)
        cut = stop_cut(text, params.stop) if params.stop else None
        logprobs = [float(x) for x in sequence.logprobs] if sequence.logprobs is not None else None
        return Completion(text=text[:cut] if cut is not None else text, token_ids=ids, logprobs=logprobs,
                          stop_reason="stop" if sequence.stop_reason == "stop" else "length")
