"""The guides' commands run as written: every `mcprl ...` line of a guide's bash blocks, in order, in a
fresh directory holding the files the guide writes (a code block whose first line is `# FILENAME`)."""

from __future__ import annotations

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
    """docs/data.md's commands in order, in a fresh directory, against the real offline servers. Three
    changes, each a stand-in the guide names: task counts cut to 12 (`--n 600` takes minutes), the
    OpenAI-compatible endpoint a local stub (it proposes one real plan, a simple polygon lookup, so the
    generator is asked for those: DOMAINS, COMPLEXITIES), and specs.jsonl the guide's example on one line."""
    import json

    from tests.data.openai_stub import Reply, StubOpenAI
    from tests.data.test_llm import plan

    page = (DOCS / "data.md").read_text()
    commands = _command_lines(page)
    assert len(commands) >= 10, "the data guide lost its commands"
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


def test_the_training_guides_commands_load_and_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/training.md's and the quickstart's `mcprl train` lines, each with `--dry-run` added: the config
    files, overrides and flags load, check and plan (no model). Training itself runs in `make train` and
    the smoke test; `--equal-time` needs a finished run, which the smoke test's equal-time test makes."""
    monkeypatch.chdir(DOCS.parent)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    runner = CliRunner()
    lines = [args for page in ("training.md", "quickstart.md") for args in _command_lines((DOCS / page).read_text())
             if args[1] == "train" and "--equal-time" not in args]
    assert len(lines) >= 6
    for args in lines:
        result = runner.invoke(app, [*args[1:], *([] if "--dry-run" in args else ["--dry-run"])])
        assert result.exit_code == 0 and "algorithm:" in result.output, f"{' '.join(args)}\n{result.output}"
