"""Shared test set-up: offline, one intra-op thread per xdist worker, a private cache for servers' stderr logs."""

import os
import socket

import pytest

from tests.support.threads import TORCH_THREADS

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

if TORCH_THREADS == 1:  # one thread under xdist (tests/support/threads.py): the tests' own tiny models and
    # every policy the trainer builds (the CLI's subprocesses take theirs from model.threads)
    import torch

    torch.set_num_threads(1)
    import functools

    from mcprl.models import devices  # patched before the policy imports the name (and without importing it:
    # transformers and peft would cost each worker ~20 s of collection)

    devices.configure_threads = functools.wraps(devices.configure_threads)(
        lambda n=1, _real=devices.configure_threads: _real(1))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def tokenizer():
    """The default model's tokenizer as `load_model` configures it, without loading the weights
    (test_validate defines its own: the validator's unconfigured loader is what it tests)."""
    from transformers import AutoTokenizer

    from mcprl.models.loading import DEFAULT_MODEL, configure_tokenizer, resolve_model

    return configure_tokenizer(AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL), local_files_only=True))
