"""The Python sandbox contains what model-written code can do wrong, and reports it."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from mcprl.servers import sandbox
from mcprl.servers.errors import InvalidArgumentError
from tests.servers.helpers import none_left as _none_left

ISO = sandbox.isolation()


def test_runs_code_in_a_fresh_directory_that_is_removed():
    code = "import os\nprint(os.getcwd())\nos.makedirs('a/b')\nopen('a/b/f.txt', 'w').write('x')\nos.chmod('a/b', 0)\nos.chmod('a', 0)"
    r = sandbox.run_python(code)
    assert r.exit_code == 0 and not r.timed_out and not r.truncated and r.stderr == ""
    workdir = r.stdout.strip()
    assert "mcprl-sandbox-" in workdir and not os.path.exists(workdir)


@pytest.mark.skipif(not ISO.pid_namespace, reason=f"no PID namespace on this machine ({ISO})")
def test_only_its_own_processes_are_visible():
    r = sandbox.run_python("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert r.stdout == "[1, 2]\n"  # the run's supervisor and the script


def test_infinite_loop_stops_at_the_timeout():
    start = time.monotonic()
    r = sandbox.run_python("while True:\n    pass", timeout_s=1.0)
    assert r.timed_out and r.exit_code == -9 and "time limit" in r.stderr
    assert 1.0 <= time.monotonic() - start < 4.0
    assert _none_left()


def test_children_die_with_the_run():
    r = sandbox.run_python(
        "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\nprint('parent done')"
    )
    assert r.stdout == "parent done\n" and not r.timed_out
    assert _none_left()


def test_huge_allocation_fails_cleanly():
    r = sandbox.run_python("data = bytearray(4 * 1024**3)\nprint('allocated')", timeout_s=10)
    assert r.exit_code == 1 and "MemoryError" in r.stderr and "allocated" not in r.stdout and not r.timed_out


def test_fork_bomb_is_contained():
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    start = time.monotonic()
    r = sandbox.run_python(code, timeout_s=2.0)
    assert r.timed_out and time.monotonic() - start < 8.0
    assert _none_left(), "fork bomb processes outlived the run"


@pytest.mark.skipif(not ISO.nproc_enforced, reason=f"RLIMIT_NPROC does not bind here ({ISO})")
def test_process_count_is_bounded():
    code = (
        "import os, time\nn = 0\ntry:\n    while n < 1000:\n        if os.fork() == 0:\n            time.sleep(30)\n"
        "            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n)"
    )
    # With a uid per run the budget is the run's alone; otherwise it sits above the uid's count at launch,
    # and tasks of that uid that end during the run leave room for as many more.
    uid = None if ISO.own_uid else os.getuid()
    before = 0 if uid is None else sandbox._tasks_of(uid)
    r = sandbox.run_python(code, timeout_s=10)
    assert _none_left()
    freed = 0 if uid is None else max(0, before - sandbox._tasks_of(uid))
    assert 0 < int(r.stdout) <= sandbox.SandboxLimits().max_processes + freed


def test_parent_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-for-the-sandbox")
    r = sandbox.run_python("import os\nprint(sorted(os.environ))\nprint(os.environ.get('OPENAI_API_KEY'))")
    assert "OPENAI_API_KEY" not in r.stdout and "sk-test" not in r.stdout and r.stdout.endswith("None\n")


def test_equal_code_fails_with_equal_text():
    """Tool results feed the next prompt: a random path in a traceback would make seeded runs drift."""
    code = "x = 1\nprint(round((CL - 1) / 2, 2))"
    first, second = sandbox.run_python(code), sandbox.run_python(code)
    assert first.exit_code == 1 and first.stderr == second.stderr
    assert 'File "main.py", line 2' in first.stderr and "NameError" in first.stderr
    assert "mcprl-sandbox-" not in first.stderr


def test_huge_output_is_truncated_with_a_marker():
    r = sandbox.run_python("for i in range(200000):\n    print(i)")
    assert r.truncated and r.exit_code == 0
    assert "characters truncated" in r.stdout and len(r.stdout) < 4200
    assert r.stdout.startswith("0\n1\n") and r.stdout.endswith("199999\n")


def test_bad_arguments_are_refused():
    with pytest.raises(InvalidArgumentError, match="timeout_s 0"):
        sandbox.run_python("print(1)", timeout_s=0)
    with pytest.raises(InvalidArgumentError, match="at most 30"):
        sandbox.run_python("print(1)", timeout_s=31)
    with pytest.raises(InvalidArgumentError, match="code is 100001 characters"):
        sandbox.run_python("#" * 100_001)


def _modes() -> list[sandbox.Isolation]:
    """Every containment mode that works on this machine, one interpreter each (fallbacks get tested too)."""
    seen, modes = set(), []
    for iso in sandbox._candidates():
        kind = (iso.prefix, iso.runs_as)
        if kind not in seen and (worked := sandbox._works(iso)) is not None:
            seen.add(kind)
            modes.append(worked)
    return modes


@pytest.mark.parametrize("iso", _modes(), ids=lambda iso: f"{'ns' if iso.prefix else 'plain'}-{iso.runs_as.replace(' ', '-')}")
def test_every_available_mode_contains_the_basics(iso, monkeypatch):
    monkeypatch.setattr(sandbox, "isolation", lambda: iso)
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test-secret")
    sleeper = "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])"
    r = sandbox.run_python(f"import os, subprocess, sys\nprint(os.environ.get('TAVILY_API_KEY'))\n{sleeper}")
    assert r.stdout == "None\n" and r.exit_code == 0 and r.network_isolated == iso.network_isolated
    r = sandbox.run_python("while True:\n    pass", timeout_s=0.5)
    assert r.timed_out and r.exit_code == -9
    assert _none_left()
    runs = lambda: {e for e in os.listdir(tempfile.gettempdir()) if e.startswith("mcprl-sandbox-")}  # noqa: E731
    before = runs()
    deep = "import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\nos.chmod('.', 0)\nprint('deep')"
    assert sandbox.run_python(deep, timeout_s=20).stdout == "deep\n"  # finding 4: cleanup used to fail here
    assert runs() <= before
