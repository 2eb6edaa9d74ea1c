"""mcprl-sandbox-supervisor: the first process of one sandbox run; owns the run from start to end.

Started by `mcprl.servers.sandbox` (as `python -I -S this_file CONFIG`, standard library only), inside
the run's namespaces where the machine has them. It reads the script from stdin, prepares the run's
filesystem, forks the script's process and waits for it, and it alone decides when the run ends:
- at the run's own deadline, whatever the server is doing;
- when the server dies: the server holds the only write end of the `lifeline` pipe, so its death
  (killed, crashed, exited) reads as EOF here, and the run is killed at once;
- when the script exits: its leftover children are killed too.
"Killed" means every process of the run: in a PID namespace, where this process is PID 1,
`kill(-1)` reaches exactly the namespace; elsewhere, the script's process group, which the syscall
filter stops it from leaving. The result goes back as one JSON line on the `status` pipe.

The script's process gets its own uid where the server is root (so runs cannot read or signal each
other and each has its own RLIMIT_NPROC budget), the rlimits, no new privileges, and a seccomp filter
(through libseccomp, where the machine has it; the status says whether it did) that refuses filesystem and kernel IPC sockets,
namespaces, mounts, ptrace and other kernel-level escapes.
"""

import ctypes
import errno
import json
import os
import select
import signal
import sys
import time

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND = 1, 2, 4, 8, 4096
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEW = {"NEWNS": 0x20000, "NEWCGROUP": 0x2000000, "NEWUTS": 0x4000000, "NEWIPC": 0x8000000,
             "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000, "NEWTIME": 0x80}
# Socket families that reach outside the run without the network: filesystem and abstract UNIX sockets
# (socketpair stays allowed: asyncio needs it, and it reaches nothing), netlink, raw packets.
DENIED_SOCKET_FAMILIES = (1, 16, 17)  # AF_UNIX, AF_NETLINK, AF_PACKET
DENIED_SYSCALLS = (
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "ptrace", "process_vm_readv",
    "process_vm_writev", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "mq_open", "open_by_handle_at", "name_to_handle_at", "kexec_load", "init_module",
    "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
    "fsopen", "fsmount", "move_mount", "open_tree", "mount_setattr",
)
# Without a PID namespace the process group is what gets killed, so the run may not leave it.
GROUP_SYSCALLS = ("setsid", "setpgid")
PRIVATE_WORKDIR = "/tmp/mcprl-sandbox-run"  # the run directory inside a private tmpfs

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def private_tmp(disk_mb: int) -> None:
    """One size-capped tmpfs for /tmp, /var/tmp and /dev/shm (one budget), an empty /run (no sockets)."""
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_mb}m,mode=1777")
    for shared in ("/var/tmp", "/dev/shm"):
        if os.path.isdir(shared) and not os.path.islink(shared):
            _mount("/tmp", shared, None, MS_BIND, None)
    if os.path.isdir("/run"):
        _mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=16k,mode=755")


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]


def _libseccomp():
    try:
        return ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return None


def syscall_filter(lib, lock_group: bool) -> None:
    """Install the seccomp filter (it outlives exec and cannot be removed)."""
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = lib.seccomp_release.argtypes = [ctypes.c_void_p]
    allow, deny = 0x7FFF0000, lambda code: 0x00050000 | code  # noqa: E731  SCMP_ACT_ALLOW, SCMP_ACT_ERRNO
    eq, masked_eq = 4, 7  # SCMP_CMP_EQ, SCMP_CMP_MASKED_EQ
    ctx = lib.seccomp_init(allow)
    if not ctx:
        raise OSError(errno.EINVAL, "seccomp_init failed")

    def rule(action: int, name: str, *cmps: _ArgCmp) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:  # not on this architecture
            return
        array = (_ArgCmp * len(cmps))(*cmps) if cmps else None
        if lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array) != 0:
            raise OSError(errno.EINVAL, f"seccomp rule for {name} failed")

    for name in DENIED_SYSCALLS + (GROUP_SYSCALLS if lock_group else ()):
        rule(deny(errno.EPERM), name)
    for family in DENIED_SOCKET_FAMILIES:
        rule(deny(errno.EACCES), "socket", _ArgCmp(0, eq, family, 0))
    for flag in CLONE_NEW.values():
        rule(deny(errno.EPERM), "clone", _ArgCmp(0, masked_eq, flag, flag))
    rule(deny(errno.ENOSYS), "clone3")  # its flags sit in memory a filter cannot read; libc falls back to clone
    try:
        if lib.seccomp_load(ctx) != 0:
            raise OSError(errno.EINVAL, "seccomp_load failed")
    finally:
        lib.seccomp_release(ctx)


def _become_script(cfg: dict, workdir: str, seccomp) -> None:
    """In the forked child: drop to the run's identity and limits, then exec the script. Never returns."""
    try:
        os.setpgid(0, 0)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.close(cfg["lifeline_fd"])
        os.close(cfg["status_fd"])
        os.chdir(workdir)
        import resource

        for name, value in cfg["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (value, value))
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        if seccomp is not None:
            syscall_filter(seccomp, lock_group=not cfg["pid_namespace"])
        env = {**cfg["env"], "HOME": workdir, "TMPDIR": workdir}
        os.execve(cfg["python"], [cfg["python"], "-I", "-S", "main.py"], env)
    except BaseException as exc:  # noqa: BLE001  anything here is a sandbox failure, reported as exit 126
        os.write(2, f"[sandbox: the run could not start: {exc}]\n".encode())
    os._exit(126)


def _prepare(cfg: dict, code: bytes) -> str:
    if cfg["workdir"] is None:
        private_tmp(cfg["disk_mb"])
        workdir = PRIVATE_WORKDIR
        os.mkdir(workdir, 0o700)
    else:
        workdir = cfg["workdir"]
    script = os.path.join(workdir, "main.py")
    with open(script, "wb") as f:
        f.write(code)
    if cfg["uid"] is not None:
        os.chown(workdir, cfg["uid"], cfg["uid"])
        os.chown(script, cfg["uid"], cfg["uid"])
    return workdir


def _wait(pid: int, lifeline: int, deadline: float) -> str:
    """'exited', 'deadline' or 'orphaned' (the server died), whichever comes first."""
    poll = select.poll()
    poll.register(lifeline, select.POLLIN)
    try:
        pidfd = os.pidfd_open(pid)
        poll.register(pidfd, select.POLLIN)
        step = None
    except (AttributeError, OSError):  # kernels before 5.3: poll for the exit every 10 ms
        pidfd, step = None, 0.01
    try:
        while True:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return "exited"
            left = deadline - time.monotonic()
            if left <= 0:
                return "deadline"
            for fd, _ in poll.poll(1000 * (left if step is None else min(step, left))):
                if fd == lifeline:
                    return "orphaned"
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _kill_run(pid: int, pid_namespace: bool) -> None:
    if pid_namespace and os.getpid() == 1:
        os.kill(-1, signal.SIGKILL)  # as PID 1 of the run's namespace: every process of the run
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main() -> int:
    cfg = json.loads(sys.argv[1])
    deadline = time.monotonic() + cfg["timeout_s"]
    with os.fdopen(cfg["status_fd"], "w", closefd=False) as status:
        try:
            workdir = _prepare(cfg, sys.stdin.buffer.read())
        except OSError as exc:
            status.write(json.dumps({"setup_error": str(exc)}) + "\n")
            return 1
        seccomp = _libseccomp()
        pid = os.fork()
        if pid == 0:
            _become_script(cfg, workdir, seccomp)
        ended = _wait(pid, cfg["lifeline_fd"], deadline)
        _kill_run(pid, cfg["pid_namespace"])
        _, wait_status = os.waitpid(pid, 0)
        if os.getpid() == 1:
            while True:  # reap the rest of the namespace
                try:
                    os.wait()
                except ChildProcessError:
                    break
        exit_code = os.waitstatus_to_exitcode(wait_status)
        status.write(json.dumps({"exit_code": exit_code, "ended": ended, "filter": seccomp is not None}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
