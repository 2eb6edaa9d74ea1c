"""Run model-written Python in a contained subprocess and return its output; never hangs the caller.

Each run gets a fresh temporary working directory (deleted afterwards), a scrubbed environment,
an interpreter started with `-I -S` (no site-packages, no PYTHON* variables), rlimits (CPU, address
space, file size, open files, processes) and a wall-clock timeout that kills the whole process group.
Where the machine allows it, the run also gets its own network namespace (no network) and PID
namespace (every process dies with the run) via `unshare`, and runs as `nobody` when we are root so
that RLIMIT_NPROC bites (it never applies to root). What this machine supports is detected once per
process (`isolation()`) and reported; see docs/servers.md for what is and is not enforced.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from pydantic import BaseModel

from mcprl.servers.errors import InvalidArgumentError

DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 30.0
MAX_CODE_CHARS = 100_000
NOBODY = 65534
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"

# Runs inside the sandbox before the user's code: apply the limits, then become the user's program.
_BOOT = (
    "import json, os, resource, sys\n"
    "for name, value in json.loads(sys.argv[1]).items():\n"
    "    resource.setrlimit(getattr(resource, name), (value, value))\n"
    "os.execv(sys.executable, [sys.executable, '-I', '-S', sys.argv[2]])\n"
)


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run resource limits."""

    memory_mb: int = 512  # RLIMIT_AS per process
    max_processes: int = 64  # extra tasks the run may create (RLIMIT_NPROC over the uid's current count)
    max_file_mb: int = 16  # RLIMIT_FSIZE: largest file (and captured output) a process may write
    max_open_files: int = 256
    max_output_chars: int = 4000  # per stream, after which the middle is cut and a marker inserted


class SandboxResult(BaseModel):
    stdout: str
    stderr: str
    exit_code: int  # negative: killed by that signal (-9 after a timeout)
    timed_out: bool
    truncated: bool  # stdout or stderr was cut to the output limit
    duration_ms: int
    network_isolated: bool


@dataclass(frozen=True)
class Isolation:
    """How runs are contained on this machine (detected once per process)."""

    prefix: tuple[str, ...]  # wrapper command, e.g. unshare with namespace flags
    python: str  # interpreter that the sandbox user can execute
    user: int | None  # uid to switch to via Popen (root without unshare)
    network_isolated: bool
    pid_namespace: bool
    runs_as: str  # "nobody", or "self" when privileges are not dropped
    nproc_enforced: bool

    def command(self, *args: str) -> list[str]:
        return [*self.prefix, self.python, "-I", "-S", *args]


def _pythons() -> list[str]:
    found = [
        sys.executable,
        os.path.realpath(sys.executable),
        getattr(sys, "_base_executable", ""),
        "/usr/bin/python3",
        "/usr/local/bin/python3",
    ]
    return list(dict.fromkeys(p for p in found if p and os.path.exists(p)))


def _candidates() -> list[Isolation]:
    """Strongest first; the last one needs nothing and always works."""
    root, unshare = os.geteuid() == 0, shutil.which("unshare")
    namespaces = ("--net", "--pid", "--fork", "--kill-child", "--mount-proc")
    out = []
    if unshare and root:
        drop = (unshare, *namespaces, f"--setgid={NOBODY}", f"--setuid={NOBODY}", "--")
        out += [Isolation(drop, py, None, True, True, "nobody", True) for py in _pythons()]
        out.append(Isolation((unshare, *namespaces, "--"), sys.executable, None, True, True, "self", False))
    if unshare and not root:
        out.append(
            Isolation((unshare, "--user", "--map-root-user", *namespaces, "--"), sys.executable, None, True, True, "self", True)
        )
    if root:
        out += [Isolation((), py, NOBODY, False, False, "nobody", True) for py in _pythons()]
    out.append(Isolation((), sys.executable, None, False, False, "self", not root))
    return out


def _works(iso: Isolation) -> bool:
    try:
        done = subprocess.run(
            iso.command("-c", "print('ok')"),
            capture_output=True,
            timeout=15,
            env={"PATH": SAFE_PATH},
            cwd="/",
            **_user_kwargs(iso),
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and done.stdout.strip() == b"ok"


@functools.cache
def isolation() -> Isolation:
    """The strongest containment that works here; probed once, then cached."""
    candidates = _candidates()
    return next((iso for iso in candidates[:-1] if _works(iso)), candidates[-1])


def _user_kwargs(iso: Isolation) -> dict:
    return {"user": iso.user, "group": iso.user, "extra_groups": []} if iso.user is not None else {}


def run_uid(iso: Isolation) -> int:
    """The uid a sandbox run's tasks count against (RLIMIT_NPROC is per uid)."""
    return NOBODY if iso.runs_as == "nobody" else os.getuid()


def _tasks_of(uid: int) -> int:
    """Threads currently owned by `uid`: RLIMIT_NPROC counts them all, so the limit sits above this."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return count


def _rlimits(iso: Isolation, limits: SandboxLimits, timeout_s: float) -> dict[str, int]:
    mib = 1024 * 1024
    out = {
        "RLIMIT_CPU": math.ceil(timeout_s) + 1,
        "RLIMIT_AS": limits.memory_mb * mib,
        "RLIMIT_FSIZE": limits.max_file_mb * mib,
        "RLIMIT_NOFILE": limits.max_open_files,
        "RLIMIT_CORE": 0,
    }
    if iso.nproc_enforced:
        out["RLIMIT_NPROC"] = _tasks_of(run_uid(iso)) + limits.max_processes
    return out


def _clip(raw: bytes, limit: int) -> tuple[str, bool]:
    """Decoded text cut to `limit` characters: head and tail kept, a marker in between."""
    text = raw.decode("utf-8", errors="replace")
    if len(text) <= limit:
        return text, False
    head, tail = limit * 3 // 4, limit // 4
    return f"{text[:head]}\n[... {len(text) - head - tail} characters truncated ...]\n{text[-tail:]}", True


def _wait(pid: int, deadline: float) -> bool:
    """Wait for `pid` to exit without reaping it (so its process group can still be killed)."""
    delay = 0.001
    while True:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.02)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _remove(path: str) -> None:
    """Delete a run's directory even if the code made parts of it unreadable."""

    def fix(func, target, _exc) -> None:
        os.chmod(os.path.dirname(target), 0o700)
        if os.path.isdir(target) and not os.path.islink(target):
            os.chmod(target, 0o700)
        func(target)

    shutil.rmtree(path, onerror=fix)


def run_python(code: str, timeout_s: float = DEFAULT_TIMEOUT_S, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `code` as a script in the sandbox and return its captured output."""
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise InvalidArgumentError(
            f"timeout_s {timeout_s} is out of range: use more than 0 and at most {MAX_TIMEOUT_S:g} seconds"
        )
    if len(code) > MAX_CODE_CHARS:
        raise InvalidArgumentError(f"code is {len(code)} characters: the limit is {MAX_CODE_CHARS}")
    iso = isolation()
    workdir = tempfile.mkdtemp(prefix="mcprl-sandbox-")
    try:
        script = os.path.join(workdir, "main.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(code)
        if iso.runs_as == "nobody":
            os.chown(workdir, NOBODY, NOBODY)
            os.chown(script, NOBODY, NOBODY)
        env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}
        limits_arg = json.dumps(_rlimits(iso, limits, timeout_s))
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.monotonic()
            proc = subprocess.Popen(
                iso.command("-c", _BOOT, limits_arg, script),
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                **_user_kwargs(iso),
            )
            timed_out = not _wait(proc.pid, start + timeout_s)
            _kill_group(proc.pid)  # the timeout, or stragglers the script left behind
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)  # after SIGKILL; never block the server on an unkillable process
            duration_ms = int((time.monotonic() - start) * 1000)
            cap = limits.max_file_mb * 1024 * 1024
            out.seek(0)
            err.seek(0)
            stdout, cut_out = _clip(out.read(cap), limits.max_output_chars)
            stderr, cut_err = _clip(err.read(cap), limits.max_output_chars)
            # Tracebacks name the script by its random directory: cut it, so equal code fails with equal
            # text (seeded rollouts repeat) and the model reads `File "main.py"`.
            stderr = stderr.replace(workdir + os.sep, "")
    finally:
        _remove(workdir)
    if timed_out:
        stderr += f"\n[killed: the run exceeded its {timeout_s:g} s time limit]"
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=proc.returncode if proc.returncode is not None else -signal.SIGKILL,
        timed_out=timed_out,
        truncated=cut_out or cut_err,
        duration_ms=duration_ms,
        network_isolated=iso.network_isolated,
    )
