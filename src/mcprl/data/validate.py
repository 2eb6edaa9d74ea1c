"""`mcprl data validate`: is every row a sample the env and trainer can use?

Checks per row: JSON parses; the SkyRL sample schema; prompt shape (system first, ends with the
user turn); ground-truth consistency (steps numbered 1..n, must_call tools and allowed_tools agree
with the sequence, unique task ids); the prompt's token count under the model's chat template
against a budget; and each `tool_sequence` step against the tools the configured servers really
expose (tool exists, params fit its input schema). Every problem names its row and field path; one
bad row never stops the others from being checked.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import jsonschema

from mcprl.data.sample import iter_rows, sample_schema
from mcprl.errors import McprlError
from mcprl.tools.manager import ToolInfo

TOKENIZE_BATCH = 256


class ValidationSetupError(McprlError):
    """The validator itself cannot run (no tokenizer, unreadable file); the message says the fix."""


@dataclass(frozen=True)
class Problem:
    row: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.field}: {self.message}"


@dataclass(frozen=True)
class Inventory:
    """The live tools of the configured servers, and the servers that failed to start."""

    tools: list[ToolInfo]
    configured: list[str]
    failed: dict[str, str] = field(default_factory=dict)

    def find(self, server: str, tool: str) -> ToolInfo | None:
        return next((t for t in self.tools if t.server == server and t.tool == tool), None)


@dataclass
class Stats:
    by_complexity: Counter = field(default_factory=Counter)
    by_source: Counter = field(default_factory=Counter)
    prompt_chars: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    tools_used: Counter = field(default_factory=Counter)  # server.tool -> steps naming it
    servers_used: Counter = field(default_factory=Counter)


@dataclass
class ValidationReport:
    path: str
    rows: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    inventory: Inventory | None = None
    max_tokens: int | None = None

    @property
    def bad_rows(self) -> set[int]:
        return {p.row for p in self.problems}

    @property
    def valid_rows(self) -> int:
        return self.rows - len(self.bad_rows)

    @property
    def ok(self) -> bool:
        return not self.problems and self.rows > 0


async def live_inventory(servers_config: Any = None) -> Inventory:
    """Start the configured servers, read their tools, stop them; servers that fail are reported, not fatal."""
    from mcprl.tools.manager import ToolManager

    tm = ToolManager(servers_config)
    try:
        failed = await tm.start(tolerate_failures=True)
        return Inventory(tm.tools(), [s.name for s in tm.config.servers], failed)
    finally:
        await tm.close()


def load_tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    from mcprl.models.loading import ModelError, resolve_model

    try:
        return AutoTokenizer.from_pretrained(resolve_model(model))
    except ModelError as e:
        raise ValidationSetupError(str(e)) from None


def validate_file(path: str | Path, *, max_tokens: int | None = 2048, tokenizer: Any = None,
                  inventory: Inventory | None = None) -> ValidationReport:
    """Validate every row of `path`. Token budgets need `tokenizer`; tool checks need `inventory`."""
    if not Path(path).is_file():
        raise ValidationSetupError(f"dataset not found: {path}")
    report = ValidationReport(str(path), inventory=inventory, max_tokens=max_tokens)
    validator = jsonschema.Draft202012Validator(sample_schema())
    prompts: list[tuple[int, list[dict[str, str]]]] = []
    task_rows: dict[str, int] = {}
    try:
        rows = list(iter_rows(path))
    except (ValueError, OSError) as e:
        raise ValidationSetupError(f"{path}: cannot read: {e}") from None
    for number, row in rows:
        report.rows += 1
        if isinstance(row, Exception):
            report.problems.append(Problem(number, "(row)", str(row)))
            continue
        report.problems += _schema_problems(number, row, validator)
        if not isinstance(row, dict):
            continue
        if _prompt_is_text(row.get("prompt")):
            prompts.append((number, row["prompt"]))
            report.stats.prompt_chars.append(sum(len(m["content"]) for m in row["prompt"]))
            report.problems += _prompt_problems(number, row["prompt"])
        gt = _ground_truth(row)
        if gt is None or row.get("env_class") == "openenv_env":  # its server scores it: no tool sequence to check
            continue
        report.problems += _ground_truth_problems(number, gt, task_rows)
        _count(report.stats, row, gt)
        if inventory is not None:
            report.problems += _tool_problems(number, gt, inventory)
    if tokenizer is not None and prompts:
        report.problems += _token_problems(prompts, tokenizer, max_tokens, report.stats)
    if inventory is None:
        report.notes.append("tool checks skipped (--no-servers): tool_sequence steps were not checked against servers")
    else:
        report.notes += [f"server {name} did not start ({error}); steps on it were not checked"
                         for name, error in inventory.failed.items()]
    report.problems.sort(key=lambda p: p.row)
    return report


def _schema_problems(number: int, row: Any, validator: jsonschema.Draft202012Validator) -> list[Problem]:
    problems = []
    for error in sorted(validator.iter_errors(row), key=lambda e: [str(p) for p in e.absolute_path]):
        where = _field(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, dict):
            for missing in (k for k in error.validator_value if k not in error.instance):
                problems.append(Problem(number, _join(where, missing), "required field is missing"))
        else:
            problems.append(Problem(number, where or "(row)", error.message))
    return problems


def _field(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _join(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _prompt_is_text(prompt: Any) -> bool:
    return isinstance(prompt, list) and bool(prompt) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt)


def _prompt_problems(number: int, prompt: list[dict[str, str]]) -> list[Problem]:
    problems = []
    if prompt[-1]["role"] != "user":
        problems.append(Problem(number, f"prompt[{len(prompt) - 1}].role",
                                "the prompt must end with the user's task (role user)"))
    for i, message in enumerate(prompt[1:], start=1):
        if message["role"] == "system":
            problems.append(Problem(number, f"prompt[{i}].role", "a system message may only come first"))
    return problems


def _ground_truth(row: dict[str, Any]) -> dict[str, Any] | None:
    spec = row.get("reward_spec")
    gt = spec.get("ground_truth") if isinstance(spec, dict) else None
    return gt if isinstance(gt, dict) else None


def _steps(gt: dict[str, Any]) -> list[dict[str, Any]]:
    seq = gt.get("tool_sequence")
    return [s for s in seq if isinstance(s, dict)] if isinstance(seq, list) else []


def _tool_part(name: Any) -> str:
    return str(name).rpartition(".")[2]


def _ground_truth_problems(number: int, gt: dict[str, Any], task_rows: dict[str, int]) -> list[Problem]:
    problems = []
    where = "reward_spec.ground_truth"
    task_id = gt.get("task_id")
    if isinstance(task_id, str):
        if task_id in task_rows:
            problems.append(Problem(number, f"{where}.task_id",
                                    f"{task_id!r} is also the id of row {task_rows[task_id]}"))
        task_rows.setdefault(task_id, number)
    steps = _steps(gt)
    numbers = [s.get("step") for s in steps]
    if steps and numbers != list(range(1, len(steps) + 1)):
        problems.append(Problem(number, f"{where}.tool_sequence", f"steps must be numbered 1..{len(steps)} in order, "
                                                                  f"got {numbers}"))
    sequence_tools = {_tool_part(s.get("tool")) for s in steps}
    success = gt.get("success") if isinstance(gt.get("success"), dict) else {}
    required = [success.get("must_call_tool"), *(success.get("must_call_tools") or [])]
    for name in (n for n in required if isinstance(n, str) and steps):
        if _tool_part(name) not in sequence_tools:
            problems.append(Problem(number, f"{where}.success", f"must-call tool {name!r} is not in tool_sequence"))
    allowed = gt.get("allowed_tools")
    if isinstance(allowed, list):
        missing = sorted(sequence_tools - {_tool_part(a) for a in allowed})
        if missing:
            problems.append(Problem(number, f"{where}.allowed_tools", f"tool_sequence uses {missing}, "
                                                                     "which allowed_tools leaves out"))
    max_turns = gt.get("max_turns")
    if isinstance(max_turns, int) and steps and max_turns < len(steps):
        problems.append(Problem(number, f"{where}.max_turns", f"{max_turns} turns cannot fit {len(steps)} tool calls"))
    return problems


def _tool_problems(number: int, gt: dict[str, Any], inventory: Inventory) -> list[Problem]:
    problems = []
    for i, step in enumerate(_steps(gt)):
        where = f"reward_spec.ground_truth.tool_sequence[{i}]"
        server, tool = step.get("server"), step.get("tool")
        if server in inventory.failed or not isinstance(tool, str):
            continue
        if server not in inventory.configured:
            problems.append(Problem(number, f"{where}.server", f"server {server!r} is not in the servers config "
                                                               f"(configured: {', '.join(inventory.configured)})"))
            continue
        info = inventory.find(server, _tool_part(tool))
        if info is None:
            known = sorted(t.tool for t in inventory.tools if t.server == server)
            problems.append(Problem(number, f"{where}.tool", f"server {server!r} exposes no tool {tool!r}; "
                                                             f"it has: {', '.join(known) or 'none'}"))
            continue
        params = step.get("params")
        if not isinstance(params, dict):
            continue  # the schema check already reported it
        error = jsonschema.exceptions.best_match(info.validator.iter_errors(params))
        if error is not None:
            problems.append(Problem(number, _join(f"{where}.params", _field(error.absolute_path)),
                                    f"does not fit {server}.{info.tool}'s input schema: {error.message}"))
    return problems


def _count(stats: Stats, row: dict[str, Any], gt: dict[str, Any]) -> None:
    stats.by_complexity[str(gt.get("complexity"))] += 1
    stats.by_source[str(row.get("data_source"))] += 1
    for step in _steps(gt):
        stats.tools_used[f"{step.get('server')}.{_tool_part(step.get('tool'))}"] += 1
        stats.servers_used[str(step.get("server"))] += 1


def _token_problems(prompts: list[tuple[int, list[dict[str, str]]]], tokenizer: Any, max_tokens: int | None,
                    stats: Stats) -> list[Problem]:
    problems = []
    for start in range(0, len(prompts), TOKENIZE_BATCH):
        batch = prompts[start:start + TOKENIZE_BATCH]
        encoded = tokenizer.apply_chat_template([p for _, p in batch], tokenize=True, add_generation_prompt=True)
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        for (number, _), row_ids in zip(batch, ids):
            stats.prompt_tokens.append(len(row_ids))
            if max_tokens is not None and len(row_ids) > max_tokens:
                problems.append(Problem(number, "prompt", f"{len(row_ids)} tokens under the chat template, "
                                                          f"over the budget of {max_tokens}"))
    return problems


def validate(path: str | Path, *, max_tokens: int | None = 2048, model: str | None = "smollm2-135m",
             servers_config: Any = None, check_servers: bool = True) -> ValidationReport:
    """Everything `mcprl data validate` does: load the tokenizer, read the live inventory, validate."""
    tokenizer = load_tokenizer(model) if model else None
    inventory = asyncio.run(live_inventory(servers_config)) if check_servers else None
    return validate_file(path, max_tokens=max_tokens, tokenizer=tokenizer, inventory=inventory)


def print_report(report: ValidationReport, console: Any, *, verdict: bool = True) -> None:
    """Summary tables, then (with `verdict`) the notes, every problem and the verdict line."""
    from rich.markup import escape
    from rich.table import Table

    stats = report.stats
    counts = Table(title=f"{report.path}: {report.rows} rows")
    counts.add_column("by")
    counts.add_column("value")
    counts.add_column("rows", justify="right")
    for label, counter in (("complexity", stats.by_complexity), ("data_source", stats.by_source)):
        for value, n in sorted(counter.items()):
            counts.add_row(label, value, str(n))
    console.print(counts)

    sizes = Table(title="prompt size")
    for col in ("measure", "mean", "max"):
        sizes.add_column(col, justify="right" if col != "measure" else "left")
    for label, values in (("chars", stats.prompt_chars), ("tokens", stats.prompt_tokens)):
        if values:
            sizes.add_row(label, f"{statistics.fmean(values):.0f}", str(max(values)))
    if report.max_tokens and stats.prompt_tokens:
        sizes.caption = f"token budget {report.max_tokens}"
    console.print(sizes)

    coverage = Table(title="tool coverage")
    for col in ("server", "tools used", "tools exposed", "steps", "never used"):
        coverage.add_column(col)
    exposed: dict[str, list[str]] = {}
    for info in report.inventory.tools if report.inventory else []:
        exposed.setdefault(info.server, []).append(info.tool)
    for server in sorted(set(exposed) | set(stats.servers_used)):
        known = exposed.get(server)
        used = sorted(t.partition(".")[2] for t in stats.tools_used
                      if t.partition(".")[0] == server and (known is None or t.partition(".")[2] in known))
        coverage.add_row(server, str(len(used)), "?" if known is None else str(len(known)),
                         str(stats.servers_used.get(server, 0)),
                         "" if known is None else ", ".join(sorted(set(known) - set(used))))
    console.print(coverage)
    if not verdict:
        return
    for note in report.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]")
    for problem in report.problems:
        console.print(f"[red]x[/red] {escape(str(problem))}", highlight=False)
    if report.ok:
        console.print(f"[green]Validation passed[/green]: {report.rows} valid rows")
    elif report.rows == 0:
        console.print("[red]Validation failed[/red]: the file has no rows")
    else:
        console.print(f"[red]Validation failed[/red]: {report.valid_rows} valid rows, "
                      f"{len(report.bad_rows)} rows with problems ({len(report.problems)} problems)")
