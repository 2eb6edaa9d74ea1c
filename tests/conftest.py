"""Shared test set-up: offline, one intra-op thread per xdist worker, the longest files first, a private
cache for servers' stderr logs."""

import os
import socket

import pytest

from tests.support.threads import TORCH_THREADS

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

if TORCH_THREADS == 1:  # one thread under xdist (tests/support/threads.py): tests' own tiny models, the
    # subprocesses they start, and every policy the trainer builds
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from mcprl.training import policy

    _configure_threads = policy.configure_threads
    policy.configure_threads = lambda n=1: _configure_threads(1)


# The files that take longest (worker-seconds from `make test PYTEST_ARGS=--durations=0` on the 2-core AVX2
# machine), longest first. xdist (`--dist loadfile --no-loadscope-reorder`, Makefile) hands files to its
# workers in collection order, so the long ones start first and the two workers end together (list
# scheduling, longest first). Otherwise the smoke file started late and ran alone at the end: 970 s for
# 1,641 worker-seconds, where an even split is 820.
LONGEST_FIRST = (
    "tests/training/test_trainer_smoke.py", "tests/training/test_inference.py", "tests/data/test_families.py",
    "tests/training/test_chaos.py", "tests/tools/test_manager.py", "tests/envs/test_cli.py",
    "tests/data/test_natural.py", "tests/data/test_cli.py", "tests/training/test_prepare_data.py",
    "tests/training/test_eval_command.py", "tests/data/test_rules.py", "tests/training/test_skyrl_launcher.py",
    "tests/test_guides.py", "tests/integrations/test_openenv.py", "tests/servers/test_registry.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: a file stays whole


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
