"""One error root: every exception class mcprl defines is a McprlError, and the `mcprl` command turns one
that no command handled into one line on stderr with the class's exit code."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from mcprl.errors import ConfigError, McprlError, suggest

SRC = Path(__file__).resolve().parents[1] / "src"


def _exception_classes() -> list[tuple[str, str]]:
    """(module, class) of every class in src/mcprl whose base is an exception: a name ending in Error or
    Exception, or a class already found (ToolNotFound(ToolError), ServerUnavailable(ServerCrashed), ...)."""
    defs = []
    for path in (SRC / "mcprl").rglob("*.py"):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        defs += [(module, node) for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)]
    found: dict[tuple[str, str], None] = {}
    while True:
        names = {name for _, name in found}
        new = [(m, n.name) for m, n in defs if (m, n.name) not in found and any(
            isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id in names) for b in n.bases)]
        if not new:
            return sorted(found)
        found.update(dict.fromkeys(new))


CLASSES = _exception_classes()


def test_the_walk_finds_the_error_families() -> None:
    names = {name for _, name in CLASSES}
    assert {"ToolError", "ServiceError", "EvalError", "ModelError", "InferenceError", "JudgeError"} <= names


@pytest.mark.parametrize(("module", "name"), CLASSES, ids=[f"{m}.{n}" for m, n in CLASSES])
def test_every_error_class_has_the_one_root(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, McprlError), f"{module}.{name} does not derive from mcprl.errors.McprlError"


def test_one_config_error() -> None:
    from mcprl.tools.errors import ConfigError as ToolsConfigError
    from mcprl.training.config import ConfigError as TrainConfigError

    assert ToolsConfigError is TrainConfigError is ConfigError
    assert issubclass(ConfigError, ValueError) and ConfigError.exit_code == 2


def test_suggest() -> None:
    assert suggest("get_quot", ["get_quote", "get_profile"]) == "did you mean 'get_quote'?"
    assert suggest("quote", ["get_quote", "get_quotes"], n=2, cutoff=0.5) == "did you mean 'get_quote' or 'get_quotes'?"
    assert suggest("zzz", ["get_quote"]) == ""


def test_the_command_prints_one_line_for_an_unhandled_error() -> None:
    """A typed error that escapes a command: one line on stderr, the class's exit code, no traceback."""
    script = ("import sys; from mcprl.cli.main import app, main; from mcprl.tools.errors import ToolTimeout\n"
              "@app.command('boom')\n"
              "def boom():\n    raise ToolTimeout('tool get_quote timed out after 10.0 s')\n"
              "sys.argv = ['mcprl', 'boom']; main()")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr
    assert lines == ["error: tool get_quote timed out after 10.0 s"], proc.stderr


@pytest.mark.parametrize("command", [["tools", "call", "polygon.get_last_quote", '{"ticker": "AAPL"}'],
                                     ["servers", "check"]])
def test_a_zero_timeout_is_refused_not_replaced_by_the_default(command: list[str]) -> None:
    """`--timeout 0` used to mean 20 s without a word (issue 49, finding 7)."""
    from typer.testing import CliRunner

    from mcprl.cli.main import app

    result = CliRunner().invoke(app, [*command, "--timeout", "0"])
    assert result.exit_code == 2 and "Invalid value for '--timeout'" in result.output


def _main(argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """`mcprl ARGV` through the real entry point, in this process."""
    from mcprl.cli.main import main

    monkeypatch.setattr(sys, "argv", ["mcprl", *argv])
    with pytest.raises(SystemExit) as done:
        main()
    out, err = capsys.readouterr()
    return done.value.code, out, err


@pytest.mark.parametrize("argv, says", [
    (["eval", "run"], "Missing option '--model' / '-m'. (see: mcprl eval run --help)"),
    (["tools", "lsit"], "No such command 'lsit'"),
    (["train", "--no-such-flag"], "No such option: --no-such-flag"),
])
def test_a_usage_mistake_is_one_line(argv: list[str], says: str, monkeypatch, capsys) -> None:
    """`eval` without `--model` printed the whole help (issue 49, finding 7): now one line naming what is missing."""
    code, out, err = _main(argv, monkeypatch, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], err
    assert out == ""


@pytest.mark.parametrize("argv", [["--help"], ["eval"], []])
def test_help_still_prints(argv: list[str], monkeypatch, capsys) -> None:
    code, out, err = _main(argv, monkeypatch, capsys)
    assert code == 0 and "Usage:" in out and err == "", err
