"""GRPO on MCP tools in one screen: the algorithm before the options.

tasks -> rollouts through SkyRL's generator on the real MCP servers -> group-relative advantages (SkyRL's
registry) -> policy-gradient loss (SkyRL's registry) -> optimizer step -> weights to the rollout engine.
`mcprl train` runs this loop with everything around it (an SFT warm start, dynamic sampling, micro-batches,
checkpoints, evals, logging); here each piece is called directly. The base model never calls a tool, so
without a warm start expect rewards near the floor; pass a checkpoint to see it learn:

    python examples/grpo_loop.py --steps 2 --model runs/quickstart/checkpoints/step_grpo_0
"""

from __future__ import annotations

import argparse

import torch

import mcprl._skyrl  # noqa: F401 - the Python 3.11 shim, before skyrl
from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry, apply_loss_reduction_to_advantages_minibatch

from mcprl.training import grpo
from mcprl.training.config import load_train_config
from mcprl.training.logprobs import selected_token_logprobs
from mcprl.training.policy import build_policy, load_policy_weights
from mcprl.training.run import prepare_data


def main(steps: int, model: str | None, prompts_per_step: int, group_size: int, overrides: list[str]) -> list[dict]:
    cfg = load_train_config(None, [f"algo.prompts_per_step={prompts_per_step}", f"algo.group_size={group_size}",
                                   *([f"model.name={model}"] if model else []), *overrides])
    tasks, _, _ = prepare_data(cfg)  # verified tasks from the family generator (generated once, then read)
    weights = load_policy_weights(model) if model else (None, None)
    policy = build_policy(cfg, model=weights[0], tokenizer=weights[1])  # model + batched engine + rollouts
    algo, temperature = cfg.algo, cfg.rollout.temperature
    skyrl_cfg = grpo.skyrl_algorithm_config(algo, temperature)  # SkyRL's AlgorithmConfig from ours
    loss_fn = PolicyLossRegistry.get(skyrl_cfg.policy_loss_type)  # "regular": PPO's clipped surrogate
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=algo.lr)
    sampling = policy.rollouts.sampling(temperature)
    log = []
    try:
        for step in range(steps):
            # 1. Rollouts: group_size episodes per task, multi-turn, every tool call executed on the servers;
            #    the env scores every turn; the engine returns the sampled tokens' logprobs.
            batch_tasks = [tasks[(step * prompts_per_step + i) % len(tasks)] for i in range(prompts_per_step)]
            result = policy.rollouts.run(batch_tasks, group_size, sampling)
            batch = grpo.build_batch(result.output, result.group_ids)
            # 2. Advantages: each episode's return against its group's mean (and std), on the model's tokens.
            advantages, _ = grpo.advantages(batch, skyrl_cfg)
            # 3. Loss: the clipped ratio of the current policy's logprobs to the sampling policy's.
            policy.model.train()
            rows = list(range(batch.size))
            ids, attention, select = grpo.token_tensors(batch, rows, policy.pad_id)
            stats = selected_token_logprobs(policy.model, ids, attention, select, temperature=temperature,
                                            bf16=policy.bf16)
            logprobs = grpo.scatter_tokens(stats.logprobs, batch.loss_mask)
            scaled = apply_loss_reduction_to_advantages_minibatch(  # summed, the loss is SkyRL's token mean
                advantages, batch.loss_mask, skyrl_cfg.loss_reduction, batch.size, batch.loss_mask.shape[1])
            loss, _ = loss_fn(logprobs, batch.old_logprobs, scaled, config=skyrl_cfg, loss_mask=batch.loss_mask,
                              rollout_logprobs=None)
            # 4. Update, then hand the new weights to the rollout engine for the next step's episodes.
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), algo.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            policy.engine.sync_weights()
            episode_rewards = batch.token_rewards.sum(dim=1)
            solved = sum(bool(t["success"]) for t in result.trajectories) / len(result.trajectories)
            log.append({"step": step + 1, "reward_mean": float(episode_rewards.mean()), "solved": solved,
                        "loss": loss.item(), "tokens": int(batch.loss_mask.sum())})
            print(f"step {step + 1}: reward {log[-1]['reward_mean']:+.3f}  solved {solved:.0%}  loss {loss.item():+.4f}")
    finally:
        policy.engine.close()
    return log


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--model", default=None, help="model name, local dir or training checkpoint")
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("-o", "--override", action="append", default=[], help="section.key=value, as mcprl train -o")
    args = parser.parse_args()
    main(args.steps, args.model, args.prompts_per_step, args.group_size, args.override)
