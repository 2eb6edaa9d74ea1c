"""Record every (server, tool, arguments) -> result, and replay a recording without servers,
so rewards and evaluations can be repeated exactly."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import mcp.types as mt


def call_key(server: str, tool: str, arguments: dict[str, Any]) -> str:
    return json.dumps([server, tool, arguments], sort_keys=True, ensure_ascii=False, default=str)


class Recorder:
    """Appends JSONL lines: one `tools` line per server, then one `call` line per call."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fh = self.path.open("w")

    def tools(self, server: str, tools: list[mt.Tool]) -> None:
        self._write({"type": "tools", "server": server,
                     "tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]})

    def call(self, server: str, tool: str, arguments: dict[str, Any], result: dict[str, Any]) -> None:
        kept = {k: v for k, v in result.items() if k != "latency_ms"}
        self._write({"type": "call", "server": server, "tool": tool, "arguments": arguments, "result": kept})

    def _write(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class Replay:
    """Serves a recording: repeated identical calls get the recorded results in order, then the last one."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.tools: dict[str, list[mt.Tool]] = {}
        self._calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._served: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        for line in self.path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row["type"] == "tools":
                self.tools[row["server"]] = [mt.Tool.model_validate(t) for t in row["tools"]]
            else:
                self._calls[call_key(row["server"], row["tool"], row["arguments"])].append(row["result"])

    def lookup(self, server: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        key = call_key(server, tool, arguments)
        with self._lock:
            results = self._calls.get(key)
            if not results:
                return None
            i = min(self._served[key], len(results) - 1)
            self._served[key] += 1
            return dict(results[i])
