"""Scripted policies and training metrics, written exactly in the formats docs/evaluation.md documents."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

Policy = Callable[[dict, int, random.Random], tuple[list[dict], bool]]

TASKS = [
    {"task_id": f"{src}-{cx}-{i}", "data_source": src, "complexity": cx}
    for src in ("finance", "search")
    for cx in ("simple", "medium", "complex")
    for i in range(2)
]


def tool_turn(tool: str = "get_quote", ok: bool = True, error_type: str | None = None, reward: float = 0.0) -> dict:
    return {
        "action": f'<tool_call>{{"name": "{tool}", "arguments": {{"ticker": "AAPL"}}}}</tool_call>',
        "kind": "tool_call",
        "tool": tool,
        "arguments": {"ticker": "AAPL"},
        "result": {
            "ok": ok,
            "error": None if ok else f"{error_type} happened",
            "error_type": None if ok else error_type,
        },
        "reward": reward,
    }


def answer_turn(reward: float = 1.0) -> dict:
    return {
        "action": "<answer>187.2</answer>",
        "kind": "answer",
        "tool": None,
        "arguments": None,
        "result": None,
        "reward": reward,
    }


def malformed_turn() -> dict:
    return {
        "action": "<tool_call>{oops",
        "kind": "malformed",
        "tool": None,
        "arguments": None,
        "result": None,
        "reward": -0.1,
    }


def trajectory(
    task: dict,
    sample_idx: int,
    turns: list[dict],
    success: bool,
    *,
    answered: bool | None = None,
    answer_correct: bool | None = None,
    stop_reason: str = "stop",
) -> dict:
    answered = any(t["kind"] == "answer" for t in turns) if answered is None else answered
    if answer_correct is None and answered:
        answer_correct = success
    score = [t["reward"] for t in turns]
    return {
        "task_id": task["task_id"],
        "sample_idx": sample_idx,
        "data_source": task["data_source"],
        "complexity": task["complexity"],
        "input_prompt": [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "AAPL price?"}],
        "output_response": "".join(t["action"] for t in turns),
        "turns": turns,
        "score": score,
        "reward": float(sum(score)),
        "success": success,
        "answered": answered,
        "answer_correct": answer_correct,
        "stop_reason": stop_reason,
        "env_extras": {k: task[k] for k in ("task_id", "data_source", "complexity")},
        "prompt_tokens": 120,
        "response_tokens": 40 * len(turns),
        "num_turns": len(turns),
    }


def always_correct(task: dict, i: int, rng: random.Random) -> tuple[list[dict], bool]:
    return [tool_turn(reward=0.1), answer_turn(1.0)], True


def never_tools(task: dict, i: int, rng: random.Random) -> tuple[list[dict], bool]:
    correct = task["complexity"] == "simple" and i == 0
    return [answer_turn(1.0 if correct else 0.0)], correct


def mixed(task: dict, i: int, rng: random.Random) -> tuple[list[dict], bool]:
    """Success odds fall with complexity; some calls fail, some turns are malformed."""
    p = {"simple": 0.8, "medium": 0.5, "complex": 0.2}[task["complexity"]]
    turns = []
    if rng.random() < 0.2:
        turns.append(malformed_turn())
    turns.append(
        tool_turn(ok=rng.random() > 0.2, error_type=rng.choice(["invalid_arguments", "timeout", "unknown_tool"]))
    )
    success = rng.random() < p
    turns.append(answer_turn(1.0 if success else 0.0))
    return turns, success


def rollout(policy: Policy, k: int = 4, tasks: list[dict] = TASKS, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for task in tasks:
        for i in range(k):
            turns, success = policy(task, i, rng)
            out.append(trajectory(task, i, turns, success))
    return out


def metrics_rows(n_sft: int = 5, n_grpo: int = 15, seed: int = 0) -> list[dict]:
    """metrics.jsonl as training writes it: SFT rows carry sft_loss and no RL keys."""
    rng = random.Random(seed)
    rows = [
        {
            "step": s,
            "phase": "sft",
            "time_s": 2.0 * s,
            "sft_loss": 2.5 * math.exp(-s / 3) + 0.3,
            "grad_norm": 1.5,
            "lr": 1e-5,
        }
        for s in range(1, n_sft + 1)
    ]
    for j in range(1, n_grpo + 1):
        success = min(0.9, 0.2 + 0.04 * j + rng.uniform(-0.05, 0.05))
        rows.append(
            {
                "step": n_sft + j,
                "phase": "grpo",
                "time_s": 10.0 * j,
                "reward_mean": success + 0.1,
                "reward_std": 0.3,
                "success_rate": success,
                "policy_loss": rng.uniform(-0.1, 0.1),
                "kl": 0.002 * j,
                "ratio_mean": 1.0 + rng.uniform(-0.02, 0.02),
                "ratio_std": 0.05,
                "clip_frac": rng.uniform(0.0, 0.1),
                "entropy": 1.2 - 0.02 * j,
                "grad_norm": rng.uniform(0.5, 2.0),
                "lr": 1e-6,
                "tool_success_rate": 0.7 + 0.01 * j,
                "tool_timeout_rate": 0.05,
                "malformed_rate": 0.1 - 0.005 * j,
                "episode_len": 3.0,
                "frac_prompts_with_signal": 0.6,
                "reward_var_per_prompt_mean": 0.15,
                "critic_value_loss": 0.5 * math.exp(-j / 5),  # a PPO run: its critic learns
                "critic_explained_variance": 1.0 - math.exp(-j / 4) - 0.3,
                "critic_values_mean": success - 0.1,
                "critic_returns_mean": success + 0.1,
            }
        )
    rows[-1]["kl"] = float("nan")  # a NaN the report must survive
    return rows
