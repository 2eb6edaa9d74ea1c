"""Teacher-forced loss of held-out expert demos, per complexity, for models or training checkpoints.

Pass/fail on 24 held-out episodes moves in steps of 4.2 points and swings with the arithmetic; the
mean negative log-likelihood per assistant token of the same tasks' expert demos (the rule generator's
held-out split, as the quickstart's eval) is a steadier read of what a warm start has learned, and
per complexity it shows whether the multi-call chains were learned.

    .venv/bin/python bench/heldout_nll.py runs/quickstart/checkpoints/step_grpo_0 [more checkpoints or models]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from side_by_side import print_table

COMPLEXITIES = ("simple", "medium", "complex")


def heldout_nll(model_or_checkpoint: str, demos: list[tuple[str, list[dict[str, str]]]]) -> dict[str, float]:
    import torch

    from mcprl.training.logprobs import selected_token_logprobs
    from mcprl.training.policy import load_policy_weights
    from mcprl.training.sft import collate, tokenize_conversation

    model, tokenizer = load_policy_weights(model_or_checkpoint, device="cpu")
    model.eval()
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for complexity, messages in demos:
        ids, attention, select = collate([tokenize_conversation(messages, tokenizer, 2048)], tokenizer.pad_token_id)
        with torch.no_grad():
            logprobs = selected_token_logprobs(model, ids, attention, select).logprobs
        for key in (complexity, "all"):
            totals[key][0] -= logprobs.sum().item()
            totals[key][1] += logprobs.numel()
    return {key: total / count for key, (total, count) in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="training checkpoints (RUN/checkpoints/NAME) or model names/dirs")
    parser.add_argument("--tasks", type=int, default=24, help="held-out tasks (the quickstart's data.generate.n_eval)")
    parser.add_argument("--seed", type=int, default=1, help="the generator's seed (data.generate.seed)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from mcprl.data.rules import generate

    torch.set_num_threads(args.threads)
    held = generate(args.tasks, args.seed, heldout=True, progress=False)
    demos = [(s.ground_truth["complexity"], e["messages"]) for s, e in zip(held.samples, held.experts)]
    rows = []
    for name in args.models:
        nll = heldout_nll(name, demos)
        rows.append([name, *(f"{nll[k]:.4f}" if k in nll else "–" for k in ("all", *COMPLEXITIES))])
    print_table(f"held-out NLL per assistant token ({args.tasks} tasks, seed {args.seed})",
                ["model", "all", *COMPLEXITIES], rows)


if __name__ == "__main__":
    main()
