"""Engines by name: the CLI's --engine choices are the registry's, and flags an engine cannot honour fail
before any work, in its plan as in its run."""

from __future__ import annotations

import pytest

from mcprl.cli.train import Engine
from mcprl.errors import ConfigError
from mcprl.training.config import TrainConfig, describe
from mcprl.training.engines import ENGINES, RunRequest, get_engine


def test_the_cli_offers_exactly_the_registered_engines():
    assert [e.value for e in Engine] == list(ENGINES) == ["embedded", "skyrl", "tinker"]
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


def test_the_tinker_plan_says_where_it_trains_and_what_it_leaves_out():
    plan = get_engine("tinker").plan(TrainConfig(), RunRequest())
    assert "engine:     tinker" in plan and "local: SkyRL's Tinker server" in plan
    assert "loss ppo" in plan and "reduction sequence_mean" in plan
    # the quickstart recipe is a full fine-tune with a weight average: a LoRA at 10x its rates, no average
    assert "finetune.mode=full: a LoRA adapter trains instead" in plan and "sft.ema_decay" in plan


@pytest.mark.parametrize(("overrides", "message"), [
    ({"kl_coef": 0.1}, "no KL term"),
    ({"policy_loss": "gspo"}, "the Tinker API has no such loss"),
    ({"epochs": 2}, "one optimizer step per GRPO step"),
    ({"advantage_estimator": "gae"}, "needs a critic, which the Tinker API does not train"),
])
def test_tinker_refuses_what_the_api_cannot_do_at_load_time(overrides, message):
    cfg = TrainConfig()
    for key, value in overrides.items():
        setattr(cfg.algo, key, value)
    engine = get_engine("tinker")
    for method in (engine.plan, engine.run):
        with pytest.raises(ConfigError, match=message):
            method(cfg, RunRequest())


def test_a_remote_tinker_needs_its_key_and_model_but_never_prints_the_key(monkeypatch):
    cfg = TrainConfig()
    cfg.tinker.base_url = "https://tinker.example.com"
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"set the API key in \$TINKER_API_KEY"):
        get_engine("tinker").plan(cfg, RunRequest())
    monkeypatch.setenv("TINKER_API_KEY", "tml-secret-0123456789")
    with pytest.raises(ConfigError, match="tinker.model: name the remote server's base model"):
        get_engine("tinker").plan(cfg, RunRequest())
    cfg.tinker.model = "meta-llama/Llama-3.2-1B"
    plan = get_engine("tinker").plan(cfg, RunRequest())
    assert "https://tinker.example.com" in plan and "tml-secret" not in plan and "reduction sum" in plan


def test_the_embedded_plan_describes_the_critic_under_gae():
    cfg = TrainConfig()
    assert "critic:" not in get_engine("embedded").plan(cfg, RunRequest())
    cfg.algo.advantage_estimator = "gae"
    line = next(x for x in get_engine("embedded").plan(cfg, RunRequest()).splitlines() if x.startswith("critic:"))
    assert "smollm2-135m (lora, r=16) + value head" in line and "M of 135M parameters trained" in line and "GiB" in line
