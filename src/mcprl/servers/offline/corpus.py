"""A news corpus of ~300 short articles written from `MarketData`, with a small BM25 search.

Every number in an article is read from the same `MarketData`, so a fact found by search agrees
with what the polygon and fmp servers return (e.g. the year-in-review close equals the last bar).
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

from mcprl.servers.errors import InvalidArgumentError, NotFoundError
from mcprl.servers.offline.market import TODAY, Company, MarketData

OUTLETS = ("www.marketledger.news", "www.streetwire.news", "www.tickerdaily.news", "www.capitalbrief.news")
SNIPPET_CHARS = 300
_STOPWORDS = frozenset("a an and are as at be by for from has in is it its of on or the to was were what which with".split())


@dataclass(frozen=True)
class Document:
    """One article; `content` is the full text `extract` returns."""

    url: str
    title: str
    published_date: str
    content: str
    symbols: tuple[str, ...]

    @property
    def snippet(self) -> str:
        """The lead sentences, as a search result shows them."""
        if len(self.content) <= SNIPPET_CHARS:
            return self.content
        cut = self.content.rfind(". ", 0, SNIPPET_CHARS)
        return self.content[: cut + 1] if cut > 0 else self.content[:SNIPPET_CHARS] + "..."


def tokenize(text: str) -> list[str]:
    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in _STOPWORDS]


def _billions(x: float) -> str:
    return f"${x / 1e9:,.1f} billion"


def _pct(now: float, before: float) -> float:
    return round((now / before - 1) * 100, 1)


def _updown(x: float) -> str:
    return "up" if x >= 0 else "down"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80]


class SearchCorpus:
    """The articles for one seed, indexed for search and addressable by url."""

    def __init__(self, market: MarketData | None = None, seed: int = 0) -> None:
        self.market = market if market is not None else MarketData(seed)

    @cached_property
    def documents(self) -> tuple[Document, ...]:
        docs: list[Document] = []
        for company in self.market.companies():
            docs.extend(self._company_documents(company))
        docs.extend(self._roundups())
        return tuple(docs)

    @cached_property
    def _by_url(self) -> dict[str, Document]:
        return {d.url: d for d in self.documents}

    def get(self, url: str) -> Document:
        """The document at `url` (trailing slash and surrounding spaces ignored)."""
        doc = self._by_url.get(url.strip().rstrip("/"))
        if doc is None:
            raise NotFoundError(f"url {url!r} is not in the offline corpus: use a url returned by search")
        return doc

    # --- search ---------------------------------------------------------

    @cached_property
    def _index(self) -> tuple[list[Counter[str]], dict[str, float], float]:
        bags = [Counter(tokenize(f"{d.title} {d.title} {d.content}")) for d in self.documents]
        n = len(bags)
        df = Counter(term for bag in bags for term in bag)
        idf = {term: math.log(1 + (n - k + 0.5) / (k + 0.5)) for term, k in sorted(df.items())}
        return bags, idf, sum(sum(b.values()) for b in bags) / n

    def search(self, query: str, max_results: int = 5) -> list[tuple[Document, float]]:
        """BM25 over title and text; scores squashed into (0, 1); ties broken by corpus order."""
        if not query.strip():
            raise InvalidArgumentError("query is empty: pass a few keywords, e.g. 'Apple Q3 2025 revenue'")
        if not 1 <= max_results <= 20:
            raise InvalidArgumentError(f"max_results {max_results} is out of range: use 1 to 20")
        bags, idf, avg_len = self._index
        terms = tokenize(query)
        scored = []
        for i, bag in enumerate(bags):
            length, score = sum(bag.values()), 0.0
            for term in terms:
                tf = bag.get(term, 0)
                if tf:
                    score += idf[term] * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / avg_len))
            if score > 0:
                scored.append((-score, i))
        scored.sort()
        return [(self.documents[i], round(-s / (-s + 5), 3)) for s, i in scored[:max_results]]

    # --- generation -----------------------------------------------------

    def _url(self, date: str, title: str) -> str:
        outlet = random.Random(f"mcprl:{self.market.seed}:outlet:{title}").choice(OUTLETS)
        return f"https://{outlet}/{date.replace('-', '/')}/{_slug(title)}"

    def _doc(self, date: str, title: str, content: str, symbols: tuple[str, ...]) -> Document:
        return Document(self._url(date, title), title, date, content, symbols)

    def _company_documents(self, c: Company) -> list[Document]:
        m, sym = self.market, c.symbol
        rng = random.Random(f"mcprl:{m.seed}:{sym}:corpus")
        bars = m.bars(sym)
        quarters = {(q.fiscal_year, q.period): q for q in m.income_statements(sym, "quarter")}
        annual = {a.fiscal_year: a for a in m.income_statements(sym)}
        docs: list[Document] = []

        def add(date: str, title: str, content: str) -> None:
            docs.append(self._doc(date, title, content, (sym,)))

        q3, q3_prev = quarters[(2025, "Q3")], quarters[(2024, "Q3")]
        day = rng.choice([b for b in bars if "2025-10-16" <= b.date <= "2025-11-06"])
        growth = _pct(q3.revenue, q3_prev.revenue)
        add(day.date, f"{c.name} Q3 2025 earnings: revenue {_updown(growth)} {abs(growth)}% to {_billions(q3.revenue)}",
            f"{c.name} ({sym}) reported third-quarter 2025 revenue of {_billions(q3.revenue)}, "
            f"{_updown(growth)} {abs(growth)}% from {_billions(q3_prev.revenue)} a year earlier. "
            f"Net income was {_billions(q3.net_income)}, or ${q3.eps:.2f} per share, and operating income was "
            f"{_billions(q3.operating_income)}. Gross margin was {q3.gross_profit / q3.revenue * 100:.1f}%. "
            f"The stock closed at ${day.close:.2f} on the day of the report.")

        fy, fy_prev = annual[2024], annual[2023]
        day = rng.choice([b for b in bars if "2025-01-27" <= b.date <= "2025-02-21"])
        growth = _pct(fy.revenue, fy_prev.revenue)
        add(day.date, f"{c.name} full-year 2024 results: net income {_billions(fy.net_income)}",
            f"{c.name} ({sym}) closed fiscal 2024 with revenue of {_billions(fy.revenue)}, {_updown(growth)} "
            f"{abs(growth)}% from {_billions(fy_prev.revenue)} in 2023. Full-year net income was "
            f"{_billions(fy.net_income)} and diluted earnings per share were ${fy.eps:.2f}, compared with "
            f"${fy_prev.eps:.2f} a year earlier. Fourth-quarter revenue was {_billions(quarters[(2024, 'Q4')].revenue)}.")

        year = [b for b in bars if b.date >= "2025-01-01"]
        start = m.bar_on(sym, "2024-12-31")
        change = _pct(year[-1].close, start.close)
        low, high = m.year_range(sym)
        add(TODAY, f"{sym} stock 2025 review: shares {_updown(change)} {abs(change)}% for the year",
            f"{c.name} ({sym}) ended 2025 at ${year[-1].close:.2f}, {_updown(change)} {abs(change)}% for the year "
            f"from the 2024 close of ${start.close:.2f}. Over the past 52 weeks the stock traded between "
            f"${low:.2f} and ${high:.2f}. The final session of the year opened at ${year[-1].open:.2f}.")

        moves = [(abs(_pct(b.close, a.close)), b.date, a, b) for a, b in pairwise([start, *year])]
        _, _, before, after = max(moves)
        move = _pct(after.close, before.close)
        verb = "jump" if move >= 0 else "slide"
        add(after.date, f"{c.name} shares {verb} {abs(move)}% on {after.date}",
            f"Shares of {c.name} ({sym}) {'rose' if move >= 0 else 'fell'} {abs(move)}% on {after.date} to close "
            f"at ${after.close:.2f}, after closing at ${before.close:.2f} the previous session. About "
            f"{after.volume:,} shares changed hands, the biggest one-day move for the stock in 2025.")

        cap = m.market_cap(sym)
        add(TODAY, f"Company profile: {c.name} ({sym})",
            f"{c.name} ({c.exchange}: {sym}) is a {c.industry.lower()} company in the {c.sector.lower()} sector. "
            f"It employs about {c.employees:,} people and has been listed since {c.list_date}; its website is "
            f"{c.website}. With {c.shares_outstanding / 1e9:,.2f} billion shares outstanding and a Dec 31, 2025 "
            f"close of ${year[-1].close:.2f}, its market capitalization is about {_billions(cap)}.")

        pe = m.pe_ratio(sym)
        if pe is not None:
            add(TODAY, f"{sym} valuation: {pe}x trailing earnings",
                f"Based on trailing-twelve-month EPS of ${m.ttm_eps(sym):.2f} (the four quarters through Q3 2025) "
                f"and the Dec 31, 2025 close of ${year[-1].close:.2f}, {c.name} trades at a price-to-earnings "
                f"ratio of {pe}. Its fiscal 2024 net margin was {fy.net_income / fy.revenue * 100:.1f}%.")
        return docs

    def _year_returns(self) -> list[tuple[float, Company]]:
        m = self.market
        return [(_pct(m.last_bar(c.symbol).close, m.bar_on(c.symbol, "2024-12-31").close), c) for c in m.companies()]

    def _roundups(self) -> list[Document]:
        returns = sorted(self._year_returns(), key=lambda rc: (-rc[0], rc[1].symbol))
        docs = []
        for sector in sorted({c.sector for _, c in returns}):
            members = [(r, c) for r, c in returns if c.sector == sector]
            listing = "; ".join(f"{c.name} ({c.symbol}) {r:+.1f}%" for r, c in members)
            (best, leader), (worst, laggard) = members[0], members[-1]
            lead = (
                f"{leader.name} led 2025 with a {best:+.1f}% return and {laggard.name} trailed at {worst:+.1f}%"
                if len(members) > 1
                else f"{leader.name} is the only one tracked here and returned {best:+.1f}% in 2025"
            )
            docs.append(
                self._doc(
                    TODAY,
                    f"{sector} stocks in 2025: best and worst performers",
                    f"Among large-cap {sector.lower()} stocks, {lead}. Full-year price changes: {listing}.",
                    tuple(c.symbol for _, c in members),
                )
            )
        for label, picks in (("best", returns[:5]), ("worst", returns[::-1][:5])):
            listing = "; ".join(f"{c.name} ({c.symbol}) {r:+.1f}%" for r, c in picks)
            docs.append(
                self._doc(
                    TODAY,
                    f"The {label}-performing large-cap stocks of 2025",
                    f"The five {label}-performing stocks of 2025 among the 50 large US companies tracked here were: "
                    f"{listing}. Returns compare the Dec 31, 2025 close with the Dec 31, 2024 close.",
                    tuple(c.symbol for _, c in picks),
                )
            )
        return docs
