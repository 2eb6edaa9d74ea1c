"""Injected tool failures, for training an agent to recover and for measuring how well it does.

Which call fails, and how, is a pure function of (seed, task, call number): a rerun meets the same
faults, and the samples of one GRPO group meet the same faults at the same call numbers, so their
advantages compare recoveries under equal conditions. An injected failure reads to the agent exactly as
the real one does: the manager raises the same typed error with the same message (a timeout, a reply
that is no JSON-RPC message, a connection lost mid-call), or returns the real result cut short, or the
API's rate-limit and internal errors as our servers report them. Nothing is waited for and no server is
killed: a real crash would fail every episode sharing the server (tests/training/test_chaos.py kills one
for real). The kind is kept beside the result (`injected_fault`) for the trajectory and the metrics.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

from mcprl.options import opt
from mcprl.tools.errors import MalformedReply, ServerCrashed, ToolError, ToolTimeout

FAULT_KINDS = ("timeout", "rate_limit", "server_error", "malformed", "truncated", "crash")


@dataclass
class FaultConfig:
    """Shares of tool calls that fail on purpose, by kind (each in [0, 1], together at most 1)."""

    timeout: float = opt(0.0, "Calls that time out (the client's timeout error, at once).")
    rate_limit: float = opt(0.0, "Calls refused with the API's rate-limit error (HTTP 429).")
    server_error: float = opt(0.0, "Calls that fail with an internal server error.")
    malformed: float = opt(0.0, "Calls whose reply is no JSON-RPC message.")
    truncated: float = opt(0.0, "Calls that run, but whose result arrives cut to half its length.")
    crash: float = opt(0.0, "Calls that lose the server's connection mid-call (the observation only: the server "
                            "keeps running for the other episodes).")
    servers: list[str] | None = opt(None, "Only calls to these servers fail (default: every server).")
    tools: list[str] | None = opt(None, "Only calls to these tools fail (default: every tool).")
    seed: int = opt(0, "Another seed puts the faults on other calls.")

    def __post_init__(self) -> None:
        for kind in FAULT_KINDS:
            rate = getattr(self, kind)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"faults.{kind} is {rate}: a share of calls, from 0 to 1")
        if (total := sum(getattr(self, kind) for kind in FAULT_KINDS)) > 1.0 + 1e-9:
            raise ValueError(f"the fault rates add up to {total:g}: at most 1")

    @property
    def active(self) -> bool:
        return any(getattr(self, kind) > 0 for kind in FAULT_KINDS)

    def rates(self) -> dict[str, float]:
        return {kind: getattr(self, kind) for kind in FAULT_KINDS if getattr(self, kind) > 0}

    def draw(self, task: str, call: int, server: str, tool: str) -> str | None:
        """The fault for call number `call` (from 0) of an episode of `task`, or None."""
        if not self.active or (self.servers and server not in self.servers) or (self.tools and tool not in self.tools):
            return None
        digest = hashlib.sha256(f"{self.seed}\0{task}\0{call}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        for kind in FAULT_KINDS:
            u -= getattr(self, kind)
            if u < 0:
                return kind
        return None

    @classmethod
    def parse(cls, spec: str) -> FaultConfig:
        """`timeout=0.1,server_error=0.05,seed=3,servers=python+slack` (the form `mcprl eval run --faults` takes)."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, object] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or key not in known:
                raise ValueError(f"--faults: {item!r} is not KIND=RATE; keys: {', '.join(known)}")
            try:
                if key in ("servers", "tools"):
                    values[key] = [v for v in value.strip().split("+") if v]
                elif key == "seed":
                    values[key] = int(value)
                else:
                    values[key] = float(value)
            except ValueError:
                raise ValueError(f"--faults: {key}={value!r} is not a number") from None
        return cls(**values)  # type: ignore[arg-type]


# What a garbled line reads as (the JSON decoder's words for `{this is not json-rpc`).
_GARBLED = ("a line that is no valid JSON-RPC message (ValidationError: 1 validation error for union[JSONRPCRequest,"
            "JSONRPCNotification,JSONRPCResponse,JSONRPCError])")


def injected_error(kind: str, name: str, server: str, tool: str, timeout: float) -> ToolError:
    """The error a real failure of `kind` raises in the manager, word for word (all but `truncated`)."""
    if kind == "timeout":
        return ToolTimeout.after(name, timeout)
    if kind == "crash":
        return ServerCrashed.lost(server, "EndOfStream")
    if kind == "malformed":
        return MalformedReply.of(name, MalformedReply.describe(server, _GARBLED))
    if kind == "rate_limit":  # as our live backends report HTTP 429 (servers/backends/http.py)
        return ToolError(f"Error executing tool {tool}: {server} rate limit reached (HTTP 429): retry later")
    if kind == "server_error":  # a JSON-RPC internal error (-32603), as the manager reports one
        return ToolError(f"{name!r} failed: Internal error")
    raise ValueError(f"no injected error for fault kind {kind!r}")
