"""Each server as a real subprocess over stdio: every tool called, answers checked against the offline data."""

from __future__ import annotations

import json

import pytest

from mcprl.servers.offline.market import MarketData
from mcprl.servers.offline.slack import Workspace

from .helpers import connect, stdio

MARKET = MarketData(seed=0)


def _server(name: str):
    with connect(stdio(name)) as session:
        yield session


@pytest.fixture(scope="module")
def polygon():
    yield from _server("polygon")


@pytest.fixture(scope="module")
def fmp():
    yield from _server("fmp")


@pytest.fixture(scope="module")
def tavily():
    yield from _server("tavily")


@pytest.fixture(scope="module")
def python():
    yield from _server("python")


@pytest.fixture(scope="module")
def slack():
    yield from _server("slack")


def test_polygon_tools(polygon):
    assert polygon.tool_names() == ["get_last_quote", "get_daily_bars", "get_previous_close", "get_ticker_details"]
    last, prev = MARKET.last_bar("MSFT"), MARKET.previous_bar("MSFT")

    quote = polygon.ok("get_last_quote", ticker="MSFT")
    assert quote["ticker"] == "MSFT" and quote["price"] == last.close and quote["timestamp"].startswith(MARKET.today)

    bars = polygon.ok("get_daily_bars", ticker="msft", start_date="2025-12-01", end_date="2025-12-31")
    assert bars["count"] == len(bars["bars"]) == 22 and not bars["truncated"]  # December 2025 has 22 sessions
    assert bars["bars"][-1] == {k: getattr(last, k) for k in ("date", "open", "high", "low", "close", "volume")}
    assert all(b["low"] <= min(b["open"], b["close"]) <= max(b["open"], b["close"]) <= b["high"] for b in bars["bars"])

    capped = polygon.ok("get_daily_bars", ticker="MSFT", start_date="2025-01-01", end_date="2025-12-31", limit=5)
    assert capped["count"] == 5 and capped["truncated"] and capped["bars"][0]["date"] == "2025-01-02"

    previous = polygon.ok("get_previous_close", ticker="MSFT")
    assert previous["date"] == prev.date and previous["close"] == prev.close
    text = polygon.call("get_previous_close", ticker="MSFT").content[0].text
    assert json.loads(text) == previous and "\n" not in text  # the text block is the same result on one line

    details = polygon.ok("get_ticker_details", ticker="MSFT")
    assert details["name"] == "Microsoft Corporation" and details["primary_exchange"] == "XNAS"
    assert details["market_cap"] == round(last.close * details["shares_outstanding"])


def test_fmp_tools(fmp):
    assert fmp.tool_names() == ["get_company_profile", "get_quote", "get_income_statement", "get_key_metrics", "get_ratios"]
    profile = fmp.ok("get_company_profile", symbol="JPM")
    assert profile["company_name"] == "JPMorgan Chase & Co." and profile["sector"] == "Financial Services"

    quote = fmp.ok("get_quote", symbol="JPM")
    assert quote["price"] == profile["price"] == MARKET.last_bar("JPM").close
    assert quote["change"] == round(quote["price"] - quote["previous_close"], 2)
    assert quote["pe"] == round(quote["price"] / quote["eps"], 2)
    assert quote["year_low"] <= quote["price"] <= quote["year_high"]

    annual = fmp.ok("get_income_statement", symbol="JPM")
    assert [s["fiscal_year"] for s in annual["statements"]] == [2024, 2023, 2022]
    quarters = fmp.ok("get_income_statement", symbol="JPM", period="quarter", limit=8)["statements"]
    assert [q["period"] for q in quarters[:4]] == ["Q3", "Q2", "Q1", "Q4"]
    fy2024 = [q for q in quarters if q["fiscal_year"] == 2024]
    assert annual["statements"][0]["revenue"] == sum(q["revenue"] for q in fy2024)

    metrics = fmp.ok("get_key_metrics", symbol="JPM", limit=2)["metrics"]
    assert len(metrics) == 2 and metrics[0]["fiscal_year"] == 2024
    fy_close = MARKET.bar_on("JPM", "2024-12-31").close
    assert metrics[0]["pe_ratio"] == round(fy_close / annual["statements"][0]["eps"], 2)

    ratios = fmp.ok("get_ratios", symbol="JPM", limit=1)["ratios"]
    s = annual["statements"][0]
    assert ratios[0]["net_margin"] == round(s["net_income"] / s["revenue"], 4)


def test_polygon_and_fmp_agree(polygon, fmp):
    for ticker in ("AAPL", "XOM", "KO", "NFLX"):
        last = polygon.ok("get_last_quote", ticker=ticker)
        prev = polygon.ok("get_previous_close", ticker=ticker)
        details = polygon.ok("get_ticker_details", ticker=ticker)
        quote = fmp.ok("get_quote", symbol=ticker)
        assert quote["price"] == last["price"]
        assert quote["previous_close"] == prev["close"]
        assert quote["market_cap"] == details["market_cap"]


def test_tavily_tools(tavily, polygon):
    assert tavily.tool_names() == ["search", "extract"]
    found = tavily.ok("search", query="NVIDIA stock 2025 review", max_results=3)
    assert len(found["results"]) == 3
    top = found["results"][0]
    assert "NVDA" in top["title"] and top["url"].startswith("https://") and 0 < top["score"] < 1

    page = tavily.ok("extract", urls=[top["url"], "https://example.com/not-there"])
    assert page["results"][0]["url"] == top["url"] and top["content"].rstrip(".") in page["results"][0]["raw_content"]
    assert page["failed_results"][0]["url"] == "https://example.com/not-there"

    close = polygon.ok("get_last_quote", ticker="NVDA")["price"]
    assert f"ended 2025 at ${close:.2f}" in page["results"][0]["raw_content"]


def test_python_tool(python):
    assert python.tool_names() == ["run_python"]
    result = python.ok("run_python", code="import statistics\nprint(statistics.mean([1, 2, 3, 4]))")
    assert result["stdout"] == "2.5\n" and result["exit_code"] == 0 and not result["timed_out"]
    failed = python.ok("run_python", code="1/0", timeout_s=5)
    assert failed["exit_code"] == 1 and "ZeroDivisionError" in failed["stderr"]


def test_slack_tools(slack):
    assert slack.tool_names() == ["list_channels", "post_message", "get_channel_history", "search_messages", "reset_workspace"]
    channels = {c["name"]: c for c in slack.ok("list_channels")["channels"]}
    assert channels["alerts"]["read_only"] and channels["q3-planning-2024"]["is_archived"]

    seeded = Workspace(seed=0).history("markets", 3)
    history = slack.ok("get_channel_history", channel="#markets", limit=3)
    assert [m["text"] for m in history["messages"]] == [m.text for m in seeded] and history["has_more"]

    posted = slack.ok("post_message", channel="trading-desk", text="Closing out the zebra-42 hedge today.")
    assert posted["channel"] == "trading-desk"
    newest = slack.ok("get_channel_history", channel=channels["trading-desk"]["id"], limit=1)["messages"][0]
    assert newest == {"ts": posted["ts"], "user": "finbot", "text": "Closing out the zebra-42 hedge today."}
    found = slack.ok("search_messages", query="zebra-42 in:#trading-desk")
    assert found["total"] == 1 and found["matches"][0]["channel"] == "trading-desk"

    assert slack.ok("reset_workspace")["messages"] > 0
    assert slack.ok("search_messages", query="zebra-42")["total"] == 0


@pytest.mark.parametrize(
    ("server", "tool", "args", "expected"),
    [
        ("polygon", "get_last_quote", {"ticker": "APPL"}, ["'APPL'", "did you mean 'AAPL'"]),
        (
            "polygon",
            "get_daily_bars",
            {"ticker": "AAPL", "start_date": "12/01/2025", "end_date": "2025-12-31"},
            ["'12/01/2025'", "YYYY-MM-DD"],
        ),
        (
            "polygon",
            "get_daily_bars",
            {"ticker": "AAPL", "start_date": "2030-01-01", "end_date": "2030-02-01"},
            ["2022-01-03 to 2025-12-31"],
        ),
        ("fmp", "get_income_statement", {"symbol": "ZZZZ"}, ["'ZZZZ'", "known: AAPL"]),
        ("fmp", "get_ratios", {"symbol": "AAPL", "limit": 500}, ["limit 500", "1 to 20"]),
        ("tavily", "search", {"query": "  "}, ["query is empty"]),
        ("tavily", "extract", {"urls": []}, ["1 to 10 urls"]),
        ("python", "run_python", {"code": "print(1)", "timeout_s": 999}, ["timeout_s 999", "at most 30"]),
        ("slack", "post_message", {"channel": "genral", "text": "hi"}, ["'genral'", "did you mean 'general'"]),
        ("slack", "post_message", {"channel": "q3-planning-2024", "text": "hi"}, ["archived"]),
        ("slack", "post_message", {"channel": "alerts", "text": "hi"}, ["read-only"]),
    ],
)
def test_bad_input_is_a_clear_error(request, server, tool, args, expected):
    message = request.getfixturevalue(server).error(tool, **args)
    for fragment in expected:
        assert fragment in message
