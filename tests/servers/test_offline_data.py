"""The offline data: deterministic per seed, internally consistent, and clear about bad input."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcprl.servers.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from mcprl.servers.offline.corpus import SearchCorpus
from mcprl.servers.offline.market import HOLIDAYS, MarketData
from mcprl.servers.offline import slack as offline_slack
from mcprl.servers.offline.slack import Workspace

ROOT = Path(__file__).resolve().parents[2]
MARKET = MarketData(seed=0)  # read-only tests share one instance
CORPUS = SearchCorpus(MARKET)


def _fingerprint(seed: int) -> str:
    """A digest of everything the servers could show for one seed, built in fresh instances."""
    market = MarketData(seed)
    parts = [repr(market.companies())]
    for sym in market.symbols:
        parts += [repr(market.bars(sym)), repr(market.income_statements(sym)), repr(market.income_statements(sym, "quarter"))]
        parts += [repr(market.balance(sym, 2024)), repr(market.pe_ratio(sym))]
    parts.append(repr(SearchCorpus(market).documents))
    parts.append(repr(Workspace(market).history("markets", None)))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def test_same_seed_same_bytes_across_processes():
    """A fresh process with another hash seed rebuilds identical data (no hash() or set order leaks in)."""
    code = "from tests.servers.test_offline_data import _fingerprint; print(_fingerprint(0))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert other.stdout.strip() == _fingerprint(0)


def test_other_seed_other_data():
    assert MarketData(1).bars("AAPL") != MARKET.bars("AAPL")
    assert Workspace(MarketData(1)).history("markets", 3) != Workspace(MARKET).history("markets", 3)


def test_calendar_is_nyse_sessions():
    days = MARKET.days
    assert days[0] == "2022-01-03" and days[-1] == "2025-12-31"
    assert not HOLIDAYS & set(days)
    assert all(dt.date.fromisoformat(d).weekday() < 5 for d in days)
    assert len([d for d in days if d.startswith("2025")]) == 250


def test_universe_is_fifty_distinct_companies():
    market = MARKET
    companies = market.companies()
    assert len(companies) == 50 and len({c.symbol for c in companies}) == 50
    assert {c.exchange for c in companies} == {"NASDAQ", "NYSE"}
    assert len({c.sector for c in companies}) == 11


def test_bars_are_well_formed():
    market = MARKET
    for sym in market.symbols:
        for b in market.bars(sym):
            assert 0 < b.low <= min(b.open, b.close) <= max(b.open, b.close) <= b.high and b.volume > 0


def test_fundamentals_add_up():
    market = MARKET
    for sym in market.symbols:
        quarters = market.income_statements(sym, "quarter")
        assert len(quarters) == 15 and quarters[0].date == "2025-09-30"
        for annual in market.income_statements(sym):
            qs = [q for q in quarters if q.fiscal_year == annual.fiscal_year]
            assert annual.revenue == sum(q.revenue for q in qs) and annual.net_income == sum(q.net_income for q in qs)
            assert annual.eps == round(annual.net_income / annual.shares, 2)
        last4 = quarters[:4]
        assert market.ttm_eps(sym) == round(sum(q.net_income for q in last4) / last4[0].shares, 2)
        pe = market.pe_ratio(sym)
        assert pe is None or pe == round(market.last_bar(sym).close / market.ttm_eps(sym), 2)


@pytest.mark.parametrize("typed,symbol", [
    ("Nvidia", "NVDA"), ("Costco", "COST"), ("UnitedHealth", "UNH"), ("GE Aerospace", "GE"), ("Linde", "LIN"),
    ("nvidia corp", "NVDA"), ("Exxon Mobil", "XOM"), ("merck", "MRK"), ("Amazon.com", "AMZN"), ("Costko", "COST"),
    ("international business machines", "IBM"), ("The Home Depot", "HD"), ("mcdonalds", "MCD"), ("APPL", "AAPL"),
    ("LN", "LIN"),
])
def test_an_unknown_ticker_that_names_a_company_suggests_its_symbol(typed, symbol):
    """What people type for a company (its name, short name, a typo) gets the symbol back in the error,
    the hint an agent retries with."""
    with pytest.raises(NotFoundError, match=rf"unknown ticker '{typed}': did you mean '{symbol}'"):
        MARKET.company(typed)


def test_an_unknown_ticker_like_nothing_lists_the_known_ones():
    with pytest.raises(NotFoundError, match=r"unknown ticker 'QQQQQ': known: AAPL, MSFT"):
        MARKET.company("QQQQQ")


def test_market_errors_name_the_value_and_the_fix():
    market = MARKET
    with pytest.raises(NotFoundError, match=r"unknown ticker 'GOGL': did you mean 'GOOGL' \(Alphabet Inc\.\)\?"):
        market.company("GOGL")
    with pytest.raises(InvalidArgumentError, match=r"bad start_date '2025-02-30': expected YYYY-MM-DD"):
        market.bars_between("AAPL", "2025-02-30", "2025-03-30")
    with pytest.raises(InvalidArgumentError, match="is after end_date"):
        market.bars_between("AAPL", "2025-03-30", "2025-03-01")
    assert market.company(" aapl ").symbol == "AAPL"
    assert market.bar_on("AAPL", "2025-12-25").date == "2025-12-24"  # holiday -> previous session


@pytest.mark.parametrize(
    "typed, meant",
    [("2025-07-1", "2025-07-01"), ("2025-2-3", "2025-02-03"), ("2025/02/03", "2025-02-03"),
     ("02/03/2025", "2025-02-03"), ("31/01/2025", "2025-01-31"), ("Feb 3, 2025", "2025-02-03"),
     ("3 February 2025", "2025-02-03"), ("january  31 2025", "2025-01-31")],
)
def test_a_date_written_another_way_suggests_its_iso_spelling(typed, meant):
    """The retry hint, like an unknown ticker's symbol; the suggestion itself is accepted."""
    with pytest.raises(InvalidArgumentError, match=rf"bad date '{typed}': expected YYYY-MM-DD; did you mean '{meant}'\?"):
        MARKET.bar_on("AAPL", typed)
    assert MARKET.bar_on("AAPL", meant).date <= meant


@pytest.mark.parametrize("typed", ["2025-14-14", "2025-02-30", "last Tuesday", ""])
def test_a_date_that_is_no_date_gets_the_format_and_an_example(typed):
    with pytest.raises(InvalidArgumentError, match=rf"bad date '{typed}': expected YYYY-MM-DD, e.g. 2025-06-30$"):
        MARKET.bar_on("AAPL", typed)


def test_corpus_facts_agree_with_market_data():
    corpus = CORPUS
    market = corpus.market
    docs = corpus.documents
    assert 250 <= len(docs) <= 400 and len({d.url for d in docs}) == len(docs)
    for sym in ("AAPL", "CVX", "PFE"):
        review = next(d for d in docs if d.title.startswith(f"{sym} stock 2025 review"))
        assert f"ended 2025 at ${market.last_bar(sym).close:.2f}" in review.content
        assert f"2024 close of ${market.bar_on(sym, '2024-12-31').close:.2f}" in review.content
        q3 = market.income_statements(sym, "quarter")[0]
        earnings = next(d for d in docs if d.symbols == (sym,) and "Q3 2025 earnings" in d.title)
        assert f"${q3.eps:.2f} per share" in earnings.content
        assert f"closed at ${market.bar_on(sym, earnings.published_date).close:.2f}" in earnings.content
        move = next(d for d in docs if d.symbols == (sym,) and re.search(r"shares (jump|slide)", d.title))
        assert f"close at ${market.bar_on(sym, move.published_date).close:.2f}" in move.content


def test_corpus_search_and_get():
    corpus = CORPUS
    hits = corpus.search("Exxon Mobil full-year 2024 results net income", 3)
    assert "Exxon Mobil" in hits[0][0].title and "full-year 2024" in hits[0][0].title
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert corpus.get(hits[0][0].url + "/") is hits[0][0]
    assert corpus.search("qwertyuiop zxcvbnm", 5) == []
    with pytest.raises(NotFoundError, match="not in the offline corpus"):
        corpus.get("https://example.com/missing")
    with pytest.raises(InvalidArgumentError, match="max_results 0"):
        corpus.search("apple", 0)


def test_slack_history_agrees_with_market_and_resets():
    ws = Workspace(MARKET)
    market = ws.market
    for msg in ws.history("markets", None):
        sym, close, date = re.match(r"(\w+) closed at \$([\d.]+) on ([\d-]+)", msg.text).groups()
        assert float(close) == market.bar_on(sym, date).close
    seeded = ws.history("general", None)
    first = ws.post("general", "first")
    second = ws.post("#general", "second")
    assert float(second.ts) > float(first.ts) > max(float(m.ts) for m in seeded)
    assert [m.text for m in ws.history("general", 2)] == ["second", "first"]
    assert ws.search("second in:#general from:@finbot", 5) == (1, [second])
    assert ws.reset() == len(ws.history("general", None)) + sum(len(ws.history(c.name, None)) for c in ws.channels[1:])
    assert ws.history("general", None) == seeded
    assert ws.post("general", "first") == first  # the post counter restarts: same ts after reset


def test_slack_keeps_each_episodes_posts_to_itself(monkeypatch):
    ws = Workspace(MARKET)
    seeded = ws.history("general", None)
    a = ws.post("general", "zebra from a", episode="a")
    b = ws.post("general", "zebra from b", episode="b")
    assert a.ts == b.ts  # a post's timestamp depends on its own episode's posts only
    assert ws.history("general", None, "a") == [a, *seeded] and ws.history("general", None, "b") == [b, *seeded]
    assert ws.search("zebra", 10, "a") == (1, [a]) and ws.search("zebra", 10, "b") == (1, [b])
    assert ws.history("general", None) == seeded and ws.search("zebra")[0] == 0  # no episode: the shared state
    shared = ws.post("general", "zebra shared")
    assert shared.ts == a.ts and ws.search("zebra", 10, "a") == (1, [a])

    ws.reset("a")
    assert ws.search("zebra", 10, "a")[0] == 0 and ws.search("zebra", 10, "b") == (1, [b]) and ws.search("zebra")[0] == 1
    ws.reset()
    assert ws.search("zebra", 10, "b")[0] == 0 and ws.search("zebra")[0] == 0

    monkeypatch.setattr(offline_slack, "MAX_EPISODES", 2)  # the least recently used episode is forgotten
    for name in ("x", "y"):
        ws.post("general", f"zebra {name}", episode=name)
    ws.history("general", 1, "x")  # reading x makes y the least recently used
    ws.post("general", "zebra z", episode="z")
    assert [ws.search("zebra", 10, e)[0] for e in ("x", "y", "z")] == [1, 0, 1]


def test_slack_refuses_what_slack_refuses():
    ws = Workspace(MARKET)
    with pytest.raises(PermissionDeniedError, match="archived"):
        ws.post("q3-planning-2024", "hello")
    with pytest.raises(PermissionDeniedError, match="read-only"):
        ws.post("alerts", "hello")
    with pytest.raises(NotFoundError, match=r"did you mean 'random'"):
        ws.post("#randon", "hello")
    with pytest.raises(InvalidArgumentError, match="text is empty"):
        ws.post("general", "   ")
    with pytest.raises(InvalidArgumentError, match="limit 0"):
        ws.history("general", 0)


def test_slack_journal_replays_posts_and_resets_after_a_restart(tmp_path):
    from mcprl.servers.offline.slack import Workspace

    journal = tmp_path / "slack-0.jsonl"
    first = Workspace(seed=0, journal=journal)
    kept = first.post("general", "kiwi kept", episode="a")
    first.post("general", "kiwi dropped", episode="b")
    first.reset("b")
    with journal.open("a") as f:
        f.write('{"op": "post", "channel": "C0')  # a crash cut the last write short
    again = Workspace(seed=0, journal=journal)
    assert [m.ts for m in again.search("kiwi", episode="a")[1]] == [kept.ts]
    assert again.search("kiwi", episode="b")[0] == 0
    following = again.post("general", "kiwi next", episode="a")
    assert following.ts != kept.ts
    assert [m.ts for m in Workspace(seed=0, journal=journal).search("kiwi", episode="a")[1]] == [following.ts, kept.ts]
