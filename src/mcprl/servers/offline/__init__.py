"""Deterministic offline data behind the domain servers: market data, a news corpus, a Slack workspace.

Import these directly (e.g. `MarketData(seed=0)`) to pick entities for tasks; the servers expose the same data.
"""
