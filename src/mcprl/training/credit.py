"""Turn-level credit for multi-turn GRPO: an episode's advantage moved onto the turns where it branched.

Plain GRPO gives every token of an episode the episode's advantage. In a multi-turn group the episodes
share their first turns (the same call from the same prompt) and part ways somewhere; a failed episode's
correct calls are then pushed down with its wrong answer. The measured effect on the quickstart: failed
episodes made more calls, and GRPO taught the model to skip required calls (docs/experiments/, run N).

Here the episodes of a group form a tree of states, a state being the actions taken so far (tool calls by
name and canonical arguments, other turns by their text). At a state that several episodes reached, a
turn's credit is Q(s, a) - V(s): the mean episode advantage of the group's episodes that took action `a`
there, less the mean of all that reached `s` (GiGPO's anchor-state grouping, with Monte-Carlo values).
A turn at a state only its own episode reached gets 0: its consequence is already credited where the
episode left the others. Along one episode the credits telescope, V(s_1) - V(s_0) + V(s_2) - V(s_1) + ...,
so they sum to the episode's own advantage when no other episode took exactly its actions: the signal is
the same, only placed on the turns that made the difference.

Approximations, documented for users: a state is keyed by actions, not by the exact text the policy saw
(two spellings of one call are one state), and tool results are assumed to follow from the calls (true
of the offline servers; a live search may differ between episodes).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from mcprl.protocol.parsing import canonical_json

Key = tuple[Hashable, ...]


def action_key(turn: Mapping[str, Any]) -> Key:
    """One turn of the env's trace as the action it took: a call by tool and arguments, else its text."""
    if turn.get("kind") == "tool_call":
        return ("tool_call", turn.get("tool"), canonical_json(turn.get("arguments")))
    return (turn.get("kind"), " ".join(str(turn.get("action") or "").split()))


def episode_keys(env_metrics: Mapping[str, Any] | None) -> list[Key] | None:
    trace = (env_metrics or {}).get("trace")
    return [action_key(turn) for turn in trace] if trace else None


def state_action_credit(values: Sequence[float], groups: Sequence[Hashable],
                        actions: Sequence[Sequence[Key] | None]) -> list[list[float] | None]:
    """Per episode and turn, Q(s, a) - V(s) over the episodes of its group (values: episode advantages).
    Episodes without actions (None) take no part and get None."""
    reached: dict[tuple[Hashable, Key], list[float]] = defaultdict(list)
    took: dict[tuple[Hashable, Key, Key], list[float]] = defaultdict(list)
    for value, group, acts in zip(values, groups, actions):
        for k, act in enumerate(acts or ()):
            state = tuple(acts[:k])
            reached[group, state].append(value)
            took[group, state, act].append(value)
    credit: list[list[float] | None] = []
    for group, acts in zip(groups, actions):
        if acts is None:
            credit.append(None)
            continue
        turns = []
        for k, act in enumerate(acts):
            state = tuple(acts[:k])
            v = reached[group, state]
            turns.append(statistics.fmean(took[group, state, act]) - statistics.fmean(v) if len(v) > 1 else 0.0)
        credit.append(turns)
    return credit


def turn_spans(mask: torch.Tensor) -> list[tuple[int, int]]:
    """[start, end) of each turn in a response: a run of trained tokens and the observation after it."""
    trained = mask.bool().tolist()
    starts = [i for i, on in enumerate(trained) if on and (i == 0 or not trained[i - 1])]
    return [(s, e) for s, e in zip(starts, starts[1:] + [len(trained)])]


def turn_advantages(adv: torch.Tensor, mask: torch.Tensor, groups: Sequence[Hashable],
                    actions: Sequence[Sequence[Key] | None]) -> tuple[torch.Tensor, int]:
    """Episode advantages ([B, R], one value per row) redistributed over turns; returns them and the number
    of rows that keep their episode advantage (no trace, or a trace whose turns do not match the tokens)."""
    values = []
    for i in range(adv.shape[0]):
        row = adv[i][mask[i].bool()]
        if row.numel() and float(row.max() - row.min()) > 1e-6:
            raise ValueError("experimental.credit=turn spreads one advantage per episode over its turns, but the advantage "
                             "estimator gave per-token values; use an outcome estimator (grpo, rloo, maxrl)")
        values.append(float(row[0]) if row.numel() else 0.0)
    spans = [turn_spans(mask[i]) for i in range(adv.shape[0])]
    usable = [acts if acts is not None and len(acts) == len(span) else None for acts, span in zip(actions, spans)]
    out = adv.clone()
    for i, credit in enumerate(state_action_credit(values, groups, usable)):
        for (start, end), c in zip(spans[i], credit or ()):
            out[i, start:end] = c
    return out * mask, sum(acts is None for acts in usable)
