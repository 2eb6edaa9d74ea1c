"""The task sample in SkyRL's dataset format, and its reading/writing as JSON, JSONL or Parquet.

SkyRL's trainer reads parquet; every column but `prompt` and `env_class` reaches the env as extras.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator

ENV_CLASS = "mcp_tool_env"
FORMATS = ("json", "jsonl", "parquet")


@dataclass
class SkyRLSample:
    data_source: str
    prompt: list[dict[str, str]]  # system + first user message only
    reward_spec: dict[str, Any]  # {"method": "rule", "ground_truth": {...}}
    extra_info: dict[str, Any] = field(default_factory=dict)
    env_class: str = ENV_CLASS

    @property
    def ground_truth(self) -> dict[str, Any]:
        return self.reward_spec["ground_truth"]

    @property
    def task_id(self) -> str:
        return self.ground_truth["task_id"]

    @property
    def family(self) -> str:
        """The rule generator's template, else the data source (LLM-generated and converted tasks have no
        template): the unit a small model tends to solve or fail as a whole."""
        return str(self.extra_info.get("template") or self.data_source)

    def to_dict(self) -> dict[str, Any]:
        return {"data_source": self.data_source, "env_class": self.env_class, "prompt": self.prompt,
                "reward_spec": self.reward_spec, "extra_info": self.extra_info}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> SkyRLSample:
        return cls(data_source=row["data_source"], prompt=list(row["prompt"]), reward_spec=row["reward_spec"],
                   extra_info=row.get("extra_info") or {}, env_class=row.get("env_class", ENV_CLASS))


def as_openenv_row(sample: SkyRLSample, url: str | None = None) -> SkyRLSample:
    """The same task as an `openenv_env` row, for a server that serves it (`mcprl openenv serve`): reset picks it by
    task_id, the server's tools make the system prompt, and the server scores it (reward_spec method `env`)."""
    gt = sample.ground_truth
    question = next((m for m in sample.prompt if m["role"] == "user"), None)
    truth = {"task_id": gt["task_id"], **{k: gt[k] for k in ("complexity", "max_turns") if k in gt}}
    info = {**sample.extra_info, "reset_kwargs": {"task_id": gt["task_id"]}, **({"openenv_url": url} if url else {})}
    return SkyRLSample(sample.data_source, [question] if question else [], {"method": "env", "ground_truth": truth},
                       info, env_class="openenv_env")


def sample_schema() -> dict[str, Any]:
    return json.loads(resources.files("mcprl.data").joinpath("schemas/skyrl_sample.schema.json").read_text())


def detect_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise ValueError(f"unsupported dataset file '{path}': use one of .{', .'.join(FORMATS)}")
    return suffix


def iter_rows(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | Exception]]:
    """Yield (row number from 1, row or the parse error) so one bad line never hides the others."""
    fmt = detect_format(path)
    if fmt == "jsonl":
        with open(path, "rb") as fh:  # bytes, so a row that is not UTF-8 is one bad row, with its number
            for i, raw in enumerate(fh, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield i, ValueError(f"not UTF-8: byte 0x{raw[e.start]:02x} at column {e.start + 1}")
                    continue
                if not line.strip():
                    continue
                try:
                    yield i, json.loads(line)
                except json.JSONDecodeError as e:
                    yield i, ValueError(f"invalid JSON: {e.msg} at column {e.colno}")
    elif fmt == "json":
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        yield from enumerate(data if isinstance(data, list) else [data], start=1)
    else:
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield i, _from_parquet(row)


def read_samples(path: str | Path) -> list[SkyRLSample]:
    samples = []
    for i, row in iter_rows(path):
        if isinstance(row, Exception):
            raise ValueError(f"{path}: row {i}: {row}")
        try:
            samples.append(SkyRLSample.from_dict(row))
        except KeyError as err:
            raise ValueError(f"{path}: row {i}: no {err.args[0]!r} (a SkyRL sample has data_source, prompt, "
                             f"reward_spec; `mcprl data validate` checks a whole file)") from None
        except (TypeError, AttributeError) as err:
            raise ValueError(f"{path}: row {i}: not a SkyRL sample ({err})") from None
    return samples


def write_samples(samples: Iterable[SkyRLSample | dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [s.to_dict() if isinstance(s, SkyRLSample) else s for s in samples]
    fmt = detect_format(path)
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows),
                        encoding="utf-8")
    elif fmt == "json":
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist([_to_parquet(r) for r in rows]), path)
    return path


# Parquet needs one type per column; free-form values (tool params, answers) vary, so they travel as JSON.
_JSON_COLUMNS = ("reward_spec", "extra_info")


def _to_parquet(row: dict[str, Any]) -> dict[str, Any]:
    return {k: json.dumps(v, ensure_ascii=False, sort_keys=True) if k in _JSON_COLUMNS else v for k, v in row.items()}


def _from_parquet(row: dict[str, Any]) -> dict[str, Any]:
    return {k: json.loads(v) if k in _JSON_COLUMNS and isinstance(v, str) else v for k, v in row.items()}

