"""The `tavily` MCP server: web search and page extraction in the shape of Tavily's API."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from mcprl.servers.backends.tavily import ExtractResults, SearchBackend, SearchResults
from mcprl.servers.base import DomainServer


def create_server(backend: SearchBackend) -> DomainServer:
    server = DomainServer("tavily", "Web search returning ranked snippets with urls, and full-text extraction of those urls.")

    @server.tool()
    def search(
        query: Annotated[str, Field(description="search keywords, e.g. 'Apple Q3 2025 revenue'")],
        max_results: Annotated[int, Field(description="number of results, 1 to 20")] = 5,
    ) -> SearchResults:
        """Search the web; each result has a title, url, snippet, relevance score and publication date."""
        return backend.search(query, max_results)

    @server.tool()
    def extract(urls: Annotated[list[str], Field(description="1 to 10 urls, e.g. from search results")]) -> ExtractResults:
        """Full text of web pages by url; urls that fail are listed in failed_results with the reason."""
        return backend.extract(urls)

    return server
