"""Chaos tests (issue 49): a disk that fills during a checkpoint, checkpoints that are corrupt on `--resume`,
the trainer killed with SIGKILL mid-GRPO step, an MCP server killed while a GRPO step's calls are in flight."""

import contextlib
import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from mcprl.training.checkpoint import (
    CheckpointError,
    TrainState,
    latest_checkpoint,
    load_weights,
    restore_policy,
    save_checkpoint,
)
from tests.support.threads import TORCH_THREADS

from .tiny_model import tiny_llama


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    """A small tmpfs at `path` (a disk that fills); skips where this process may not mount one."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def tiny_checkpoint(run_dir: Path, tokenizer, step: int, model=None) -> tuple[Path, torch.nn.Module]:
    """A real checkpoint of the tiny Llama after one AdamW step (optimizer state included)."""
    model = model or tiny_llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    opt.step()
    path = save_checkpoint(run_dir, TrainState(phase="grpo", grpo_step=step), model, tokenizer, opt, None,
                           {"engine": torch.Generator()})
    return path, model


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one(tmp_path, tokenizer):
    """The first checkpoint fits the 6 MB disk, the second cannot (the tokenizer alone is 3.5 MB): the save
    raises a CheckpointError naming the checkpoint and the one still latest, leaves no partial directory,
    and `--resume` would load the first, whole."""
    with tmpfs(tmp_path / "disk", "6m") as disk:
        first, model = tiny_checkpoint(disk, tokenizer, 1)
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        with pytest.raises(CheckpointError) as err:
            tiny_checkpoint(disk, tokenizer, 2, model)
        message = str(err.value)
        assert "\n" not in message and str(disk / "checkpoints" / "step_grpo_2") in message
        assert "No space left on device" in message and f"{first} is still the latest" in message
        assert sorted(p.name for p in (disk / "checkpoints").iterdir()) == ["latest", "step_grpo_1"]
        assert latest_checkpoint(disk) == first
        fresh = tiny_llama()
        restore_policy(first, fresh, torch.optim.AdamW(fresh.parameters()))
        assert all(torch.equal(fresh.state_dict()[k], v) for k, v in saved.items())


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_corrupt_training_state_is_one_error_naming_its_file(tmp_path, tokenizer, damage):
    path, model = tiny_checkpoint(tmp_path, tokenizer, 1)
    for name in ("training.pt", "model/model.safetensors"):
        file = path / name
        data = file.read_bytes()
        file.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00garbage" * 100)
        with pytest.raises(CheckpointError, match=f"checkpoint file {file} is unreadable"):
            if name == "training.pt":
                restore_policy(path, model, None)
            else:
                load_weights(path, model)
        file.write_bytes(data)


def resume_cli(run_dir: Path, data: Path) -> subprocess.CompletedProcess:
    """`mcprl train --resume` on `run_dir`, evals off, as a user would run it."""
    overrides = [f"run.output_dir={run_dir}", f"data.train={data / 'train.jsonl'}", f"data.eval={data / 'test.jsonl'}",
                 "data.generate.n_train=4", "data.generate.n_eval=1", "eval.before=false", "eval.after_sft=false",
                 "eval.after_grpo=false", "logging.wandb.enabled=false", f"model.threads={TORCH_THREADS}"]
    return subprocess.run([sys.executable, "-m", "mcprl.cli", "train", "-c", "configs/quickstart.yaml", "--resume",
                           *[a for o in overrides for a in ("-o", o)]], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("damage", ["state", *(pytest.param(d, marks=pytest.mark.slow) for d in ("pointer", "weights"))])
def test_resuming_from_a_corrupt_checkpoint_prints_one_line_naming_the_file(tmp_path, tokenizer, damage):
    """The state file and the pointer fail before the trainer's imports (a CLI run of ~4 s), the weights once
    they are read (~15 s: the trainer and the model load); the first is in `make test`."""
    run_dir = tmp_path / "run"
    path, _ = tiny_checkpoint(run_dir, tokenizer, 1)
    if damage == "state":
        bad = path / "trainer_state.json"
        bad.write_text(bad.read_text()[:40])
    elif damage == "pointer":
        bad = run_dir / "checkpoints" / "latest"
        bad.write_text("step_grpo_7")
    else:
        bad = path / "model" / "model.safetensors"
        bad.write_bytes(bad.read_bytes()[:100])
    result = resume_cli(run_dir, tmp_path / "data")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("error: ") and str(bad) in lines[0]


# ------------------------------------------------------------------------------------ a server killed mid-step

def server_children() -> dict[int, str]:
    """pid -> name of the MCP servers this process started (stdio: its children)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if ppid == os.getpid() and b"mcprl.servers" in argv:
            found[int(proc.name)] = argv[argv.index(b"mcprl.servers") + 1].decode()
    return found


def unread_request(pid: int) -> bool:
    """Bytes waiting in a pipe the server reads (its JSON-RPC input; the SDK moves it off fd 0): a call sent
    that it has not read, as it is stopped."""
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        flags = int((fds.parent / "fdinfo" / fd.name).read_text().split("flags:")[1].split()[0], 8)
        if os.readlink(fd).startswith("pipe:") and flags & os.O_ACCMODE == os.O_RDONLY:
            pipe = os.open(fd, os.O_RDONLY | os.O_NONBLOCK)
            try:
                if struct.unpack("i", fcntl.ioctl(pipe, termios.FIONREAD, b"\0\0\0\0"))[0] > 0:
                    return True
            finally:
                os.close(pipe)
    return False


def kill_with_a_call_in_flight(servers: dict[int, str], killed: list[str], timeout: float = 120) -> None:
    """Every server stopped (SIGSTOP) until one holds a call it has not read; that one is SIGKILLed, so the call
    is in flight when it dies; the others go on (SIGCONT)."""
    for pid in servers:
        os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + timeout
        while not killed and time.monotonic() < deadline:
            for pid, name in servers.items():
                if unread_request(pid):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(name)
                    break
            time.sleep(0.01)
    finally:
        for pid in servers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def tool_results(result) -> list[list[dict]]:
    return [[t["result"] for t in r["turns"] if t["kind"] == "tool_call"] for r in result.trajectories]


def test_a_server_killed_during_a_rollout_step_gives_error_observations_and_the_next_step_is_normal(tokenizer):
    """A GRPO step's episodes (`Rollouts.run`, SkyRL's generator over the env and mcprl's servers) with the
    demos as the policy (guidance.ReplayClient: every episode calls tools, none waits on a model). One step
    runs clean; in the next, a server dies with a call in flight: the step still returns every episode, the
    calls the kill caught are `server_error` observations (nothing raised), and the step after it gives the
    clean step's observations again, on a restarted server."""
    from mcprl.data import families
    from mcprl.tools.sync import _shared
    from mcprl.training.config import env_config, load_train_config
    from mcprl.training.experimental.guidance import ReplayClient, demo_turns
    from mcprl.training.rollout import Rollouts

    cfg = load_train_config(None, ["rollout.max_turns=4"])
    train, _ = families.generate_splits(8, 1, cfg.data.generate.seed)
    demos = demo_turns(train.experts)
    tasks = [t for t in train.samples if t.task_id in demos][:4]
    rollouts = Rollouts(ReplayClient(tokenizer, demos), tokenizer, env_config=env_config(cfg), max_turns=4,
                        max_input_length=cfg.rollout.max_input_length, max_new_tokens=cfg.rollout.max_new_tokens)
    sampling = rollouts.sampling(0.0)
    first = rollouts.run(tasks, 2, sampling)
    clean = tool_results(first)  # the recovery demos' slips are tool errors on purpose; no server errors
    assert all(r["success"] for r in first.trajectories) and sum(map(len, clean)) >= len(tasks) * 2
    assert not any(r["error_type"] == "server_error" for calls in clean for r in calls)

    def restarts() -> dict[str, int]:  # over every shared manager (this process may hold other tests' too)
        return Counter(name for m in _shared.values() for name, n in m.manager.restarts().items() for _ in range(n))

    before, servers, killed = restarts(), server_children(), []
    killer = threading.Thread(target=kill_with_a_call_in_flight, args=(servers, killed))
    killer.start()
    try:
        hit = rollouts.run(tasks, 2, sampling)
    finally:
        killer.join()
    assert killed, "no call reached a stopped server"
    assert len(hit.trajectories) == len(tasks) * 2
    errors = [r["error"] for calls in tool_results(hit) for r in calls if r["error_type"] == "server_error"]
    assert errors and all(f"server '{killed[0]}' connection lost" in e for e in errors), errors

    assert tool_results(rollouts.run(tasks, 2, sampling)) == clean
    assert restarts() - before == {killed[0]: 1}


# ------------------------------------------------------------------------------- the trainer killed mid-step

# GRPO from the base model on tasks with demos: its own episodes fail alike, so the demo each failed group gets
# (experimental.expert_guidance) is the step's signal, a non-zero loss and gradient at every step.
# chain_weight 1: with these 8 tasks both GRPO steps hold a group that expert guidance fills with a demo, so the
# step the kill interrupts has a gradient to compare. At the recipe's 3, step 2's failed group is growth_and_post,
# whose demo (a name, the retry with the ticker, run_python, the post, the answer) takes 5 turns: it fails under
# this test's rollout.max_turns=4, so guidance leaves the group as it is (it fits the recipe's 6) and the loss is 0.
KILL_RUN = ["data.generate.n_train=8", "data.generate.n_eval=1", "data.generate.chain_weight=1", "sft.enabled=false",
            "algo.steps=2", "algo.prompts_per_step=2", "algo.group_size=2", "algo.micro_batch_size=4", "algo.save_every=1",
            "algo.dynamic_sampling.max_sample_batches=1", "algo.prompts=all", "experimental.expert_guidance=true",
            "rollout.max_new_tokens=24", "rollout.max_turns=4", "eval.before=false", "eval.after_sft=false",
            "eval.after_grpo=false", "logging.wandb.enabled=false", "logging.console_every=0", f"model.threads={TORCH_THREADS}"]


def train_cli(tmp_path: Path, run_dir: Path, *flags: str, extra: tuple[str, ...] = ()) -> list[str]:
    overrides = [*KILL_RUN, f"run.output_dir={run_dir}", f"data.train={tmp_path / 'data' / 'train.jsonl'}",
                 f"data.eval={tmp_path / 'data' / 'test.jsonl'}", *extra]
    return [sys.executable, "-m", "mcprl.cli", "train", "-c", "configs/quickstart.yaml", *flags,
            *[a for o in overrides for a in ("-o", o)]]


def grpo_rows(run_dir: Path) -> dict[int, dict]:
    from mcprl.metric_names import short

    rows = [short(json.loads(line)) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if r["phase"] == "grpo"}


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_trainer_killed_mid_grpo_step_resumes_to_the_same_next_step(tmp_path):
    """`mcprl train` SIGKILLed while GRPO step 2 runs (step 1's checkpoint written, step 2 not logged), then
    `--resume`: step 2 gives the uninterrupted run's loss, gradient norm and entropy (±1e-4)."""
    subprocess.run(train_cli(tmp_path, tmp_path / "straight"), check=True, capture_output=True, timeout=900)
    straight = grpo_rows(tmp_path / "straight")
    assert straight[2]["policy_loss"] != 0 and straight[2]["grad_norm"] > 0  # a step with signal to compare

    trainer = subprocess.Popen(train_cli(tmp_path, tmp_path / "killed"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    latest, deadline = tmp_path / "killed" / "checkpoints" / "latest", time.monotonic() + 900
    while not (latest.is_file() and latest.read_text() == "step_grpo_1") and trainer.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # into step 2's rollouts
    trainer.send_signal(signal.SIGKILL)
    assert trainer.wait() == -signal.SIGKILL
    assert list(grpo_rows(tmp_path / "killed")) == [1]  # killed inside step 2

    subprocess.run(train_cli(tmp_path, tmp_path / "killed", "--resume"), check=True, capture_output=True, timeout=900)
    resumed = grpo_rows(tmp_path / "killed")
    assert list(resumed) == [1, 2]
    for key in ("policy_loss", "grad_norm", "entropy", "reward_mean", "trained_tokens"):
        assert resumed[2][key] == pytest.approx(straight[2][key], abs=1e-4), key


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_disk_that_fills_during_a_run_ends_it_with_one_line_and_the_last_checkpoint_whole(tmp_path):
    """`mcprl train` with its run directory on a 900 MB disk: step 1's checkpoint (the 517 MB model, a small
    optimizer state: only the top layer trains) fits, step 2's cannot. The run stops with one error line naming
    the checkpoint it could not write and the one still latest (the summary that could not be written either
    does not hide it), and step 1's checkpoint is whole."""
    from mcprl.training.checkpoint import read_state

    with tmpfs(tmp_path / "disk", "900m") as disk:
        command = train_cli(tmp_path, disk / "run", extra=("finetune.top_layers=1",))
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
        checkpoints = disk / "run" / "checkpoints"
        assert errors == [result.stderr.strip().splitlines()[-1]] and len(errors) == 1
        assert errors[0].startswith(f"error: could not write checkpoint {checkpoints / 'step_grpo_2'}: ")
        assert "No space left on device" in errors[0]
        assert f"{checkpoints / 'step_grpo_1'} is still the latest" in errors[0]
        assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step_grpo_1"]
        assert latest_checkpoint(disk / "run") == checkpoints / "step_grpo_1"
        assert read_state(checkpoints / "step_grpo_1").grpo_step == 1
        torch.load(checkpoints / "step_grpo_1" / "training.pt", weights_only=False)
