"""A GRPO rerun from another run's warm start (--resume-from) keeps that run's evals for its summary."""
from pathlib import Path

from mcprl.training.checkpoint import TrainState
from mcprl.training.run import adopt_evals


def _eval_dir(path: Path, text: str) -> None:
    path.mkdir(parents=True)
    (path / "trajectories.jsonl").write_text(text)


def test_evals_of_the_source_run_are_copied_and_missing_ones_dropped(tmp_path):
    source, target = tmp_path / "warm", tmp_path / "rerun"
    checkpoint = source / "checkpoints" / "step_grpo_0"
    checkpoint.mkdir(parents=True)
    _eval_dir(source / "eval_base", "base\n")
    _eval_dir(source / "eval_sft", "sft\n")
    _eval_dir(target / "eval_sft", "stale from an older run\n")
    state = TrainState(phase="grpo", evals={"base": {"success_rate": 0.0}, "sft": {"success_rate": 0.7},
                                            "gone": {"success_rate": 0.1}})

    adopt_evals(checkpoint, target, state)

    assert (target / "eval_base" / "trajectories.jsonl").read_text() == "base\n"
    assert (target / "eval_sft" / "trajectories.jsonl").read_text() == "sft\n"
    assert set(state.evals) == {"base", "sft"}
    assert (source / "eval_sft").is_dir()


def test_resuming_inside_the_same_run_touches_nothing(tmp_path):
    checkpoint = tmp_path / "checkpoints" / "step_grpo_0"
    checkpoint.mkdir(parents=True)
    state = TrainState(phase="grpo", evals={"sft": {"success_rate": 0.7}})

    adopt_evals(checkpoint, tmp_path, state)

    assert state.evals == {"sft": {"success_rate": 0.7}}
    assert not (tmp_path / "eval_sft").exists()
