"""Financial Modeling Prep: company profile, quote, income statements, key metrics, ratios."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel

from mcprl.servers.errors import InvalidArgumentError, NotFoundError, UpstreamError
from mcprl.servers.offline.market import MarketData

if TYPE_CHECKING:
    from mcprl.servers.backends.http import ApiClient

Period = Literal["annual", "quarter"]
MAX_ROWS = 20


class CompanyProfile(BaseModel):
    symbol: str
    company_name: str
    price: float | None = None
    market_cap: int | None = None
    exchange: str | None = None
    sector: str | None = None
    industry: str | None = None
    employees: int | None = None
    website: str | None = None
    ipo_date: str | None = None
    description: str | None = None


class Quote(BaseModel):
    symbol: str
    price: float
    change: float | None = None
    change_percent: float | None = None
    previous_close: float | None = None
    open: float | None = None
    day_high: float | None = None
    day_low: float | None = None
    volume: int | None = None
    year_high: float | None = None
    year_low: float | None = None
    market_cap: int | None = None
    eps: float | None = None  # trailing twelve months
    pe: float | None = None


class IncomeStatementRow(BaseModel):
    date: str
    fiscal_year: int
    period: str
    revenue: int | None = None
    gross_profit: int | None = None
    operating_income: int | None = None
    net_income: int | None = None
    eps: float | None = None


class IncomeStatements(BaseModel):
    symbol: str
    period: Period
    statements: list[IncomeStatementRow]


class KeyMetricsRow(BaseModel):
    date: str
    fiscal_year: int
    market_cap: int | None = None
    pe_ratio: float | None = None
    price_to_sales: float | None = None
    price_to_book: float | None = None
    revenue_per_share: float | None = None
    net_income_per_share: float | None = None
    dividend_yield: float | None = None


class KeyMetrics(BaseModel):
    symbol: str
    metrics: list[KeyMetricsRow]


class RatiosRow(BaseModel):
    date: str
    fiscal_year: int
    gross_margin: float | None = None
    operating_margin: float | None = None
    net_margin: float | None = None
    return_on_equity: float | None = None
    debt_to_equity: float | None = None
    current_ratio: float | None = None


class Ratios(BaseModel):
    symbol: str
    ratios: list[RatiosRow]


class FmpBackend(Protocol):
    def company_profile(self, symbol: str) -> CompanyProfile: ...
    def quote(self, symbol: str) -> Quote: ...
    def income_statement(self, symbol: str, period: Period, limit: int) -> IncomeStatements: ...
    def key_metrics(self, symbol: str, limit: int) -> KeyMetrics: ...
    def ratios(self, symbol: str, limit: int) -> Ratios: ...


def _check(limit: int, period: str = "annual") -> None:
    if period not in ("annual", "quarter"):
        raise InvalidArgumentError(f"bad period {period!r}: expected 'annual' or 'quarter'")
    if not 1 <= limit <= MAX_ROWS:
        raise InvalidArgumentError(f"limit {limit} is out of range: use 1 to {MAX_ROWS}")


class OfflineFmp:
    """FMP's view of `MarketData`; the quote price is polygon's last trade, ratios follow from the statements."""

    def __init__(self, market: MarketData) -> None:
        self.market = market

    def company_profile(self, symbol: str) -> CompanyProfile:
        m, c = self.market, self.market.company(symbol)
        return CompanyProfile(
            symbol=c.symbol,
            company_name=c.name,
            price=m.last_bar(c.symbol).close,
            market_cap=m.market_cap(c.symbol),
            exchange=c.exchange,
            sector=c.sector,
            industry=c.industry,
            employees=c.employees,
            website=f"https://www.{c.website}",
            ipo_date=c.list_date,
            description=c.description,
        )

    def quote(self, symbol: str) -> Quote:
        m, c = self.market, self.market.company(symbol)
        last, prev = m.last_bar(c.symbol), m.previous_bar(c.symbol)
        low, high = m.year_range(c.symbol)
        change = round(last.close - prev.close, 2)
        return Quote(
            symbol=c.symbol,
            price=last.close,
            change=change,
            change_percent=round(change / prev.close * 100, 2),
            previous_close=prev.close,
            open=last.open,
            day_high=last.high,
            day_low=last.low,
            volume=last.volume,
            year_high=high,
            year_low=low,
            market_cap=m.market_cap(c.symbol),
            eps=m.ttm_eps(c.symbol),
            pe=m.pe_ratio(c.symbol),
        )

    def income_statement(self, symbol: str, period: Period = "annual", limit: int = 4) -> IncomeStatements:
        _check(limit, period)
        c = self.market.company(symbol)
        rows = self.market.income_statements(c.symbol, period)[:limit]
        fields = IncomeStatementRow.model_fields
        return IncomeStatements(
            symbol=c.symbol, period=period, statements=[IncomeStatementRow(**{k: getattr(r, k) for k in fields}) for r in rows]
        )

    def key_metrics(self, symbol: str, limit: int = 4) -> KeyMetrics:
        _check(limit)
        m, c = self.market, self.market.company(symbol)
        rows = []
        for s in m.income_statements(c.symbol)[:limit]:
            close, bal = m.bar_on(c.symbol, s.date).close, m.balance(c.symbol, s.fiscal_year)
            cap = round(close * s.shares)
            rows.append(
                KeyMetricsRow(
                    date=s.date,
                    fiscal_year=s.fiscal_year,
                    market_cap=cap,
                    pe_ratio=round(close / s.eps, 2) if s.eps > 0 else None,
                    price_to_sales=round(cap / s.revenue, 2),
                    price_to_book=round(cap / bal.total_equity, 2),
                    revenue_per_share=round(s.revenue / s.shares, 2),
                    net_income_per_share=s.eps,
                    dividend_yield=round(bal.dividends_per_share / close, 4),
                )
            )
        return KeyMetrics(symbol=c.symbol, metrics=rows)

    def ratios(self, symbol: str, limit: int = 4) -> Ratios:
        _check(limit)
        m, c = self.market, self.market.company(symbol)
        rows = []
        for s in m.income_statements(c.symbol)[:limit]:
            bal = m.balance(c.symbol, s.fiscal_year)
            rows.append(
                RatiosRow(
                    date=s.date,
                    fiscal_year=s.fiscal_year,
                    gross_margin=round(s.gross_profit / s.revenue, 4),
                    operating_margin=round(s.operating_income / s.revenue, 4),
                    net_margin=round(s.net_income / s.revenue, 4),
                    return_on_equity=round(s.net_income / bal.total_equity, 4),
                    debt_to_equity=round(bal.total_debt / bal.total_equity, 2),
                    current_ratio=bal.current_ratio,
                )
            )
        return Ratios(symbol=c.symbol, ratios=rows)


def _r(value: Any, digits: int) -> float | None:
    """A rounded number from an API field that may be missing, null or a numeric string."""
    try:
        return round(float(value), digits)
    except (TypeError, ValueError):
        return None


def _i(value: Any) -> int | None:
    number = _r(value, 0)
    return int(number) if number is not None else None


def _year(row: dict) -> int:
    year = row.get("calendarYear") or row.get("fiscalYear") or str(row.get("date", "0"))[:4]
    return int(year)


class LiveFmp:
    """financialmodelingprep.com /api/v3 (key sent as the `apikey` query parameter, as FMP requires)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def _rows(self, symbol: str, endpoint: str, params: dict | None = None) -> list[dict]:
        s = symbol.strip().upper()
        body = self.api.get(f"/api/v3/{endpoint}/{s}", params)
        if isinstance(body, dict) and "Error Message" in body:
            raise InvalidArgumentError(f"fmp refused {endpoint} for {s!r}: {self.api.redact(str(body['Error Message']))[:200]}")
        if not body:
            raise NotFoundError(f"unknown symbol {symbol!r}: fmp returned no {endpoint} data")
        return body if isinstance(body, list) else [body]

    def company_profile(self, symbol: str) -> CompanyProfile:
        r = self._rows(symbol, "profile")[0]
        return CompanyProfile(
            symbol=r["symbol"],
            company_name=r.get("companyName") or r["symbol"],
            price=_r(r.get("price"), 2),
            market_cap=_i(r.get("mktCap") or r.get("marketCap")),
            exchange=r.get("exchangeShortName") or r.get("exchange"),
            sector=r.get("sector"),
            industry=r.get("industry"),
            employees=_i(r.get("fullTimeEmployees")),
            website=r.get("website"),
            ipo_date=r.get("ipoDate"),
            description=(r.get("description") or "")[:300] or None,
        )

    def quote(self, symbol: str) -> Quote:
        r = self._rows(symbol, "quote")[0]
        price = _r(r.get("price"), 2)
        if price is None:
            raise UpstreamError(f"fmp returned a quote without a price for {symbol!r}")
        return Quote(
            symbol=r["symbol"],
            price=price,
            change=_r(r.get("change"), 2),
            change_percent=_r(r.get("changesPercentage"), 2),
            previous_close=_r(r.get("previousClose"), 2),
            open=_r(r.get("open"), 2),
            day_high=_r(r.get("dayHigh"), 2),
            day_low=_r(r.get("dayLow"), 2),
            volume=_i(r.get("volume")),
            year_high=_r(r.get("yearHigh"), 2),
            year_low=_r(r.get("yearLow"), 2),
            market_cap=_i(r.get("marketCap")),
            eps=_r(r.get("eps"), 2),
            pe=_r(r.get("pe"), 2),
        )

    def income_statement(self, symbol: str, period: Period = "annual", limit: int = 4) -> IncomeStatements:
        _check(limit, period)
        rows = self._rows(symbol, "income-statement", {"period": period, "limit": limit})[:limit]
        return IncomeStatements(
            symbol=symbol.strip().upper(),
            period=period,
            statements=[
                IncomeStatementRow(
                    date=r["date"],
                    fiscal_year=_year(r),
                    period=r.get("period", "FY"),
                    revenue=_i(r.get("revenue")),
                    gross_profit=_i(r.get("grossProfit")),
                    operating_income=_i(r.get("operatingIncome")),
                    net_income=_i(r.get("netIncome")),
                    eps=_r(r.get("eps"), 2),
                )
                for r in rows
            ],
        )

    def key_metrics(self, symbol: str, limit: int = 4) -> KeyMetrics:
        _check(limit)
        rows = self._rows(symbol, "key-metrics", {"period": "annual", "limit": limit})[:limit]
        return KeyMetrics(
            symbol=symbol.strip().upper(),
            metrics=[
                KeyMetricsRow(
                    date=r["date"],
                    fiscal_year=_year(r),
                    market_cap=_i(r.get("marketCap")),
                    pe_ratio=_r(r.get("peRatio"), 2),
                    price_to_sales=_r(r.get("priceToSalesRatio"), 2),
                    price_to_book=_r(r.get("pbRatio"), 2),
                    revenue_per_share=_r(r.get("revenuePerShare"), 2),
                    net_income_per_share=_r(r.get("netIncomePerShare"), 2),
                    dividend_yield=_r(r.get("dividendYield"), 4),
                )
                for r in rows
            ],
        )

    def ratios(self, symbol: str, limit: int = 4) -> Ratios:
        _check(limit)
        rows = self._rows(symbol, "ratios", {"period": "annual", "limit": limit})[:limit]
        return Ratios(
            symbol=symbol.strip().upper(),
            ratios=[
                RatiosRow(
                    date=r["date"],
                    fiscal_year=_year(r),
                    gross_margin=_r(r.get("grossProfitMargin"), 4),
                    operating_margin=_r(r.get("operatingProfitMargin"), 4),
                    net_margin=_r(r.get("netProfitMargin"), 4),
                    return_on_equity=_r(r.get("returnOnEquity"), 4),
                    debt_to_equity=_r(r.get("debtEquityRatio"), 2),
                    current_ratio=_r(r.get("currentRatio"), 2),
                )
                for r in rows
            ],
        )
