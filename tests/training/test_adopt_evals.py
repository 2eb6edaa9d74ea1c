"""A resumed run's record: a GRPO rerun from another run's warm start (--resume-from) keeps that run's evals for
its summary, and a resume logs each step once."""
import json
from pathlib import Path

from mcprl.training.checkpoint import TrainState
from mcprl.training.config import TrainConfig
from mcprl.training.run import RunStart, adopt_evals, open_run


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


def test_a_resume_logs_each_step_once(tmp_path):
    """The run killed after GRPO step 7, checkpointed at step 5: `open_run` keeps steps 1-5 in metrics.jsonl,
    so the steps trained again are logged once (the report counted 10 GRPO steps of 8 before)."""
    cfg = TrainConfig()
    cfg.run.output_dir, cfg.logging.wandb.enabled, cfg.logging.console_every = str(tmp_path), False, 0
    checkpoint = tmp_path / "checkpoints" / "step_grpo_5"
    checkpoint.mkdir(parents=True)
    rows = [json.dumps({"step": s, "phase": "grpo"}) + "\n" for s in range(1, 8)]
    (tmp_path / "metrics.jsonl").write_text("".join(rows))
    start = RunStart(cfg, tmp_path, [], [], tmp_path / "experts.jsonl", [], checkpoint,
                     TrainState(phase="grpo", sft_step=641, grpo_step=5))

    run = open_run(start, policy=None)  # type: ignore[arg-type]
    run.callbacks.on_step(6, {"phase": "grpo", "reward_mean": 0.5})

    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]
