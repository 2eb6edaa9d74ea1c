"""The SkyRL launcher on CPU: overrides that SkyRL's own config and validate_cfg accept, parquet data the
env reads back, the run-record bridge, and the errors a user can hit before any GPU is involved."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from mcprl.data.sample import SkyRLSample, read_samples, write_samples
from mcprl.envs.config import EnvConfig
from mcprl.metric_names import short
from mcprl.rewards.ground_truth import GroundTruth
from mcprl.training import skyrl_launcher
from mcprl.training.config import ConfigError, load_train_config
from mcprl.training.skyrl_launcher import (
    LaunchError,
    MCPSkyRLTrainConfig,
    build_skyrl_config,
    dry_run,
    format_override,
    plan,
)
from tests.support.cli import train_app

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "configs" / "cluster.yaml"
QUICKSTART = ROOT / "configs" / "quickstart.yaml"


@pytest.fixture(autouse=True)
def _no_wandb_key(monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def sample(i: int) -> SkyRLSample:
    gt = {"task_id": f"t{i}", "answer": 180.5 + i, "max_turns": 4, "complexity": "simple",
          "tool_sequence": [{"tool": "get_quote", "params": {"ticker": "AAPL"}}]}
    return SkyRLSample(data_source="finance", prompt=[{"role": "system", "content": "Use tools."},
                                                      {"role": "user", "content": f"Price of AAPL, task {i}?"}],
                       reward_spec={"method": "rule", "ground_truth": gt}, extra_info={"split": "train", "i": i})


@pytest.fixture
def datasets(tmp_path):
    train = write_samples([sample(i) for i in range(10)], tmp_path / "train.jsonl")
    test = write_samples([sample(100 + i) for i in range(6)], tmp_path / "test.jsonl")
    return train, test


def quickstart(tmp_path, *overrides):
    return load_train_config(QUICKSTART, ["sft.enabled=false", f"run.output_dir={tmp_path / 'run'}",
                                          f"data.train={tmp_path / 'train.jsonl'}", f"data.eval={tmp_path / 'test.jsonl'}",
                                          *overrides])


def test_cluster_dry_run_builds_and_validates_skyrls_own_config():
    cfg = load_train_config(CLUSTER)
    p = plan(cfg)
    skyrl = build_skyrl_config(p.overrides)
    assert isinstance(skyrl, MCPSkyRLTrainConfig)
    t, g = skyrl.trainer, skyrl.generator
    assert t.policy.model.path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert (t.policy.model.lora.rank, t.policy.model.lora.alpha, t.policy.model.lora.target_modules) == (32, 64,
                                                                                                      "all-linear")
    assert (t.algorithm.advantage_estimator, t.algorithm.policy_loss_type) == ("grpo", "regular")
    assert (t.algorithm.eps_clip_low, t.algorithm.eps_clip_high) == (0.2, 0.28)
    assert (t.algorithm.use_kl_loss, t.algorithm.use_kl_in_reward) == (False, False)
    assert t.policy.optimizer_config.lr == pytest.approx(2e-5)
    assert (t.train_batch_size, t.policy_mini_batch_size, g.n_samples_per_prompt) == (64, 64, 8)
    assert (t.max_training_steps, t.placement.policy_num_gpus_per_node, g.inference_engine.num_engines) == (200, 4, 4)
    assert (g.max_turns, g.max_input_length, g.sampling_params.max_generate_length) == (6, 6144, 512)
    assert g.sampling_params.stop == ["</tool_call>", "</answer>"]
    assert g.inference_engine.backend == "vllm" and g.inference_engine.engine_init_kwargs == {"max_model_len": 8192}
    assert t.logger == "console" and t.tags == ["cluster"]
    assert Path(t.ckpt_path).is_absolute() and t.ckpt_path.endswith("runs/cluster-qwen1.5b/skyrl/ckpts")
    assert skyrl.environment.env_class == "mcp_tool_env"
    env = EnvConfig.from_any(skyrl.environment.skyrl_gym.mcp_tool_env)
    assert (env.max_turns, env.tool_timeout_s, env.reward_fn) == (6, 10.0, "heuristic")
    assert any("WANDB_API_KEY" in n for n in p.notes)


def test_full_finetune_turns_lora_off_and_kl_maps_to_skyrl(tmp_path):
    skyrl = build_skyrl_config(plan(quickstart(tmp_path, "finetune.mode=full", "algo.kl_coef=0.01",
                                               "algo.use_kl_loss=true")).overrides)
    assert skyrl.trainer.policy.model.lora.rank == 0
    assert (skyrl.trainer.algorithm.use_kl_loss, skyrl.trainer.algorithm.kl_loss_coef) == (True, 0.01)
    lora = build_skyrl_config(plan(quickstart(tmp_path, "finetune.mode=lora", "algo.kl_coef=0.01")).overrides)
    assert lora.trainer.policy.model.lora.rank == 16
    assert lora.trainer.policy.model.lora.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj"]
    assert (lora.trainer.algorithm.use_kl_loss, lora.trainer.algorithm.use_kl_in_reward) == (False, True)


def test_prepare_writes_parquet_that_skyrls_dataset_and_the_env_read_back(tmp_path, datasets, monkeypatch):
    train, test = datasets
    monkeypatch.chdir(tmp_path)  # a relative servers config, checked at load and made absolute for the workers
    Path("servers.yaml").write_text("servers:\n  - {name: polygon, command: python, args: [-m, mcprl.servers, polygon]}\n")
    cfg = quickstart(tmp_path, f"data.train={train}", f"data.eval={test}", "eval.max_tasks=4",
                     "rollout.servers_config=servers.yaml", "algo.steps=5", "algo.prompts_per_step=3")
    p = plan(cfg, prepare=True)
    assert p.train_data.suffix == ".parquet" and p.train_data.is_relative_to(tmp_path / "run")
    assert [s.to_dict() for s in read_samples(p.train_data)] == [s.to_dict() for s in read_samples(train)]
    assert len(read_samples(p.eval_data)) == 4
    skyrl = build_skyrl_config(p.overrides)
    assert skyrl.data.train_data == [str(p.train_data)] and skyrl.trainer.eval_batch_size == 4
    assert skyrl.trainer.epochs == 2  # 5 steps, 10 tasks / 3 per step -> 3 steps per epoch
    assert skyrl.environment.skyrl_gym.mcp_tool_env["servers_config"] == str(Path("servers.yaml").resolve())

    from skyrl.train.dataset import PromptDataset

    dataset = PromptDataset(datasets=[str(p.train_data)], tokenizer=CharTokenizer(), max_prompt_length=10_000,
                            num_workers=1)
    messages, env_class, extras, _ = dataset[3]
    assert env_class == "mcp_tool_env" and messages == sample(3).prompt
    assert GroundTruth.read(extras).data == sample(3).ground_truth
    assert json.loads(extras["extra_info"]) == {"split": "train", "i": 3}


def test_openenv_rows_reach_skyrls_dataset_with_their_env_and_its_settings(tmp_path):
    """`env_class: openenv_env` rows under SkyRL's trainer: the row's env class and reset kwargs come back from
    SkyRL's own dataset, and the env's settings sit where SkyRL's generator hands them to it."""
    from skyrl.train.dataset import PromptDataset

    from mcprl.data.sample import as_openenv_row

    rows = write_samples([as_openenv_row(sample(i)) for i in range(4)], tmp_path / "rows.jsonl")
    cfg = quickstart(tmp_path, f"data.train={rows}", f"data.eval={rows}", "algo.prompts_per_step=2",
                     "rollout.openenv.url=http://10.0.0.2:8000", "rollout.openenv.success_reward=0.5")
    p = plan(cfg, prepare=True)
    skyrl = build_skyrl_config(p.overrides)
    assert skyrl.environment.skyrl_gym.openenv_env["url"] == "http://10.0.0.2:8000"
    assert skyrl.environment.skyrl_gym.openenv_env["success_reward"] == 0.5
    messages, env_class, extras, _ = PromptDataset(datasets=[str(p.train_data)], tokenizer=CharTokenizer(),
                                                   max_prompt_length=10_000, num_workers=1)[1]
    assert env_class == "openenv_env" and messages == [sample(1).prompt[-1]]
    assert json.loads(extras["extra_info"])["reset_kwargs"] == {"task_id": "t1"}
    import skyrl_gym

    import mcprl.envs  # noqa: F401
    env = skyrl_gym.make("openenv_env", env_config=skyrl.environment.skyrl_gym.openenv_env, extras=extras)
    assert env.reset_kwargs == {"task_id": "t1"} and env.task_id == "t1" and env.max_turns == 4  # JSON text, read


def test_gae_maps_the_critic_to_skyrls_trainer_critic(tmp_path, datasets):
    train, test = datasets
    cfg = quickstart(tmp_path, f"data.train={train}", f"data.eval={test}", "algo.advantage_estimator=gae",
                     "algo.lambd=0.95", "critic.lr=3e-5", "critic.value_clip=0.5", "critic.mode=full")
    skyrl = build_skyrl_config(plan(cfg).overrides)  # plan() runs SkyRL's own validate_cfg
    assert skyrl.trainer.algorithm.advantage_estimator == "gae" and skyrl.trainer.algorithm.lambd == 0.95
    assert skyrl.trainer.algorithm.value_clip == 0.5
    assert skyrl.trainer.critic.model.path == skyrl.trainer.policy.model.path
    assert skyrl.trainer.critic.optimizer_config.lr == 3e-5 and skyrl.trainer.critic.model.lora.rank == 0
    with pytest.raises(ConfigError, match="no critic-only steps"):
        plan(quickstart(tmp_path, f"data.train={train}", f"data.eval={test}", "algo.advantage_estimator=gae",
                        "critic.warmup_steps=2"))


class CharTokenizer:
    """Enough of a tokenizer for PromptDataset's length filter: one token per 4 characters."""

    def apply_chat_template(self, messages, add_generation_prompt=True, return_dict=False, tokenize=True):
        return list(range(sum(len(m["content"]) for m in messages) // 4 + 1))


@pytest.mark.parametrize(("overrides", "expected"), [
    (["sft.enabled=true"], "sft.enabled=true: SkyRL's trainer runs GRPO only"),
    (["rollout.backend=hf"], "SkyRL's trainer generates with vLLM only"),
    (["experimental.probe.per_family=2"], "experimental.probe.per_family=2 runs in the embedded trainer only"),
    (["experimental.guard.every=2"], "experimental.guard.every=2 runs in the embedded trainer only"),
    (["experimental.expert_guidance=true"], "experimental.expert_guidance=true runs in the embedded trainer only"),
    (["experimental.negative_weight=0.5"], "experimental.negative_weight=0.5 runs in the embedded trainer only"),
    (["experimental.credit=turn"], "experimental.credit=turn runs in the embedded trainer only"),
    (["algo.detach=context"], "experimental.grpo_detach=context runs in the embedded trainer only"),  # the old key
    (["finetune.top_layers=10"], "finetune.top_layers=10 with mode full: SkyRL's trainer fine-tunes every weight"),
    (["algo.prompts_per_step=1000"], "data.train has 600 tasks, fewer than algo.prompts_per_step=1000"),
    (["algo.micro_batch_size=5"], "SkyRL rejects the configuration: normalized policy_mini_batch_size_per_gpu 16 "
                                  "should be divisible by micro_train_batch_size_per_gpu 5"),
    (["skyrl.num_inference_engines=2"], "must be the same when colocating all models"),
    (["skyrl.overrides=[trainer.no_such_key=1]"], "SkyRL rejects the configuration: Invalid fields {'no_such_key'}"),
])
def test_problems_surface_as_one_line_config_errors(tmp_path, overrides, expected):
    with pytest.raises(ConfigError) as err:
        dry_run(quickstart(tmp_path, *overrides))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_real_run_needs_existing_data_and_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(skyrl_launcher, "_missing_runtime", lambda: None)
    with pytest.raises(ConfigError, match="data.train=.* does not exist; generate the tasks first"):
        skyrl_launcher.launch(quickstart(tmp_path, f"data.train={tmp_path / 'none.jsonl'}"))
    monkeypatch.setattr(skyrl_launcher, "_missing_runtime", lambda: "CUDA GPUs (none is visible)")
    with pytest.raises(LaunchError, match="--engine skyrl needs CUDA GPUs"):
        skyrl_launcher.launch(quickstart(tmp_path))


@pytest.mark.parametrize("value", ["plain", "my run", "007", "true", "null", 'quote"d', "a,b=c", "</tool_call>",
                                   "/abs/path-1.parquet", "1e-05", ["</tool_call>", "</answer>"], {"a b": [1, "x"]},
                                   {}, [], None, True, 1e-05, 3, -1, 0.0])
def test_format_override_round_trips_through_skyrls_parser(value):
    text = format_override("k", value)
    assert OmegaConf.to_container(OmegaConf.from_cli([text]), resolve=True)["k"] == value


def test_run_record_bridge_maps_skyrl_metrics_into_metrics_jsonl(tmp_path):
    from skyrl.train.utils.callbacks import CallbackInput, TrainingControl

    from mcprl.training.skyrl_entrypoint import RunRecordBridge, register_env

    register_env()
    from skyrl_gym.envs.registration import registry

    assert "mcp_tool_env" in registry
    cfg = quickstart(tmp_path)
    bridge = RunRecordBridge(cfg, tmp_path / "run")
    control = TrainingControl()
    bridge.on_train_start(None, CallbackInput(0, 0, 2, 2), control)
    bridge.on_log(None, CallbackInput(0, 0, 2, 2, logs={"eval/all/avg_score": 0.1}), control)
    bridge.on_eval_end(None, CallbackInput(0, 0, 2, 2, metrics={"eval/all/avg_score": 0.1}), control)
    logs = {"reward/avg_raw_reward": 0.25, "policy/policy_loss": -0.01, "policy/loss_metrics/clip_ratio": 0.02,
            "policy/policy_entropy": 1.5, "policy/policy_lr": 1e-4, "loss/avg_kl": 0.003,
            "environment/tool_success_rate": 0.8, "environment/success": 0.5, "environment/turns": 2.5,
            "generate/avg_num_tokens": 300.0}
    bridge.on_log(None, CallbackInput(1, 0, 2, 2, logs=logs), control)
    bridge.on_train_end(None, CallbackInput(2, 0, 2, 2), control)
    record = tmp_path / "run" / "metrics.jsonl"
    with record.open("a") as fh:  # killed after step 2, SkyRL's checkpoint at step 1: step 2 trains again
        fh.write(json.dumps({"step": 2, "phase": "grpo"}) + "\n")
    bridge.on_train_start(None, CallbackInput(1, 0, 2, 2), control)
    assert (tmp_path / "run" / "metrics.superseded.jsonl").read_text().count("\n") == 1

    (row,) = [short(json.loads(line)) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {k: row[k] for k in ("step", "phase", "reward_mean", "policy_loss", "clip_frac", "entropy", "lr", "kl",
                                "tool_success_rate", "success_rate", "episode_len")} == {
        "step": 1, "phase": "grpo", "reward_mean": 0.25, "policy_loss": -0.01, "clip_frac": 0.02, "entropy": 1.5,
        "lr": 1e-4, "kl": 0.003, "tool_success_rate": 0.8, "success_rate": 0.5, "episode_len": 2.5}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["skyrl_evals"] == {"step_0": {"eval/all/avg_score": 0.1}} and summary["grpo_steps"] == 2
    assert load_train_config(tmp_path / "run" / "config.yaml") == cfg



def test_cli_skyrl_dry_run():
    result = CliRunner().invoke(train_app(), ["train", "--engine", "skyrl", "-c", str(CLUSTER), "--dry-run",
                                         "--resume", "-o", "algo.steps=3"])
    assert result.exit_code == 0, result.output
    assert "rollout:    vllm (SkyRL's trainer always generates with vLLM)" in result.output
    assert "SkyRL overrides (accepted by SkyRL's validate_cfg):" in result.output
    assert "  trainer.max_training_steps=3" in result.output and "  trainer.resume_mode=latest" in result.output
    result = CliRunner().invoke(train_app(), ["train", "--engine", "skyrl", "-c", str(CLUSTER), "--sft-only"])
    assert result.exit_code == 2 and "--sft-only: SkyRL's trainer runs GRPO only" in result.output


def test_train_grpo_script_defaults_to_a_dry_run_of_the_cluster_config():
    result = subprocess.run(["bash", str(ROOT / "scripts" / "train_grpo.sh"), "-o", "algo.steps=2"],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr
    assert "run:        cluster-qwen1.5b" in result.stdout
    assert "  trainer.max_training_steps=2" in result.stdout


def test_env_settings_reach_skyrls_env_config(tmp_path):
    skyrl = build_skyrl_config(plan(quickstart(tmp_path, "rollout.tool_allowlist=[get_quote]",
                                               "rollout.tool_retries=0")).overrides)
    env = EnvConfig.from_any(skyrl.environment.skyrl_gym.mcp_tool_env)
    assert env.tool_allowlist == ["get_quote"] and env.tool_retries == 0


def test_lora_top_layers_maps_to_skyrls_exclude_modules(tmp_path):
    every = build_skyrl_config(plan(quickstart(tmp_path, "finetune.mode=lora")).overrides)
    assert every.trainer.policy.model.lora.exclude_modules is None
    top = build_skyrl_config(plan(quickstart(tmp_path, "finetune.mode=lora", "finetune.top_layers=2")).overrides)
    pattern = top.trainer.policy.model.lora.exclude_modules
    import re

    assert re.fullmatch(pattern, "model.layers.27.self_attn.q_proj")
    assert not re.fullmatch(pattern, "model.layers.28.self_attn.q_proj")
    assert not re.fullmatch(pattern, "model.layers.29.mlp.down_proj")


def test_an_online_resume_gives_skyrls_wandb_the_directorys_run_id(tmp_path, monkeypatch):
    """SkyRL's tracker calls wandb.init without an id: W&B's own variables make `--resume` continue the run the
    directory started, as the embedded engine does; offline is a new run (W&B cannot resume those)."""
    from mcprl.training.skyrl_launcher import _logger

    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    cfg, run_dir = quickstart(tmp_path, "logging.wandb.mode=online"), tmp_path / "run"

    logger, env = _logger(cfg, run_dir, [], resume=False, prepare=True)
    assert logger == "wandb" and "WANDB_RESUME" not in env
    assert (run_dir / "wandb_run_id").read_text() == env["WANDB_RUN_ID"]
    assert plan(cfg, resume=True).env == {"WANDB_RUN_ID": env["WANDB_RUN_ID"], "WANDB_RESUME": "allow"}
    assert plan(cfg).env["WANDB_RUN_ID"] != env["WANDB_RUN_ID"]
    assert plan(quickstart(tmp_path, "logging.wandb.mode=offline"), resume=True).env == {"WANDB_MODE": "offline"}
