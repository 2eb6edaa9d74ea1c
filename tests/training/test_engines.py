"""Engines by name: the CLI's --engine choices are the registry's, and flags an engine cannot honour fail
before any work, in its plan as in its run."""

from __future__ import annotations

import pytest

from mcprl.cli.train import Engine
from mcprl.errors import ConfigError
from mcprl.training.config import TrainConfig, describe
from mcprl.training.engines import ENGINES, RunRequest, get_engine


def test_the_cli_offers_exactly_the_registered_engines():
    assert [e.value for e in Engine] == list(ENGINES) == ["embedded", "skyrl"]
    assert all(get_engine(name).name == name for name in ENGINES)


def test_an_unknown_engine_is_one_line_with_the_closest_name():
    with pytest.raises(ConfigError, match="unknown engine 'embeded'; did you mean 'embedded'"):
        get_engine("embeded")


def test_the_embedded_plan_is_the_dry_run_text():
    cfg = TrainConfig()
    assert get_engine("embedded").plan(cfg, RunRequest(sft_only=True)) == describe(cfg, "embedded", True)


@pytest.mark.parametrize(("request_", "message"), [
    (RunRequest(sft_only=True), "--sft-only: SkyRL's trainer runs GRPO only"),
    (RunRequest(resume_from="runs/x/checkpoints/step_grpo_0"), "--resume-from: SkyRL's trainer resumes from its own"),
])
def test_skyrl_refuses_what_it_cannot_do_before_any_work(request_, message):
    engine = get_engine("skyrl")
    for method in (engine.plan, engine.run):
        with pytest.raises(ConfigError, match=message):
            method(TrainConfig(), request_)
