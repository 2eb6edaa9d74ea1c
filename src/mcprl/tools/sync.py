"""Blocking facade over ToolManager for callers in worker threads.

skyrl_gym calls `env.step` from a thread pool; every call goes to one event-loop thread that owns
the MCP sessions (rather than `asyncio.run` per call, which would respawn servers each time).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from mcprl.aio import LoopThread
from mcprl.tools.config import ServersConfig, load_servers_config
from mcprl.tools.manager import Mode, ToolInfo, ToolManager

T = TypeVar("T")


class SyncToolManager:
    def __init__(self, config: ServersConfig | str | Path | None = None, *, mode: Mode = "live",
                 recording: str | Path | None = None, default_timeout: float | None = None,
                 loop: LoopThread | None = None) -> None:
        self._owns_loop = loop is None
        self._loop = loop or LoopThread()
        self.manager = ToolManager(config, mode=mode, recording=recording, default_timeout=default_timeout)

    def start(self) -> SyncToolManager:
        self._loop.run(self.manager.start())
        return self

    def list_tools(self) -> list[ToolInfo]:
        return self._loop.run(self.manager.list_tools())

    def execute_tool(self, tool_name: str, arguments: dict[str, Any] | None = None,
                     timeout: float | None = None, *, episode: str | None = None,
                     fault: str | None = None) -> dict[str, Any]:
        return self._loop.run(self.manager.execute_tool(tool_name, arguments, timeout, episode=episode, fault=fault))

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine that uses `self.manager` on the loop that owns its sessions (TimeoutError after `timeout` s)."""
        return self._loop.run(coro, timeout)

    def close(self) -> None:
        self._loop.run(self.manager.close())
        if self._owns_loop:
            self._loop.close()

    def __enter__(self) -> SyncToolManager:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


_shared: dict[str, SyncToolManager] = {}
_shared_lock = threading.Lock()


def shared_tool_manager(config: ServersConfig | str | Path | None = None, *, mode: Mode = "live",
                        recording: str | Path | None = None) -> SyncToolManager:
    """One started manager per (config, mode, recording) per process: servers start once, every env reuses them."""
    cfg = config if isinstance(config, ServersConfig) else load_servers_config(config)
    key = f"{cfg.model_dump_json()}|{mode}|{recording}"
    with _shared_lock:
        mgr = _shared.get(key)
        if mgr is None:
            mgr = SyncToolManager(cfg, mode=mode, recording=recording).start()
            _shared[key] = mgr
        return mgr


@atexit.register
def close_shared_tool_managers() -> None:
    with _shared_lock:
        for mgr in _shared.values():
            try:
                mgr.close()
            except Exception:  # noqa: BLE001 - interpreter is exiting; servers die with us anyway
                pass
        _shared.clear()
