"""Attacks on the Python sandbox, each asserting containment (issue 49).

Every single-run attack prints `blocked: ...` when it is contained and `ESCAPED ...` when it is not,
so an attack that did not run at all (a syntax error, a crash) fails the test too. Attacks that need
a containment feature the machine lacks are skipped with the mode in the reason; docs/servers.md and
docs/reliability.md list what each mode enforces.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass

import pytest

from mcprl.servers import sandbox
from tests.servers.helpers import none_left, sandbox_processes

ISO = sandbox.isolation()
SECRET = "sk-attack-suite-secret-0123456789"


@dataclass(frozen=True)
class Attack:
    name: str
    code: str  # prints "blocked: ..." when contained
    needs: tuple[str, ...] = ()  # Isolation fields that must be true for containment
    timeout_s: float = 5.0
    timed_out: bool | None = None  # whether the run must end at its deadline (None: either)


def _try(body: str, blocked: str = "Exception") -> str:
    """An attack body that prints ESCAPED if it runs to the end, blocked when `blocked` is raised."""
    return (
        "import ctypes, os, socket, subprocess, sys\n"
        "try:\n" + textwrap.indent(textwrap.dedent(body).strip() + "\nprint('ESCAPED')", "    ") + "\n"
        f"except {blocked} as exc:\n    print('blocked:', type(exc).__name__, exc)\n"
    )


def _libc_call(expr: str) -> str:
    """A libc call that must fail (return -1); prints the errno."""
    return (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"rc = {expr}\n"
        "print('blocked: errno', ctypes.get_errno()) if rc == -1 else print('ESCAPED', rc)\n"
    )


SYSCALLS = {"keyctl": 250, "bpf": 321, "io_uring_setup": 425, "perf_event_open": 298}  # x86_64 numbers

ATTACKS = [
    Attack("udp_to_the_internet", _try("socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('8.8.8.8', 53))"),
           ("network_isolated",)),
    Attack("dns_lookup", _try("socket.getaddrinfo('example.com', 80)"), ("network_isolated",)),
    Attack("tcp_to_the_internet", _try("socket.create_connection(('1.1.1.1', 443), timeout=2)"), ("network_isolated",)),
    Attack("unix_socket", _try("socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)"), ("syscall_filter",)),
    Attack("unix_datagram_socket", _try("socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)"), ("syscall_filter",)),
    Attack("netlink_socket", _try("socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)"), ("syscall_filter",)),
    Attack("packet_socket", _try("socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)"), ("syscall_filter",)),
    Attack("parent_secret_in_environ", f"import os\nprint('ESCAPED' if '{SECRET}' in str(os.environ) else 'blocked: not in environ')"),
    Attack("supervisor_environ", _try("open('/proc/1/environ').read()"), ("pid_namespace", "own_uid")),
    Attack("signal_the_supervisor", _try("os.kill(1, 9)"), ("pid_namespace", "own_uid")),
    Attack("host_processes_visible",
           "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
           "print('blocked: only', pids) if sorted(pids) == ['1', '2'] else print('ESCAPED', pids)", ("pid_namespace",)),
    Attack("become_root", _try("os.setuid(0)"), ("own_uid",)),
    Attack("write_etc", _try("open('/etc/mcprl-attack', 'w').write('x')"), ("own_uid",)),
    Attack("read_root_home", _try("os.listdir('/root')"), ("own_uid",)),
    Attack("read_kernel_memory", _try("open('/proc/kcore', 'rb').read(1)"), ("own_uid",)),
    Attack("ptrace_traceme", _libc_call("libc.ptrace(0, 0, 0, 0)"), ("syscall_filter",)),
    Attack("user_namespace", _libc_call("libc.unshare(0x10000000)"), ("syscall_filter",)),
    Attack("unshare_binary", "import subprocess\nr = subprocess.run(['unshare', '--user', '--map-root-user', 'id'], capture_output=True)\n"
           "print('blocked: exit', r.returncode) if r.returncode else print('ESCAPED', r.stdout)", ("syscall_filter",)),
    Attack("mount_tmpfs", _libc_call("libc.mount(b'tmpfs', b'/tmp', b'tmpfs', 0, None)"), ("syscall_filter",)),
    Attack("chroot", _libc_call("libc.chroot(b'/tmp')"), ("syscall_filter",)),
    Attack("no_new_privs_and_filter", "s = open('/proc/self/status').read()\n"
           "ok = 'NoNewPrivs:\\t1' in s and 'Seccomp:\\t2' in s\nprint('blocked: nnp and seccomp' if ok else 'ESCAPED')",
           ("syscall_filter",)),
    *[Attack(f"syscall_{name}", _libc_call(f"libc.syscall({nr}, 0, 0, 0, 0)"), ("syscall_filter",))
      for name, nr in SYSCALLS.items()],
    Attack("fork_bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", (),
           timeout_s=2.0, timed_out=True),
    Attack("thread_bomb", "import threading, time\nn = 0\ntry:\n    while n < 5000:\n"
           "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n        n += 1\n"
           "    print('ESCAPED', n)\nexcept RuntimeError as exc:\n    print('blocked: at', n, flush=True)\nimport os\nos._exit(0)",
           ("nproc_enforced",)),
    Attack("memory_bomb", _try("bytearray(4 * 1024**3)", "MemoryError")),
    Attack("busy_loop", "while True:\n    pass", (), timeout_s=1.0, timed_out=True),
    Attack("sleep_forever", "import time\ntime.sleep(3600)", (), timeout_s=1.0, timed_out=True),
    Attack("ignore_sigterm", "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass", (),
           timeout_s=1.0, timed_out=True),
    Attack("close_output_then_hang", "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(3600)", (), timeout_s=1.0,
           timed_out=True),
    Attack("huge_file", _try("open('big', 'wb').write(b'x' * 32 * 1024**2)", "OSError")),
    Attack("fill_tmp", "import os\nn = 0\ntry:\n    for i in range(1000):\n        open(f'/tmp/f{i}', 'wb').write(b'x' * 8 * 1024**2)\n"
           "        n += 8\n    print('ESCAPED', n)\nexcept OSError as exc:\n    print('blocked: after', n, 'MiB', exc.errno)",
           ("private_tmp",)),
    Attack("fill_dev_shm", "import os\nn = 0\ntry:\n    for i in range(1000):\n        open(f'/dev/shm/f{i}', 'wb').write(b'x' * 8 * 1024**2)\n"
           "        n += 8\n    print('ESCAPED', n)\nexcept OSError as exc:\n    print('blocked: after', n, 'MiB', exc.errno)",
           ("private_tmp",)),
    Attack("open_files", "n = 0\nfiles = []\ntry:\n    while n < 100000:\n        files.append(open('/dev/null'))\n        n += 1\n"
           "    print('ESCAPED', n)\nexcept OSError:\n    print('blocked: at', n)"),
    Attack("run_sockets_listed", "import os\nfound = [e for e in os.listdir('/run') if not e.startswith('.')]\n"
           "print('blocked: /run is empty') if not found else print('ESCAPED', found)", ("private_tmp",)),
    Attack("core_dump", "import os, resource\nprint('blocked: core limit', resource.getrlimit(resource.RLIMIT_CORE)) "
           "if resource.getrlimit(resource.RLIMIT_CORE) == (0, 0) else print('ESCAPED')"),
    Attack("escape_the_process_group", _try("os.setsid()\nos.setpgid(0, 0)"),
           ("syscall_filter",)),
]


def _missing(needs: tuple[str, ...]) -> list[str]:
    return [feature for feature in needs if not getattr(ISO, feature)]


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_attack_is_contained(attack: Attack, monkeypatch):
    if missing := _missing(attack.needs):
        pytest.skip(f"needs {', '.join(missing)}, which this machine's mode lacks ({ISO.runs_as})")
    if attack.name == "escape_the_process_group" and ISO.pid_namespace:
        pytest.skip("with a PID namespace the run may change groups: every process of the namespace dies")
    if attack.name.startswith("syscall_") and os.uname().machine != "x86_64":
        pytest.skip("syscall numbers are x86_64's")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    r = sandbox.run_python(attack.code, timeout_s=attack.timeout_s)
    if attack.timed_out is not None:
        assert r.timed_out == attack.timed_out, r
    if not r.timed_out:
        assert r.stdout.startswith("blocked:"), f"{attack.name}: {r}"
    assert "ESCAPED" not in r.stdout and SECRET not in r.stdout + r.stderr
    assert r.duration_ms < (attack.timeout_s + sandbox.GRACE_S) * 1000
    assert none_left(), f"{attack.name} left processes behind"


def test_filesystem_unix_socket_of_the_host_is_unreachable():
    """A socket a host service listens on (here in a world-searchable directory, mode 777) stays out of reach."""
    folder = tempfile.mkdtemp(dir="/work" if os.path.isdir("/work") else None)
    os.chmod(folder, 0o755)
    path = os.path.join(folder, "service.sock")
    try:
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(path)
            os.chmod(path, 0o777)
            listener.listen()
            code = _try(f"s = socket.socket(socket.AF_UNIX)\ns.connect({path!r})")
            r = sandbox.run_python(code)
    finally:
        os.unlink(path)
        os.rmdir(folder)
    assert r.stdout.startswith("blocked:"), r


def test_abstract_unix_socket_of_the_host_is_unreachable():
    with socket.socket(socket.AF_UNIX) as listener:
        name = f"\0mcprl-attack-{os.getpid()}"
        listener.bind(name)
        listener.listen()
        r = sandbox.run_python(_try(f"s = socket.socket(socket.AF_UNIX)\ns.connect({name!r})"))
    assert r.stdout.startswith("blocked:"), r


def test_tcp_to_a_host_listener_is_blocked():
    if not ISO.network_isolated:
        pytest.skip(f"no network namespace here ({ISO.runs_as})")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        r = sandbox.run_python(_try(f"socket.create_connection(('127.0.0.1', {port}), timeout=2)"))
    assert r.stdout.startswith("blocked:"), r


def test_socketpair_still_works_for_asyncio():
    """The filter refuses sockets that reach something, not the in-process pair asyncio needs."""
    r = sandbox.run_python("import asyncio\nasync def main():\n    return 41 + 1\nprint(asyncio.run(main()))")
    assert r.stdout == "42\n" and r.exit_code == 0, r


def test_a_daemon_dies_with_the_run():
    code = (
        "import os, time\nif os.fork() == 0:\n    try:\n        os.setsid()\n    except OSError:\n        pass\n    if os.fork() == 0:\n"
        "        time.sleep(60)\n    os._exit(0)\nprint('blocked: parent returns')"
    )
    r = sandbox.run_python(code)
    assert r.stdout.startswith("blocked:") and none_left(), r


def test_a_deep_directory_tree_is_cleaned_up():
    code = "import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\nprint('blocked: made 1500 levels')"
    r = sandbox.run_python(code, timeout_s=20)
    assert r.exit_code == 0 and r.stdout.startswith("blocked:"), r
    assert not [e for e in os.listdir(tempfile.gettempdir()) if e.startswith("mcprl-sandbox-") and e != "mcprl-sandbox-uids"]


def test_nothing_is_kept_between_runs():
    if not ISO.private_tmp:
        pytest.skip(f"no private /tmp here ({ISO.runs_as})")
    write = "for d in ('/tmp', '/var/tmp', '/dev/shm'):\n    open(d + '/left-behind', 'w').write('x')\nprint('written')"
    assert sandbox.run_python(write).stdout == "written\n"
    r = sandbox.run_python("import os\nprint([d for d in ('/tmp', '/var/tmp', '/dev/shm') if os.path.exists(d + '/left-behind')])")
    assert r.stdout == "[]\n", r


def _concurrently(*codes: str, timeout_s: float = 10.0) -> list[sandbox.SandboxResult]:
    results: list = [None] * len(codes)

    def run(i: int) -> None:
        results[i] = sandbox.run_python(codes[i], timeout_s=timeout_s)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(codes))]
    for t in threads:
        t.start()
        time.sleep(0.3)  # the first run is under way when the next starts
    for t in threads:
        t.join()
    return results


def test_concurrent_runs_cannot_see_each_other():
    if not (ISO.private_tmp and ISO.own_uid):
        pytest.skip(f"needs a private /tmp and a uid per run ({ISO.runs_as})")
    holder = "import os, time\nopen('/tmp/secret', 'w').write('mine')\nprint(os.getuid())\ntime.sleep(2)"
    prober = "import os\nprint(os.getuid())\nprint(sorted(os.listdir('/tmp')), os.path.exists('/tmp/secret'))"
    first, second = _concurrently(holder, prober)
    assert first.stdout.split()[0] != second.stdout.split()[0], "two concurrent runs shared a uid"
    assert second.stdout.splitlines()[1] == "['mcprl-sandbox-run'] False", second


def test_one_run_cannot_starve_another_of_processes():
    if not (ISO.own_uid and ISO.nproc_enforced):
        pytest.skip(f"needs a uid per run ({ISO.runs_as})")
    hog = ("import os, time\nn = 0\ntry:\n    while n < 1000:\n        if os.fork() == 0:\n            time.sleep(4)\n"
           "            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n)\ntime.sleep(3)")
    other = ("import os\nok = 0\nfor _ in range(10):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n"
             "    os.waitpid(pid, 0)\n    ok += 1\nprint(ok)")
    hogged, forked = _concurrently(hog, other)
    assert int(hogged.stdout) <= sandbox.SandboxLimits().max_processes
    assert forked.stdout == "10\n", forked
    assert none_left()


def _script_pid(within_s: float = 10.0) -> int:
    """The host pid of a running sandbox script (the run's `main.py` process)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for pid in sandbox_processes():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().endswith(b"main.py\0"):
                        return pid
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError("no sandbox script started")


def _start_server(timeout_s: float = 30) -> subprocess.Popen:
    """A process that runs one sleeping script in the sandbox, started once its isolation probe (a run of
    its own) is done, so the run found next is that script."""
    code = ("import sys\nfrom mcprl.servers import sandbox\nsandbox.isolation()\nprint('probed', flush=True)\n"
            f"sandbox.run_python('import time\\ntime.sleep(60)', timeout_s={timeout_s})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    server = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline() == "probed\n"
    return server


def test_a_run_dies_with_its_server():
    """Finding 1: a run in flight outlived a killed server (reparented to PID 1, its directory kept)."""
    server = _start_server()
    try:
        _script_pid()
        server.send_signal(signal.SIGKILL)
        server.wait()
        assert none_left(within_s=3.0), "the run outlived its server"
    finally:
        server.kill()


def test_a_run_dies_when_its_wrapper_is_killed():
    if not ISO.prefix:
        pytest.skip("no namespace wrapper in this mode")
    server = _start_server()
    try:
        script = _script_pid()
        wrappers = [p for p in sandbox_processes() if p != script and open(f"/proc/{p}/comm").read().strip() == "unshare"]
        assert wrappers
        for pid in wrappers:
            os.kill(pid, signal.SIGKILL)
        assert none_left(within_s=3.0), "the run outlived its unshare"
    finally:
        server.kill()
        server.wait()


def test_a_run_ends_at_its_own_deadline_whatever_the_server_does():
    """The supervisor, not the server, ends the run: a stopped (SIGSTOP) server still sees its runs end."""
    server = _start_server(timeout_s=1)
    try:
        _script_pid()
        server.send_signal(signal.SIGSTOP)
        assert none_left(within_s=3.0), "the run outlived its deadline while the server was stopped"
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait()
