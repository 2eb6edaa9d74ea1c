"""In-process batched inference for SkyRL's `SkyRLGymGenerator`, on a transformers (or PEFT) model.

SkyRL runs one coroutine per trajectory and calls `client.generate(...)` with one prompt each.
`BatchingEngine` queues those calls, gathers the ones that arrive together into one batch per
sampling configuration, and generates that batch on a single worker thread, so the event loop stays
free for environment steps. `HFInferenceEngine` decodes the batch with a KV cache on a transformers
model; `mcprl.inference.vllm_engine` plugs vLLM into the same front end. `generate_batch` is the
synchronous core, also used directly by evaluation and the benchmark.

Why a hand-written decode loop rather than `model.generate`: it gives per-token logprobs of the
sampled tokens exactly as a trainer recomputes them (`log_softmax(logits / T)`), stop strings that
end a row in the text and the ids, and finished rows dropped from the batch as soon as they stop.
Why a bf16 copy and a grouped decode attention: see docs/model.md (measured on the 2-core box).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch
from transformers import AttentionInterface, DynamicCache, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from mcprl.errors import McprlError
from mcprl.models.devices import pick_dtype

StopReason = Literal["stop", "length"]
DECODE_ATTENTION = "mcprl_grouped_decode"


class InferenceError(McprlError):
    """Inference that cannot run as asked; the message names the offending value and the fix."""


class UnsupportedSampling(InferenceError, ValueError):
    pass


class PromptTooLong(InferenceError, ValueError):
    pass


# --------------------------------------------------------------------------- sampling parameters

_ALIASES = {"max_generate_length": "max_tokens"}
_NULLABLE = {"max_tokens", "logprobs", "stop", "stop_token_ids"}  # where None means something; else None = default
# vLLM keys SkyRL sends whose only supported value is the one given here.
_FIXED = {"n": 1, "repetition_penalty": 1.0, "include_stop_str_in_output": True, "additional_kwargs": None}


@dataclass(frozen=True)
class SamplingParams:
    """The vLLM-style sampling keys SkyRL passes (`get_vllm_sampling_params`), as a hashable value.

    `max_tokens=None` means "up to the model's context length"; `top_k` of -1 or 0 is off;
    `temperature=0` is greedy; `logprobs` says whether to return the sampled tokens' logprobs.
    """

    max_tokens: int | None = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    min_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    logprobs: bool = True
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UnsupportedSampling(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise UnsupportedSampling(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise UnsupportedSampling(f"top_p must be in (0, 1], got {self.top_p}")
        if any(not s for s in self.stop):
            raise UnsupportedSampling(f"stop strings must be non-empty, got {list(self.stop)}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @classmethod
    def from_dict(cls, params: Mapping[str, Any] | None, defaults: SamplingParams | None = None) -> SamplingParams:
        """Parse a SkyRL/vLLM sampling dict over `defaults`; unknown keys or unsupported values raise."""
        base = defaults or cls()
        if not params:
            return base
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in params.items():
            name = _ALIASES.get(key, key)
            if name in _FIXED:
                if value is not None and value != _FIXED[name]:
                    raise UnsupportedSampling(f"sampling {key}={value!r} is not supported (only {_FIXED[name]!r})")
            elif name == "seed":
                if value is not None:
                    raise UnsupportedSampling("per-request seed is not supported; pass seed= to the engine")
            elif name not in known:
                supported = sorted(known | set(_ALIASES) | set(_FIXED))
                raise UnsupportedSampling(f"unknown sampling key {key!r}; supported: {', '.join(supported)}")
            elif value is not None or name in _NULLABLE:
                values[name] = value
        if "stop" in values:
            values["stop"] = tuple(values["stop"] or ())
        if "stop_token_ids" in values:
            values["stop_token_ids"] = tuple(values["stop_token_ids"] or ())
        if "logprobs" in values:
            values["logprobs"] = values["logprobs"] is not None and values["logprobs"] is not False
        return cls(**{**base.__dict__, **values})


@dataclass
class Completion:
    """One generated continuation: `token_ids` include a final EOS or the tokens of a matched stop
    string; `text` ends right after the stop string (vLLM's `include_stop_str_in_output`)."""

    text: str
    token_ids: list[int]
    logprobs: list[float] | None
    stop_reason: StopReason


# --------------------------------------------------------------------------- attention for decode


def _grouped_decode_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Single-token decode attention without expanding the KV heads (GQA as a grouped matmul).

    torch's CPU SDPA repeats K/V per query head when a mask is given, and its bf16 flash kernel is
    slow for one query row; this path is 2.4x faster per decode step in bf16 (docs/model.md).
    Prefill (more than one query token) goes to SDPA unchanged.
    """
    if query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    batch, heads, q_len, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    scores = torch.matmul(query.reshape(batch, kv_heads, groups * q_len, dim), key.transpose(-1, -2))
    scores = scores.view(batch, kv_heads, groups, q_len, kv_len) * scale
    if attention_mask is not None:  # boolean [batch, 1, q_len, kv_len], True = attend
        scores = scores.masked_fill(~attention_mask[:, :, None], float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(value.dtype).view(batch, kv_heads, groups * q_len, kv_len)
    out = torch.matmul(probs, value).view(batch, heads, q_len, dim)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(DECODE_ATTENTION, _grouped_decode_attention)
AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)


@contextlib.contextmanager
def generation_mode(model: PreTrainedModel) -> Iterator[None]:
    """Eval mode, inference mode and the decode attention for the duration; restores all after."""
    was_training = model.training
    attention = model.config._attn_implementation
    model.eval()
    if attention == "sdpa":
        model.set_attn_implementation(DECODE_ATTENTION)
    try:
        with torch.inference_mode():
            yield
    finally:
        if attention == "sdpa":
            model.set_attn_implementation(attention)
        model.train(was_training)


# --------------------------------------------------------------------------- reusable keys/values


@dataclass
class _KV:
    """Keys/values of a token sequence: one (keys, values) pair per layer, each [kv_heads, len, head_dim]."""

    ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)


class PrefixCache:
    """Keys/values of earlier prompts + completions, reused when a later prompt starts with the same tokens.

    A multi-turn episode re-sends its whole history every turn (token-in-token-out), so with this cache a
    turn prefills only its new tokens (the observation) instead of the history. Entries hold only for the
    weights that computed them; the engine clears the cache whenever the weights change.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self.reused_tokens = 0
        self._entries: OrderedDict[int, _KV] = OrderedDict()
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: Sequence[int]) -> tuple[int, _KV] | None:
        """The longest entry that is a strict prefix of `prompt` (one token at least must stay to prefill)."""
        best: tuple[int, _KV] | None = None
        for key, entry in self._entries.items():
            n = len(entry.ids)
            if n < len(prompt) and (best is None or n > len(best[1].ids)) and list(prompt[:n]) == entry.ids:
                best = (key, entry)
        if best is not None:
            self._entries.move_to_end(best[0])
            self.reused_tokens += len(best[1].ids)
        return best

    def add(self, entry: _KV, replaces: int | None = None) -> None:
        """Store `entry`, dropping the entry it extends and then the least recently used over budget."""
        if replaces is not None and (old := self._entries.pop(replaces, None)) is not None:
            self.bytes -= old.nbytes
        if entry.nbytes > self.max_bytes:
            return
        self._entries[self._next_key] = entry
        self._next_key += 1
        self.bytes += entry.nbytes
        while self.bytes > self.max_bytes:
            self.bytes -= self._entries.popitem(last=False)[1].nbytes

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0


def _plain_attention(model: PreTrainedModel) -> bool:
    """Prefix reuse assumes full-attention layers that keep every position (no sliding windows)."""
    return all(type(layer) is DynamicLayer for layer in DynamicCache(config=model.config).layers)


def _common_prefix_len(prompts: Sequence[Sequence[int]]) -> int:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    for i in range(n):
        token = first[i]
        if any(p[i] != token for p in prompts):
            return i
    return n


def _last(input_ids: torch.Tensor) -> torch.Tensor:
    """`logits_to_keep` for the last position, as an index tensor: the integer form hands the LM head a
    strided slice, which torch multiplies by a batch-expanded copy of the head when the head is frozen
    (PEFT), 5 s per prefill at batch 16."""
    return torch.tensor([input_ids.shape[1] - 1], device=input_ids.device)


def _forward_kv(model: PreTrainedModel, ids: Sequence[int]) -> _KV:
    cache = DynamicCache(config=model.config)
    input_ids = torch.tensor([list(ids)], device=model.device)
    model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=_last(input_ids))
    return _KV(list(ids), [(layer.keys[0], layer.values[0]) for layer in cache.layers])


# --------------------------------------------------------------------------- the decode loop


def _sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    if params.greedy:
        return logits.argmax(-1)
    scores = logits / params.temperature
    if params.top_k > 0 and params.top_k < scores.shape[-1]:
        kth = torch.topk(scores, params.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = sorted_scores.softmax(-1)
        drop = sorted_probs.cumsum(-1) - sorted_probs > params.top_p
        scores = scores.scatter(-1, order, sorted_scores.masked_fill(drop, float("-inf")))
    probs = scores.softmax(-1)
    if params.min_p > 0:
        probs = probs.masked_fill(probs < params.min_p * probs.amax(-1, keepdim=True), 0.0)
    # Inverse-CDF sampling: one uniform per row (torch.multinomial draws one exponential per vocabulary
    # entry, 15 ms a step at batch 16). u is in (0, 1], so a zero-probability token is never the first
    # index whose cumulative mass reaches it.
    cdf = probs.cumsum(-1)
    u = 1.0 - torch.rand((probs.shape[0], 1), generator=generator, device=probs.device)
    return torch.searchsorted(cdf, u * cdf[:, -1:]).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(configured) if isinstance(configured, list) else ({configured} if configured is not None else set())
    return ids


def stop_cut(text: str, stops: Sequence[str]) -> int | None:
    ends = [text.find(s) + len(s) for s in stops if s in text]
    return min(ends) if ends else None


@dataclass
class _Row:
    prompt: list[int]
    budget: int
    prefix: _KV | None = None
    prefix_key: int | None = None  # the PrefixCache entry this row extends
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reason: StopReason | None = None

    @property
    def cached(self) -> int:
        """Prompt tokens whose keys/values come from `prefix`."""
        return len(self.prefix.ids) if self.prefix is not None else 0

    @property
    def new_tokens(self) -> int:
        """Prompt tokens the prefill has to compute."""
        return len(self.prompt) - self.cached


_MIN_SHARED_PREFIX = 16  # tokens; below this a separate prefill costs more than it saves


def _assign_prefixes(model: PreTrainedModel, rows: list[_Row], store: PrefixCache | None) -> None:
    """Give each row reusable keys/values: its longest cached prefix, else the prefix all other
    uncached rows share (the system prompt, or the whole prompt for a GRPO group), computed once."""
    if not _plain_attention(model):
        return
    for row in rows:
        hit = store.lookup(row.prompt) if store is not None else None
        if hit is not None:
            row.prefix_key, row.prefix = hit
    uncached = [row for row in rows if row.prefix is None]
    if len(uncached) < 2:
        return
    shared = min(_common_prefix_len([r.prompt for r in uncached]), min(len(r.prompt) for r in uncached) - 1)
    if shared >= _MIN_SHARED_PREFIX:
        kv = _forward_kv(model, uncached[0].prompt[:shared])
        for row in uncached:
            row.prefix = kv


_Layers = list[tuple[torch.Tensor, torch.Tensor]]  # (keys, values) per layer, each [kv_heads, len, head_dim]


def _left_padded(entries: Sequence[_Layers | None], width: int) -> tuple[_Layers, torch.Tensor]:
    """Rows' keys/values right-aligned in [rows, kv_heads, width, head_dim] tensors (None: no keys/values),
    and the [rows, width] mask of their real positions."""
    lengths = [entry[0][0].shape[1] if entry is not None else 0 for entry in entries]
    template = next(entry for entry in entries if entry is not None)
    layers = []
    for layer, (k0, v0) in enumerate(template):
        keys = k0.new_zeros((len(entries), k0.shape[0], width, k0.shape[2]))
        values = v0.new_zeros((len(entries), v0.shape[0], width, v0.shape[2]))
        for i, entry in enumerate(entries):
            if entry is not None:
                keys[i, :, width - lengths[i] :] = entry[layer][0]
                values[i, :, width - lengths[i] :] = entry[layer][1]
        layers.append((keys, values))
    mask = torch.zeros((len(entries), width), dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, width - n :] = 1  # n = 0 selects nothing
    return layers, mask


def _row_layers(cache: DynamicCache, attention: torch.Tensor, slot: int) -> _Layers:
    """One row's keys/values at its real (unmasked) positions, copied out of the batch."""
    valid = attention[slot].nonzero().squeeze(-1)
    return [(layer.keys[slot][:, valid], layer.values[slot][:, valid]) for layer in cache.layers]


def _prefill_padded(model: PreTrainedModel, rows: list[_Row], pad_id: int):
    """One forward over every row's uncached tokens. Layout per row: [pad][cached prefix][pad][new tokens];
    the attention mask hides both pads and position ids count real tokens only."""
    device = model.device
    reused = [r.cached for r in rows]
    width_cached = max(reused)
    if width_cached:
        layers, cached_mask = _left_padded([r.prefix.layers if r.prefix is not None else None for r in rows],
                                           width_cached)
        cache = DynamicCache(ddp_cache_data=layers, config=model.config)
    else:
        cached_mask = torch.zeros((len(rows), 0), dtype=torch.long)
        cache = DynamicCache(config=model.config)
    suffixes = [row.prompt[n:] for row, n in zip(rows, reused)]
    width = max(len(s) for s in suffixes)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    new_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, suffix in enumerate(suffixes):
        input_ids[i, width - len(suffix) :] = torch.as_tensor(suffix, dtype=torch.long)
        new_mask[i, width - len(suffix) :] = 1
    positions = (torch.as_tensor(reused)[:, None] + new_mask.cumsum(-1) - 1).clamp(min=0)
    attention = torch.cat([cached_mask, new_mask], dim=-1).to(device)
    input_ids = input_ids.to(device)
    logits = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions.to(device),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=_last(input_ids),
    ).logits[:, -1].float()
    return cache, attention, positions[:, -1:].to(device) + 1, logits


_PAD_SLACK_TOKENS = 32  # padding per row a shared forward may add before a row starts its own bucket


def _length_buckets(lengths: Sequence[int]) -> list[list[int]]:
    """Indices grouped so that one padded forward per group wastes little: longest first, and a row
    joins the open group unless it would be padded by more than a quarter and `_PAD_SLACK_TOKENS`."""
    buckets: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        width = lengths[buckets[-1][0]] if buckets else 0
        if buckets and (width - lengths[i] <= _PAD_SLACK_TOKENS or lengths[i] * 4 >= width * 3):
            buckets[-1].append(i)
        else:
            buckets.append([i])
    return buckets


def _prefill(model: PreTrainedModel, rows: list[_Row], pad_id: int):
    """Keys/values and next-token logits for every row's prompt, laid out [pad][prompt] for decoding.

    A turn's new tokens vary a lot in length (tool results run from a dozen tokens to hundreds), so
    one padded forward over all rows can compute twice the real tokens. Each distinct prompt is
    prefilled once (the rows of a GRPO group share theirs), in buckets of similar length.
    """
    distinct: dict[tuple[int, tuple[int, ...]], int] = {}
    owner = [distinct.setdefault((id(r.prefix), tuple(r.prompt)), len(distinct)) for r in rows]
    firsts = [rows[owner.index(u)] for u in range(len(distinct))]
    buckets = _length_buckets([r.new_tokens for r in firsts])
    if len(buckets) == 1 and len(firsts) == len(rows):
        return _prefill_padded(model, rows, pad_id)
    kv: list[_Layers] = [[] for _ in firsts]
    last_logits: list[torch.Tensor] = [torch.empty(0)] * len(firsts)
    for bucket in buckets:
        cache, attention, _, logits = _prefill_padded(model, [firsts[u] for u in bucket], pad_id)
        for slot, u in enumerate(bucket):
            kv[u] = _row_layers(cache, attention, slot)
            last_logits[u] = logits[slot]
    layers, attention = _left_padded([kv[u] for u in owner], max(len(r.prompt) for r in rows))
    attention = attention.to(model.device)
    next_pos = torch.tensor([[len(r.prompt)] for r in rows], device=model.device)
    logits = torch.stack([last_logits[u] for u in owner])
    return DynamicCache(ddp_cache_data=layers, config=model.config), attention, next_pos, logits


_SPARE_TOKENS = 256  # room a decode cache grows by when it runs out


class _SpareLayer(DynamicLayer):
    """A decode cache layer whose keys/values are views into buffers with room for the tokens to come.

    `DynamicLayer` concatenates the whole cache at every decode step: a copy of all keys and values
    that took 35-40% of a decode step at batch 12 and ~1,100 tokens of context (fp32, 2 threads),
    about as long as the matmuls. Attention on the views runs as fast as on contiguous tensors.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int):
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._reserve(keys, values, room)

    def _reserve(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> None:
        n = keys.shape[-2]
        self._keys = keys.new_empty((*keys.shape[:-2], n + room, keys.shape[-1]))
        self._values = values.new_empty((*values.shape[:-2], n + room, values.shape[-1]))
        self._keys[..., :n, :] = keys
        self._values[..., :n, :] = values
        self._view(n)

    def _view(self, n: int) -> None:
        self.keys, self.values = self._keys[..., :n, :], self._values[..., :n, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n, new = self.keys.shape[-2], key_states.shape[-2]
        if n + new > self._keys.shape[-2]:
            self._reserve(self.keys, self.values, new + _SPARE_TOKENS)
        self._keys[..., n : n + new, :] = key_states
        self._values[..., n : n + new, :] = value_states
        self._view(n + new)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        n = self.keys.shape[-2]
        self._keys, self._values = self._keys[indices], self._values[indices]
        self._view(n)


def _with_room(cache: DynamicCache, room: int) -> DynamicCache:
    """The prefilled cache with `room` free positions per layer for decoding (one copy, not one per step).
    fp32 on a CPU only: bf16 attention on the views measured no faster and rounds differently."""
    first = cache.layers[0].keys
    if first.dtype == torch.float32 and first.device.type == "cpu" and all(
        type(layer) is DynamicLayer for layer in cache.layers
    ):
        cache.layers = [_SpareLayer(layer.keys, layer.values, room) for layer in cache.layers]
    return cache


def _keep_kv(cache: DynamicCache, attention: torch.Tensor, slot: int, row: _Row, store: PrefixCache) -> None:
    """Store a finished row's keys/values (prompt + all generated tokens but the last, never fed)."""
    store.add(_KV(row.prompt + row.ids[:-1], _row_layers(cache, attention, slot)), replaces=row.prefix_key)


def _generate_chunk(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    generator: torch.Generator | None,
    store: PrefixCache | None,
) -> list[Completion]:
    device = model.device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    context = _context_length(model, tokenizer)
    rows = [_Row(list(p), min(params.max_tokens or context - len(p), context - len(p))) for p in prompts]
    eos = _eos_ids(model, tokenizer) | set(params.stop_token_ids)
    eos_list = sorted(eos)
    decode_kwargs = {"skip_special_tokens": params.skip_special_tokens, "clean_up_tokenization_spaces": False}
    window = max((len(s) for s in params.stop), default=0) + 1
    scale = params.temperature if params.temperature > 0 else 1.0

    _assign_prefixes(model, rows, store)
    cache, attention, next_pos, logits = _prefill(model, rows, pad_id)
    cache = _with_room(cache, min(max(row.budget for row in rows), _SPARE_TOKENS))
    active = list(range(len(rows)))
    step = 0
    while True:
        sample_logits = logits
        if step < params.min_tokens and eos_list:
            sample_logits = logits.clone()
            sample_logits[:, eos_list] = float("-inf")
        tokens = _sample(sample_logits, params, generator)
        token_logprobs = (logits / scale).log_softmax(-1).gather(-1, tokens[:, None]).squeeze(-1)
        step += 1
        keep = []
        for slot, (row_index, token, logprob) in enumerate(zip(active, tokens.tolist(), token_logprobs.tolist())):
            row = rows[row_index]
            row.ids.append(token)
            row.logprobs.append(logprob)
            if token in eos:
                row.reason = "stop"
            elif params.stop and stop_cut(tokenizer.decode(row.ids[-window:], **decode_kwargs), params.stop):
                row.reason = "stop"
            elif len(row.ids) >= row.budget:
                row.reason = "length"
            else:
                keep.append(slot)
                continue
            if store is not None:
                _keep_kv(cache, attention, slot, row, store)
        if not keep:
            break
        if len(keep) < len(active):
            index = torch.as_tensor(keep, device=device)
            cache.batch_select_indices(index)
            attention, next_pos, tokens = attention[index], next_pos[index], tokens[index]
            active = [active[k] for k in keep]
        attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=-1)
        logits = model(
            input_ids=tokens[:, None],
            attention_mask=attention,
            position_ids=next_pos,
            past_key_values=cache,
            use_cache=True,
        ).logits[:, -1].float()
        next_pos = next_pos + 1

    completions = []
    for row in rows:
        text = tokenizer.decode(row.ids, **decode_kwargs)
        cut = stop_cut(text, params.stop) if params.stop else None
        completions.append(
            Completion(
                text=text[:cut] if cut is not None else text,
                token_ids=row.ids,
                logprobs=row.logprobs if params.logprobs else None,
                stop_reason=row.reason or "length",
            )
        )
    return completions


def _context_length(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> int:
    return getattr(model.config, "max_position_embeddings", None) or tokenizer.model_max_length


def check_prompt(prompt: Sequence[int], context: int) -> None:
    if not prompt:
        raise InferenceError("empty prompt: every prompt needs at least one token")
    if len(prompt) >= context:
        raise PromptTooLong(f"prompt of {len(prompt)} tokens leaves no room in the {context}-token context")


def generate_batch(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts_token_ids: Sequence[Sequence[int]],
    sampling: SamplingParams | Mapping[str, Any] | None = None,
    *,
    generator: torch.Generator | None = None,
    batch_size: int = 16,
    prefix_cache: PrefixCache | None = None,
) -> list[Completion]:
    """Generate one completion per prompt, `batch_size` prompts at a time (similar lengths together,
    to waste less on padding); results come back in prompt order. With `prefix_cache`, prompts that
    extend an earlier prompt + completion reuse its keys/values (the caller owns its invalidation)."""
    params = sampling if isinstance(sampling, SamplingParams) else SamplingParams.from_dict(sampling)
    for prompt in prompts_token_ids:
        check_prompt(prompt, _context_length(model, tokenizer))
    order = sorted(range(len(prompts_token_ids)), key=lambda i: len(prompts_token_ids[i]))
    results: list[Completion | None] = [None] * len(order)
    with generation_mode(model):
        store = prefix_cache if prefix_cache is not None and _plain_attention(model) else None
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            prompts = [prompts_token_ids[i] for i in chunk]
            for i, output in zip(chunk, _generate_chunk(model, tokenizer, prompts, params, generator, store)):
                results[i] = output
    return results  # type: ignore[return-value]


# --------------------------------------------------------------------------- weights used for generation


def _column_major(model: torch.nn.Module) -> None:
    """Store every Linear weight as the contiguous [in, out] matrix seen as [out, in], so `x @ W.T` is
    a plain matmul: MKL's fp32 GEMM with a transposed operand is 2-5x slower at the few rows of a
    decode step (batch 12: 0.23 ms against 0.045 ms for a 576x576 weight, 25 ms against 12 ms for
    the LM head; docs/model.md), and no slower at a prefill's hundreds. Tied weights follow."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data = module.weight.data.t().contiguous().t()


class _GenerationWeights:
    """The model that generates: a copy of the trainer's model in the generation dtype with any LoRA
    adapter merged into its weights (and, in fp32 on a CPU, Linear weights laid out for decoding),
    kept in sync automatically (a parameter whose storage or version counter changed is copied or
    re-merged), or the trainer's model itself elsewhere. Merging matters: a PEFT model runs every
    adapter as two extra matmuls per layer and decode step, 20% slower decode on the 2-core CPU
    (docs/experiments/). `version` advances whenever the weights change, so keys/values computed
    earlier can be dropped."""

    def __init__(self, model: PreTrainedModel, dtype: torch.dtype):
        self.source = model
        self.dtype = dtype
        lora = _lora_layers(model)
        column_major = dtype == torch.float32 and model.device.type == "cpu"
        self.copy = None
        self._plain: list[tuple[torch.nn.Parameter, torch.nn.Parameter]] = []
        self._merged: list[tuple[torch.nn.Module, torch.nn.Parameter]] = []
        if lora or model.dtype != dtype or column_major:
            self.copy = copy.deepcopy(model)
            if lora:
                self.copy = self.copy.merge_and_unload()
            self.copy.eval()
            for param in self.copy.parameters():  # buffers (rotary frequencies) keep their fp32 precision
                param.data = param.data.to(dtype)
            if column_major:
                _column_major(self.copy)
            self.copy.set_attn_implementation(DECODE_ATTENTION)
            targets = dict(self.copy.named_parameters())
            prefix = "base_model.model." if lora else ""
            self._merged = [(layer, targets[f"{name.removeprefix(prefix)}.weight"]) for name, layer in lora.items()]
            inside = {id(p) for layer in lora.values() for p in layer.parameters()}
            self._plain = [(p, targets[name.removeprefix(prefix)]) for name, p in model.named_parameters()
                           if id(p) not in inside]
        self.version = 0
        self._seen = param_versions(self.source.parameters())

    def current(self) -> PreTrainedModel:
        versions = param_versions(self.source.parameters())
        if versions != self._seen:
            if self.copy is not None:
                self._refresh()
            self._seen = versions
            self.version += 1
        return self.copy if self.copy is not None else self.source

    @torch.no_grad()
    def _refresh(self) -> None:
        for src, dst in self._plain:
            dst.copy_(src)
        for layer, dst in self._merged:
            weight = layer.base_layer.weight
            for adapter in layer.active_adapters:
                weight = weight + layer.get_delta_weight(adapter)
            dst.copy_(weight)

    def sync(self) -> None:
        """Copy every parameter again (after replacing weights in a way version counters miss)."""
        self._seen = [(0, -1)] * len(self._seen)


def param_versions(params: Iterable[torch.nn.Parameter]) -> list[tuple[int, int]]:
    """Storage address and in-place version counter of each parameter: changes when an optimizer
    steps, a checkpoint loads, or the tensor is replaced, so a copy elsewhere knows to refresh."""
    return [(p.data_ptr(), p._version) for p in params]


def _lora_layers(model: PreTrainedModel) -> dict[str, torch.nn.Module]:
    """PEFT LoRA layers by module name ({} for a plain model)."""
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


# --------------------------------------------------------------------------- the async engine


@dataclass
class EngineStats:
    batches: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    generate_seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.generate_seconds if self.generate_seconds else 0.0


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams
    future: asyncio.Future
    session: str = ""  # breaks ties between equal prompts (a group's first turns) in the canonical order


class BatchingEngine:
    """SkyRL inference client (`generate`, `finish_session`, `teardown`) over a synchronous batch generator.

    SkyRL sends one prompt per call; the engine queues the calls, gathers those that arrive together into
    one batch per sampling configuration and runs `_generate` on a single worker thread, so the event loop
    stays free for environment steps. Subclasses supply `_generate` (HF here, vLLM in `vllm_engine`) and
    `sync_weights`, the hook the trainer calls after each optimizer step.
    `batch_wait_ms` is the quiet gap that closes a batch; while trajectories known to be running
    (announced with `expect`, or sessions seen and not yet finished) are still missing, it waits up to
    `max_wait_ms` for them, or, with None, until each has sent its next turn or finished. Then every
    decode wave holds every running episode, whatever the tool calls' timing, so a seeded run samples
    the same tokens again.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        context: int,
        max_batch_size: int = 16,
        batch_wait_ms: float = 20.0,
        max_wait_ms: float | None = 500.0,
        seed: int | None = None,
        default_sampling: SamplingParams | Mapping[str, Any] | None = None,
        model_name: str = "mcprl-policy",
        device: torch.device | str = "cpu",
    ):
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_ms / 1000
        self.max_wait_s = math.inf if max_wait_ms is None else max_wait_ms / 1000
        self.default_sampling = (
            default_sampling
            if isinstance(default_sampling, SamplingParams)
            else SamplingParams.from_dict(default_sampling)
        )
        self.model_name = model_name
        self.stats = EngineStats()
        self._context = context
        self._generator = torch.Generator(device=device)
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(seed)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcprl-generate")
        self._lock = threading.Lock()
        self._sessions: set[Hashable] = set()
        self._announced = 0  # sessions expected that have not sent their first turn
        self._sessions_changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task | None = None

    @property
    def generator(self) -> torch.Generator:
        """The sampling RNG; checkpoints save and restore its state."""
        return self._generator

    def sync_weights(self) -> None:
        raise NotImplementedError

    def reset_stats(self) -> None:
        self.stats = EngineStats()

    def expect(self, sessions: int) -> None:
        """`sessions` episodes are about to start (one rollout at a time): the first wave waits for
        all of them rather than closing on whichever arrived within the quiet gap."""
        self._sessions.clear()
        self._announced = sessions

    # ---- synchronous core

    def _generate(self, prompts_token_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        raise NotImplementedError

    def generate_batch(
        self, prompts_token_ids: Sequence[Sequence[int]], sampling: SamplingParams | Mapping[str, Any] | None = None
    ) -> list[Completion]:
        """One completion per prompt, in prompt order; also used directly by evaluation and the benchmark."""
        if not isinstance(sampling, SamplingParams):
            sampling = SamplingParams.from_dict(sampling, self.default_sampling)
        with self._lock:
            start = time.perf_counter()
            results = self._generate(prompts_token_ids, sampling)
            self.stats.batches += -(-len(prompts_token_ids) // self.max_batch_size)
            self.stats.requests += len(prompts_token_ids)
            self.stats.prompt_tokens += sum(len(p) for p in prompts_token_ids)
            self.stats.generated_tokens += sum(len(r.token_ids) for r in results)
            self.stats.generate_seconds += time.perf_counter() - start
        return results

    # ---- SkyRL's InferenceEngineInterface (the parts SkyRLGymGenerator calls)

    async def generate(self, input_batch: Mapping[str, Any], model: str | None = None) -> dict[str, Any]:
        """`InferenceEngineInput` -> `InferenceEngineOutput`. `model` is accepted for interface
        compatibility: there is one model, whatever name (base or LoRA adapter) the caller uses."""
        prompts = input_batch.get("prompt_token_ids")
        if prompts is None:
            conversations = input_batch.get("prompts")
            if conversations is None:
                raise InferenceError("input_batch needs prompt_token_ids or prompts")
            prompts = [
                self.tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=False)
                for c in conversations
            ]
        params = SamplingParams.from_dict(input_batch.get("sampling_params"), self.default_sampling)
        for prompt in prompts:  # fail this caller alone, not the batch it would join
            check_prompt(prompt, self._context)
        sessions = list(input_batch.get("session_ids") or ())
        for session in sessions:
            self._start_session(session)
        tie_keys = [str(s) for s in sessions] + [""] * (len(prompts) - len(sessions))
        queue = self._ensure_worker()
        loop = asyncio.get_running_loop()
        futures = []
        for prompt, tie_key in zip(prompts, tie_keys):
            future = loop.create_future()
            queue.put_nowait(_Request(list(prompt), params, future, tie_key))
            futures.append(future)
        results: list[Completion] = await asyncio.gather(*futures)
        return {
            "responses": [r.text for r in results],
            "response_ids": [r.token_ids for r in results],
            "stop_reasons": [r.stop_reason for r in results],
            "response_logprobs": [r.logprobs for r in results] if params.logprobs else None,
        }

    async def finish_session(self, session_id: Hashable) -> None:
        if session_id in self._sessions:
            self._sessions.discard(session_id)
        elif self._announced:  # it ended before its first turn reached the queue (a prompt refused)
            self._announced -= 1
        if self._sessions_changed is not None:
            self._sessions_changed.set()

    def _start_session(self, session_id: Hashable | None) -> None:
        if session_id is not None and session_id not in self._sessions:
            self._sessions.add(session_id)
            self._announced = max(self._announced - 1, 0)

    async def teardown(self) -> None:
        self.close()

    def close(self) -> None:
        if self._worker is not None and not self._worker.done() and not self._worker.get_loop().is_closed():
            self._worker.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ---- batching

    def _ensure_worker(self) -> asyncio.Queue[_Request]:
        """One queue and worker per event loop (a trainer may call `asyncio.run` once per step)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._worker is None or self._worker.done():
            self._loop = loop
            self._queue = asyncio.Queue()
            self._sessions_changed = asyncio.Event()
            self._worker = loop.create_task(self._work(self._queue, self._sessions_changed),
                                            name="mcprl-inference-batcher")
        return self._queue  # type: ignore[return-value]

    async def _collect(self, queue: asyncio.Queue[_Request], changed: asyncio.Event, pending: list[_Request]) -> None:
        """Gather requests until every running session is in, `max_wait_ms` while some are missing, or, with
        no running sessions known, a full batch or a quiet gap of `batch_wait_ms`. Waiting for every session,
        not the first `max_batch_size` to arrive, is what keeps batches independent of tool-call timing when
        more episodes run than a batch holds (an eval's 100 tasks in batches of 16)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            running = len(self._sessions) + self._announced
            if len(pending) >= (running or self.max_batch_size):
                return
            remaining = self.max_wait_s - (loop.time() - started)
            wait = remaining if running else min(self.batch_wait_s, remaining)
            if wait <= 0:
                return
            changed.clear()
            arrival = asyncio.ensure_future(queue.get())
            change = asyncio.ensure_future(changed.wait())
            done, waiting = await asyncio.wait((arrival, change), timeout=None if math.isinf(wait) else wait,
                                               return_when=asyncio.FIRST_COMPLETED)
            for task in waiting:
                task.cancel()  # a cancelled get leaves its item in the queue
            if arrival in done:
                pending.append(arrival.result())
            elif not done:  # timed out
                return

    async def _work(self, queue: asyncio.Queue[_Request], changed: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        pending: list[_Request] = []
        while True:
            if not pending:
                pending.append(await queue.get())
            await self._collect(queue, changed, pending)
            params = pending[0].params
            wave = [r for r in pending if r.params == params]
            pending = [r for r in pending if r.params != params]
            # Canonical order: which rows share a batch, and which row draws which random numbers, must
            # not depend on arrival timing (env steps finish in any order), or seeded runs, exact resumes
            # and greedy evals would drift (bf16 logits change with a batch's other rows and padding).
            # Similar lengths batch together; equal prompts (a group's first turns) are told apart by
            # session. Requests that arrive meanwhile wait for the next wave.
            wave = sorted((r for r in wave if not r.future.cancelled()),
                          key=lambda r: (len(r.prompt), r.prompt, r.session))
            for start in range(0, len(wave), self.max_batch_size):
                await self._decode(loop, wave[start : start + self.max_batch_size], params)

    async def _decode(self, loop: asyncio.AbstractEventLoop, batch: list[_Request], params: SamplingParams) -> None:
        try:
            results = await loop.run_in_executor(self._executor, self.generate_batch, [r.prompt for r in batch], params)
        except Exception as exc:  # every waiting trajectory sees the failure, the worker lives on
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        for request, result in zip(batch, results):
            if not request.future.done():
                request.future.set_result(result)




class HFInferenceEngine(BatchingEngine):
    """The batching engine on a transformers (or PEFT) model, in-process.

    `dtype="auto"` generates in bf16 where the device has fast bf16 (on a bf16 copy of an fp32 model,
    re-synced automatically after optimizer steps), else in the model's own dtype.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        dtype: str | torch.dtype = "auto",
        prefix_cache_mb: int = 1024,
        **options: Any,
    ):
        if dtype == "auto":
            dtype = pick_dtype(model.device)
        elif isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        super().__init__(tokenizer, context=_context_length(model, tokenizer), device=model.device, **options)
        self._weights = _GenerationWeights(model, dtype)
        self.prefix_cache = PrefixCache(prefix_cache_mb << 20) if prefix_cache_mb > 0 else None
        self._cache_version = self._weights.version

    @property
    def dtype(self) -> torch.dtype:
        return self._weights.dtype

    def sync_weights(self) -> None:
        self._weights.sync()

    def _generate(self, prompts_token_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        model = self._weights.current()
        if self.prefix_cache is not None and self._weights.version != self._cache_version:
            self.prefix_cache.clear()
            self._cache_version = self._weights.version
        return generate_batch(
            model,
            self.tokenizer,
            prompts_token_ids,
            params,
            generator=self._generator,
            batch_size=self.max_batch_size,
            prefix_cache=self.prefix_cache,
        )
