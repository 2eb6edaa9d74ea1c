from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path

import pytest
from rich.console import Console

from mcprl.eval.errors import RunDirError
from mcprl.eval.plots import CHARTS, reward_success
from mcprl.eval.report import build_report
from mcprl.eval.results import write_eval_outputs
from mcprl.eval.run import load_run
from tests.eval.scripted import metrics_rows, mixed, never_tools, rollout

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def quiet() -> Console:
    return Console(file=io.StringIO(), width=110)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR", f"{path.name} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_full_run_gets_every_chart_html_and_summary(run_dir: Path):
    console = quiet()
    paths = build_report(run_dir, console=console)
    assert paths.out_dir == run_dir / "report"
    assert set(paths.images) == set(CHARTS)
    for png in paths.images.values():
        width, height = png_size(png)
        assert width >= 600 and height >= 300 and png.stat().st_size > 5000

    page = paths.html.read_text()
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert sorted(srcs) == sorted(p.name for p in paths.images.values())
    assert not re.search(r'(src|href)="(https?:)?//', page) and "<script" not in page
    assert "Not available" not in page
    assert (
        "<th>base</th><th>grpo</th>" in page and "low_grpo_signal" in page and "pass@1, complex" in page
    )  # grpo: every prompt always solved
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in page and "skipped 1 unreadable line" in page

    summary = paths.summary.read_text()
    assert len(summary.splitlines()) <= 50
    assert "Δ grpo - base" in summary and "pass@4" in summary and "too easy" in summary
    assert "5.5 min" in summary and "SFT: 5 steps" in summary and "GRPO: 15 steps" in summary
    assert "report.html" in console.file.getvalue()


def test_report_flags_collapse_between_evals(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    write_eval_outputs(run / "eval_base", rollout(mixed), console=quiet())
    write_eval_outputs(run / "eval_grpo", rollout(never_tools), console=quiet())  # no reference given here
    paths = build_report(run, console=quiet())
    page = paths.html.read_text()
    assert 'class="alarm error"' in page and "TOOL-USE COLLAPSE" in page
    assert "ALARM: eval grpo vs base: tool_collapse" in paths.summary.read_text()


def test_evals_only_degrade_gracefully(tmp_path: Path):
    run = tmp_path / "run"
    write_eval_outputs(run / "eval_base", rollout(mixed), console=quiet())
    paths = build_report(run, console=quiet())
    assert set(paths.images) == {"success_by_complexity", "error_patterns"}
    page = paths.html.read_text()
    assert page.count("Not available") == len(CHARTS) - 2
    assert "metrics.jsonl not found" in page


def test_sft_only_run_without_evals(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics_rows(n_sft=6, n_grpo=0)))
    paths = build_report(run, console=quiet())
    assert set(paths.images) == {"sft_loss"}
    page = paths.html.read_text()
    assert "Not available: no GRPO steps" in page and "no eval_*/ directories" in page
    assert "GRPO: no steps" in paths.summary.read_text()


def test_metrics_without_phase_or_rl_keys(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "reward_mean": 0.1 * s, "success_rate": None} for s in range(1, 6)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    paths = build_report(run, console=quiet())
    assert set(paths.images) == {"reward_success"}


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_nothing_to_report_is_a_clear_error(tmp_path: Path, make: str):
    run = tmp_path / "run"
    if make == "empty":
        run.mkdir()
    with pytest.raises(RunDirError, match="run"):
        build_report(run, console=quiet())


def test_guard_probes_join_the_success_chart(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"phase": "grpo", "step": s, "reward_mean": 0.5, "success_rate": 0.5} for s in range(1, 5)]
    rows[1] |= {"guard_success": 0.7, "guard_restored": 0.0}
    rows[3] |= {"guard_success": 0.4, "guard_restored": 1.0}
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ax = reward_success(load_run(run)).axes[1]
    probe, = [line for line in ax.lines if line.get_label() == "guard probe (greedy)"]
    assert list(probe.get_xdata()) == [2, 4] and list(probe.get_ydata()) == [0.7, 0.4]
    restored, = ax.collections
    assert restored.get_offsets().tolist() == [[4.0, 0.4]]
    (run / "metrics.jsonl").write_text("".join(json.dumps({k: r[k] for k in ("phase", "step", "reward_mean",
                                                                         "success_rate")}) + "\n" for r in rows))
    plain = reward_success(load_run(run)).axes[1]
    assert [line.get_label() for line in plain.lines if line.get_label() == "guard probe (greedy)"] == []
    assert not plain.collections


def test_a_run_of_namespaced_rows_reads_like_one_of_flat_rows(tmp_path):
    """metrics.jsonl holds `rollout/reward_mean`, `sft/loss`, ...; runs written before that hold the short
    names. The report reads both alike."""
    from mcprl.metric_names import namespaced

    rows = metrics_rows(n_sft=3, n_grpo=4)
    for name, written in (("flat", rows), ("namespaced", [namespaced(r) for r in rows])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in written))
    assert "rollout/reward_mean" in (tmp_path / "namespaced" / "metrics.jsonl").read_text()
    flat, spaced = load_run(tmp_path / "flat").metrics, load_run(tmp_path / "namespaced").metrics
    assert sorted(flat.columns) == sorted(spaced.columns)
    assert flat.equals(spaced[flat.columns])


def test_the_critic_chart_shows_a_ppo_run_and_says_why_a_grpo_run_has_none(tmp_path: Path):
    from mcprl.eval.plots import critic

    rows = metrics_rows(n_sft=0, n_grpo=6)
    for name, written in (("ppo", rows), ("grpo", [{k: v for k, v in r.items() if not k.startswith("critic_")}
                                                  for r in rows])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in written))
    loss, variance, *_ = critic(load_run(tmp_path / "ppo")).axes
    assert list(loss.lines[0].get_ydata()) == [r["critic_value_loss"] for r in rows]
    assert variance.get_title() == "explained variance of the returns" and variance.get_ylim()[0] < 0 < variance.get_ylim()[1]
    assert "algo.advantage_estimator: gae" in critic(load_run(tmp_path / "grpo"))
