"""A run's record: a GRPO rerun from another run's warm start (--resume-from) keeps that run's evals for its
summary, a resume logs each step once, and a new run in a used directory starts a record of its own."""
import json
from pathlib import Path

from mcprl.training.checkpoint import TrainState, latest_checkpoint
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


def _record(run_dir: Path, rows: list[tuple[str, int]]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "phase": p}) + "\n" for p, s in rows))


def _open(run_dir: Path, checkpoint: Path | None, state: TrainState) -> list[tuple[str, int]]:
    cfg = TrainConfig()
    cfg.run.output_dir, cfg.logging.wandb.enabled, cfg.logging.console_every = str(run_dir), False, 0
    open_run(RunStart(cfg, run_dir, [], [], run_dir / "experts.jsonl", [], checkpoint, state),
             policy=None)  # type: ignore[arg-type]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [(row["phase"], row["step"]) for row in map(json.loads, lines)]


def test_a_new_run_in_a_used_directory_moves_the_old_record_aside(tmp_path):
    """`make train` twice, or `--resume` before any checkpoint: the second run's steps are not appended to the
    first one's (the report would count 641 SFT steps twice); the old rows are kept aside."""
    _record(tmp_path, [("sft", 1), ("sft", 2), ("grpo", 1)])
    old = tmp_path / "checkpoints" / "step_grpo_1"
    old.mkdir(parents=True)
    (tmp_path / "checkpoints" / "latest").write_text(old.name)

    assert _open(tmp_path, None, TrainState(phase="sft")) == []
    assert len((tmp_path / "metrics.superseded.jsonl").read_text().splitlines()) == 3
    assert latest_checkpoint(tmp_path) is None and old.is_dir()  # a crash now, then --resume: this run again


def test_a_rerun_from_another_runs_checkpoint_keeps_none_of_the_directorys_old_rows(tmp_path):
    warm, rerun = tmp_path / "warm", tmp_path / "rerun"
    checkpoint = warm / "checkpoints" / "step_grpo_0"
    checkpoint.mkdir(parents=True)
    _record(rerun, [("sft", 1), ("grpo", 1)])  # an older run in the rerun's directory

    assert _open(rerun, checkpoint, TrainState(phase="grpo", sft_step=641)) == []
    own = rerun / "checkpoints" / "step_grpo_0"  # --resume-from the directory's own warm start keeps its SFT
    own.mkdir(parents=True)
    _record(rerun, [("sft", 1), ("sft", 2), ("grpo", 1)])
    assert _open(rerun, own, TrainState(phase="grpo", sft_step=2)) == [("sft", 1), ("sft", 2)]
