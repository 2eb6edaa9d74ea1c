"""Seeded market data for 50 US stocks: daily bars 2022-2025 and quarterly/annual statements.

One `MarketData(seed)` is the single source of truth for the polygon and fmp servers and for the
news corpus, so every number agrees everywhere. Byte-for-byte deterministic per seed: streams come
from `random.Random` seeded with strings (SHA-512 based, stable across runs and platforms), values
are rounded once at generation, and everything derived is computed from the rounded values.
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
import re
import random
from dataclasses import dataclass
from functools import cached_property

from mcprl.servers.errors import InvalidArgumentError, NotFoundError, suggest
from mcprl.servers.offline.companies import COMPANIES, SHORT_NAMES, CompanySpec

FIRST_DAY = "2022-01-03"
TODAY = "2025-12-31"  # the fixed "now": the last session; quotes are as of its close
ANNUAL_YEARS = (2022, 2023, 2024)  # reported fiscal years (calendar years); FY2025 is not reported yet
QUARTERS = tuple((year, q) for year in (2022, 2023, 2024, 2025) for q in (1, 2, 3, 4))[:-1]  # up to 2025 Q3

# NYSE full-day closures.
HOLIDAYS = frozenset(
    {
        "2022-01-17",
        "2022-02-21",
        "2022-04-15",
        "2022-05-30",
        "2022-06-20",
        "2022-07-04",
        "2022-09-05",
        "2022-11-24",
        "2022-12-26",
        "2023-01-02",
        "2023-01-16",
        "2023-02-20",
        "2023-04-07",
        "2023-05-29",
        "2023-06-19",
        "2023-07-04",
        "2023-09-04",
        "2023-11-23",
        "2023-12-25",
        "2024-01-01",
        "2024-01-15",
        "2024-02-19",
        "2024-03-29",
        "2024-05-27",
        "2024-06-19",
        "2024-07-04",
        "2024-09-02",
        "2024-11-28",
        "2024-12-25",
        "2025-01-01",
        "2025-01-09",
        "2025-01-20",
        "2025-02-17",
        "2025-04-18",
        "2025-05-26",
        "2025-06-19",
        "2025-07-04",
        "2025-09-01",
        "2025-11-27",
        "2025-12-25",
    }
)

_LEGAL_SUFFIX = re.compile(r",?\s+(inc\.?|incorporated|corporation|corp\.?|company|co\.|plc|group)$", re.IGNORECASE)
_QUARTER_END = {1: "03-31", 2: "06-30", 3: "09-30", 4: "12-31"}
_SEASONALITY = (0.97, 0.99, 1.0, 1.04)


@dataclass(frozen=True)
class Company:
    """A listed company as both APIs describe it."""

    symbol: str
    name: str
    exchange: str
    sector: str
    industry: str
    employees: int
    list_date: str
    website: str
    shares_outstanding: int

    @property
    def description(self) -> str:
        return f"{self.name} is a {self.industry.lower()} company in the {self.sector.lower()} sector, listed on {self.exchange}."


@dataclass(frozen=True)
class Bar:
    """One daily session, prices in USD."""

    date: str
    open: float
    high: float
    low: float
    close: float
    volume: int


@dataclass(frozen=True)
class IncomeStatement:
    """One reporting period; annual statements are the sums of their quarters. Amounts in USD."""

    symbol: str
    fiscal_year: int
    period: str  # "FY" or "Q1".."Q4"
    date: str  # period end
    revenue: int
    gross_profit: int
    operating_income: int
    net_income: int
    eps: float
    shares: int


@dataclass(frozen=True)
class BalanceSummary:
    """Year-end balance-sheet figures behind the ratios (not exposed as a statement)."""

    fiscal_year: int
    total_equity: int
    total_debt: int
    current_ratio: float
    dividends_per_share: float


def _fold(name: str) -> str:
    """A name as compared: lower case, '&' kept, other punctuation and a leading 'the' dropped."""
    words = re.sub(r"[^a-z0-9& ]+", " ", name.lower().replace("'", "")).split()
    return " ".join(words[1:] if words[:1] == ["the"] else words)


def trading_days(first: str = FIRST_DAY, last: str = TODAY) -> tuple[str, ...]:
    """NYSE sessions between two ISO dates, inclusive."""
    day, end, days = dt.date.fromisoformat(first), dt.date.fromisoformat(last), []
    while day <= end:
        iso = day.isoformat()
        if day.weekday() < 5 and iso not in HOLIDAYS:
            days.append(iso)
        day += dt.timedelta(days=1)
    return tuple(days)


# Ways people write a date that are not ISO; tried in order, so 03/02/2025 reads as March 2 (US).
_OTHER_DATE_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%Y.%m.%d", "%m/%d/%Y", "%d/%m/%Y", "%B %d, %Y", "%b %d, %Y",
                       "%B %d %Y", "%b %d %Y", "%d %B %Y", "%d %b %Y")


def parse_date(value: str, name: str = "date") -> str:
    """Validate an ISO date argument and return it normalized. A date written another way ('2025-02-3',
    'Feb 3, 2025') is refused with its ISO spelling to retry with, as an unknown ticker gets its symbol: a fixed
    example alone was copied as the answer (docs/experiments/2026-12-07-a-made-up-answer-after-an-error.md)."""
    try:
        return dt.date.fromisoformat(value.strip()).isoformat()
    except (ValueError, AttributeError):
        meant = _iso_spelling(value)
        fix = f"; did you mean {meant!r}?" if meant else ", e.g. 2025-06-30"
        raise InvalidArgumentError(f"bad {name} {value!r}: expected YYYY-MM-DD{fix}") from None


def _iso_spelling(value: object) -> str | None:
    text = " ".join(str(value).split())
    for fmt in _OTHER_DATE_FORMATS:
        try:
            return dt.datetime.strptime(text, fmt).date().isoformat()
        except ValueError:
            continue
    return None


def _millions(x: float) -> int:
    return round(x / 1e6) * 1_000_000


class MarketData:
    """All offline market facts for one seed; series are generated lazily per symbol and cached."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._specs = {c.symbol: c for c in COMPANIES}
        self._bars: dict[str, tuple[Bar, ...]] = {}
        self._quarters: dict[str, tuple[IncomeStatement, ...]] = {}

    def _rng(self, *parts: object) -> random.Random:
        return random.Random(":".join(["mcprl", str(self.seed), *map(str, parts)]))

    # --- reference data -------------------------------------------------

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(self._specs)

    @property
    def today(self) -> str:
        return TODAY

    @cached_property
    def days(self) -> tuple[str, ...]:
        return trading_days()

    def spec(self, symbol: str) -> CompanySpec:
        key = symbol.strip().upper() if isinstance(symbol, str) else symbol
        if key not in self._specs:
            raise NotFoundError(f"unknown ticker {symbol!r}: {self._hint(str(symbol))}")
        return self._specs[key]

    @cached_property
    def _names(self) -> dict[str, str]:
        """Every way a company is named (full name, name without its legal suffix, short names), folded."""
        names: dict[str, str] = {}
        for spec in COMPANIES:
            for name in (spec.name, _LEGAL_SUFFIX.sub("", spec.name), *SHORT_NAMES.get(spec.symbol, ())):
                names.setdefault(_fold(name), spec.symbol)
        return names

    def _hint(self, value: str) -> str:
        """The symbol a user most likely meant: a company's name or short name ('Costco', 'nvidia corp') names
        its ticker, else the closest symbol or name: 'did you mean ...?', or the known symbols when nothing is close."""
        folded = _fold(value)
        symbol = self._names.get(folded)
        if symbol is None and folded:
            prefixed = sorted({s for name, s in self._names.items() if name.startswith(folded) or folded.startswith(name)})
            symbol = prefixed[0] if len(prefixed) == 1 else None
        if symbol is None:
            close = difflib.get_close_matches(folded, list(self._names), n=1, cutoff=0.75)
            symbol = self._names[close[0]] if close else None
        if symbol is None:
            return suggest(value.strip().upper(), list(self._specs))
        return f"did you mean {symbol!r} ({self._specs[symbol].name})?"

    def company(self, symbol: str) -> Company:
        s = self.spec(symbol)
        return Company(
            s.symbol, s.name, s.exchange, s.sector, s.industry, s.employees, s.list_date, s.website, s.shares_m * 1_000_000
        )

    def companies(self) -> tuple[Company, ...]:
        return tuple(self.company(s) for s in self._specs)

    # --- prices ---------------------------------------------------------

    @cached_property
    def _market_returns(self) -> tuple[float, ...]:
        rng = self._rng("market")
        return tuple(rng.gauss(0, 0.15 / math.sqrt(252)) for _ in self.days)

    def bars(self, symbol: str) -> tuple[Bar, ...]:
        """Every session from FIRST_DAY to TODAY, oldest first."""
        spec = self.spec(symbol)
        if spec.symbol not in self._bars:
            self._bars[spec.symbol] = self._walk(spec)
        return self._bars[spec.symbol]

    def _walk(self, spec: CompanySpec) -> tuple[Bar, ...]:
        """Log price = a fundamental trend (revenue growth) + a mean-reverting deviation driven by market and own shocks."""
        rng = self._rng(spec.symbol, "prices")
        trend = (math.log1p(spec.growth) + rng.uniform(-0.04, 0.08)) / 252
        idio = (0.10 + 0.08 * spec.beta) / math.sqrt(252)
        base_volume = spec.shares_m * 1e6 * rng.uniform(0.003, 0.009)
        gauss, exp, beta, start = rng.gauss, math.exp, spec.beta, spec.start_price
        gap, wick, keep = idio * 0.3, idio * 0.4, 1 - 1 / 250
        prev, deviation, out = start, 0.0, []
        for k, (day, market) in enumerate(zip(self.days, self._market_returns, strict=True)):
            deviation = deviation * keep + beta * market + gauss(0, idio)
            close = round(max(start * exp(trend * (k + 1) + deviation), 0.5), 2)
            open_ = round(prev * (1 + gauss(0, gap)), 2)
            high = round(max(open_, close) * (1 + abs(gauss(0, wick))), 2)
            low = round(min(open_, close) * (1 - abs(gauss(0, wick))), 2)
            volume = int(base_volume * exp(gauss(0, 0.3)) * (1 + 25 * abs(close / prev - 1)) / 100) * 100
            out.append(Bar(day, open_, high, low, close, volume))
            prev = close
        return tuple(out)

    def bars_between(self, symbol: str, start: str, end: str) -> tuple[Bar, ...]:
        """Sessions with start <= date <= end; the range must overlap the data."""
        start, end = parse_date(start, "start_date"), parse_date(end, "end_date")
        if start > end:
            raise InvalidArgumentError(f"start_date {start} is after end_date {end}")
        if end < FIRST_DAY or start > TODAY:
            raise InvalidArgumentError(f"no data between {start} and {end}: data covers {FIRST_DAY} to {TODAY}")
        return tuple(b for b in self.bars(symbol) if start <= b.date <= end)

    def bar_on(self, symbol: str, date: str) -> Bar:
        """The session on `date`, or the last one before it (weekend, holiday)."""
        date = parse_date(date)
        if not FIRST_DAY <= date <= TODAY:
            raise InvalidArgumentError(f"date {date} is outside the data range {FIRST_DAY} to {TODAY}")
        return [b for b in self.bars(symbol) if b.date <= date][-1]

    def last_bar(self, symbol: str) -> Bar:
        return self.bars(symbol)[-1]

    def previous_bar(self, symbol: str) -> Bar:
        return self.bars(symbol)[-2]

    def year_range(self, symbol: str) -> tuple[float, float]:
        """52-week (last 252 sessions) low and high."""
        window = self.bars(symbol)[-252:]
        return min(b.low for b in window), max(b.high for b in window)

    def market_cap(self, symbol: str, date: str = TODAY) -> int:
        return round(self.bar_on(symbol, date).close * self.company(symbol).shares_outstanding)

    # --- fundamentals ---------------------------------------------------

    def income_statements(self, symbol: str, period: str = "annual") -> tuple[IncomeStatement, ...]:
        """Newest first. period: 'annual' (FY2022-FY2024) or 'quarter' (2022 Q1 - 2025 Q3)."""
        if period not in ("annual", "quarter"):
            raise InvalidArgumentError(f"bad period {period!r}: expected 'annual' or 'quarter'")
        spec = self.spec(symbol)
        if spec.symbol not in self._quarters:
            self._quarters[spec.symbol] = self._statements(spec)
        quarters = self._quarters[spec.symbol]
        if period == "quarter":
            return tuple(reversed(quarters))
        return tuple(self._annual(spec, [q for q in quarters if q.fiscal_year == year]) for year in reversed(ANNUAL_YEARS))

    def _statements(self, spec: CompanySpec) -> tuple[IncomeStatement, ...]:
        rng = self._rng(spec.symbol, "fundamentals")
        growth = spec.growth + rng.gauss(0, 0.03)
        level = spec.revenue_b * 1e9 / 4 * (1 + rng.gauss(0, 0.03))
        shares = spec.shares_m * 1_000_000
        out = []
        for k, (year, q) in enumerate(QUARTERS):
            revenue = _millions(level * (1 + growth) ** ((k - 1.5) / 4) * _SEASONALITY[q - 1] * (1 + rng.gauss(0, 0.02)))
            gross = _millions(revenue * (spec.gross_margin + rng.gauss(0, 0.01)))
            operating = _millions(revenue * (spec.operating_margin + rng.gauss(0, 0.012)))
            net = _millions(revenue * (spec.net_margin + rng.gauss(0, 0.01)))
            date = f"{year}-{_QUARTER_END[q]}"
            out.append(
                IncomeStatement(spec.symbol, year, f"Q{q}", date, revenue, gross, operating, net, round(net / shares, 2), shares)
            )
        return tuple(out)

    @staticmethod
    def _annual(spec: CompanySpec, quarters: list[IncomeStatement]) -> IncomeStatement:
        shares = spec.shares_m * 1_000_000
        net = sum(q.net_income for q in quarters)
        return IncomeStatement(
            spec.symbol,
            quarters[0].fiscal_year,
            "FY",
            f"{quarters[0].fiscal_year}-12-31",
            sum(q.revenue for q in quarters),
            sum(q.gross_profit for q in quarters),
            sum(q.operating_income for q in quarters),
            net,
            round(net / shares, 2),
            shares,
        )

    def balance(self, symbol: str, fiscal_year: int) -> BalanceSummary:
        """Year-end equity, debt, current ratio and dividends for a reported fiscal year."""
        if fiscal_year not in ANNUAL_YEARS:
            raise InvalidArgumentError(f"fiscal year {fiscal_year} is not reported: known {', '.join(map(str, ANNUAL_YEARS))}")
        spec = self.spec(symbol)
        rng = self._rng(spec.symbol, "balance", fiscal_year)
        annual = next(s for s in self.income_statements(symbol) if s.fiscal_year == fiscal_year)
        equity = _millions(max(annual.net_income, annual.revenue * 0.02) * rng.uniform(3, 8))
        dividends = round(spec.dividend_yield * spec.start_price * 1.05 ** (fiscal_year - 2022), 2)
        return BalanceSummary(
            fiscal_year, equity, _millions(equity * rng.uniform(0.2, 1.5)), round(rng.uniform(0.8, 2.2), 2), dividends
        )

    def ttm_eps(self, symbol: str) -> float:
        """Trailing-twelve-month EPS: net income of the last four reported quarters over shares outstanding."""
        last4 = self.income_statements(symbol, "quarter")[:4]
        return round(sum(q.net_income for q in last4) / last4[0].shares, 2)

    def pe_ratio(self, symbol: str) -> float | None:
        """Last close over TTM EPS; None when earnings are not positive."""
        eps = self.ttm_eps(symbol)
        return round(self.last_bar(symbol).close / eps, 2) if eps > 0 else None
