"""The guides' commands run as written: every `mcprl ...` line of a guide's bash blocks, in order, in a
fresh directory holding the files the guide writes (a code block whose first line is `# FILENAME`)."""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mcprl.cli.main import app

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def _steps(page: Path) -> list[tuple[str, str, str]]:
    """("file", name, text) and ("run", command, "") in page order."""
    steps = []
    for lang, body in BLOCK.findall(page.read_text()):
        first, _, rest = body.partition("\n")
        if lang in ("yaml", "json", "jsonl") and first.startswith("# "):
            steps.append(("file", first[2:].split(":")[0].strip(), rest))
        elif lang == "bash":
            steps += [("run", line.strip(), "") for line in body.splitlines() if line.strip().startswith("mcprl ")]
    return steps


def test_the_own_server_guide_and_the_readme_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/own-server.md, then the README's commands in the same directory (they use the guide's files)."""
    guide, readme = _steps(DOCS / "own-server.md"), _steps(DOCS.parent / "README.md")
    assert sum(kind == "run" for kind, _, _ in guide) >= 5, "the guide lost its commands"
    assert sum(kind == "run" for kind, _, _ in readme) >= 3, "the README lost its commands"
    steps = guide + readme
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for kind, what, text in steps:
        if kind == "file":
            # `python` in a servers YAML is whatever python the user has; here, the one running the tests.
            (tmp_path / what).write_text(text.replace("command: python,", f"command: {sys.executable},"))
            continue
        result = runner.invoke(app, shlex.split(what)[1:], catch_exceptions=False)
        assert result.exit_code == 0, f"{what}\n{result.output}"
    assert (tmp_path / "my_train.jsonl").read_text().count("\n") == 2


def test_the_cli_reference_is_current() -> None:
    from mcprl.cli.reference import cli_reference

    reference = cli_reference()
    assert "### `mcprl train`" in reference and "### `mcprl eval compare`" in reference
    assert reference in (DOCS / "cli.md").read_text(), "docs/cli.md: regenerate it with cli_reference()"


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict`: every page in the nav exists and every relative link and anchor resolves."""
    import subprocess

    root = DOCS.parent
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(root / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_readme_stays_short() -> None:
    assert len((DOCS.parent / "README.md").read_text().splitlines()) <= 150


def _leaf_commands():
    import typer

    root = typer.main.get_command(app)
    stack = [(root, [], root.context_class(root, info_name="mcprl"))]
    while stack:
        cmd, path, ctx = stack.pop()
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                stack.append((sub, [*path, name], sub.context_class(sub, info_name=name, parent=ctx)))
        else:
            yield path, cmd


def test_every_command_shows_an_example_that_parses() -> None:
    """`--help` of each command shows one example, and the example's arguments are ones the command takes."""
    leaves = list(_leaf_commands())
    assert len(leaves) >= 15
    for path, cmd in leaves:
        help_text = cmd.help or ""
        assert "Example: mcprl " in help_text, f"mcprl {' '.join(path)}: no example in its help"
        example = shlex.split(help_text.split("Example: ", 1)[1].split("\n\n")[0].replace("\n", " "))
        assert example[: len(path) + 1] == ["mcprl", *path], f"the example of mcprl {' '.join(path)} runs another command"
        ctx = cmd.make_context(path[-1], example[len(path) + 1:])  # raises on an unknown option or a missing argument
        assert ctx.params is not None


GUIDES = ["index.md", "quickstart.md", "servers.md", "own-server.md", "data.md", "environment.md", "rewards.md",
          "training.md", "evaluation.md", "model.md", "scaling-out.md", "troubleshooting.md", "INSTALL.md", "../README.md"]


def _command_lines(text: str) -> list[str]:
    """Every `mcprl ...` line of the page's bash blocks, continuation lines joined, comments dropped."""
    found = []
    for lang, body in BLOCK.findall(text):
        if lang not in ("bash", "sh", "console"):
            continue
        joined = re.sub(r"\\\n\s*", " ", body)
        for line in joined.splitlines():
            line = line.strip().removeprefix("$ ")
            line = re.sub(r"^(\.venv/bin/|PYTHONPATH=\S+ )", "", line)
            if line.startswith("mcprl ") and not re.search(r"\s\[|\s\|\s|\.\.\.", line):  # not a synopsis
                found.append(shlex.split(line, comments=True))
    return found


def _resolve(args: list[str]):
    import typer

    cmd = typer.main.get_command(app)
    ctx = cmd.context_class(cmd, info_name="mcprl")
    rest = args[1:]
    while hasattr(cmd, "list_commands") and rest and rest[0] in cmd.list_commands(ctx):
        cmd = cmd.get_command(ctx, rest[0])
        ctx = cmd.context_class(cmd, info_name=rest[0], parent=ctx)
        rest = rest[1:]
    return cmd, rest


def where(args: list[str]) -> str:
    """The test that runs a guide's command; each of those tests picks its lines through here, so a new kind of
    command in a guide fails `test_every_command_in_the_guides_is_run_by_a_test` until a test runs it."""
    if any(a.startswith(("my_servers", "my_specs", "my_train")) or "=my_" in a for a in args):
        return "own-server"  # the own-server guide's files: test_the_own_server_guide_and_the_readme_run_as_written
    if args[1] in ("eval", "report") or "--equal-time" in args:
        return "finished-run"  # on the smoke test's run: test_trainer_smoke.py::test_the_guides_commands_run_on_a_run
    if args[1] == "train":
        return "plan"  # test_every_train_command_in_the_guides_plans (training itself: make train, the smoke test)
    if args[1:3] in (["servers", "serve"], ["servers", "up"]):
        return "serve"  # test_the_serve_commands_serve_as_written: started, asked for their tools, stopped
    if args[1] == "data":
        return "data"  # test_the_data_guide_runs_as_written
    if args[1] in ("servers", "tools", "env"):
        return "offline"  # test_the_server_tool_and_env_commands_run_as_written
    return "nowhere"


def guide_commands(kind: str, pages: list[str] = GUIDES) -> list[list[str]]:
    """The guides' command lines that `where` gives to `kind`, in page order, each once."""
    seen, found = set(), []
    for page in pages:
        for args in _command_lines((DOCS / page).read_text()):
            if where(args) == kind and tuple(args) not in seen:
                seen.add(tuple(args))
                found.append(args)
    return found


def test_every_command_in_the_guides_is_run_by_a_test() -> None:
    own_server = {tuple(a) for page in ("own-server.md", "../README.md") for a in _command_lines((DOCS / page).read_text())}
    for page in GUIDES:
        for args in _command_lines((DOCS / page).read_text()):
            assert where(args) != "nowhere", f"{page}: no test runs `{' '.join(args)}`: give it one in where()"
            if where(args) == "own-server":  # that test runs the own-server guide and the README only
                assert tuple(args) in own_server, f"{page}: `{' '.join(args)}` is not a line of own-server.md"
    assert len(guide_commands("serve")) >= 4 and len(guide_commands("offline")) >= 4
    assert len(guide_commands("finished-run")) >= 3 and len(guide_commands("data")) >= 10


@pytest.mark.parametrize("page", GUIDES)
def test_every_command_in_the_guides_parses(page: str) -> None:
    """Each `mcprl` line of README.md and the guides names a real command with options it takes (the
    own-server guide, the README and the data guide also run, and every `mcprl train` line plans with
    --dry-run, below; `make train` runs the quickstart)."""
    lines = _command_lines((DOCS / page).read_text())
    for args in lines:
        cmd, rest = _resolve(args)
        assert not hasattr(cmd, "list_commands") or not rest or rest[0].startswith("-"), f"{page}: {' '.join(args)}"
        if hasattr(cmd, "list_commands"):
            continue  # a group with options only, e.g. `mcprl eval --help`
        cmd.make_context(args[-1], rest, resilient_parsing=False)


def test_the_metric_names_table_is_current() -> None:
    from mcprl.metric_names import reference

    assert reference() in (DOCS / "metrics.md").read_text(), "docs/metrics.md: regenerate it with reference()"


@pytest.mark.slow  # 70 s on the 2-core machine (its commands generate and execute ~150 tasks): make test-all
def test_the_data_guide_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quickstart page's data lines, then docs/data.md's, in order, in a fresh directory, against the real
    offline servers. Three changes, each a stand-in the guide names: task counts cut to 12 (`--n 600` takes minutes), the
    OpenAI-compatible endpoint a local stub (it proposes one real plan, a simple polygon lookup, so the
    generator is asked for those: DOMAINS, COMPLEXITIES), and specs.jsonl the guide's example on one line."""
    import json

    from tests.data.openai_stub import Reply, StubOpenAI
    from tests.data.test_llm import plan

    page = (DOCS / "data.md").read_text()
    commands = guide_commands("data")  # the quickstart's data lines, then the data guide's
    assert len(_command_lines(page)) >= 10, "the data guide lost its commands"
    spec = next(body for lang, body in BLOCK.findall(page.split("## The specs converter")[1]) if lang == "json")
    (tmp_path / "specs.jsonl").write_text(json.dumps(json.loads(spec)) + "\n")
    (tmp_path / "data" / "heldout").mkdir(parents=True)
    (tmp_path / "data" / "heldout" / "natural.yaml").write_bytes((DOCS.parent / "data/heldout/natural.yaml").read_bytes())
    reply = plan("What did AAPL close at in the previous session?",
                 [("polygon", "get_previous_close", {"ticker": "AAPL"})], "{{step1.data.close}}")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    with StubOpenAI(lambda path, body: Reply(reply)) as stub:
        env = {"OPENAI_API_KEY": "sk-guide-test", "OPENAI_BASE_URL": stub.url,
               "DOMAINS": "polygon", "COMPLEXITIES": "simple"}  # what the stub's one plan is
        for args in commands:
            if "--n" in args:
                args[args.index("--n") + 1] = str(min(int(args[args.index("--n") + 1]), 12))
            result = runner.invoke(app, args[1:], env=env, catch_exceptions=False)
            assert result.exit_code == 0, f"{' '.join(args)}\n{result.output}"
    assert (tmp_path / "data/processed/train.parquet").is_file() and (tmp_path / "data/specs.jsonl").is_file()
    assert (tmp_path / "data/heldout/natural.jsonl").read_text().count("\n") >= 90
    assert stub.requests, "the llm command never asked the endpoint"


def test_every_train_command_in_the_guides_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each guide's `mcprl train` line with `--dry-run` added: its config files, overrides and flags load, check
    and plan (no model). Training itself runs in `make train`, the smoke test and the tinker test; the hosted
    Tinker line gets a stand-in key (the plan checks that one is set)."""
    monkeypatch.chdir(DOCS.parent)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("TINKER_API_KEY", "tml-guide-test-stand-in")
    runner = CliRunner()
    lines = guide_commands("plan")
    assert len(lines) >= 10 and any("--engine" in args for args in lines)
    for args in lines:
        result = runner.invoke(app, [*args[1:], *([] if "--dry-run" in args else ["--dry-run"])])
        assert result.exit_code == 0 and "algorithm:" in result.output, f"{' '.join(args)}\n{result.output}"


def _mcprl(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "mcprl.cli", *args[1:]]


def _free_ports(n: int) -> int:
    """The first of n consecutive free ports on 127.0.0.1."""
    import socket

    for base in range(20000, 60000, 97):
        try:
            with contextlib.ExitStack() as stack:
                for port in range(base, base + n):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {n} consecutive free ports")


@pytest.mark.slow  # ~15 s (eight server processes): make test-all
def test_the_serve_commands_serve_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each `servers serve` / `servers up` line, started as written (a free port in place of the guide's), answers
    list_tools over its transport and stops on SIGTERM; `--backend live` without its key exits with one line."""
    import signal
    import subprocess

    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    from mcprl.cli.launcher import wait_listening
    from mcprl.tools.config import OUR_SERVERS
    from tests.servers.helpers import connect

    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    lines = guide_commands("serve")
    assert {" ".join(a[1:3]) for a in lines} == {"servers serve", "servers up"}
    for args in lines:
        args = list(args)
        if "--backend" in args and args[args.index("--backend") + 1] == "live":
            done = subprocess.run(_mcprl(args), check=False, capture_output=True, text=True, timeout=60)
            assert done.returncode == 2 and done.stderr.count("\n") == 1 and "is not set" in done.stderr, done.stderr
            continue
        if args[2] == "serve" and "--transport" not in args:  # stdio: what an MCP client launches
            command = _mcprl(args)
            # the server's stderr to the real one: a test before may leave sys.stderr a capture without a fileno
            with connect(stdio_client(StdioServerParameters(command=command[0], args=command[1:]),
                                      errlog=sys.__stderr__)) as session:
                assert session.tool_names()
            continue
        flag = "--port" if args[2] == "serve" else "--base-port"
        base = _free_ports(1 if args[2] == "serve" else len(OUR_SERVERS))
        if flag in args:
            args[args.index(flag) + 1] = str(base)
        else:
            args += [flag, str(base)]
        ports = [base] if args[2] == "serve" else [base + i for i in range(len(OUR_SERVERS))]
        proc = subprocess.Popen(_mcprl(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for port in ports:
                wait_listening(f"http://127.0.0.1:{port}/mcp", proc, timeout=60)
                with connect(streamable_http_client(f"http://127.0.0.1:{port}/mcp")) as session:
                    assert session.tool_names(), f"{' '.join(args)}: no tools on {port}"
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
        assert proc.returncode in (0, -signal.SIGTERM), f"{' '.join(args)} exited with {proc.returncode}"


@pytest.mark.slow  # ~20 s (each command starts the five servers): make test-all
def test_the_server_tool_and_env_commands_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`servers check`, `tools list|call` and `env check` lines as written, in a directory holding what they read
    (the quickstart's task file, generated here: `make train` writes it)."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    lines = guide_commands("offline")
    data_files = {a[a.index("--data") + 1] for a in lines if "--data" in a}
    for path in data_files:
        result = runner.invoke(app, ["data", "generate", "families", "--n", "2", "--seed", "1", "--out", path])
        assert result.exit_code == 0, result.output
    for args in lines:
        result = runner.invoke(app, args[1:], catch_exceptions=False)
        assert result.exit_code == 0, f"{' '.join(args)}\n{result.output}"
        if args[1:3] == ["tools", "call"]:
            assert "price" in result.output, result.output
