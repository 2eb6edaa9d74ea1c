"""sft.ema_decay: the warm start is the moving average of the SFT weights, and a resume mid-SFT restores it."""

import json
from types import SimpleNamespace

import pytest
import torch

from mcprl.training.callbacks import Callback, CallbackList
from mcprl.training.checkpoint import TrainState, read_state
from mcprl.training.config import ConfigError, FinetuneConfig, LoraConfig, load_train_config
from mcprl.training.loop.sft import run_sft
from mcprl.training.policy import Policy, wrap_for_finetune
from mcprl.training.run import Clock, Run
from mcprl.training.sft import WeightAverage

from .tiny_model import tiny_llama

DECAY = 0.5


class Snapshots(Callback):
    """The live weights after each optimizer step; an optional crash after step `crash_at`."""

    def __init__(self, model, crash_at=None):
        self.model, self.crash_at, self.seen = model, crash_at, []

    def on_step(self, step, metrics):
        self.seen.append([p.detach().clone() for p in self.model.parameters()])
        if step == self.crash_at:
            raise KeyboardInterrupt(f"simulated crash after SFT step {step}")


def _policy(tokenizer):
    engine = SimpleNamespace(generator=torch.Generator(), sync_weights=lambda: None)
    return Policy(model=tiny_llama(2, vocab_size=len(tokenizer)), tokenizer=tokenizer, engine=engine,
                  rollouts=None, bf16=False)


def sft_run(cfg, experts, run_dir, policy, callbacks, checkpoint=None, state=None) -> Run:
    return Run(cfg, run_dir, [], [], experts, [], checkpoint, state or TrainState(), policy, callbacks, Clock())


def _setup(tmp_path):
    experts = tmp_path / "experts.jsonl"
    experts.write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"Price of ticker {i}?"},
        {"role": "assistant", "content": f'<tool_call>{{"name": "quote", "arguments": {{"t": "T{i}"}}}}</tool_call>'},
        {"role": "user", "content": str(10 * i)},
        {"role": "assistant", "content": f"<answer>{10 * i}</answer>"}]}) + "\n"
        for i in range(5)))
    cfg = load_train_config("configs/quickstart.yaml", [
        "sft.max_steps=4", f"sft.ema_decay={DECAY}", "sft.warmup_steps=0", "sft.lr=1e-2", "sft.max_seconds=null",
        "sft.save_every=2", f"run.output_dir={tmp_path / 'run'}", "logging.wandb.enabled=false"])
    return cfg, experts


def test_warm_start_is_the_moving_average_and_a_resume_restores_it(tmp_path, tokenizer):
    cfg, experts = _setup(tmp_path)
    policy, run_dir = _policy(tokenizer), tmp_path / "run"
    steps = Snapshots(policy.model)
    run_sft(sft_run(cfg, experts, run_dir, policy, CallbackList([steps])))
    expected = steps.seen[0]
    for weights in steps.seen[1:]:
        expected = [DECAY * e + (1 - DECAY) * w for e, w in zip(expected, weights)]
    final = [p.detach().clone() for p in policy.model.parameters()]
    for got, want in zip(final, expected):
        torch.testing.assert_close(got, want)
    assert any(not torch.equal(f, w) for f, w in zip(final, steps.seen[-1]))  # not the last step's weights

    crashed = _policy(tokenizer)
    cfg.run.output_dir = str(tmp_path / "crashed")
    with pytest.raises(KeyboardInterrupt):
        run_sft(sft_run(cfg, experts, tmp_path / "crashed", crashed, CallbackList([Snapshots(crashed.model, 3)])))
    checkpoint = tmp_path / "crashed" / "checkpoints" / "step_sft_2"
    resumed = _policy(tokenizer)
    run_sft(sft_run(cfg, experts, tmp_path / "crashed", resumed, CallbackList(), checkpoint, read_state(checkpoint)))
    for got, want in zip(resumed.model.parameters(), final):
        torch.testing.assert_close(got.detach(), want, rtol=0, atol=1e-6)


def test_a_lora_average_holds_the_adapters_only_and_leaves_the_frozen_base_as_it_is():
    model = wrap_for_finetune(tiny_llama(2), FinetuneConfig(mode="lora", lora=LoraConfig(r=4, alpha=8,
                                                                                           target_modules=["q_proj"])))
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in trainable]
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    average = WeightAverage(trainable, DECAY)
    average.update()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    average.update()
    average.apply()
    held = sum(m.numel() for m in average.mean)
    assert held == sum(p.numel() for p in trainable) < sum(p.numel() for p in frozen.values())
    assert all(torch.equal(p, frozen[name] + 1.0) for name, p in model.named_parameters() if not p.requires_grad)
    for p, b in zip(trainable, before):
        torch.testing.assert_close(p.detach(), b + (1 - DECAY))  # the mean of b and b + 1


@pytest.mark.parametrize("decay", ["0", "1", "1.5"])
def test_a_decay_outside_the_open_unit_interval_is_refused(decay):
    with pytest.raises(ConfigError, match="sft.ema_decay must be in"):
        load_train_config("configs/quickstart.yaml", [f"sft.ema_decay={decay}"])
