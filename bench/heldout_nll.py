"""Teacher-forced loss of held-out expert demos, per complexity or task family, for models or checkpoints.

Pass/fail on 24 held-out episodes moves in steps of 4.2 points and swings with the arithmetic; the
mean negative log-likelihood per assistant token of the same tasks' expert demos (the rule generator's
held-out split, as the quickstart's eval) is a steadier read of what a warm start has learned, and
per complexity it shows whether the multi-call chains were learned.

`--by family` adds what decides whether GRPO can repair a family the warm start fails: the demo's least
likely token (usually the choice of the first tool) and its probability. A T = 1 rollout takes the
demo's path through that token with about that probability, so at p = 0.005 a group of 4 almost never
holds an episode to reinforce, and at p = 0.07 one in four groups does.

    .venv/bin/python bench/heldout_nll.py runs/quickstart/checkpoints/step_grpo_0 [more checkpoints or models]
    .venv/bin/python bench/heldout_nll.py --by family --tasks 96 runs/ema_s2/checkpoints/step_grpo_0
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict

from side_by_side import print_table

COMPLEXITIES = ("simple", "medium", "complex")


def demo_stats(model_or_checkpoint: str, demos: list[tuple[str, list[dict[str, str]]]]) -> dict[str, dict[str, float]]:
    """Per group (and "all"): NLL per assistant token, and the mean log-probability of each demo's least
    likely assistant token."""
    import torch

    from mcprl.training.logprobs import selected_token_logprobs
    from mcprl.training.policy import load_policy_weights
    from mcprl.training.sft import collate, tokenize_conversation

    model, tokenizer = load_policy_weights(model_or_checkpoint, device="cpu")
    model.eval()
    totals: dict[str, dict[str, float]] = defaultdict(lambda: {"nll": 0.0, "tokens": 0, "least": 0.0, "demos": 0})
    for group, messages in demos:
        ids, attention, select = collate([tokenize_conversation(messages, tokenizer, 2048)], tokenizer.pad_token_id)
        with torch.no_grad():
            logprobs = selected_token_logprobs(model, ids, attention, select).logprobs
        for key in (group, "all"):
            t = totals[key]
            t["nll"] -= logprobs.sum().item()
            t["tokens"] += logprobs.numel()
            t["least"] += logprobs.min().item()
            t["demos"] += 1
    return {key: {"nll": t["nll"] / t["tokens"], "least": t["least"] / t["demos"], "demos": t["demos"]}
            for key, t in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="training checkpoints (RUN/checkpoints/NAME) or model names/dirs")
    parser.add_argument("--tasks", type=int, default=24, help="held-out tasks (the quickstart's data.generate.n_eval)")
    parser.add_argument("--seed", type=int, default=1, help="the generator's seed (data.generate.seed)")
    parser.add_argument("--by", choices=("complexity", "family"), default="complexity")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from mcprl.data.rules import generate

    torch.set_num_threads(args.threads)
    held = generate(args.tasks, args.seed, heldout=True, progress=False)
    group = (lambda s: s.ground_truth["complexity"]) if args.by == "complexity" else (lambda s: s.family)
    demos = [(group(s), e["messages"]) for s, e in zip(held.samples, held.experts)]
    title = f"held-out demos ({args.tasks} tasks, seed {args.seed})"
    if args.by == "complexity":
        rows = []
        for name in args.models:
            nll = {k: v["nll"] for k, v in demo_stats(name, demos).items()}
            rows.append([name, *(f"{nll[k]:.4f}" if k in nll else "–" for k in ("all", *COMPLEXITIES))])
        print_table(f"NLL per assistant token, {title}", ["model", "all", *COMPLEXITIES], rows)
        return
    for name in args.models:
        stats = demo_stats(name, demos)
        rows = [[key, str(s["demos"]), f"{s['nll']:.4f}", f"{s['least']:.2f}", f"{math.exp(s['least']):.3g}"]
                for key, s in sorted(stats.items(), key=lambda kv: (kv[0] == "all", kv[1]["least"]))]
        print_table(f"{name}: {title}", ["family", "demos", "NLL / token", "least likely token: logprob", "p"], rows)


if __name__ == "__main__":
    main()
