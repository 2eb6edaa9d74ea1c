"""Expert guidance for GRPO (LUFFY-style): a task's demo takes a place in a group whose rollouts all failed.

A group without a success can only push down what the policy sampled; it never shows the way. Where
the warm start gives a demo's key token p ~ 1e-3 (a family's first tool, docs/experiments/), a group
of four almost never samples it and the family stays failed. The rule generator has a demo for every
training task: replayed through the real environment it becomes an episode with the env's own reward,
tool outputs and loss mask. No policy sampled it, so its behaviour logprobs are NaN (unknown) and the
update takes the current policy's (grpo.fill_unknown_behaviour).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from functools import partial
from typing import Any

from transformers import PreTrainedTokenizerBase

from mcprl.training.loop.hooks import GRPOHook, Guide
from mcprl.training.rollout import RolloutResult, Rollouts
from mcprl.training.run import Run
from mcprl.training.sft import load_experts

ROW_KEYS = ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons", "rollout_logprobs",
            "env_metrics", "trajectory_generation_times")


class GuidanceHook(GRPOHook):
    def __init__(self, run: Run) -> None:
        self.run = run

    def guide(self, sampling: dict[str, Any]) -> Guide:
        demos = demo_turns(load_experts(self.run.cfg.data.experts_path()))
        return partial(add_expert_demos, self.run.policy.rollouts, demos, sampling)

    def metrics(self, results: list[RolloutResult]) -> dict[str, float]:
        """Groups that trained on an expert demo, counted over every sample batch."""
        return {"guided_groups": float(sum(len(r.guided) for r in results))}


def demo_turns(experts: list[dict[str, Any]]) -> dict[str, list[str]]:
    """task_id -> the demo's assistant turns, without the slips a recovery demo makes on purpose (weight 0:
    replayed with a positive advantage they would be taught as right)."""
    turns = {expert.get("task_id"): [m["content"] for m in expert["messages"]
                                     if m["role"] == "assistant" and m.get("weight", 1) != 0] for expert in experts}
    return {task_id: demo for task_id, demo in turns.items() if task_id is not None and demo}


class ReplayClient:
    """SkyRL's inference-client interface, answering each episode's turns from its task's demo.

    SkyRL names an episode's session `{task_id}_{repetition}`; the client counts that session's turns.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, demos: Mapping[str, list[str]]) -> None:
        self.tokenizer = tokenizer
        self.demos = demos
        self.default_sampling = None
        self._turns: dict[Hashable, int] = {}

    async def generate(self, input_batch: Mapping[str, Any], model: str | None = None) -> dict[str, Any]:
        texts = []
        for session in input_batch["session_ids"]:
            turns = self.demos[str(session).rsplit("_", 1)[0]]
            k = self._turns.get(session, 0)
            self._turns[session] = k + 1
            texts.append(turns[min(k, len(turns) - 1)])
        ids = [self.tokenizer.encode(t, add_special_tokens=False) for t in texts]
        return {"responses": texts, "response_ids": ids, "stop_reasons": ["stop"] * len(ids),
                "response_logprobs": [[math.nan] * len(i) for i in ids]}

    def expect(self, sessions: int) -> None:
        """Replies need no batching."""

    async def finish_session(self, session_id: Hashable) -> None:
        self._turns.pop(session_id, None)


def add_expert_demos(rollouts: Rollouts, demos: Mapping[str, list[str]], sampling: dict[str, Any],
                     result: RolloutResult, uids: list[str]) -> dict[str, Any]:
    """The step's generator output with the last rollout of each group that holds no success replaced by
    the task's demo (LUFFY's group: n - 1 samples and one demo; a fixed group size is what SkyRL's
    dynamic sampling assumes).

    Groups whose task has no demo, and demos that fail in the env (a changed server), are left as they are.
    The replayed records go to `result.guided`; `result.output` and `result.trajectories` stay the
    policy's own, so the rollout metrics describe the policy.
    """
    groups: dict[str, list[int]] = {}
    for i, uid in enumerate(uids):
        groups.setdefault(uid, []).append(i)
    failed = [rows for rows in groups.values()
              if result.samples[rows[0]].task_id in demos and not any(result.trajectories[i]["success"] for i in rows)]
    if not failed:
        return result.output
    replay = rollouts.replaying(ReplayClient(rollouts.tokenizer, demos)).run(
        [result.samples[rows[0]] for rows in failed], 1, sampling)
    keep = [j for j, record in enumerate(replay.trajectories) if record["success"]]
    result.guided = [{**replay.trajectories[j], "guided": True} for j in keep]
    output = dict(result.output)
    for key in ROW_KEYS:
        if output.get(key) is not None:
            column, added = list(output[key]), replay.output.get(key) or [None] * len(replay.trajectories)
            for j in keep:
                column[failed[j][-1]] = added[j]
            output[key] = column
    return output
