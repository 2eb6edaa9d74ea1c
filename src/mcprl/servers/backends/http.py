"""The HTTP client behind the live backends: auth, timeout, and failures turned into typed errors.

The API key goes in a header or a query parameter; it is scrubbed from every message this module
produces, and error messages name the path only (never the full URL, which may carry the key).
"""

from __future__ import annotations

import os
from typing import Any, Literal

import httpx

from mcprl.servers.errors import MissingCredentialsError, NotFoundError, UpstreamError


def require_key(env_var: str) -> str:
    """The API key from the environment, or one clear error naming the variable."""
    value = os.environ.get(env_var, "").strip()
    if not value:
        raise MissingCredentialsError(f"{env_var} is not set: export it to use --backend live, or use --backend offline")
    return value


class ApiClient:
    """A small JSON client for one service."""

    def __init__(
        self,
        service: str,
        base_url: str,
        key: str,
        *,
        key_env: str,
        auth: Literal["bearer", "query"] = "bearer",
        query_param: str = "apikey",
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.service, self.key_env, self._key = service, key_env, key
        self._query = {query_param: key} if auth == "query" else {}
        headers = {"Authorization": f"Bearer {key}"} if auth == "bearer" else {}
        self._timeout_s = timeout_s
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s, transport=transport)

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._send("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._send("POST", path, json=body)

    def close(self) -> None:
        self._http.close()

    def redact(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _send(self, method: str, path: str, *, params: dict[str, Any] | None = None, json: Any = None) -> Any:
        try:
            response = self._http.request(method, path, params={**(params or {}), **self._query}, json=json)
        except httpx.TimeoutException:
            raise UpstreamError(f"{self.service} did not answer {path} within {self._timeout_s:g}s") from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"could not reach {self.service} for {path}: {type(exc).__name__}") from None
        if response.status_code >= 400:
            raise self._status_error(path, response)
        try:
            return response.json()
        except ValueError:
            raise UpstreamError(f"{self.service} returned non-JSON for {path} (HTTP {response.status_code})") from None

    def _status_error(self, path: str, response: httpx.Response) -> Exception:
        code, detail = response.status_code, self._detail(response)
        if code in (401, 403):
            return UpstreamError(f"{self.service} refused the credentials (HTTP {code}): check {self.key_env}{detail}")
        if code == 404:
            return NotFoundError(f"{self.service} found nothing at {path}{detail}")
        if code == 429:
            return UpstreamError(f"{self.service} rate limit reached (HTTP 429) for {path}: retry later")
        return UpstreamError(f"{self.service} returned HTTP {code} for {path}{detail}")

    def _detail(self, response: httpx.Response) -> str:
        """The service's own error text, if any, shortened and without the key."""
        try:
            body = response.json()
        except ValueError:
            return ""
        if isinstance(body, dict) and isinstance(body.get("detail"), dict):
            body = body["detail"]  # tavily nests it
        if isinstance(body, dict):
            for field in ("message", "error", "Error Message", "detail"):
                if isinstance(body.get(field), str):
                    return ": " + self.redact(body[field])[:200]
        return ""
