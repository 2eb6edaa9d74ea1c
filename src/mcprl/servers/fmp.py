"""The `fmp` MCP server: company fundamentals in the shape of Financial Modeling Prep's API."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from mcprl.servers.backends.fmp import CompanyProfile, FmpBackend, IncomeStatements, KeyMetrics, Quote, Ratios
from mcprl.servers.base import DomainServer

Symbol = Annotated[str, Field(description="US stock ticker symbol, e.g. MSFT")]
Limit = Annotated[int, Field(description="number of periods to return, newest first")]


def create_server(backend: FmpBackend) -> DomainServer:
    server = DomainServer("fmp", "Company fundamentals: profile, quote, income statements, key metrics and ratios.")

    @server.tool()
    def get_company_profile(symbol: Symbol) -> CompanyProfile:
        """Company profile: name, sector, industry, price, market cap, employees, website."""
        return backend.company_profile(symbol)

    @server.tool()
    def get_quote(symbol: Symbol) -> Quote:
        """Real-time quote: price, day change, day range, volume, 52-week range, market cap, EPS and P/E."""
        return backend.quote(symbol)

    @server.tool()
    def get_income_statement(
        symbol: Symbol,
        period: Annotated[Literal["annual", "quarter"], Field(description="annual or quarter statements")] = "annual",
        limit: Limit = 4,
    ) -> IncomeStatements:
        """Income statements (revenue, gross profit, operating income, net income in USD; EPS), newest first."""
        return backend.income_statement(symbol, period, limit)

    @server.tool()
    def get_key_metrics(symbol: Symbol, limit: Limit = 4) -> KeyMetrics:
        """Annual valuation metrics at each fiscal year end: market cap, P/E, P/S, P/B, per-share figures, dividend yield."""
        return backend.key_metrics(symbol, limit)

    @server.tool()
    def get_ratios(symbol: Symbol, limit: Limit = 4) -> Ratios:
        """Annual financial ratios as fractions: gross/operating/net margin, return on equity, debt to equity, current ratio."""
        return backend.ratios(symbol, limit)

    return server
