"""Rule-based task generator: templates over all five servers at three complexities.

Every task is a plan of tool calls whose later arguments are computed from earlier results. The plan
is executed against the offline servers (each task its own episode), and the ground truth (concrete tool sequence,
final answer) comes from that execution, so every task is provably solvable. The same run writes
the expert trajectory (the full correct conversation in the env's format) for a supervised warm start.

With `recovery` > 0 a share of the expert trajectories first makes a slip a small model makes (a
misspelled ticker), shows the server's real error, then makes the correct call: a demonstration of
recovering from a failed call, which correct-only demos never give. The slip carries `"weight": 0`
(OpenAI's fine-tuning convention), so SFT learns the recovery without learning the slip. The tasks
are the same whatever `recovery` is; only their demos change.

Deterministic for a seed: fresh servers, one task at a time, seeded choices only.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from rich.progress import Progress

from mcprl.data.execute import on_offline_servers
from mcprl.data.sample import SkyRLSample
from mcprl.episode import new_episode
from mcprl.errors import McprlError
from mcprl.protocol.parsing import format_answer, format_tool_call
from mcprl.protocol.prompt import system_prompt, tool_response
from mcprl.servers.offline.market import MarketData
from mcprl.servers.slack import ADMIN_TOOLS
from mcprl.tools.manager import ToolInfo, ToolManager

COMPLEXITY_WEIGHTS = {"simple": 0.4, "medium": 0.35, "complex": 0.25}
POST_CHANNELS = ("general", "trading-desk", "random")  # writable; reads use read-only #alerts only
HELDOUT_EVERY = 5  # every 5th ticker (sorted) is held out of training
TICKER_KEYS = ("ticker", "symbol")  # the parameters a slip misspells
DISTINCT_TRIES = 20  # draws a task gets to find a plan its split does not have yet


class GenerationError(McprlError, RuntimeError):
    """A plan failed on the offline servers: a template bug, never a task to keep."""


Results = list[Any]  # the `data` of each executed step, in order


@dataclass(frozen=True)
class Step:
    server: str
    tool: str
    params: Callable[[Results], dict[str, Any]]


@dataclass(frozen=True)
class Draft:
    template: str
    complexity: str
    question: str
    steps: tuple[Step, ...]
    answer: Callable[[Results], Any] | None  # None: an action task, done when its calls are made
    entities: tuple[str, ...]
    must_call_with: Callable[[Results], list[dict[str, Any]]] | None = None  # side effects that must be right


@dataclass(frozen=True)
class Slip:
    """A failed call made (and then corrected) before step `before` of a plan, with the server's real error.

    weight 0: a slip the demo recovers from without teaching it (a misspelled ticker); weight 1: the call
    the policy should make first (the company as the user named it, which the server's hint turns into a symbol).
    """

    before: int
    params: dict[str, Any]
    result: dict[str, Any]
    weight: int = 0


@dataclass
class World:
    """Entities a split may use: held-out tickers never appear in training tasks."""

    tickers: list[str]
    names: dict[str, str]
    alert_tickers: list[str]


@dataclass
class RuleOutput:
    samples: list[SkyRLSample] = field(default_factory=list)
    experts: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- helpers

def fixed(**params: Any) -> Callable[[Results], dict[str, Any]]:
    return lambda _results: dict(params)


def printed_number(result: dict[str, Any]) -> float:
    """The number a python step printed (its last stdout line)."""
    lines = str(result.get("stdout", "")).strip().splitlines()
    if not lines:
        raise GenerationError(f"python step printed nothing: {result}")
    return float(lines[-1])


def alert_of(results: Results, index: int) -> dict[str, Any]:
    matches = results[index].get("matches") or []
    if not matches:
        raise GenerationError("no alert found")
    return matches[0]


def alert_date(message: dict[str, Any]) -> str:
    text = message["text"]
    return text.split(" on ", 1)[1].split(" ", 1)[0]


def pct_code(new: float, old: float) -> str:
    return f"print(round(({new} - {old}) / {old} * 100, 2))"


def pick(rng: random.Random, options: tuple[str, ...], **values: Any) -> str:
    return rng.choice(options).format(**values)


def one_call(server: str, tool: str, arg: str) -> Callable[[str], tuple[Step, ...]]:
    return lambda t: (Step(server, tool, fixed(**{arg: t})),)


def move_steps(t: str) -> tuple[Step, ...]:
    """Last trade, previous close, and the percent move between them computed in python."""
    return (Step("polygon", "get_last_quote", fixed(ticker=t)), Step("polygon", "get_previous_close", fixed(ticker=t)),
            Step("python", "run_python", lambda r: {"code": pct_code(r[0]["price"], r[1]["close"])}))


def growth_steps(t: str) -> tuple[Step, ...]:
    """The last two annual income statements and the revenue growth between them computed in python."""
    return (Step("fmp", "get_income_statement", fixed(symbol=t, period="annual", limit=2)),
            Step("python", "run_python", lambda r: {"code": pct_code(two_statements(r[0])[0]["revenue"],
                                                                     two_statements(r[0])[1]["revenue"])}))


def alert_bar_steps(t: str) -> tuple[Step, ...]:
    """The latest #alerts message about t, then the daily bar of the day it names."""
    return (Step("slack", "search_messages", fixed(query=f"{t} in:#alerts", limit=1)),
            Step("polygon", "get_daily_bars", lambda r: {"ticker": t, "start_date": alert_date(alert_of(r, 0)),
                                                         "end_date": alert_date(alert_of(r, 0))}))


# ------------------------------------------------------------------------------------------- templates

def ticker_question(family: str, complexity: str, phrasings: tuple[str, ...], steps: Callable[[str], tuple[Step, ...]],
                    answer: Callable[[Results], Any], pool: str = "tickers") -> Callable[[random.Random, World], Draft]:
    """A question about one ticker of the world's `pool` ({t}; {n}: its company name) and the plan that answers it."""
    def template(rng: random.Random, w: World) -> Draft:
        t = rng.choice(getattr(w, pool))
        return Draft(family, complexity, pick(rng, phrasings, t=t, n=w.names[t]), steps(t), answer, (t,))

    return template


def ticker_post(family: str, complexity: str, phrasings: tuple[str, ...], steps: Callable[[str], tuple[Step, ...]],
                value: Callable[[Results], Any], message: str) -> Callable[[random.Random, World], Draft]:
    """A value about one ticker, posted to a channel ({c}) as `message` ({t}, {v}) and answered."""
    def template(rng: random.Random, w: World) -> Draft:
        t, ch = rng.choice(w.tickers), rng.choice(POST_CHANNELS)
        post = lambda r: {"channel": ch, "text": message.format(t=t, v=value(r))}  # noqa: E731
        return Draft(family, complexity, pick(rng, phrasings, t=t, c=ch), (*steps(t), Step("slack", "post_message", post)),
                     value, (t,), lambda r: [{"tool": "post_message", "params": post(r)}])

    return template


last_price = ticker_question("last_price", "simple", (
    "What is the latest trade price of {t}?", "Get me the last traded price for {n} ({t}).",
    "How much is one {t} share trading for right now?"),
    one_call("polygon", "get_last_quote", "ticker"), lambda r: r[0]["price"])
previous_close = ticker_question("previous_close", "simple", (
    "What was {t}'s closing price in the previous session?",
    "At what price did {n} ({t}) close in the previous trading session?"),
    one_call("polygon", "get_previous_close", "ticker"), lambda r: r[0]["close"])
employees = ticker_question("employees", "simple", (
    "How many employees does {n} ({t}) have?", "What is the total employee count of {t}?"),
    one_call("polygon", "get_ticker_details", "ticker"), lambda r: r[0]["total_employees"])
sector = ticker_question("sector", "simple", ("Which sector is {n} ({t}) in?", "What sector does {t} belong to?"),
                         one_call("fmp", "get_company_profile", "symbol"), lambda r: r[0]["sector"])
pe_ratio = ticker_question("pe_ratio", "simple", (
    "What is the P/E ratio of {t}?", "What price-to-earnings ratio does {n} ({t}) trade at?"),
    one_call("fmp", "get_quote", "symbol"), lambda r: required_field(r[0], "pe"))


def calculate(rng: random.Random, w: World) -> Draft:
    a, b, c = rng.randint(12, 999), rng.randint(2, 99), rng.randint(1, 5000)
    op = rng.choice(("+", "-"))
    expr = f"{a} * {b} {op} {c}"
    q = pick(rng, ("Use Python to compute {e}.", "Calculate {e} with Python."), e=expr)
    return Draft("calculate", "simple", q, (Step("python", "run_python", fixed(code=f"print({expr})")),),
                 lambda r: printed_number(r[0]), (expr,))


def top_result_url(rng: random.Random, w: World) -> Draft:
    t = rng.choice(w.tickers)
    query = f"{w.names[t]} {rng.choice(('Q3 2025 earnings', 'full-year 2024 results', 'company profile'))}"
    q = pick(rng, ("Search the web for '{s}' and give the url of the top result.",
                   "What is the url of the first web search result for '{s}'?"), s=query)
    return Draft("top_result_url", "simple", q, (Step("tavily", "search", fixed(query=query, max_results=3)),),
                 lambda r: r[0]["results"][0]["url"], (t,))


def post_message(rng: random.Random, w: World) -> Draft:
    t, ch = rng.choice(w.tickers), rng.choice(POST_CHANNELS)
    text = rng.choice((f"Reminder: {t} reports earnings soon.", f"Desk note: watching {t} today.",
                       f"Please review the {t} position."))
    q = pick(rng, ("Post the message '{m}' to the #{c} Slack channel.", "Send '{m}' to #{c} on Slack."), m=text, c=ch)
    return Draft("post_message", "simple", q, (Step("slack", "post_message", fixed(channel=ch, text=text)),),
                 None, (t,), lambda r: [{"tool": "post_message", "params": {"channel": ch, "text": text}}])


move_since_close = ticker_question("move_since_close", "medium", (
    "Get the last trade price and the previous close of {t}, then use Python to compute the percent "
    "change between them, rounded to 2 decimals.",
    "By how many percent did {n} ({t}) move from its previous close to its last trade? Look up both "
    "prices, then compute it with Python, rounded to 2 decimals."), move_steps, lambda r: printed_number(r[2]))
revenue_growth = ticker_question("revenue_growth", "medium", (
    "Get {t}'s last two annual income statements and use Python to compute the revenue growth in "
    "percent, rounded to 2 decimals.",
    "How much did {n} ({t}) grow its annual revenue in the latest fiscal year, in percent? Use its "
    "income statements and compute it with Python, rounded to 2 decimals."), growth_steps, lambda r: printed_number(r[1]))


def article_margin(rng: random.Random, w: World) -> Draft:
    t = rng.choice(w.tickers)
    query = f"{w.names[t]} Q3 2025 earnings"
    q = pick(rng, ("Search the web for '{s}', open the top result, and tell me the gross margin it reports.",
                   "Find the article for '{s}' and read it: what gross margin percentage does it report?"), s=query)
    steps = (Step("tavily", "search", fixed(query=query, max_results=3)),
             Step("tavily", "extract", lambda r: {"urls": [r[0]["results"][0]["url"]]}))
    return Draft("article_margin", "medium", q, steps, lambda r: article_gross_margin(r[1]), (t,))


quote_and_post = ticker_post("quote_and_post", "medium", (
    "Get the last trade price of {t} and post '{t} last trade: <price>' to #{c}. Then tell me the price.",
    "Look up {t}'s latest price, share it in #{c} as '{t} last trade: <price>', and answer with the price."),
    one_call("polygon", "get_last_quote", "ticker"), lambda r: r[0]["price"], "{t} last trade: {v}")


alert_volume = ticker_question("alert_volume", "medium", (
    "Search Slack for the latest price alert about {t} in #alerts, then get that day's daily bar. "
    "What was the trading volume that day?",
    "Find the most recent #alerts message about {t} on Slack and look up the daily bar for its date: "
    "how many shares traded?"), alert_bar_steps, lambda r: r[1]["bars"][0]["volume"], pool="alert_tickers")


move_and_post = ticker_post("move_and_post", "complex", (
    "Get the last trade price and previous close of {t}, compute the percent change with Python "
    "(2 decimals), post '{t} moved <change>% since the previous close' to #{c}, and answer with the change.",),
    move_steps, lambda r: printed_number(r[2]), "{t} moved {v}% since the previous close")
growth_and_post = ticker_post("growth_and_post", "complex", (
    "Compute {t}'s annual revenue growth in percent from its last two income statements with Python "
    "(2 decimals), post '{t} revenue growth: <growth>%' to #{c}, and answer with the growth.",),
    growth_steps, lambda r: printed_number(r[1]), "{t} revenue growth: {v}%")


def compare_pe(rng: random.Random, w: World) -> Draft:
    a, b = rng.sample(w.tickers, 2)
    q = pick(rng, ("Get the quotes of {a} and {b}, then use Python to compute {a}'s P/E minus {b}'s P/E, rounded "
                   "to 2 decimals.",), a=a, b=b)
    steps = (Step("fmp", "get_quote", fixed(symbol=a)), Step("fmp", "get_quote", fixed(symbol=b)),
             Step("python", "run_python",
                  lambda r: {"code": f"print(round({required_field(r[0], 'pe')} - {required_field(r[1], 'pe')}, 2))"}))
    return Draft("compare_pe", "complex", q, steps, lambda r: printed_number(r[2]), (a, b))


alert_range = ticker_question("alert_range", "complex", (
    "Find the latest #alerts message about {t} on Slack, get the daily bar for that date, and use "
    "Python to compute the day's high-low range as a percent of the low, rounded to 2 decimals.",),
    lambda t: (*alert_bar_steps(t), Step("python", "run_python", lambda r: {
        "code": pct_code(r[1]["bars"][0]["high"], r[1]["bars"][0]["low"])})), lambda r: printed_number(r[2]),
    pool="alert_tickers")


TEMPLATES: dict[str, tuple[Callable[[random.Random, World], Draft], ...]] = {
    "simple": (last_price, previous_close, employees, sector, pe_ratio, calculate, top_result_url, post_message),
    "medium": (move_since_close, revenue_growth, article_margin, quote_and_post, alert_volume),
    "complex": (move_and_post, growth_and_post, compare_pe, alert_range),
}


def required_field(data: dict[str, Any], key: str) -> Any:
    if data.get(key) is None:
        raise GenerationError(f"'{key}' missing in {data}")
    return data[key]


def two_statements(data: dict[str, Any]) -> list[dict[str, Any]]:
    statements = data.get("statements") or []
    if len(statements) < 2:
        raise GenerationError(f"need two statements, got {len(statements)}")
    return statements


def article_gross_margin(data: dict[str, Any]) -> float:
    text = data["results"][0]["raw_content"]
    marker = "Gross margin was "
    if marker not in text:
        raise GenerationError("article has no gross margin")
    return float(text.split(marker, 1)[1].split("%", 1)[0])


# ------------------------------------------------------------------------------------------ generation

def build_world(heldout: bool, seed: int = 0) -> World:
    market = MarketData(seed)
    symbols = sorted(market.symbols)
    held = {s for i, s in enumerate(symbols) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1}
    pool = sorted(held) if heldout else [s for s in symbols if s not in held]
    from mcprl.servers.offline.slack import Workspace

    alerts = {m.text.split(" ")[2] for m in Workspace(market).history("alerts", None)}
    alert_pool = [s for s in pool if s in alerts] or pool
    return World(pool, {s: market.company(s).name for s in pool}, alert_pool)


def draw(rng: random.Random, world: World) -> Draft:
    complexity = rng.choices(list(COMPLEXITY_WEIGHTS), weights=list(COMPLEXITY_WEIGHTS.values()))[0]
    return rng.choice(TEMPLATES[complexity])(rng, world)


def plan_key(draft: Draft) -> str:
    return f"{draft.template}|{'|'.join(draft.entities)}"


def draw_distinct(rng: random.Random, world: World, seen: set[str]) -> Draft:
    """A draft whose template and entities no earlier task of the split has, while the world offers one:
    twelve wordings of one plan in a held-out set are one result counted twelve times."""
    for _ in range(DISTINCT_TRIES):
        draft = draw(rng, world)
        if plan_key(draft) not in seen:
            break
    seen.add(plan_key(draft))
    return draft


async def execute_plan(tm: ToolManager, draft: Draft,
                       episode: str) -> tuple[list[dict[str, Any]], Results, list[dict[str, Any]]]:
    calls, data, raw = [], [], []
    for step in draft.steps:
        params = step.params(data)
        result = await tm.execute_tool(f"{step.server}.{step.tool}", params, episode=episode)
        if not result["ok"]:
            raise GenerationError(f"{draft.template}: {step.server}.{step.tool}({params}) failed: {result['error']}")
        calls.append({"server": step.server, "tool": step.tool, "params": params})
        data.append(result["data"])
        raw.append(result)
    return calls, data, raw


def misspell(ticker: str, rng: random.Random, known: list[str]) -> str:
    """A slip made copying a ticker: a letter dropped, doubled or swapped with its neighbour (LIN: LN,
    LLIN, ILN), or, half the time, a look-alike known ticker half-remembered (LIN: LL, after LLY). The
    server's hint then names the look-alike, so the demo's correct call copies the task, not the hint."""
    lookalikes = [k for k in known if k != ticker and k[0] == ticker[0]]
    base = rng.choice(lookalikes) if lookalikes and rng.random() < 0.5 else ticker
    i = rng.randrange(len(base))
    dropped = base[:i] + base[i + 1:]
    doubled = base[:i] + base[i] + base[i:]
    swapped = base[:i] + base[i + 1:i + 2] + base[i] + base[i + 2:]
    slips = {dropped, doubled, swapped}
    return rng.choice(sorted(s for s in slips if s and s not in (ticker, base)))


async def _slip(tm: ToolManager, calls: list[dict[str, Any]], known: list[str], rng: random.Random,
                episode: str) -> Slip | None:
    """A misspelled ticker in one of the calls, run on the server for its real error; None when no call
    takes a ticker or every misspelling tried is another real ticker."""
    spots = [(i, key) for i, call in enumerate(calls) for key in TICKER_KEYS
             if isinstance(call["params"].get(key), str)]
    if not spots:
        return None
    i, key = rng.choice(spots)
    for _ in range(5):
        params = {**calls[i]["params"], key: misspell(calls[i]["params"][key], rng, known)}
        result = await tm.execute_tool(f"{calls[i]['server']}.{calls[i]['tool']}", params, episode=episode)
        if not result["ok"]:
            return Slip(i, params, result)
    return None


def build_task(index: int, draft: Draft, calls: list[dict[str, Any]], data: Results, raw: list[dict[str, Any]],
               tools: list[ToolInfo], *, split: str, seed: int, style: str, slips: tuple[Slip, ...] = (),
               source: str = "rules", info: dict[str, Any] | None = None) -> tuple[SkyRLSample, dict[str, Any]]:
    """The task row and its expert demo; `slips` are failed calls the demo makes and recovers from. A
    weight-1 slip is part of the expected path and adds a turn; a masked one changes only the demo."""
    servers = sorted({c["server"] for c in calls})
    allowed = [t for t in tools if t.server in servers and t.tool not in ADMIN_TOOLS]
    answer = draft.answer(data) if draft.answer else None
    must_call_with = draft.must_call_with(data) if draft.must_call_with else []
    task_id = f"{source}-{split}-{seed}-{index:05d}"
    success: dict[str, Any] = {"must_call_tool": calls[0]["tool"],
                               "must_call_tools": list(dict.fromkeys(c["tool"] for c in calls))}
    if must_call_with:
        success["must_call_with"] = must_call_with
    gt = {"task_id": task_id, "complexity": draft.complexity, "max_turns": len(calls) + sum(s.weight for s in slips) + 2, "success": success,
          "tool_sequence": [{"step": i + 1, **c} for i, c in enumerate(calls)],
          "limits": {"max_servers": len(servers), "max_tools": len(calls) + 1}, "answer": answer,
          "allowed_tools": [t.name for t in allowed]}
    prompt = [{"role": "system", "content": system_prompt(allowed, style=style)},
              {"role": "user", "content": draft.question}]
    sample = SkyRLSample(data_source=f"{source}/{'+'.join(servers)}", prompt=prompt,
                         reward_spec={"method": "rule", "ground_truth": gt},
                         extra_info={"template": draft.template, "entities": list(draft.entities), "split": split,
                                     "dedup_key": plan_key(draft), **(info or {})})
    messages = list(prompt)
    for i, (call, result) in enumerate(zip(calls, raw)):
        for slip in (s for s in slips if s.before == i):
            messages.append({"role": "assistant", "content": format_tool_call(call["tool"], slip.params, style),
                             **({} if slip.weight else {"weight": 0})})
            messages.append({"role": "user", "content": tool_response(slip.result)})
        messages.append({"role": "assistant", "content": format_tool_call(call["tool"], call["params"], style)})
        messages.append({"role": "user", "content": tool_response(result)})
    if answer is not None:
        messages.append({"role": "assistant", "content": format_answer(answer)})
    else:
        messages.pop()  # an action task ends with its last call (the env stops on success)
    return sample, {"task_id": task_id, "messages": messages}


def check_recovery(recovery: float) -> None:
    """A bad share fails before any server starts."""
    if not 0.0 <= recovery <= 1.0:
        raise ValueError(f"recovery must be in [0, 1] (a share of the demos), got {recovery}")


async def generate_async(tm: ToolManager, n: int, seed: int, *, style: str = "hermes", heldout: bool = False,
                         progress: bool = True, recovery: float = 0.0) -> RuleOutput:
    check_recovery(recovery)
    split = "heldout" if heldout else "train"
    rng = random.Random(f"mcprl-rules:{seed}:{split}")
    slips = random.Random(f"mcprl-rules-recovery:{seed}:{split}")  # its own stream: the tasks do not depend on it
    world = build_world(heldout)
    out, seen, tools = RuleOutput(), set[str](), tm.tools()
    with Progress(disable=not progress, transient=True) as bar:
        job = bar.add_task(f"generating {n} {split} tasks", total=n)
        while len(out.samples) < n:
            draft, episode = draw_distinct(rng, world, seen), new_episode()  # each task runs as its own episode, as in training
            calls, data, raw = await execute_plan(tm, draft, episode)
            slip = await _slip(tm, calls, world.tickers, slips, episode) if slips.random() < recovery else None
            sample, expert = build_task(len(out.samples), draft, calls, data, raw, tools, split=split, seed=seed,
                                        style=style, slips=(slip,) if slip else ())
            out.samples.append(sample)
            out.experts.append(expert)
            bar.advance(job)
    return out


def generate(n: int, seed: int, *, style: str = "hermes", heldout: bool = False, progress: bool = True,
             recovery: float = 0.0) -> RuleOutput:
    """`n` verified tasks (and their expert trajectories) from the rule templates; `recovery` of the
    demos first make a slip and recover from it."""
    check_recovery(recovery)
    return on_offline_servers(lambda tm: generate_async(tm, n, seed, style=style, heldout=heldout, progress=progress,
                                                        recovery=recovery))


def generate_splits(n_train: int, n_heldout: int, seed: int, *, recovery: float = 0.0) -> tuple[RuleOutput, RuleOutput]:
    """Training and held-out tasks at once, on the same servers."""
    check_recovery(recovery)

    async def both(tm: ToolManager) -> list[RuleOutput]:
        return await asyncio.gather(generate_async(tm, n_train, seed, progress=False, recovery=recovery),
                                    generate_async(tm, n_heldout, seed, heldout=True, progress=False))

    train, heldout = on_offline_servers(both)
    return train, heldout
