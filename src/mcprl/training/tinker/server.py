"""SkyRL's Tinker server on this machine (`tinker.base_url: local`, `mcprl tinker serve`).

The JAX CPU backend on a local checkpoint, bound to 127.0.0.1 on a free port, its database and
checkpoints under one directory (SkyRL's default database lives inside site-packages), started in its
own process group so that stopping it stops its engine process too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from mcprl.errors import McprlError

HEALTH = "/api/v1/healthz"


class TinkerServerError(McprlError, RuntimeError):
    """The local Tinker server did not start or died; the message ends with its log's last line."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalTinkerServer:
    """`with LocalTinkerServer(model_dir, root) as server:` a running server at `server.url`."""

    def __init__(self, base_model: str | Path, root: Path, *, backend_config: dict[str, Any] | None = None,
                 port: int | None = None, startup_timeout_s: float = 600.0) -> None:
        self.base_model = str(base_model)
        self.root = Path(root)
        self.backend_config = dict(backend_config or {})
        self.port = port or free_port()
        self.startup_timeout_s = startup_timeout_s
        self.log_path = self.root / "server.log"
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "mcprl.training.tinker.serve_main", "api",
                "--base-model", self.base_model, "--backend", "jax",
                "--backend-config", json.dumps(self.backend_config),
                "--database-url", f"sqlite:///{(self.root / 'tinker.db').resolve()}",
                "--checkpoints-base", str(self.checkpoints.resolve()),
                "--host", "127.0.0.1", "--port", str(self.port)]

    def start(self) -> LocalTinkerServer:
        self.root.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise TinkerServerError(f"the local Tinker server exited with code {self._process.returncode} "
                                        f"({self.log_path}): {self.last_log_line()}")
            try:
                if httpx.get(self.url + HEALTH, timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise TinkerServerError(f"the local Tinker server did not answer {HEALTH} within {self.startup_timeout_s:g} s "
                                f"({self.log_path}): {self.last_log_line()}")

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the server's process group (API and engine), SIGKILL after `grace_s`."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace_s)
        with contextlib.suppress(ProcessLookupError):  # the engine, or an API that ignored SIGTERM
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5.0)

    def last_log_line(self) -> str:
        try:
            lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return "(no log)"
        return lines[-1].strip()[:300] if lines else "(empty log)"

    def __enter__(self) -> LocalTinkerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
