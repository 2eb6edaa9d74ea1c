"""Run model-written Python in a contained subprocess and return its output; never hangs the caller.

Each run is owned by a supervisor process (`sandbox_supervisor.py`) that enforces the run's own
deadline and kills the whole run when it ends, when its deadline passes, or when this server dies,
whatever the server does in the meantime. Where the machine allows it (root with `unshare`), every run
gets its own network, PID, IPC and mount namespaces, a private size-capped tmpfs for /tmp, /var/tmp and
/dev/shm that vanishes with the run, a uid of its own (so concurrent runs cannot read, signal or starve
each other), rlimits, no new privileges and a seccomp filter. What this machine supports is detected
once per process (`isolation()`) and reported; docs/servers.md says what is and is not enforced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from mcprl.servers.errors import InvalidArgumentError, ServiceError
from mcprl.servers.sandbox_supervisor import PRIVATE_WORKDIR

DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 30.0
MAX_CODE_CHARS = 100_000
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
SUPERVISOR = str(Path(__file__).with_name("sandbox_supervisor.py"))
# The supervisor ends the run at its deadline; this server waits that long plus GRACE_S before it kills
# the supervisor itself, so the run's own limit always answers first, with its partial output.
GRACE_S = 3.0
# One uid per concurrent run, held with a lock file for the run's life (released even if the server dies).
RUN_UIDS = range(1_600_000_000, 1_600_000_000 + 4096)
UID_LOCKS = Path(tempfile.gettempdir()) / "mcprl-sandbox-uids"


class SandboxError(ServiceError):
    """The sandbox itself failed (not the code it ran): the run could not be set up."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run resource limits."""

    memory_mb: int = 512  # RLIMIT_AS per process
    max_processes: int = 64  # tasks the run may create (RLIMIT_NPROC over its uid's count at launch)
    max_file_mb: int = 16  # RLIMIT_FSIZE: largest file (and captured output) a process may write
    max_disk_mb: int = 64  # the private tmpfs holding the run directory, /tmp, /var/tmp and /dev/shm
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
    python: str  # interpreter the run's script executes (its uid must be able to execute it)
    own_uid: bool  # each run gets a uid of its own (needs root)
    network_isolated: bool
    pid_namespace: bool
    private_tmp: bool  # a private tmpfs for /tmp, /var/tmp and /dev/shm, gone with the run
    nproc_enforced: bool
    syscall_filter: bool = False  # seccomp applied (learnt from the probe's run)

    @property
    def runs_as(self) -> str:
        return "own uid" if self.own_uid else "self"

    def command(self, config: dict) -> list[str]:
        return [*self.prefix, sys.executable, "-I", "-S", SUPERVISOR, json.dumps(config)]


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
    namespaces = ("--net", "--pid", "--ipc", "--mount", "--fork", "--kill-child", "--mount-proc")
    out = []
    if unshare and root:
        ns = (unshare, *namespaces, "--")
        out += [Isolation(ns, py, True, True, True, True, True) for py in _pythons()]
        out.append(Isolation(ns, sys.executable, False, True, True, True, False))
    if unshare and not root:
        userns = (unshare, "--user", "--map-root-user", *namespaces, "--")
        out.append(Isolation(userns, sys.executable, False, True, True, True, True))
    if root:
        out += [Isolation((), py, True, False, False, False, True) for py in _pythons()]
    out.append(Isolation((), sys.executable, False, False, False, False, not root))
    return out


def _works(iso: Isolation) -> Isolation | None:
    """`iso` as it ran (with whether the filter applied), or None if a run fails in this mode."""
    try:
        result, status = _launch(iso, "print('ok')", 10.0, SandboxLimits())
    except (OSError, SandboxError, subprocess.SubprocessError):
        return None
    if result.exit_code != 0 or result.stdout != "ok\n":
        return None
    return dataclasses.replace(iso, syscall_filter=bool(status.get("filter")))


@functools.cache
def isolation() -> Isolation:
    """The strongest containment that works here; probed once, then cached."""
    candidates = _candidates()
    for iso in candidates[:-1]:
        if (worked := _works(iso)) is not None:
            return worked
    return _works(candidates[-1]) or candidates[-1]


@contextlib.contextmanager
def _run_uid(iso: Isolation) -> Iterator[int | None]:
    """A uid no other run on this machine holds now (None: the run keeps the server's identity)."""
    if not iso.own_uid:
        yield None
        return
    UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
    for uid in RUN_UIDS:
        fd = os.open(UID_LOCKS / str(uid), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            os.close(fd)  # releases the lock
        return
    raise SandboxError(f"all {len(RUN_UIDS)} sandbox uids are in use: too many concurrent runs")


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


def _rlimits(iso: Isolation, uid: int | None, limits: SandboxLimits, timeout_s: float) -> dict[str, int]:
    mib = 1024 * 1024
    out = {
        "RLIMIT_CPU": math.ceil(timeout_s) + 1,
        "RLIMIT_AS": limits.memory_mb * mib,
        "RLIMIT_FSIZE": limits.max_file_mb * mib,
        "RLIMIT_NOFILE": limits.max_open_files,
        "RLIMIT_CORE": 0,
    }
    if iso.nproc_enforced:
        out["RLIMIT_NPROC"] = _tasks_of(os.getuid() if uid is None else uid) + limits.max_processes
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
    """Delete a run's directory whatever the code did to it (unreadable parts, thousands of levels)."""

    def fix(func, target, _exc) -> None:
        os.chmod(os.path.dirname(target), 0o700)
        if os.path.isdir(target) and not os.path.islink(target):
            os.chmod(target, 0o700)
        func(target)

    try:
        shutil.rmtree(path, onerror=fix)
    except (OSError, RecursionError):  # shutil recurses per level; coreutils does not
        subprocess.run(["chmod", "-R", "u+rwx", path], capture_output=True)
        subprocess.run(["rm", "-rf", "--one-file-system", path], capture_output=True)


def _read_status(fd: int) -> dict:
    with os.fdopen(fd, "rb") as f:
        line = f.read().decode("utf-8", errors="replace").strip()
    return json.loads(line) if line else {}


def _launch(iso: Isolation, code: str, timeout_s: float, limits: SandboxLimits) -> tuple[SandboxResult, dict]:
    """One run under its supervisor: the result and the supervisor's status line."""
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "MCPRL_SANDBOX": "1"}
    with contextlib.ExitStack() as stack:
        uid = stack.enter_context(_run_uid(iso))
        workdir = None
        if not iso.private_tmp:
            workdir = tempfile.mkdtemp(prefix="mcprl-sandbox-")
            stack.callback(_remove, workdir)
        source, out, err = (stack.enter_context(tempfile.TemporaryFile()) for _ in range(3))
        source.write(code.encode("utf-8", errors="surrogatepass"))
        source.seek(0)
        lifeline_r, lifeline_w = os.pipe()  # the write end never leaves this process: EOF = we died
        stack.callback(os.close, lifeline_w)
        status_r, status_w = os.pipe()
        config = {
            "timeout_s": timeout_s, "uid": uid, "python": iso.python, "workdir": workdir,
            "disk_mb": limits.max_disk_mb, "pid_namespace": iso.pid_namespace,
            "rlimits": _rlimits(iso, uid, limits, timeout_s), "env": env,
            "lifeline_fd": lifeline_r, "status_fd": status_w,
        }  # fmt: skip
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                iso.command(config), cwd="/", env=env, stdin=source, stdout=out, stderr=err,
                pass_fds=(lifeline_r, status_w), start_new_session=True,
            )  # fmt: skip
        finally:
            os.close(lifeline_r)
            os.close(status_w)
        if not _wait(proc.pid, start + timeout_s + GRACE_S):
            _kill_group(proc.pid)  # the supervisor is stuck: end it and, with it, the run
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)  # never block the server on an unkillable process
        status = _read_status(status_r)
        duration_ms = int((time.monotonic() - start) * 1000)
        cap = limits.max_file_mb * 1024 * 1024
        out.seek(0)
        err.seek(0)
        stdout, cut_out = _clip(out.read(cap), limits.max_output_chars)
        stderr, cut_err = _clip(err.read(cap), limits.max_output_chars)
    # Tracebacks name the script by its directory: cut it, so equal code fails with equal text
    # (seeded rollouts repeat) and the model reads `File "main.py"`.
    stderr = stderr.replace((workdir or PRIVATE_WORKDIR) + os.sep, "")
    if "setup_error" in status:
        raise SandboxError(f"the sandbox could not set up the run: {status['setup_error']}")
    timed_out = status.get("ended", "deadline") == "deadline"
    if timed_out:
        stderr += f"\n[killed: the run exceeded its {timeout_s:g} s time limit]"
    result = SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=status.get("exit_code", -signal.SIGKILL),
        timed_out=timed_out,
        truncated=cut_out or cut_err,
        duration_ms=duration_ms,
        network_isolated=iso.network_isolated,
    )
    return result, status


def run_python(code: str, timeout_s: float = DEFAULT_TIMEOUT_S, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `code` as a script in the sandbox and return its captured output."""
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise InvalidArgumentError(
            f"timeout_s {timeout_s} is out of range: use more than 0 and at most {MAX_TIMEOUT_S:g} seconds"
        )
    if len(code) > MAX_CODE_CHARS:
        raise InvalidArgumentError(f"code is {len(code)} characters: the limit is {MAX_CODE_CHARS}")
    return _launch(isolation(), code, timeout_s, limits)[0]
