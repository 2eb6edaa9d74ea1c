"""`mcprl data generate families|rules|llm|specs`, `mcprl data natural|validate|convert|stats`.

Imported at `mcprl` start-up, so heavy modules (openai, transformers, torch, the generators) are
imported inside the commands.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional

import typer
from rich.console import Console

from mcprl.cli.errors import fail
from mcprl.errors import ConfigError, McprlError

if TYPE_CHECKING:
    from mcprl.data.execute import Generated

app = typer.Typer(no_args_is_help=True, help="Generate, validate and convert task datasets.")
generate_app = typer.Typer(no_args_is_help=True, help="Generate verified tasks and expert demos: one subcommand per "
                                                      "generator (families, rules, llm, specs).")
app.add_typer(generate_app, name="generate")
console = Console(stderr=True)
STYLES = ("hermes", "json")
FORMATS = ("jsonl", "json", "parquet")
ConfigOpt = typer.Option(None, "--servers-config", "-c", help="Servers YAML; default: mcprl's five servers (stdio).")
OutOpt = typer.Option(..., "--out", help="Output .jsonl/.json/.parquet, or a directory with --split.")
SeedOpt = typer.Option(0, "--seed", help="Fixes generation and the split.")
SplitOpt = typer.Option(None, "--split", help="e.g. train=0.8,val=0.1,test=0.1")
FormatOpt = typer.Option(None, "--format", help="jsonl|json|parquet for a directory --out.")
StyleOpt = typer.Option("hermes", "--style", help="Tool-call style taught by the prompt: hermes | json.")
ExpertsOpt = typer.Option(None, "--experts", help="Expert trajectories; default <out stem>.experts.jsonl.")
DroppedOpt = typer.Option(None, "--dropped", help="Dropped tasks and why; default <out stem>.dropped.jsonl.")
HeldoutOpt = typer.Option(False, "--heldout", help="The held-out companies (families: and phrasings).")
RecoveryOpt = typer.Option(0.0, "--recovery", help="Share of expert demos that make a slip (a misspelled ticker; "
                           "families also a missing argument or a date as the user wrote it), get the real error and "
                           "recover; the slip is not trained.")
MaxTurnsOpt = typer.Option(8, envvar="MAX_TURNS", help="Cap on a task's turn budget (calls + 2).")


def _fail(message: str) -> NoReturn:
    fail(ConfigError(message))


def _csv(value: Optional[str]) -> Optional[list[str]]:
    items = [v.strip() for v in (value or "").split(",") if v.strip()]
    return items or None


def _generate(make: Callable[[], Generated], out: Path, *, seed: int, split: Optional[str], fmt: Optional[str],
              style: str, experts: Optional[Path], dropped: Optional[Path] = None, with_dropped: bool) -> None:
    """What every generator shares: checks the output options before any work, runs it, writes the files."""
    from mcprl.data.splits import SplitError, is_directory, parse_split

    if style not in STYLES:
        _fail(f"unknown --style {style!r}; use one of: {', '.join(STYLES)}")
    if fmt is not None and fmt not in FORMATS:
        _fail(f"unknown --format {fmt!r}; use jsonl, json or parquet")
    try:
        fractions = parse_split(split) if split else None
    except SplitError as e:
        _fail(str(e))
    if fractions is None and is_directory(out):
        _fail(f"--out {out} is a directory; give a .jsonl/.json/.parquet file, or add --split")
    try:
        result = make()
        written = write_outputs(result, out, fractions=fractions, seed=seed, fmt=fmt, experts=experts,
                                dropped=dropped, with_dropped=with_dropped)
    except McprlError as e:
        fail(e)
    except (ValueError, OSError, ImportError) as e:
        _fail(str(e))
    for path, count in written:
        console.print(f"wrote {count:>6} rows to {path}")
    if not result.samples:
        fail(McprlError("no sample was generated; see the dropped reasons above"))


@generate_app.command("families")
def generate_families(
    out: Path = OutOpt,
    n: int = typer.Option(100, "--n", envvar="N_SAMPLES", help="Tasks to generate (held-out: two per family)."),
    seed: int = SeedOpt, split: Optional[str] = SplitOpt, fmt: Optional[str] = FormatOpt, style: str = StyleOpt,
    experts: Optional[Path] = ExpertsOpt, heldout: bool = HeldoutOpt, recovery: float = RecoveryOpt,
    no_demo: Optional[str] = typer.Option(None, "--no-demo", help="Comma-separated families whose tasks get no "
                                                                   "expert demos (learned by GRPO alone)."),
    slip_kinds: Optional[str] = typer.Option(None, "--slip-kinds", help="Comma-separated kinds of slip the recovering "
                                             "demos make (default: all of misspell, missing_argument, date_format, "
                                             "wrong_type, date_out_of_range, empty_result, empty_search)."),
    chain_weight: int = typer.Option(1, "--chain-weight", min=1, help="Draws of each family of several calls for "
                                     "every draw of a one-lookup family (training split)."),
) -> None:
    """Facts from the tools' own outputs and chains of calls, twelve phrasings per family; no network.

    Example: mcprl data generate families --n 600 --seed 1 --recovery 0.25 --out data/processed/train.jsonl
    """
    def make() -> Generated:
        from mcprl.data.execute import Generated
        from mcprl.data.families import SLIP_KINDS, generate

        output = generate(n, seed, style=style, heldout=heldout, recovery=recovery,
                          no_demo_families=tuple(_csv(no_demo) or ()), slip_kinds=tuple(_csv(slip_kinds) or SLIP_KINDS),
                          chain_weight=chain_weight)
        return Generated(list(output.samples), list(output.experts), [])

    _generate(make, out, seed=seed, split=split, fmt=fmt, style=style, experts=experts, with_dropped=False)


@generate_app.command("rules")
def generate_rules(
    out: Path = OutOpt,
    n: int = typer.Option(100, "--n", envvar="N_SAMPLES", help="Tasks to generate."),
    seed: int = SeedOpt, split: Optional[str] = SplitOpt, fmt: Optional[str] = FormatOpt, style: str = StyleOpt,
    experts: Optional[Path] = ExpertsOpt, heldout: bool = HeldoutOpt, recovery: float = RecoveryOpt,
) -> None:
    """The 17 rule templates (the earlier recipe's data); no network.

    Example: mcprl data generate rules --n 500 --seed 1 --out data/processed/ --split train=0.8,val=0.1,test=0.1
    """
    _generate(lambda: _rules(n, seed, style, heldout, recovery), out, seed=seed, split=split, fmt=fmt, style=style,
              experts=experts, with_dropped=False)


@generate_app.command("llm")
def generate_llm_cmd(
    out: Path = OutOpt,
    n: int = typer.Option(100, "--n", envvar="N_SAMPLES", help="Tasks to ask for."),
    seed: int = SeedOpt, split: Optional[str] = SplitOpt, fmt: Optional[str] = FormatOpt, style: str = StyleOpt,
    experts: Optional[Path] = ExpertsOpt, dropped: Optional[Path] = DroppedOpt,
    servers_config: Optional[Path] = ConfigOpt,
    model: str = typer.Option("gpt-4o-mini", envvar="OPENAI_MODEL", help="Model name at the endpoint."),
    backend: str = typer.Option("chat", envvar="OPENAI_BACKEND", help="chat (chat.completions) | responses."),
    max_tools: int = typer.Option(4, envvar="MAX_TOOLS", help="Most tool calls in one task."),
    max_turns: int = MaxTurnsOpt,
    domains: Optional[str] = typer.Option(None, envvar="DOMAINS", help="Servers to use, comma-separated."),
    complexities: str = typer.Option("simple,medium,complex", envvar="COMPLEXITIES", help="Comma-separated."),
    concurrency: int = typer.Option(4, envvar="LLM_CONCURRENCY", help="Requests in flight."),
    cache_dir: Path = typer.Option(Path(".cache/llm"), help="Reply cache (re-runs are free)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Always ask the endpoint."),
) -> None:
    """Tasks proposed by any OpenAI-compatible endpoint, each executed on the servers and kept only if it checks.

    Example: mcprl data generate llm --n 50 --out data/processed/llm.jsonl
    """
    _generate(lambda: _llm(n, seed, style, servers_config, model=model, backend=backend, max_tools=max_tools,
                           max_turns=max_turns, domains=_csv(domains), complexities=_csv(complexities) or [],
                           concurrency=concurrency, cache_dir=None if no_cache else cache_dir),
              out, seed=seed, split=split, fmt=fmt, style=style, experts=experts, dropped=dropped, with_dropped=True)


@generate_app.command("specs")
def generate_specs(
    inp: Path = typer.Option(..., "--in", help="The conversation specs (JSONL)."),
    out: Path = OutOpt,
    seed: int = SeedOpt, split: Optional[str] = SplitOpt, fmt: Optional[str] = FormatOpt, style: str = StyleOpt,
    experts: Optional[Path] = ExpertsOpt, dropped: Optional[Path] = DroppedOpt,
    servers_config: Optional[Path] = ConfigOpt,
    verify: bool = typer.Option(False, "--verify", help="Re-execute the calls, drop the mismatches."),
    max_turns: int = MaxTurnsOpt,
) -> None:
    """Your own multi-turn conversations, converted to tasks (and demos) on your servers.

    Example: mcprl data generate specs --in conversations.jsonl --out data/processed/specs.jsonl --verify
    """
    _generate(lambda: _specs(inp, servers_config, verify=verify, style=style, max_turns=max_turns), out, seed=seed,
              split=split, fmt=fmt, style=style, experts=experts, dropped=dropped, with_dropped=True)


def _rules(n: int, seed: int, style: str, heldout: bool, recovery: float) -> Generated:
    from mcprl.data.execute import Generated

    try:
        from mcprl.data.rules import generate as rules_generate
    except ImportError as e:
        raise ImportError(f"the rule generator is not available ({e})") from None
    output = rules_generate(n, seed, style=style, heldout=heldout, recovery=recovery)
    return Generated(list(output.samples), list(output.experts), [])


@app.command("natural")
def natural_cmd(
    spec: Path = typer.Option(Path("data/heldout/natural.yaml"), "--in", help="The hand-written tasks (YAML)."),
    out: Path = typer.Option(Path("data/heldout/natural.jsonl"), "--out", help="Where the verified tasks go."),
) -> None:
    """Build the natural held-out set: execute every hand-written plan, take each answer from its results.

    Example: mcprl data natural --in data/heldout/natural.yaml --out data/heldout/natural.jsonl
    """
    from mcprl.data.natural import NaturalTaskError, build, write
    from mcprl.tools.errors import ToolError

    try:
        samples = build(spec)
    except (NaturalTaskError, ToolError, ValueError, OSError) as e:
        _fail(str(e))
    write(samples, out)
    console.print(f"wrote {len(samples):>6} rows to {out} "
                  f"({len({s.extra_info['family'] for s in samples})} families)")


def _llm(n: int, seed: int, style: str, servers_config: Optional[Path], *, domains: Optional[list[str]],
         **knobs: Any) -> Generated:
    from mcprl.data.llm import LLMConfig, generate_llm
    from mcprl.tools.config import ServersConfig, load_servers_config
    from mcprl.tools.manager import ToolManager

    cfg = LLMConfig(n_samples=n, seed=seed, style=style, domains=domains, **knobs)  # type: ignore[arg-type]
    config = load_servers_config(servers_config)
    if domains:
        unknown = sorted(set(domains) - {s.name for s in config.servers})
        if unknown:
            raise ValueError(f"DOMAINS names unknown servers {unknown}; configured: "
                             f"{', '.join(s.name for s in config.servers)}")
        config = ServersConfig(servers=[s for s in config.servers if s.name in domains])

    async def run() -> Any:
        async with ToolManager(config) as tm:
            return await generate_llm(tm, cfg, console=console)

    return asyncio.run(run())


def _specs(inp: Path, servers_config: Optional[Path], **options: Any) -> Generated:
    from mcprl.data.specs import convert_specs
    from mcprl.tools.manager import ToolManager

    if not inp.is_file():
        raise ValueError(f"specs file not found: {inp}")

    async def run() -> Any:
        async with ToolManager(servers_config) as tm:
            return await convert_specs(tm, inp, console=console, **options)

    return asyncio.run(run())


def sidecar(path: Path, kind: str) -> Path:
    """`data/tasks.jsonl` -> `data/tasks.<kind>.jsonl`; a directory gets `<dir>/<kind>.jsonl`."""
    from mcprl.data.splits import is_directory

    return path / f"{kind}.jsonl" if is_directory(path) else path.with_name(f"{path.stem}.{kind}.jsonl")


def write_outputs(result: Generated, out: Path, *, fractions: Optional[dict[str, float]], seed: int, fmt: Optional[str],
                  experts: Optional[Path], dropped: Optional[Path], with_dropped: bool) -> list[tuple[Path, int]]:
    """Write samples (one file, or one per split), their experts next to them, and the dropped tasks."""
    from mcprl.data.sample import write_samples
    from mcprl.data.splits import split_path, split_samples

    written: list[tuple[Path, int]] = []
    by_task = {e["task_id"]: e for e in result.experts}
    if fractions is None:
        parts = {None: result.samples}
    else:
        parts = split_samples(result.samples, fractions, seed)  # type: ignore[assignment]
    for name, samples in parts.items():
        path = out if name is None else split_path(out, name, fmt or "jsonl")
        if fmt is not None and path.suffix.lstrip(".") != fmt:
            raise ValueError(f"--format {fmt} does not match --out {path}")
        write_samples(samples, path)
        written.append((path, len(samples)))
        if by_task:
            expert_path = sidecar(path, "experts") if experts is None else (
                experts if name is None else split_path(experts, name))
            rows = [by_task[s.task_id] for s in samples if s.task_id in by_task]
            written.append((write_jsonl(rows, expert_path), len(rows)))
    if with_dropped:
        path = dropped or sidecar(out, "dropped")
        written.append((write_jsonl([d.to_dict() for d in result.dropped], path), len(result.dropped)))
    return written


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    return path


@app.command()
def validate(
    inp: Path = typer.Option(..., "--in", help="Dataset (.jsonl/.json/.parquet)."),
    max_tokens: int = typer.Option(2048, "--max-tokens", help="Prompt token budget under the chat template."),
    model: str = typer.Option("smollm2-135m", "--model", help="Model whose tokenizer counts the tokens."),
    servers_config: Optional[Path] = ConfigOpt,
    no_servers: bool = typer.Option(False, "--no-servers", help="Skip checking tools against live servers."),
) -> None:
    """Check every row (schema, prompt budget, tools the servers expose); exit 1 on any problem.

    Example: mcprl data validate --in data/processed/train.jsonl --max-tokens 2048 --model smollm2-135m
    """
    from mcprl.data.validate import ValidationSetupError, print_report
    from mcprl.data.validate import validate as run_validation

    try:
        report = run_validation(inp, max_tokens=max_tokens, model=model, servers_config=servers_config,
                                check_servers=not no_servers)
    except (ValidationSetupError, ConfigError) as e:
        _fail(str(e))
    print_report(report, Console())
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def convert(
    inp: Path = typer.Option(..., "--in", help="Source .jsonl/.json/.parquet."),
    out: Path = typer.Option(..., "--out", help="Target .jsonl/.json/.parquet (format from the extension)."),
) -> None:
    """Convert a dataset between JSON, JSONL and Parquet; rows round-trip exactly.

    Example: mcprl data convert --in data/processed/train.jsonl --out data/processed/train.parquet
    """
    from mcprl.data.sample import detect_format, iter_rows, write_samples

    try:
        detect_format(out)
        rows = list(iter_rows(inp))
    except (ValueError, OSError) as e:
        _fail(str(e))
    bad = [f"row {i}: {row}" for i, row in rows if isinstance(row, Exception)]
    if bad:
        fail(McprlError(f"{inp} has unreadable rows, nothing written: {'; '.join(bad[:5])}"))
    write_samples([row for _, row in rows], out)  # type: ignore[misc]
    console.print(f"wrote {len(rows)} rows to {out}")


@app.command()
def stats(inp: Path = typer.Option(..., "--in", help="Dataset (.jsonl/.json/.parquet).")) -> None:
    """Counts by complexity and source, prompt sizes and tool use (no tokenizer, no servers).

    Example: mcprl data stats --in data/processed/train.jsonl
    """
    from mcprl.data.validate import ValidationSetupError, print_report, validate_file

    try:
        report = validate_file(inp, max_tokens=None)
    except ValidationSetupError as e:
        _fail(str(e))
    print_report(report, Console(), verdict=False)
