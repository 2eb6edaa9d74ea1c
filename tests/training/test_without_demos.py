"""summary.json's `no_demo_families`: the held-out tasks of the families SFT had no demo of, per eval, paired."""

from mcprl.eval.results import write_eval_outputs
from mcprl.training.loop.evals import _load_evals, _without_demos
from tests.eval.scripted import TASKS, answer_turn, tool_turn, trajectory


def _eval(run_dir, name, solved):
    rows = [dict(trajectory(task, 0, [tool_turn(), answer_turn()] if task["task_id"] in solved else [answer_turn(-0.3)],
                            task["task_id"] in solved), family="net_income" if i % 2 else "last_price")
            for i, task in enumerate(TASKS)]
    write_eval_outputs(run_dir / f"eval_{name}", rows)


def test_no_demo_families_counts_only_their_tasks_and_pairs_the_evals(tmp_path):
    odd = [t["task_id"] for i, t in enumerate(TASKS) if i % 2]  # the net_income tasks
    even = [t["task_id"] for i, t in enumerate(TASKS) if not i % 2]
    _eval(tmp_path, "sft", solved=set(even))  # solves last_price only
    _eval(tmp_path, "grpo", solved=set(even) | set(odd[:4]))
    out = _without_demos(_load_evals(tmp_path, {"sft": {}, "grpo": {}}), ["net_income"])
    assert out["n_tasks"] == len(odd)
    assert out["pass@1"] == {"sft": 0.0, "grpo": 4 / len(odd)}
    assert out["paired"]["grpo_vs_sft"]["better"] == 4 and out["paired"]["grpo_vs_sft"]["worse"] == 0
    assert _without_demos(_load_evals(tmp_path, {"sft": {}}), []) == {}
