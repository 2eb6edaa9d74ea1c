"""Task families from the tools' outputs, each said many ways: the generator whose agent answers people.

The rule templates ask 17 sentences about tickers, so an agent trained on them learned the sentences.
Here a family is one fact a tool returns (a lookup: a field of a tool's result, such as `net_income`
of `fmp.get_income_statement`) or a chain of calls whose outputs feed the next call (arithmetic with
`run_python`, comparisons answered with a ticker, posts of computed values). Each family has a bank of
twelve hand-written phrasings (`phrasings/*.yaml`); its last three are held out, so the held-out split
differs from training in its wording as well as in its companies. Companies are named as people name
them: ticker, full name or short name ("Nvidia"), with occasional lower case, typos and small talk.

Recovery is part of the demos: a company named in words is first looked up as written, and the
server's "unknown ticker 'Costco': did you mean 'COST'?" turns it into the symbol the next call uses
(the one policy that works on companies never seen in training). A share of demos also slip (a
misspelled ticker, a missing argument, a date in the user's format; on request also an integer written as
a string, a date past the data, a day the market was shut, a search that finds nothing: `SLIP_KINDS`) and
fix the call after the server's error or empty result; a slip is masked out of the SFT loss, its fix is not.

`no_demo_families` keep their training tasks but get no demos, and so do the middle three phrasings of
every family: what GRPO must learn from reward alone. Every plan is executed on fresh offline servers
and its ground truth comes from that execution, as in the rule generator. Deterministic for a seed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import string
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Callable, Iterator

import yaml
from rich.progress import Progress

from mcprl.data.execute import on_offline_servers
from mcprl.data.rules import (DISTINCT_TRIES, POST_CHANNELS, TICKER_KEYS, Draft, GenerationError, Results, RuleOutput, Slip, Step, World,
                              alert_date, alert_of, build_task, build_world, check_recovery, execute_plan, fixed, misspell, pct_code,
                              printed_number, required_field, two_statements, article_gross_margin)
from mcprl.episode import new_episode
from mcprl.servers.offline.companies import SHORT_NAMES
from mcprl.servers.offline.market import MarketData
from mcprl.tools.manager import ToolManager

HELDOUT_PHRASINGS = 3  # the last three of each bank: never in training
RL_ONLY_PHRASINGS = 3  # the three before them: training tasks without demos
STYLE_WEIGHTS = {"ticker": 0.3, "short": 0.45, "name": 0.25}  # how the user names a company
DATE_FORMATS = ("%Y-%m-%d", "%Y-%m-%d", "%B %-d, %Y", "%-d %B %Y", "%-m/%-d/%Y", "%b %-d %Y")
CONTEXTS = {  # small talk before the question: (training, held-out)
    "train": ("Quick question: ", "Hi! ", "For my notes, ", "I'm updating a spreadsheet. ", "Hey there, ",
              "Sorry to bother you, but ", "Need this for a client call: "),
    "heldout": ("Morning! ", "Before my 10am meeting, ", "My manager is asking: ", "Hello, "),
}
NOISE = {"lower": 0.12, "typo": 0.1, "context": 0.2}
TICKER_ONLY = frozenset({"alert_date", "alert_volume", "alert_range"})  # #alerts messages name tickers only
LOOKUP_DATES = ("2025-01-02", "2025-12-30")  # trading days the *_on_date families ask about

# family -> (server, tool, ticker parameter, path into the result's data, fixed parameters)
LOOKUPS: dict[str, tuple[str, str, str, str, dict[str, Any]]] = {
    "last_price": ("polygon", "get_last_quote", "ticker", "price", {}),
    "previous_close": ("polygon", "get_previous_close", "ticker", "close", {}),
    "previous_volume": ("polygon", "get_previous_close", "ticker", "volume", {}),
    "employees": ("polygon", "get_ticker_details", "ticker", "total_employees", {}),
    "industry": ("polygon", "get_ticker_details", "ticker", "industry", {}),
    "market_cap": ("polygon", "get_ticker_details", "ticker", "market_cap", {}),
    "list_date": ("polygon", "get_ticker_details", "ticker", "list_date", {}),
    "shares_outstanding": ("polygon", "get_ticker_details", "ticker", "shares_outstanding", {}),
    "sector": ("fmp", "get_company_profile", "symbol", "sector", {}),
    "website": ("fmp", "get_company_profile", "symbol", "website", {}),
    "exchange": ("fmp", "get_company_profile", "symbol", "exchange", {}),
    "pe_ratio": ("fmp", "get_quote", "symbol", "pe", {}),
    "eps": ("fmp", "get_quote", "symbol", "eps", {}),
    "year_high": ("fmp", "get_quote", "symbol", "year_high", {}),
    "year_low": ("fmp", "get_quote", "symbol", "year_low", {}),
    "day_change_percent": ("fmp", "get_quote", "symbol", "change_percent", {}),
    **{f: ("fmp", "get_income_statement", "symbol", f"statements.0.{f}", {"period": "annual", "limit": 1})
       for f in ("revenue", "net_income", "gross_profit", "operating_income")},
    **{f: ("fmp", "get_ratios", "symbol", f"ratios.0.{f}", {"limit": 1})
       for f in ("gross_margin", "operating_margin", "net_margin", "return_on_equity", "debt_to_equity", "current_ratio")},
    **{f: ("fmp", "get_key_metrics", "symbol", f"metrics.0.{f}", {"limit": 1})
       for f in ("dividend_yield", "price_to_book", "price_to_sales")},
}
BAR_FIELDS = {"close_on_date": "close", "open_on_date": "open", "high_on_date": "high", "volume_on_date": "volume"}


@dataclass(frozen=True)
class Slots:
    """What a phrasing is filled with, and what the plan calls with (tickers, ISO dates)."""

    values: dict[str, str]
    tickers: tuple[str, ...] = ()
    refs: tuple[str, ...] = ()  # each ticker as the user named it
    date: str | None = None  # ISO date the plan uses; values["date"] is as the user wrote it


@dataclass(frozen=True)
class Family:
    name: str
    complexity: str
    plan: Callable[[Slots], tuple[Step, ...]]
    answer: Callable[[Results], Any] | None
    posts: Callable[[Slots, Results], list[dict[str, Any]]] | None = None


# ---------------------------------------------------------------------------------------------- families

def path_value(data: Any, path: str) -> Any:
    """`statements.0.net_income` of a tool's result; a missing or null value is a plan that cannot be kept."""
    for key in path.split("."):
        try:
            data = data[int(key)] if isinstance(data, list) else data[key]
        except (KeyError, IndexError, ValueError, TypeError):
            raise GenerationError(f"no '{path}' in the result") from None
    if data is None:
        raise GenerationError(f"'{path}' is null")
    return data


def _lookup(name: str, server: str, tool: str, key: str, path: str, params: dict[str, Any]) -> Family:
    return Family(name, "simple", lambda s: (Step(server, tool, fixed(**{key: s.tickers[0]}, **params)),),
                  lambda r: path_value(r[0], path))


def _bar(name: str, field: str) -> Family:
    return Family(name, "simple", lambda s: (Step("polygon", "get_daily_bars", fixed(
        ticker=s.tickers[0], start_date=s.date, end_date=s.date)),), lambda r: path_value(r[0], f"bars.0.{field}"))


def _quote(t: str) -> Step:
    return Step("polygon", "get_last_quote", fixed(ticker=t))


def _previous(t: str) -> Step:
    return Step("polygon", "get_previous_close", fixed(ticker=t))


def _python(code: Callable[[Results], str]) -> Step:
    return Step("python", "run_python", lambda r: {"code": code(r)})


def _income(t: str, limit: int = 2) -> Step:
    return Step("fmp", "get_income_statement", fixed(symbol=t, period="annual", limit=limit))


def _growth(r: Results) -> str:
    return pct_code(two_statements(r[0])[0]["revenue"], two_statements(r[0])[1]["revenue"])


def _alert_search(t: str) -> Step:
    return Step("slack", "search_messages", fixed(query=f"{t} in:#alerts", limit=1))


def _alert_bar(t: str) -> Step:
    return Step("polygon", "get_daily_bars", lambda r: {"ticker": t, "start_date": alert_date(alert_of(r, 0)),
                                                        "end_date": alert_date(alert_of(r, 0))})


def _which(field: str) -> Callable[[Slots], tuple[Step, ...]]:
    """Two quotes, then Python says which ticker's `field` is larger: the comparison a small model gets wrong by eye."""
    def plan(s: Slots) -> tuple[Step, ...]:
        a, b = s.tickers
        return (Step("fmp", "get_quote", fixed(symbol=a)), Step("fmp", "get_quote", fixed(symbol=b)),
                _python(lambda r: f"print('{a}' if {required_field(r[0], field)} > {required_field(r[1], field)} else '{b}')"))
    return plan


def _post(text: Callable[[Slots, Results], str]) -> Callable[[Slots, Results], list[dict[str, Any]]]:
    return lambda s, r: [{"tool": "post_message", "params": {"channel": s.values["channel"], "text": text(s, r)}}]


def _post_step(text: Callable[[Slots, Results], str], s: Slots) -> Step:
    return Step("slack", "post_message", lambda r: {"channel": s.values["channel"], "text": text(s, r)})


FORMATS = {  # post chains: the message format the user dictates (<...> is filled in) and how the plan fills it
    "quote_and_post": ("{ref} last trade: <price>", lambda s, r: f"{s.refs[0]} last trade: {r[0]['price']}"),
    "move_and_post": ("{ref} moved <change>% since the previous close",
                      lambda s, r: f"{s.refs[0]} moved {printed_number(r[2])}% since the previous close"),
    "growth_and_post": ("{ref} revenue growth: <growth>%", lambda s, r: f"{s.refs[0]} revenue growth: {printed_number(r[1])}%"),
}


def _families() -> dict[str, Family]:
    fams = [_lookup(name, *spec) for name, spec in LOOKUPS.items()]
    fams += [_bar(name, field) for name, field in BAR_FIELDS.items()]
    text = {name: fmt[1] for name, fmt in FORMATS.items()}
    fams += [
        Family("top_result_url", "simple", lambda s: (Step("tavily", "search", fixed(query=s.values["query"], max_results=3)),),
               lambda r: r[0]["results"][0]["url"]),
        Family("article_margin", "medium", lambda s: (
            Step("tavily", "search", fixed(query=s.values["query"], max_results=3)),
            Step("tavily", "extract", lambda r: {"urls": [r[0]["results"][0]["url"]]})), lambda r: article_gross_margin(r[1])),
        Family("post_message", "simple", lambda s: (Step("slack", "post_message", fixed(
            channel=s.values["channel"], text=s.values["message"])),), None, _post(lambda s, r: s.values["message"])),
        Family("calculate", "simple", lambda s: (_python(lambda r: f"print({s.values['expr']})"),),
               lambda r: printed_number(r[0])),
        Family("alert_date", "simple", lambda s: (_alert_search(s.tickers[0]),), lambda r: alert_date(alert_of(r, 0))),
        Family("price_change", "medium", lambda s: (_quote(s.tickers[0]), _previous(s.tickers[0]), _python(
            lambda r: f"print(round({r[0]['price']} - {r[1]['close']}, 2))")), lambda r: printed_number(r[2])),
        Family("move_since_close", "medium", lambda s: (_quote(s.tickers[0]), _previous(s.tickers[0]), _python(
            lambda r: pct_code(r[0]["price"], r[1]["close"]))), lambda r: printed_number(r[2])),
        Family("revenue_growth", "medium", lambda s: (_income(s.tickers[0]), _python(_growth)),
               lambda r: printed_number(r[1])),
        Family("revenue_per_employee", "complex", lambda s: (
            _income(s.tickers[0], 1), Step("polygon", "get_ticker_details", fixed(ticker=s.tickers[0])),
            _python(lambda r: f"print(round({path_value(r[0], 'statements.0.revenue')} / {r[1]['total_employees']}, 2))")),
            lambda r: printed_number(r[2])),
        Family("pe_difference", "complex", lambda s: (
            Step("fmp", "get_quote", fixed(symbol=s.tickers[0])), Step("fmp", "get_quote", fixed(symbol=s.tickers[1])),
            _python(lambda r: f"print(round({required_field(r[0], 'pe')} - {required_field(r[1], 'pe')}, 2))")),
            lambda r: printed_number(r[2])),
        Family("higher_pe", "complex", _which("pe"), lambda r: r[2]["stdout"].strip()),
        Family("bigger_market_cap", "complex", _which("market_cap"), lambda r: r[2]["stdout"].strip()),
        Family("alert_volume", "medium", lambda s: (_alert_search(s.tickers[0]), _alert_bar(s.tickers[0])),
               lambda r: r[1]["bars"][0]["volume"]),
        Family("alert_range", "complex", lambda s: (_alert_search(s.tickers[0]), _alert_bar(s.tickers[0]), _python(
            lambda r: pct_code(r[1]["bars"][0]["high"], r[1]["bars"][0]["low"]))), lambda r: printed_number(r[2])),
        Family("quote_and_post", "medium", lambda s: (_quote(s.tickers[0]), _post_step(text["quote_and_post"], s)),
               lambda r: r[0]["price"], _post(text["quote_and_post"])),
        Family("move_and_post", "complex", lambda s: (
            _quote(s.tickers[0]), _previous(s.tickers[0]), _python(lambda r: pct_code(r[0]["price"], r[1]["close"])),
            _post_step(text["move_and_post"], s)), lambda r: printed_number(r[2]), _post(text["move_and_post"])),
        Family("growth_and_post", "complex", lambda s: (
            _income(s.tickers[0]), _python(_growth), _post_step(text["growth_and_post"], s)),
            lambda r: printed_number(r[1]), _post(text["growth_and_post"])),
    ]
    return {f.name: f for f in fams}


FAMILIES: dict[str, Family] = _families()


@cache
def phrasings() -> dict[str, tuple[str, ...]]:
    """Every family's bank, from the package's phrasings/*.yaml."""
    banks: dict[str, tuple[str, ...]] = {}
    for name in ("lookups.yaml", "chains.yaml"):
        text = resources.files("mcprl.data").joinpath(f"phrasings/{name}").read_text(encoding="utf-8")
        banks |= {family: tuple(bank) for family, bank in yaml.safe_load(text).items()}
    return banks


def phrasing_split(index: int, size: int) -> str:
    """demo | rl | heldout: which part of a family's bank a phrasing belongs to."""
    if index >= size - HELDOUT_PHRASINGS:
        return "heldout"
    return "rl" if index >= size - HELDOUT_PHRASINGS - RL_ONLY_PHRASINGS else "demo"


def placeholders(template: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(template) if field}


# --------------------------------------------------------------------------------------------- wording

def company_ref(ticker: str, style: str, names: dict[str, str], rng: random.Random) -> str:
    if style == "ticker":
        return ticker
    if style == "name":
        return names[ticker]
    return rng.choice(SHORT_NAMES.get(ticker) or (ticker,))


def typo(text: str, rng: random.Random, protected: tuple[str, ...]) -> str:
    """Two neighbouring letters of one longer word swapped, never inside a value the task depends on."""
    words = text.split(" ")
    spots = [i for i, w in enumerate(words) if len(w) > 4 and w.isalpha() and not any(w in p for p in protected)]
    if not spots:
        return text
    i = rng.choice(spots)
    w, j = words[i], rng.randrange(1, len(words[i]) - 2)
    words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    return " ".join(words)


def dress(question: str, rng: random.Random, split: str, slots: Slots) -> tuple[str, list[str]]:
    """Occasional lower case, a typo, small talk: how people type. Returns the text and what was done.
    Exact strings (a message to post, a query, an expression) keep their case, and no typo touches them or
    a company's name."""
    exact = tuple(v for k, v in slots.values.items() if k in ("message", "fmt", "query", "expr"))
    noise = []
    if rng.random() < NOISE["typo"]:
        question, noise = typo(question, rng, (*exact, *slots.values.values())), [*noise, "typo"]
    if rng.random() < NOISE["context"]:
        question, noise = rng.choice(CONTEXTS[split]) + question[0].lower() + question[1:], [*noise, "context"]
    if rng.random() < NOISE["lower"] and not exact:
        question, noise = question.lower(), [*noise, "lower"]
    return question, noise


def _slots(family: str, template: str, world: World, rng: random.Random, days: tuple[str, ...]) -> Slots:
    wanted = placeholders(template)
    style = "ticker" if family in TICKER_ONLY else rng.choices(list(STYLE_WEIGHTS), list(STYLE_WEIGHTS.values()))[0]
    pool = world.alert_tickers if family in TICKER_ONLY else world.tickers
    tickers = tuple(rng.sample(pool, 2 if "e2" in wanted else 1)) if "e" in wanted else ()
    refs = tuple(company_ref(t, style, world.names, rng) for t in tickers)
    values: dict[str, str] = {"e": refs[0]} if refs else {}
    if len(refs) > 1:
        values["e2"] = refs[1]
    date = None
    if "date" in wanted:
        date = rng.choice([d for d in days if LOOKUP_DATES[0] <= d <= LOOKUP_DATES[1]])
        values["date"] = dt.date.fromisoformat(date).strftime(rng.choice(DATE_FORMATS))
    if "channel" in wanted:
        values["channel"] = rng.choice(POST_CHANNELS)
    if "message" in wanted:
        t = rng.choice(world.tickers)
        values["message"] = rng.choice((f"Reminder: {t} reports earnings soon.", f"Desk note: watching {t} today.",
                                        f"Please review the {t} position.", f"Lunch order is in, {t} call at 2pm.",
                                        f"Heads up: {t} options expire Friday."))
        tickers = (t,)
    if "query" in wanted:
        t = rng.choice(world.tickers)
        suffix = "Q3 2025 earnings" if family == "article_margin" else rng.choice(
            ("Q3 2025 earnings", "full-year 2024 results", "company profile"))
        values["query"], tickers = f"{world.names[t]} {suffix}", (t,)
    if "expr" in wanted:
        a, b, c = rng.randint(12, 999), rng.randint(2, 99), rng.randint(1, 5000)
        values["expr"] = f"{a} * {b} {rng.choice(('+', '-'))} {c}"
    if "fmt" in wanted:
        values["fmt"] = FORMATS[family][0].format(ref=refs[0])
    return Slots(values, tickers, refs, date)


# ------------------------------------------------------------------------------------------- generation

@dataclass(frozen=True)
class FamilyTask:
    draft: Draft
    slots: Slots
    info: dict[str, Any]
    has_demo: bool


def family_cycle(rng: random.Random, chain_weight: int = 1) -> Iterator[str]:
    """Every family once per round, each round in a fresh seeded order: any 50 consecutive tasks span all
    families, so a held-out set measures each of them and SFT sees each early. A family of several calls
    comes `chain_weight` times a round, so the demos need not teach that one lookup ends every task."""
    names = sorted(name for name in phrasings()
                   for _ in range(chain_weight if FAMILIES[name].complexity != "simple" else 1))
    while True:
        yield from rng.sample(names, len(names))


def draw(rng: random.Random, family: str, world: World, split: str, no_demo: frozenset[str],
         days: tuple[str, ...]) -> FamilyTask:
    bank = phrasings()[family]
    indices = [i for i in range(len(bank)) if (phrasing_split(i, len(bank)) == "heldout") == (split == "heldout")]
    index = rng.choice(indices)
    slots = _slots(family, bank[index], world, rng, days)
    question, noise = dress(bank[index].format(**slots.values), rng, split, slots)
    fam = FAMILIES[family]
    complexity = fam.complexity
    draft = Draft(family, complexity, question, fam.plan(slots),
                  fam.answer, slots.tickers or (slots.values.get("expr", ""),),
                  (lambda r, s=slots: fam.posts(s, r)) if fam.posts else None)
    styles = {"ticker" if ref == t else "name" if ref == world.names.get(t) else "short"
              for t, ref in zip(slots.tickers, slots.refs)}
    part = phrasing_split(index, len(bank))
    info = {"family": family, "phrasing": index, "phrasing_split": part, "noise": noise,
            "entity_style": "+".join(sorted(styles)) or "none", "date_format": _date_style(slots.values.get("date"))}
    has_demo = split == "train" and part == "demo" and family not in no_demo
    return FamilyTask(draft, slots, {**info, "demo": has_demo}, has_demo)


def _date_style(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        dt.date.fromisoformat(value)
        return "iso"
    except ValueError:
        return "words" if any(c.isalpha() for c in value) else "numeric"


async def name_lookups(tm: ToolManager, task: FamilyTask, calls: list[dict[str, Any]], episode: str) -> list[Slip]:
    """The first call with each company named in words, as written, and the server's hint (weight 1: the policy)."""
    slips, seen = [], set()
    for i, call in enumerate(calls):
        for key in TICKER_KEYS:
            ticker = call["params"].get(key)
            if ticker not in task.slots.tickers or ticker in seen:
                continue
            seen.add(ticker)
            ref = task.slots.refs[task.slots.tickers.index(ticker)]
            if ref.upper() == ticker:
                continue
            params = {**call["params"], key: ref}
            result = await tm.execute_tool(f"{call['server']}.{call['tool']}", params, episode=episode)
            if result["ok"] or ticker not in str(result.get("error", "")):
                raise GenerationError(f"{ref!r} gave no hint towards {ticker}: {result}")
            slips.append(Slip(i, params, result, weight=1))
    return slips


@dataclass(frozen=True)
class SlipKind:
    """How a demo can slip: the calls of a plan it fits (`spots`), the slipped arguments (`wrong`), and
    whether the slip shows as an empty result rather than an error (a wrong day, a query that finds nothing)."""

    spots: Callable[[FamilyTask, list[dict[str, Any]]], list[int]]
    wrong: Callable[[FamilyTask, dict[str, Any], list[str], random.Random], dict[str, Any]]
    empty: bool = False


def _single_day(task: FamilyTask, calls: list[dict[str, Any]]) -> list[int]:
    return [i for i, c in enumerate(calls) if c["params"].get("start_date")
            and c["params"].get("start_date") == c["params"].get("end_date")]


def _without(p: dict[str, Any], gone: str) -> dict[str, Any]:
    return {k: v for k, v in p.items() if k != gone}


def _wrong_type(p: dict[str, Any]) -> dict[str, Any]:
    """An integer argument written as a string, as models often write it: the schema rejects it."""
    key = next(k for k in sorted(p) if isinstance(p[k], int) and not isinstance(p[k], bool))
    return {**p, key: str(p[key])}


def _next_year(p: dict[str, Any]) -> dict[str, Any]:
    """The asked day a year later, past the data's end: the server says which range it covers."""
    def later(day: str) -> str:
        d = dt.date.fromisoformat(day)
        return str(d.replace(year=d.year + 1))
    return {**p, "start_date": later(p["start_date"]), "end_date": later(p["end_date"])}


def _closed_day(p: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The asked day of the month in another month, or a day beside it, on which the market was shut: the
    bars come back empty (the slip a small model makes turning "8/14/2025" into a date)."""
    day = dt.date.fromisoformat(p["start_date"])
    open_days = set(MarketData().days)
    near = [day.replace(month=m) for m in range(1, 13) if m != day.month and day.day <= 28]
    near += [day + dt.timedelta(days=k) for k in (-3, -2, -1, 1, 2, 3)]
    shut = sorted(str(d) for d in near if str(d) not in open_days and LOOKUP_DATES[0] <= str(d) <= LOOKUP_DATES[1])
    if not shut:
        return p  # no closed day near it: the call succeeds and the kind does not fit
    when = rng.choice(shut)
    return {**p, "start_date": when, "end_date": when}


def _garbled_query(p: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A search query with its words' letters swapped: nothing matches it."""
    def swap(word: str) -> str:
        if len(word) < 4:
            return word
        i = rng.randrange(1, len(word) - 2)
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return {**p, "query": " ".join(swap(w) for w in p["query"].split())}


def _calls_where(test: Callable[[dict[str, Any]], Any]) -> Callable[[FamilyTask, list[dict[str, Any]]], list[int]]:
    return lambda task, calls: [i for i, c in enumerate(calls) if test(c)]


def _user_date_spots(task: FamilyTask, calls: list[dict[str, Any]]) -> list[int]:
    if not task.slots.date or task.info["date_format"] == "iso":
        return []
    return [i for i, c in enumerate(calls) if c["params"].get("start_date") == task.slots.date]


def _has_int(call: dict[str, Any]) -> bool:
    return call["tool"] != "run_python" and any(isinstance(v, int) and not isinstance(v, bool)
                                                for v in call["params"].values())


SLIP_KINDS: dict[str, SlipKind] = {  # a registry: a new kind of slip is one entry
    "misspell": SlipKind(_calls_where(lambda c: c["params"].get("ticker") or c["params"].get("symbol")),
                         lambda t, p, known, rng: {**p, **{k: misspell(p[k], rng, known) for k in TICKER_KEYS if k in p}}),
    "missing_argument": SlipKind(_calls_where(lambda c: len(c["params"]) > 1 and c["tool"] != "run_python"),
                                 lambda t, p, known, rng: _without(p, rng.choice(sorted(p)))),
    "date_format": SlipKind(_user_date_spots, lambda t, p, known, rng: {**p, "start_date": t.slots.values["date"],
                                                                        "end_date": t.slots.values["date"]}),
    "wrong_type": SlipKind(_calls_where(_has_int), lambda t, p, known, rng: _wrong_type(p)),
    "date_out_of_range": SlipKind(_single_day, lambda t, p, known, rng: _next_year(p)),
    "empty_result": SlipKind(_single_day, lambda t, p, known, rng: _closed_day(p, rng), empty=True),
    "empty_search": SlipKind(_calls_where(lambda c: isinstance(c["params"].get("query"), str)),
                             lambda t, p, known, rng: _garbled_query(p, rng), empty=True),
}


def _empty(data: Any) -> bool:
    """A result with lists and all of them empty: no bars, no search results, no matches."""
    lists = [v for v in data.values() if isinstance(v, list)] if isinstance(data, dict) else []
    return bool(lists) and not any(lists)


async def recovery_slip(tm: ToolManager, task: FamilyTask, calls: list[dict[str, Any]], known: list[str],
                        rng: random.Random, episode: str, kinds: tuple[str, ...]) -> Slip | None:
    """One masked slip, fixed by the next call (`kinds` tried in a seeded order until the plan has a spot for
    one and the slipped call fails or comes back empty); None when none fits. After a name lookup it is a slip
    copying the server's hint."""
    for name in rng.sample(kinds, len(kinds)):
        kind = SLIP_KINDS[name]
        spots = kind.spots(task, calls)
        if not spots:
            continue
        i = rng.choice(spots)
        params = kind.wrong(task, calls[i]["params"], known, rng)
        result = await tm.execute_tool(f"{calls[i]['server']}.{calls[i]['tool']}", params, episode=episode)
        slipped = result["ok"] and _empty(result["data"]) if kind.empty else not result["ok"]
        if slipped:
            return Slip(i, params, result)
    return None


def check_settings(recovery: float, no_demo_families: tuple[str, ...], slip_kinds: tuple[str, ...] = tuple(SLIP_KINDS),
                   chain_weight: int = 1, heldout: bool = False) -> None:
    """Bad settings fail before any server starts."""
    if chain_weight < 1:
        raise ValueError(f"chain_weight must be a whole number >= 1, got {chain_weight}")
    if heldout and chain_weight != 1:
        raise ValueError("the held-out split draws every family once a round (comparable across settings); "
                         "chain_weight is for the training split")
    unknown = sorted(set(no_demo_families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown families in no_demo_families: {', '.join(unknown)}; known: {', '.join(sorted(FAMILIES))}")
    unknown = sorted(set(slip_kinds) - set(SLIP_KINDS))
    if unknown or not slip_kinds:
        raise ValueError(f"unknown or no slip_kinds {unknown or list(slip_kinds)}; known: {', '.join(SLIP_KINDS)}")
    check_recovery(recovery)


async def generate_async(tm: ToolManager, n: int, seed: int, *, heldout: bool = False, progress: bool = True,
                         recovery: float = 0.25, no_demo_families: tuple[str, ...] = (), style: str = "hermes",
                         slip_kinds: tuple[str, ...] = tuple(SLIP_KINDS), chain_weight: int = 1) -> RuleOutput:
    check_settings(recovery, no_demo_families, slip_kinds, chain_weight, heldout)
    split = "heldout" if heldout else "train"
    rng, slip_rng = random.Random(f"mcprl-families:{seed}:{split}"), random.Random(f"mcprl-families-slips:{seed}:{split}")
    world, days = build_world(heldout), MarketData().days
    no_demo, out, seen = frozenset(no_demo_families), RuleOutput(), set[str]()
    order, tools = family_cycle(random.Random(f"mcprl-families-order:{seed}:{split}"), chain_weight), tm.tools()
    with Progress(disable=not progress, transient=True) as bar:
        job = bar.add_task(f"generating {n} {split} tasks", total=n)
        while len(out.samples) < n:
            family, episode = next(order), new_episode()
            for _ in range(DISTINCT_TRIES):  # the same family again: a round covers every family
                task = draw(rng, family, world, split, no_demo, days)
                key = f"{family}|{task.info['phrasing']}|{sorted(task.slots.values.items())}"
                if key in seen:
                    continue
                try:
                    calls, data, raw = await execute_plan(tm, task.draft, episode)
                    slips = await name_lookups(tm, task, calls, episode)
                    break
                except GenerationError:
                    continue  # e.g. no P/E for a loss maker: draw again
            else:
                raise GenerationError(f"{family}: no new plan in {DISTINCT_TRIES} draws")
            seen.add(key)
            if slip_rng.random() < recovery:
                extra = await recovery_slip(tm, task, calls, world.tickers, slip_rng, episode, tuple(slip_kinds))
                slips += [extra] if extra else []
            sample, expert = build_task(len(out.samples), task.draft, calls, data, raw, tools, split=split, seed=seed,
                                        style=style, slips=tuple(sorted(slips, key=lambda s: s.before)),
                                        source="families", info=task.info)
            out.samples.append(sample)
            if task.has_demo:
                out.experts.append(expert)
            bar.advance(job)
    return out


def generate(n: int, seed: int, **kwargs: Any) -> RuleOutput:
    """`n` verified tasks; the demos of those that have one (train split, demo phrasings, demo families)."""
    return on_offline_servers(lambda tm: generate_async(tm, n, seed, **kwargs))


def generate_splits(n_train: int, n_heldout: int, seed: int, *, recovery: float = 0.25,
                    no_demo_families: tuple[str, ...] = (),
                    slip_kinds: tuple[str, ...] = tuple(SLIP_KINDS),
                    chain_weight: int = 1) -> tuple[RuleOutput, RuleOutput]:
    """The training split weighs the chains by `chain_weight`; the held-out split always draws every family
    once a round, so held-out scores stay comparable across settings."""
    check_settings(recovery, no_demo_families, slip_kinds, chain_weight)

    async def both(tm: ToolManager) -> list[RuleOutput]:
        return await asyncio.gather(
            generate_async(tm, n_train, seed, progress=False, recovery=recovery, no_demo_families=no_demo_families,
                           slip_kinds=slip_kinds, chain_weight=chain_weight),
            generate_async(tm, n_heldout, seed, heldout=True, progress=False, no_demo_families=no_demo_families))

    train, heldout = on_offline_servers(both)
    return train, heldout
