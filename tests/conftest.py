"""Shared test set-up: offline, one intra-op thread, a private cache for servers' stderr logs."""

import os
import socket

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")


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
