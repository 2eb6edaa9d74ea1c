"""The `polygon` MCP server: US stock prices in the shape of Polygon.io's most used endpoints."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from mcprl.servers.backends.polygon import DailyBars, LastQuote, PolygonBackend, PreviousClose, TickerDetails
from mcprl.servers.base import DomainServer

Ticker = Annotated[str, Field(description="US stock ticker symbol, e.g. AAPL")]
Date = Annotated[str, Field(description="date as YYYY-MM-DD")]


def create_server(backend: PolygonBackend) -> DomainServer:
    server = DomainServer("polygon", "US stock market data: last trade, daily OHLCV bars, previous close, company reference.")

    @server.tool()
    def get_last_quote(ticker: Ticker) -> LastQuote:
        """Latest trade price of a stock."""
        return backend.last_quote(ticker)

    @server.tool()
    def get_daily_bars(
        ticker: Ticker,
        start_date: Date,
        end_date: Date,
        limit: Annotated[int, Field(description="most bars to return, oldest first")] = 30,
    ) -> DailyBars:
        """Daily open/high/low/close/volume bars of a stock between two dates (inclusive)."""
        return backend.daily_bars(ticker, start_date, end_date, limit)

    @server.tool()
    def get_previous_close(ticker: Ticker) -> PreviousClose:
        """The previous trading session's open, high, low, close and volume of a stock."""
        return backend.previous_close(ticker)

    @server.tool()
    def get_ticker_details(ticker: Ticker) -> TickerDetails:
        """Company reference data for a ticker: name, exchange, industry, market cap, shares, employees."""
        return backend.ticker_details(ticker)

    return server
