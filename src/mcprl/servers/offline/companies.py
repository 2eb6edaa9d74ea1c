"""The fixed universe of 50 US large caps: real symbols and names, synthetic numbers.

The numbers (starting price, revenue, margins, head count) only set the scale of the seeded
series in `market.py`; nothing here claims to be a real figure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompanySpec:
    """Seed parameters of one company; `market.MarketData` turns them into prices and statements."""

    symbol: str
    name: str
    exchange: str  # NASDAQ or NYSE
    sector: str
    industry: str
    start_price: float  # close before the first session, USD
    shares_m: int  # shares outstanding, millions
    revenue_b: float  # FY2022 revenue, USD billions
    gross_margin: float
    operating_margin: float
    net_margin: float
    employees: int
    list_date: str
    website: str
    growth: float  # mean yearly revenue growth
    dividend_yield: float
    beta: float


# fmt: off
_ROWS = [
    # symbol, name, exchange, sector, industry, price, shares_m, revenue_b, gm, om, nm, employees, list_date, website, growth, div_yield, beta
    ("AAPL", "Apple Inc.", "NASDAQ", "Technology", "Consumer Electronics", 178.0, 15500, 394.3, 0.43, 0.30, 0.25, 164000, "1980-12-12", "apple.com", 0.03, 0.005, 1.2),
    ("MSFT", "Microsoft Corporation", "NASDAQ", "Technology", "Software - Infrastructure", 335.0, 7430, 198.3, 0.68, 0.42, 0.36, 221000, "1986-03-13", "microsoft.com", 0.12, 0.008, 0.9),
    ("NVDA", "NVIDIA Corporation", "NASDAQ", "Technology", "Semiconductors", 30.0, 24500, 27.0, 0.65, 0.40, 0.35, 29600, "1999-01-22", "nvidia.com", 0.60, 0.0003, 1.7),
    ("GOOGL", "Alphabet Inc.", "NASDAQ", "Communication Services", "Internet Content & Information", 145.0, 12300, 282.8, 0.55, 0.26, 0.21, 182000, "2004-08-19", "abc.xyz", 0.10, 0.0, 1.05),
    ("AMZN", "Amazon.com, Inc.", "NASDAQ", "Consumer Cyclical", "Internet Retail", 167.0, 10300, 514.0, 0.44, 0.03, 0.02, 1540000, "1997-05-15", "amazon.com", 0.11, 0.0, 1.15),
    ("META", "Meta Platforms, Inc.", "NASDAQ", "Communication Services", "Internet Content & Information", 338.0, 2600, 116.6, 0.78, 0.25, 0.20, 86000, "2012-05-18", "meta.com", 0.12, 0.0, 1.25),
    ("TSLA", "Tesla, Inc.", "NASDAQ", "Consumer Cyclical", "Auto Manufacturers", 400.0, 3180, 81.5, 0.25, 0.17, 0.15, 127000, "2010-06-29", "tesla.com", 0.15, 0.0, 2.0),
    ("AVGO", "Broadcom Inc.", "NASDAQ", "Technology", "Semiconductors", 66.0, 4650, 33.2, 0.66, 0.43, 0.35, 20000, "2009-08-06", "broadcom.com", 0.15, 0.02, 1.1),
    ("ORCL", "Oracle Corporation", "NYSE", "Technology", "Software - Infrastructure", 87.0, 2700, 42.4, 0.73, 0.27, 0.16, 164000, "1986-03-12", "oracle.com", 0.08, 0.015, 1.0),
    ("CRM", "Salesforce, Inc.", "NYSE", "Technology", "Software - Application", 254.0, 1000, 31.4, 0.73, 0.06, 0.04, 79000, "2004-06-23", "salesforce.com", 0.11, 0.0, 1.2),
    ("ADBE", "Adobe Inc.", "NASDAQ", "Technology", "Software - Infrastructure", 567.0, 460, 17.6, 0.88, 0.35, 0.27, 29000, "1986-08-13", "adobe.com", 0.10, 0.0, 1.2),
    ("AMD", "Advanced Micro Devices, Inc.", "NASDAQ", "Technology", "Semiconductors", 144.0, 1620, 23.6, 0.45, 0.05, 0.06, 25000, "1972-09-27", "amd.com", 0.10, 0.0, 1.7),
    ("INTC", "Intel Corporation", "NASDAQ", "Technology", "Semiconductors", 51.0, 4200, 63.1, 0.42, 0.04, 0.05, 124800, "1971-10-13", "intel.com", -0.05, 0.02, 1.0),
    ("CSCO", "Cisco Systems, Inc.", "NASDAQ", "Technology", "Communication Equipment", 63.0, 4100, 51.6, 0.62, 0.27, 0.23, 83300, "1990-02-16", "cisco.com", 0.03, 0.028, 0.85),
    ("IBM", "International Business Machines Corporation", "NYSE", "Technology", "Information Technology Services", 134.0, 910, 60.5, 0.54, 0.14, 0.08, 288000, "1915-11-11", "ibm.com", 0.02, 0.045, 0.75),
    ("QCOM", "QUALCOMM Incorporated", "NASDAQ", "Technology", "Semiconductors", 183.0, 1120, 44.2, 0.58, 0.35, 0.29, 51000, "1991-12-13", "qualcomm.com", 0.03, 0.02, 1.3),
    ("NFLX", "Netflix, Inc.", "NASDAQ", "Communication Services", "Entertainment", 600.0, 445, 31.6, 0.39, 0.18, 0.14, 12800, "2002-05-23", "netflix.com", 0.10, 0.0, 1.3),
    ("JPM", "JPMorgan Chase & Co.", "NYSE", "Financial Services", "Banks - Diversified", 158.0, 2900, 128.7, 0.90, 0.38, 0.30, 309000, "1969-03-05", "jpmorganchase.com", 0.08, 0.025, 1.1),
    ("BAC", "Bank of America Corporation", "NYSE", "Financial Services", "Banks - Diversified", 44.0, 8000, 95.0, 0.90, 0.32, 0.27, 213000, "1973-01-02", "bankofamerica.com", 0.05, 0.025, 1.3),
    ("WFC", "Wells Fargo & Company", "NYSE", "Financial Services", "Banks - Diversified", 48.0, 3800, 74.4, 0.90, 0.22, 0.18, 238000, "1972-06-01", "wellsfargo.com", 0.05, 0.025, 1.15),
    ("GS", "The Goldman Sachs Group, Inc.", "NYSE", "Financial Services", "Capital Markets", 383.0, 335, 47.4, 0.85, 0.30, 0.24, 45300, "1999-05-04", "goldmansachs.com", 0.05, 0.025, 1.35),
    ("V", "Visa Inc.", "NYSE", "Financial Services", "Credit Services", 217.0, 2050, 29.3, 0.80, 0.67, 0.51, 26500, "2008-03-19", "visa.com", 0.11, 0.007, 0.95),
    ("MA", "Mastercard Incorporated", "NYSE", "Financial Services", "Credit Services", 359.0, 955, 22.2, 0.76, 0.56, 0.44, 29900, "2006-05-25", "mastercard.com", 0.12, 0.005, 1.05),
    ("JNJ", "Johnson & Johnson", "NYSE", "Healthcare", "Drug Manufacturers - General", 171.0, 2600, 94.9, 0.68, 0.25, 0.19, 152700, "1944-09-25", "jnj.com", 0.03, 0.029, 0.55),
    ("UNH", "UnitedHealth Group Incorporated", "NYSE", "Healthcare", "Healthcare Plans", 502.0, 935, 324.2, 0.24, 0.09, 0.06, 400000, "1984-10-17", "unitedhealthgroup.com", 0.10, 0.015, 0.6),
    ("PFE", "Pfizer Inc.", "NYSE", "Healthcare", "Drug Manufacturers - General", 59.0, 5620, 100.3, 0.66, 0.36, 0.31, 83000, "1942-01-02", "pfizer.com", -0.15, 0.035, 0.6),
    ("MRK", "Merck & Co., Inc.", "NYSE", "Healthcare", "Drug Manufacturers - General", 77.0, 2530, 59.3, 0.71, 0.30, 0.25, 69000, "1946-01-02", "merck.com", 0.05, 0.03, 0.45),
    ("ABBV", "AbbVie Inc.", "NYSE", "Healthcare", "Drug Manufacturers - General", 135.0, 1765, 58.1, 0.70, 0.31, 0.20, 50000, "2012-12-10", "abbvie.com", 0.02, 0.04, 0.6),
    ("LLY", "Eli Lilly and Company", "NYSE", "Healthcare", "Drug Manufacturers - General", 276.0, 950, 28.5, 0.76, 0.27, 0.22, 39000, "1970-07-09", "lilly.com", 0.20, 0.012, 0.45),
    ("PG", "The Procter & Gamble Company", "NYSE", "Consumer Defensive", "Household & Personal Products", 163.0, 2360, 80.2, 0.47, 0.22, 0.18, 106000, "1950-03-22", "pg.com", 0.03, 0.024, 0.4),
    ("KO", "The Coca-Cola Company", "NYSE", "Consumer Defensive", "Beverages - Non-Alcoholic", 59.0, 4325, 43.0, 0.58, 0.29, 0.22, 82500, "1919-09-05", "coca-colacompany.com", 0.05, 0.03, 0.6),
    ("PEP", "PepsiCo, Inc.", "NASDAQ", "Consumer Defensive", "Beverages - Non-Alcoholic", 173.0, 1375, 86.4, 0.53, 0.13, 0.10, 315000, "1972-06-01", "pepsico.com", 0.05, 0.028, 0.55),
    ("WMT", "Walmart Inc.", "NYSE", "Consumer Defensive", "Discount Stores", 48.0, 8050, 611.3, 0.24, 0.034, 0.019, 2100000, "1972-08-25", "walmart.com", 0.05, 0.015, 0.5),
    ("COST", "Costco Wholesale Corporation", "NASDAQ", "Consumer Defensive", "Discount Stores", 565.0, 443, 227.0, 0.12, 0.034, 0.026, 316000, "1985-12-05", "costco.com", 0.08, 0.008, 0.8),
    ("HD", "The Home Depot, Inc.", "NYSE", "Consumer Cyclical", "Home Improvement Retail", 414.0, 1010, 157.4, 0.335, 0.154, 0.108, 471600, "1981-09-22", "homedepot.com", 0.02, 0.023, 1.0),
    ("MCD", "McDonald's Corporation", "NYSE", "Consumer Cyclical", "Restaurants", 268.0, 730, 23.2, 0.57, 0.40, 0.26, 150000, "1966-04-21", "mcdonalds.com", 0.05, 0.022, 0.7),
    ("SBUX", "Starbucks Corporation", "NASDAQ", "Consumer Cyclical", "Restaurants", 117.0, 1150, 32.2, 0.28, 0.14, 0.10, 402000, "1992-06-26", "starbucks.com", 0.07, 0.02, 0.95),
    ("NKE", "NIKE, Inc.", "NYSE", "Consumer Cyclical", "Footwear & Accessories", 167.0, 1550, 46.7, 0.46, 0.13, 0.12, 79400, "1980-12-02", "nike.com", 0.02, 0.012, 1.05),
    ("XOM", "Exxon Mobil Corporation", "NYSE", "Energy", "Oil & Gas Integrated", 61.0, 4100, 398.7, 0.33, 0.18, 0.14, 62000, "1920-03-01", "exxonmobil.com", -0.03, 0.035, 0.9),
    ("CVX", "Chevron Corporation", "NYSE", "Energy", "Oil & Gas Integrated", 117.0, 1900, 246.3, 0.35, 0.17, 0.145, 43800, "1921-06-24", "chevron.com", -0.03, 0.04, 1.0),
    ("CAT", "Caterpillar Inc.", "NYSE", "Industrials", "Farm & Heavy Construction Machinery", 207.0, 515, 59.4, 0.30, 0.18, 0.11, 109100, "1929-12-02", "caterpillar.com", 0.05, 0.018, 1.0),
    ("BA", "The Boeing Company", "NYSE", "Industrials", "Aerospace & Defense", 201.0, 600, 66.6, 0.12, 0.05, 0.04, 156000, "1962-01-02", "boeing.com", 0.06, 0.0, 1.4),
    ("GE", "GE Aerospace", "NYSE", "Industrials", "Aerospace & Defense", 95.0, 1090, 29.1, 0.30, 0.15, 0.12, 52000, "1962-01-02", "geaerospace.com", 0.12, 0.005, 1.2),
    ("HON", "Honeywell International Inc.", "NASDAQ", "Industrials", "Conglomerates", 209.0, 670, 35.5, 0.36, 0.20, 0.14, 95000, "1970-01-02", "honeywell.com", 0.03, 0.02, 1.0),
    ("DIS", "The Walt Disney Company", "NYSE", "Communication Services", "Entertainment", 155.0, 1830, 82.7, 0.34, 0.08, 0.04, 220000, "1957-11-12", "thewaltdisneycompany.com", 0.05, 0.005, 1.2),
    ("VZ", "Verizon Communications Inc.", "NYSE", "Communication Services", "Telecom Services", 52.0, 4200, 136.8, 0.57, 0.22, 0.157, 117100, "1983-11-21", "verizon.com", 0.0, 0.065, 0.4),
    ("T", "AT&T Inc.", "NYSE", "Communication Services", "Telecom Services", 18.0, 7150, 120.7, 0.58, 0.20, 0.12, 160700, "1983-11-21", "att.com", 0.01, 0.065, 0.6),
    ("NEE", "NextEra Energy, Inc.", "NYSE", "Utilities", "Utilities - Regulated Electric", 93.0, 1990, 20.9, 0.60, 0.25, 0.20, 16800, "1950-01-03", "nexteraenergy.com", 0.07, 0.025, 0.5),
    ("PLD", "Prologis, Inc.", "NYSE", "Real Estate", "REIT - Industrial", 168.0, 925, 6.0, 0.75, 0.40, 0.45, 2500, "1997-11-21", "prologis.com", 0.10, 0.03, 1.1),
    ("LIN", "Linde plc", "NASDAQ", "Basic Materials", "Specialty Chemicals", 346.0, 490, 33.4, 0.42, 0.23, 0.13, 66000, "2018-10-31", "linde.com", 0.02, 0.014, 0.9),
]
# fmt: on

COMPANIES: tuple[CompanySpec, ...] = tuple(CompanySpec(*row) for row in _ROWS)

# The names people use for each company, besides its ticker and full name: what a user types, and what an
# unknown-ticker error matches to suggest the symbol ("unknown ticker 'Costco': did you mean 'COST'?").
SHORT_NAMES: dict[str, tuple[str, ...]] = {
    "AAPL": ("Apple",), "MSFT": ("Microsoft",), "NVDA": ("Nvidia",), "GOOGL": ("Google", "Alphabet"),
    "AMZN": ("Amazon",), "META": ("Meta", "Facebook"), "TSLA": ("Tesla",), "AVGO": ("Broadcom",),
    "ORCL": ("Oracle",), "CRM": ("Salesforce",), "ADBE": ("Adobe",), "AMD": ("AMD",), "INTC": ("Intel",),
    "CSCO": ("Cisco",), "IBM": ("IBM",), "QCOM": ("Qualcomm",), "NFLX": ("Netflix",), "JPM": ("JPMorgan", "JP Morgan Chase"),
    "BAC": ("Bank of America",), "WFC": ("Wells Fargo",), "GS": ("Goldman Sachs", "Goldman"), "V": ("Visa",),
    "MA": ("Mastercard",), "JNJ": ("Johnson & Johnson", "J&J"), "UNH": ("UnitedHealth",), "PFE": ("Pfizer",),
    "MRK": ("Merck",), "ABBV": ("AbbVie",), "LLY": ("Eli Lilly", "Lilly"), "PG": ("Procter & Gamble", "P&G"),
    "KO": ("Coca-Cola", "Coke"), "PEP": ("PepsiCo", "Pepsi"), "WMT": ("Walmart",), "COST": ("Costco",),
    "HD": ("Home Depot",), "MCD": ("McDonald's",), "SBUX": ("Starbucks",), "NKE": ("Nike",), "XOM": ("Exxon", "ExxonMobil"),
    "CVX": ("Chevron",), "CAT": ("Caterpillar",), "BA": ("Boeing",), "GE": ("GE", "GE Aerospace"),
    "HON": ("Honeywell",), "DIS": ("Disney",), "VZ": ("Verizon",), "T": ("AT&T",), "NEE": ("NextEra",),
    "PLD": ("Prologis",), "LIN": ("Linde",),
}  # fmt: skip
