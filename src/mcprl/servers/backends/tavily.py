"""Tavily web search: `search` returns ranked snippets, `extract` the full text of pages by url."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

from mcprl.servers.errors import InvalidArgumentError, NotFoundError
from mcprl.servers.offline.corpus import SearchCorpus

if TYPE_CHECKING:
    from mcprl.servers.backends.http import ApiClient

MAX_URLS = 10
MAX_PAGE_CHARS = 4000
SNIPPET_CHARS = 400


class SearchResult(BaseModel):
    title: str
    url: str
    content: str  # a snippet; call extract for the full text
    score: float
    published_date: str | None = None


class SearchResults(BaseModel):
    query: str
    results: list[SearchResult]


class ExtractedPage(BaseModel):
    url: str
    raw_content: str


class FailedExtraction(BaseModel):
    url: str
    error: str


class ExtractResults(BaseModel):
    results: list[ExtractedPage]
    failed_results: list[FailedExtraction]


class SearchBackend(Protocol):
    def search(self, query: str, max_results: int) -> SearchResults: ...
    def extract(self, urls: list[str]) -> ExtractResults: ...


def _check_urls(urls: list[str]) -> None:
    if not urls or len(urls) > MAX_URLS:
        raise InvalidArgumentError(f"urls has {len(urls)} entries: pass 1 to {MAX_URLS} urls returned by search")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more characters truncated]"


class OfflineSearch:
    """Search over the seeded news corpus; extract returns a corpus article's full text."""

    def __init__(self, corpus: SearchCorpus) -> None:
        self.corpus = corpus

    def search(self, query: str, max_results: int = 5) -> SearchResults:
        hits = self.corpus.search(query, max_results)
        return SearchResults(
            query=query,
            results=[
                SearchResult(title=d.title, url=d.url, content=d.snippet, score=s, published_date=d.published_date)
                for d, s in hits
            ],
        )

    def extract(self, urls: list[str]) -> ExtractResults:
        _check_urls(urls)
        ok, failed = [], []
        for url in urls:
            try:
                doc = self.corpus.get(url)
            except NotFoundError as exc:
                failed.append(FailedExtraction(url=url, error=str(exc)))
            else:
                ok.append(ExtractedPage(url=doc.url, raw_content=f"{doc.title}\n\n{doc.content}"))
        return ExtractResults(results=ok, failed_results=failed)


class LiveSearch:
    """api.tavily.com (key sent as a Bearer header)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def search(self, query: str, max_results: int = 5) -> SearchResults:
        if not query.strip():
            raise InvalidArgumentError("query is empty: pass a few keywords")
        if not 1 <= max_results <= 20:
            raise InvalidArgumentError(f"max_results {max_results} is out of range: use 1 to 20")
        body = self.api.post("/search", {"query": query, "max_results": max_results, "search_depth": "basic"})
        return SearchResults(
            query=query,
            results=[
                SearchResult(
                    title=r.get("title", ""),
                    url=r["url"],
                    content=_clip(r.get("content", ""), SNIPPET_CHARS),
                    score=round(float(r.get("score", 0.0)), 3),
                    published_date=r.get("published_date"),
                )
                for r in body.get("results", [])[:max_results]
            ],
        )

    def extract(self, urls: list[str]) -> ExtractResults:
        _check_urls(urls)
        body = self.api.post("/extract", {"urls": urls})
        return ExtractResults(
            results=[
                ExtractedPage(url=r["url"], raw_content=_clip(r.get("raw_content") or "", MAX_PAGE_CHARS))
                for r in body.get("results", [])
            ],
            failed_results=[
                FailedExtraction(url=f["url"], error=str(f.get("error", "failed"))) for f in body.get("failed_results", [])
            ],
        )
