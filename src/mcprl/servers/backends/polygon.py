"""Polygon.io stocks: last trade, daily aggregates, previous close, ticker reference."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

from mcprl.servers.errors import InvalidArgumentError, NotFoundError
from mcprl.servers.offline.market import MarketData, parse_date

if TYPE_CHECKING:
    from mcprl.servers.backends.http import ApiClient

MAX_BARS = 260


class LastQuote(BaseModel):
    ticker: str
    price: float
    size: int | None = None
    timestamp: str  # ISO 8601, UTC


class DailyBar(BaseModel):
    date: str
    open: float
    high: float
    low: float
    close: float
    volume: int


class DailyBars(BaseModel):
    ticker: str
    count: int
    truncated: bool  # more sessions in the range than `limit`
    bars: list[DailyBar]


class PreviousClose(DailyBar):
    ticker: str


class TickerDetails(BaseModel):
    ticker: str
    name: str
    primary_exchange: str | None = None
    industry: str | None = None
    market_cap: int | None = None
    shares_outstanding: int | None = None
    total_employees: int | None = None
    homepage_url: str | None = None
    list_date: str | None = None


class PolygonBackend(Protocol):
    def last_quote(self, ticker: str) -> LastQuote: ...
    def daily_bars(self, ticker: str, start_date: str, end_date: str, limit: int) -> DailyBars: ...
    def previous_close(self, ticker: str) -> PreviousClose: ...
    def ticker_details(self, ticker: str) -> TickerDetails: ...


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_BARS:
        raise InvalidArgumentError(f"limit {limit} is out of range: use 1 to {MAX_BARS}")


_MIC = {"NASDAQ": "XNAS", "NYSE": "XNYS"}


class OfflinePolygon:
    """Polygon's view of `MarketData`: the last session's close is the last trade."""

    def __init__(self, market: MarketData) -> None:
        self.market = market

    def last_quote(self, ticker: str) -> LastQuote:
        company, bar = self.market.company(ticker), self.market.last_bar(ticker)
        return LastQuote(ticker=company.symbol, price=bar.close, size=100, timestamp=f"{bar.date}T20:59:59Z")

    def daily_bars(self, ticker: str, start_date: str, end_date: str, limit: int = 30) -> DailyBars:
        _check_limit(limit)
        company = self.market.company(ticker)
        bars = self.market.bars_between(company.symbol, start_date, end_date)
        shown = [DailyBar(**vars(b)) for b in bars[:limit]]
        return DailyBars(ticker=company.symbol, count=len(shown), truncated=len(bars) > limit, bars=shown)

    def previous_close(self, ticker: str) -> PreviousClose:
        company = self.market.company(ticker)
        return PreviousClose(ticker=company.symbol, **vars(self.market.previous_bar(company.symbol)))

    def ticker_details(self, ticker: str) -> TickerDetails:
        c = self.market.company(ticker)
        return TickerDetails(
            ticker=c.symbol,
            name=c.name,
            primary_exchange=_MIC[c.exchange],
            industry=c.industry,
            market_cap=self.market.market_cap(c.symbol),
            shares_outstanding=c.shares_outstanding,
            total_employees=c.employees,
            homepage_url=f"https://www.{c.website}",
            list_date=c.list_date,
        )


def _utc(ns_or_ms: int, unit: str) -> dt.datetime:
    seconds = ns_or_ms / (1e9 if unit == "ns" else 1e3)
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _bar(row: dict) -> DailyBar:
    return DailyBar(
        date=_utc(row["t"], "ms").date().isoformat(),
        open=round(row["o"], 2),
        high=round(row["h"], 2),
        low=round(row["l"], 2),
        close=round(row["c"], 2),
        volume=int(row.get("v", 0)),
    )


class LivePolygon:
    """api.polygon.io (key sent as a Bearer header)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def _get(self, ticker: str, path: str, params: dict | None = None) -> dict:
        try:
            return self.api.get(path, params)
        except NotFoundError:
            raise NotFoundError(f"unknown ticker {ticker!r}: polygon has no data for it") from None

    def last_quote(self, ticker: str) -> LastQuote:
        t = ticker.strip().upper()
        r = self._get(t, f"/v2/last/trade/{t}").get("results") or {}
        if "p" not in r:
            raise NotFoundError(f"unknown ticker {ticker!r}: polygon returned no last trade")
        stamp = _utc(r["t"], "ns").isoformat(timespec="seconds").replace("+00:00", "Z") if "t" in r else ""
        return LastQuote(ticker=r.get("T", t), price=round(r["p"], 2), size=r.get("s"), timestamp=stamp)

    def daily_bars(self, ticker: str, start_date: str, end_date: str, limit: int = 30) -> DailyBars:
        _check_limit(limit)
        t, start, end = ticker.strip().upper(), parse_date(start_date, "start_date"), parse_date(end_date, "end_date")
        if start > end:
            raise InvalidArgumentError(f"start_date {start} is after end_date {end}")
        body = self._get(t, f"/v2/aggs/ticker/{t}/range/1/day/{start}/{end}", {"adjusted": "true", "sort": "asc", "limit": 50000})
        rows = body.get("results") or []
        shown = [_bar(row) for row in rows[:limit]]
        return DailyBars(ticker=t, count=len(shown), truncated=len(rows) > limit, bars=shown)

    def previous_close(self, ticker: str) -> PreviousClose:
        t = ticker.strip().upper()
        rows = self._get(t, f"/v2/aggs/ticker/{t}/prev", {"adjusted": "true"}).get("results") or []
        if not rows:
            raise NotFoundError(f"unknown ticker {ticker!r}: polygon returned no previous close")
        return PreviousClose(ticker=t, **_bar(rows[0]).model_dump())

    def ticker_details(self, ticker: str) -> TickerDetails:
        t = ticker.strip().upper()
        r = self._get(t, f"/v3/reference/tickers/{t}").get("results") or {}
        if not r:
            raise NotFoundError(f"unknown ticker {ticker!r}: polygon returned no details")
        cap, shares = r.get("market_cap"), r.get("share_class_shares_outstanding") or r.get("weighted_shares_outstanding")
        return TickerDetails(
            ticker=r.get("ticker", t),
            name=r.get("name", t),
            primary_exchange=r.get("primary_exchange"),
            industry=r.get("sic_description"),
            market_cap=int(cap) if cap is not None else None,
            shares_outstanding=int(shares) if shares else None,
            total_employees=r.get("total_employees"),
            homepage_url=r.get("homepage_url"),
            list_date=r.get("list_date"),
        )
