"""Live backends against httpx.MockTransport fakes of each API: requests, mapping, errors, and no key leaks."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from mcp import Client

from mcprl.servers import polygon as polygon_server
from mcprl.servers.backends.fmp import LiveFmp
from mcprl.servers.backends.http import ApiClient, require_key
from mcprl.servers.backends.polygon import LivePolygon
from mcprl.servers.backends.slack import LiveSlack
from mcprl.servers.backends.tavily import LiveSearch
from mcprl.servers.errors import (
    InvalidArgumentError,
    MissingCredentialsError,
    NotFoundError,
    PermissionDeniedError,
    ServiceError,
    UpstreamError,
)
from mcprl.servers.registry import build_server

KEY = "sk-live-SECRET-0123456789"


def _client(service: str, handler, **kw) -> ApiClient:
    return ApiClient(
        service,
        f"https://api.{service}.test",
        KEY,
        key_env=f"{service.upper()}_API_KEY",
        transport=httpx.MockTransport(handler),
        **kw,
    )


def _no_key(*payloads: object) -> None:
    for payload in payloads:
        text = payload.model_dump_json() if hasattr(payload, "model_dump_json") else str(payload)
        assert KEY not in text


def _error(call) -> ServiceError:
    with pytest.raises(ServiceError) as info:
        call()
    _no_key(info.value)
    return info.value


# --- polygon -------------------------------------------------------------

AAPL_DAY_MS = 1735621200000  # 2024-12-31 05:00 UTC, a daily bar's start in New York time


def polygon_api(request: httpx.Request) -> httpx.Response:
    assert request.headers["Authorization"] == f"Bearer {KEY}" and "apiKey" not in request.url.params
    path = request.url.path
    if "ZZZZ" in path:
        return httpx.Response(404, json={"status": "NOT_FOUND", "message": "Ticker not found.", "request_id": "r1"})
    if path == "/v2/last/trade/AAPL":
        return httpx.Response(
            200, json={"status": "OK", "results": {"T": "AAPL", "p": 250.4213, "s": 300, "t": 1735678800123456789}}
        )
    if path == "/v2/aggs/ticker/AAPL/range/1/day/2024-12-30/2024-12-31":
        assert request.url.params["adjusted"] == "true" and request.url.params["sort"] == "asc"
        bar = {"v": 3.9e7, "vw": 250.1, "o": 252.2, "c": 250.42, "h": 253.5, "l": 249.43, "t": AAPL_DAY_MS, "n": 500000}
        first = {**bar, "t": AAPL_DAY_MS - 86_400_000, "c": 252.2}
        return httpx.Response(200, json={"ticker": "AAPL", "resultsCount": 2, "results": [first, bar], "status": "OK"})
    if path == "/v2/aggs/ticker/AAPL/prev":
        bar = {"T": "AAPL", "v": 3.9e7, "o": 252.2, "c": 250.42, "h": 253.5, "l": 249.43, "t": AAPL_DAY_MS}
        return httpx.Response(200, json={"ticker": "AAPL", "resultsCount": 1, "results": [bar], "status": "OK"})
    if path == "/v3/reference/tickers/AAPL":
        results = {
            "ticker": "AAPL",
            "name": "Apple Inc.",
            "primary_exchange": "XNAS",
            "sic_description": "ELECTRONIC COMPUTERS",
            "market_cap": 3.78e12,
            "share_class_shares_outstanding": 15115823000,
            "total_employees": 164000,
            "homepage_url": "https://www.apple.com",
            "list_date": "1980-12-12",
        }
        return httpx.Response(200, json={"status": "OK", "results": results})
    return httpx.Response(401, json={"status": "ERROR", "message": f"Unknown API Key {KEY}"})


def test_polygon_requests_and_mapping():
    api = LivePolygon(_client("polygon", polygon_api))
    quote = api.last_quote("aapl")
    assert (quote.ticker, quote.price, quote.size, quote.timestamp) == ("AAPL", 250.42, 300, "2024-12-31T21:00:00Z")
    bars = api.daily_bars("AAPL", "2024-12-30", "2024-12-31", limit=1)
    assert bars.count == 1 and bars.truncated and bars.bars[0].date == "2024-12-30" and bars.bars[0].close == 252.2
    prev = api.previous_close("AAPL")
    assert (prev.date, prev.close, prev.volume) == ("2024-12-31", 250.42, 39_000_000)
    details = api.ticker_details("AAPL")
    assert details.market_cap == 3_780_000_000_000 and details.industry == "ELECTRONIC COMPUTERS"
    _no_key(quote, bars, prev, details)


def test_polygon_errors_name_the_ticker_and_never_the_key():
    api = LivePolygon(_client("polygon", polygon_api))
    err = _error(lambda: api.last_quote("ZZZZ"))
    assert isinstance(err, NotFoundError) and "'ZZZZ'" in str(err)
    err = _error(lambda: api.last_quote("MSFT"))  # the fake answers 401 with the key in its message
    assert isinstance(err, UpstreamError) and "POLYGON_API_KEY" in str(err) and "***" in str(err)
    err = _error(lambda: api.daily_bars("AAPL", "2024-12-31", "2024-12-30", 5))
    assert isinstance(err, InvalidArgumentError)


def test_polygon_error_reaches_the_model_without_the_key():
    server = polygon_server.create_server(LivePolygon(_client("polygon", polygon_api)))

    async def call():
        async with Client(server) as client:
            return await client.call_tool("get_ticker_details", {"ticker": "MSFT"})

    result = anyio.run(call)
    assert result.is_error and "refused the credentials" in result.content[0].text and KEY not in result.content[0].text


# --- fmp -----------------------------------------------------------------


def fmp_api(request: httpx.Request) -> httpx.Response:
    assert request.url.params["apikey"] == KEY and "Authorization" not in request.headers
    path = request.url.path
    if path == "/api/v3/profile/MSFT":
        return httpx.Response(
            200,
            json=[
                {
                    "symbol": "MSFT",
                    "companyName": "Microsoft Corporation",
                    "price": 421.5,
                    "mktCap": 3133802247084,
                    "exchangeShortName": "NASDAQ",
                    "sector": "Technology",
                    "industry": "Software - Infrastructure",
                    "fullTimeEmployees": "228000",
                    "website": "https://www.microsoft.com",
                    "ipoDate": "1986-03-13",
                    "description": "Microsoft Corporation develops software.",
                }
            ],
        )
    if path == "/api/v3/quote/MSFT":
        return httpx.Response(
            200,
            json=[
                {
                    "symbol": "MSFT",
                    "price": 421.5,
                    "changesPercentage": 0.8123,
                    "change": 3.4,
                    "dayLow": 417.0,
                    "dayHigh": 423.1,
                    "yearHigh": 468.35,
                    "yearLow": 385.58,
                    "marketCap": 3133802247084,
                    "volume": 18000000,
                    "open": 418.2,
                    "previousClose": 418.1,
                    "eps": 12.12,
                    "pe": 34.78,
                }
            ],
        )
    if path == "/api/v3/income-statement/MSFT":
        assert request.url.params["period"] == "quarter" and request.url.params["limit"] == "1"
        return httpx.Response(
            200,
            json=[
                {
                    "date": "2024-09-30",
                    "calendarYear": "2025",
                    "period": "Q1",
                    "revenue": 65585000000,
                    "grossProfit": 45486000000,
                    "operatingIncome": 30552000000,
                    "netIncome": 24667000000,
                    "eps": 3.32,
                }
            ],
        )
    if path == "/api/v3/key-metrics/MSFT":
        return httpx.Response(
            200,
            json=[
                {
                    "date": "2024-06-30",
                    "calendarYear": "2024",
                    "marketCap": 3.32e12,
                    "peRatio": 37.9123,
                    "priceToSalesRatio": 13.53,
                    "pbRatio": 12.4,
                    "revenuePerShare": 32.99,
                    "netIncomePerShare": 11.8,
                    "dividendYield": 0.00661,
                }
            ],
        )
    if path == "/api/v3/ratios/MSFT":
        return httpx.Response(
            200,
            json=[
                {
                    "date": "2024-06-30",
                    "calendarYear": "2024",
                    "grossProfitMargin": 0.69764,
                    "operatingProfitMargin": 0.44644,
                    "netProfitMargin": 0.35956,
                    "returnOnEquity": 0.32834,
                    "debtEquityRatio": 0.2902,
                    "currentRatio": 1.2749,
                }
            ],
        )
    if path == "/api/v3/quote/NOPE":
        return httpx.Response(200, json=[])
    return httpx.Response(500, json={"Error Message": f"Internal error for apikey={KEY}"})


def test_fmp_requests_and_mapping():
    api = LiveFmp(_client("fmp", fmp_api, auth="query", query_param="apikey"))
    profile = api.company_profile("msft")
    assert profile.company_name == "Microsoft Corporation" and profile.employees == 228000 and profile.market_cap == 3133802247084
    quote = api.quote("MSFT")
    assert (quote.price, quote.change_percent, quote.previous_close, quote.pe) == (421.5, 0.81, 418.1, 34.78)
    income = api.income_statement("MSFT", "quarter", 1)
    assert income.statements[0].fiscal_year == 2025 and income.statements[0].net_income == 24667000000
    metrics = api.key_metrics("MSFT", 1).metrics[0]
    assert metrics.pe_ratio == 37.91 and metrics.dividend_yield == 0.0066
    ratios = api.ratios("MSFT", 1).ratios[0]
    assert ratios.gross_margin == 0.6976 and ratios.debt_to_equity == 0.29
    _no_key(profile, quote, income, metrics, ratios)


def test_fmp_errors_never_carry_the_query_key():
    api = LiveFmp(_client("fmp", fmp_api, auth="query", query_param="apikey"))
    assert isinstance(_error(lambda: api.quote("NOPE")), NotFoundError)
    err = _error(lambda: api.ratios("AAPL", 1))  # HTTP 500 whose body quotes the key
    assert isinstance(err, UpstreamError) and "HTTP 500" in str(err) and "/api/v3/ratios/AAPL" in str(err)

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot connect to {request.url}", request=request)  # the URL holds the key

    err = _error(lambda: LiveFmp(_client("fmp", unreachable, auth="query")).quote("MSFT"))
    assert "could not reach fmp" in str(err)


# --- tavily --------------------------------------------------------------


def tavily_api(request: httpx.Request) -> httpx.Response:
    assert request.method == "POST" and request.headers["Authorization"] == f"Bearer {KEY}"
    body = json.loads(request.content)
    assert "api_key" not in body
    if request.url.path == "/search":
        assert body["max_results"] == 2
        results = [
            {"title": f"Result {i}", "url": f"https://news.test/{i}", "content": "x" * 1000, "score": 0.91234 - i / 10}
            for i in range(3)
        ]
        return httpx.Response(200, json={"query": body["query"], "results": results, "response_time": 0.5})
    if request.url.path == "/extract":
        return httpx.Response(
            200,
            json={
                "results": [{"url": body["urls"][0], "raw_content": "y" * 10000}],
                "failed_results": [{"url": u, "error": "timeout"} for u in body["urls"][1:]],
            },
        )
    return httpx.Response(400, json={"detail": {"error": "bad request"}})


def test_tavily_requests_and_mapping():
    api = LiveSearch(_client("tavily", tavily_api))
    found = api.search("apple earnings", max_results=2)
    assert [r.url for r in found.results] == ["https://news.test/0", "https://news.test/1"]
    assert found.results[0].score == 0.912 and "truncated" in found.results[0].content and len(found.results[0].content) < 500
    pages = api.extract(["https://news.test/0", "https://news.test/9"])
    assert len(pages.results[0].raw_content) < 4100 and pages.failed_results[0].error == "timeout"
    _no_key(found, pages)
    assert isinstance(_error(lambda: api.extract([])), InvalidArgumentError)


# --- slack ---------------------------------------------------------------

CHANNELS = [
    {"id": "C01GENERAL", "name": "general", "topic": {"value": "Announcements"}, "num_members": 12, "is_archived": False},
    {"id": "C02OLDPROJ", "name": "old-project", "topic": {"value": ""}, "num_members": 3, "is_archived": True},
]


def slack_api(request: httpx.Request) -> httpx.Response:
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    method = request.url.path.rsplit("/", 1)[-1]
    if method == "conversations.list":
        return httpx.Response(200, json={"ok": True, "channels": CHANNELS})
    if method == "chat.postMessage":
        body = json.loads(request.content)
        if body["channel"] == "C02OLDPROJ":
            return httpx.Response(200, json={"ok": False, "error": "is_archived"})
        return httpx.Response(
            200, json={"ok": True, "channel": body["channel"], "ts": "1735689600.000100", "message": {"text": body["text"]}}
        )
    if method == "conversations.history":
        assert request.url.params["channel"] == "C01GENERAL"
        msgs = [{"type": "message", "user": "U123", "text": "hello", "ts": "1735689500.000100"}]
        return httpx.Response(200, json={"ok": True, "messages": msgs, "has_more": True})
    if method == "search.messages":
        return httpx.Response(200, json={"ok": False, "error": "not_allowed_token_type"})
    return httpx.Response(200, json={"ok": False, "error": "invalid_auth"})


def test_slack_requests_and_mapping():
    api = LiveSlack(_client("slack", slack_api))
    channels = api.list_channels().channels
    assert [(c.name, c.is_archived, c.topic) for c in channels] == [
        ("general", False, "Announcements"),
        ("old-project", True, ""),
    ]
    posted = api.post_message("#general", "Q4 numbers are in")
    assert (posted.channel, posted.ts, posted.text) == ("general", "1735689600.000100", "Q4 numbers are in")
    history = api.channel_history("general", 5)
    assert history.has_more and history.messages[0].user == "U123"
    _no_key(channels, posted, history)


def test_slack_errors_are_typed():
    api = LiveSlack(_client("slack", slack_api))
    assert isinstance(_error(lambda: api.post_message("old-project", "hi")), PermissionDeniedError)
    assert "did you mean 'general'" in str(_error(lambda: api.post_message("genral", "hi")))
    assert "user token" in str(_error(lambda: api.search_messages("hello", 5)))
    assert isinstance(_error(lambda: api.reset()), InvalidArgumentError)


# --- start-up ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "env"),
    [("polygon", "POLYGON_API_KEY"), ("fmp", "FMP_API_KEY"), ("tavily", "TAVILY_API_KEY"), ("slack", "SLACK_BOT_TOKEN")],
)
def test_live_without_key_fails_naming_the_variable(name, env, monkeypatch):
    monkeypatch.delenv(env, raising=False)
    with pytest.raises(MissingCredentialsError, match=f"^{env} is not set"):
        build_server(name, backend="live")


def test_live_with_key_builds_and_python_stays_local(monkeypatch):
    monkeypatch.setenv("POLYGON_API_KEY", KEY)
    assert build_server("polygon", backend="live").name == "polygon"
    assert build_server("python", backend="live").name == "python"
    monkeypatch.setenv("FMP_API_KEY", "  ")
    with pytest.raises(MissingCredentialsError):
        require_key("FMP_API_KEY")
