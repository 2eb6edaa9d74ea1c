"""Per-call cost of serving mcprl over OpenEnv: `MCPToolEnv.step` in process vs the same call as an OpenEnv
`call_tool` over the session WebSocket, and over HTTP `/mcp` `tools/call` (openenv's MCPToolClient path).

The same env settings, task and call (`get_last_quote {"ticker": "AAPL"}` on the offline polygon server, stdio),
one episode per 40 calls; the three paths run in interleaved blocks of 10 so machine noise hits them alike.

    .venv/bin/python bench/openenv_latency.py [--calls 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcprl.data.sample import SkyRLSample  # noqa: E402
from mcprl.envs.config import EnvConfig  # noqa: E402
from mcprl.envs.mcp_env import MCPToolEnv  # noqa: E402
from mcprl.integrations.openenv.app import build_app, running  # noqa: E402
from mcprl.integrations.openenv.episode import TaskPool  # noqa: E402
from mcprl.protocol.parsing import format_tool_call  # noqa: E402
from mcprl.tools.openenv import OpenEnvSession  # noqa: E402
from side_by_side import print_table  # noqa: E402

BLOCK, PER_EPISODE = 10, 40
TOOL, ARGS = "get_last_quote", {"ticker": "AAPL"}
# A long episode that the call never ends: success needs a post, and there are 50 turns.
TASK = SkyRLSample("bench", [{"role": "user", "content": "Quote AAPL again and again."}], {"method": "rule", "ground_truth": {
    "task_id": "bench-openenv", "complexity": "simple", "max_turns": 50, "success": {"must_call_tool": "post_message"},
    "tool_sequence": [{"step": 1, "server": "slack", "tool": "post_message", "params": {"channel": "general", "text": "x"}}],
    "limits": {"max_servers": 2, "max_tools": 4}, "answer": None}})
SETTINGS = EnvConfig(max_turns=50, max_idle_turns=None)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Caller:
    """One way to make the call; `fresh()` starts its next episode (not timed)."""

    def __init__(self, fresh: Callable[[], Callable[[], object]]) -> None:
        self.fresh, self.call, self.done, self.times = fresh, None, PER_EPISODE, []

    def block(self) -> None:
        for _ in range(BLOCK):
            if self.done >= PER_EPISODE:
                self.call, self.done = self.fresh(), 0
            t0 = time.perf_counter()
            self.call()
            self.times.append((time.perf_counter() - t0) * 1000)
            self.done += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--port", type=int, default=8791)
    args = parser.parse_args()
    text = format_tool_call(TOOL, ARGS)

    def direct() -> Callable[[], object]:
        env = MCPToolEnv(SETTINGS, {"reward_spec": TASK.reward_spec, "extra_info": {}})
        env.init(TASK.prompt)

        def call() -> object:
            out = env.step(text)
            assert env.last_result and env.last_result["ok"] and not out["done"], out
            return out
        return call

    with running(build_app(TaskPool([TASK]), SETTINGS, max_sessions=4), port=args.port) as url:
        sessions: list[OpenEnvSession] = []
        opened: list[str] = []
        client = httpx.Client(timeout=30)

        def ws() -> Callable[[], object]:
            for s in sessions:
                s.close()
            sessions[:] = [OpenEnvSession(url)]
            sessions[0].reset(task_id=TASK.task_id)

            def call() -> object:
                reply = sessions[0].call_tool(TOOL, ARGS)
                assert reply.observation["error"] is None and not reply.done, reply
                return reply
            return call

        def mcp() -> Callable[[], object]:
            rpc = lambda method, **p: client.post(f"{url}/mcp", json={"jsonrpc": "2.0", "method": method,  # noqa: E731
                                                                      "params": p, "id": 1}).json()
            for old in opened:
                rpc("openenv/session/close", session_id=old)
            sid = rpc("openenv/session/create")["result"]["session_id"]
            opened[:] = [sid]
            attached = OpenEnvSession(f"{url.replace('http', 'ws')}/ws?session_id={sid}")
            attached.reset(task_id=TASK.task_id)
            attached.close()

            def call() -> object:
                reply = rpc("tools/call", name=TOOL, arguments=ARGS, session_id=sid)["result"]
                assert reply["error"] is None and not reply["done"], reply
                return reply
            return call

        paths = {"MCPToolEnv.step (in process)": Caller(direct), "OpenEnv call_tool over /ws": Caller(ws),
                 "OpenEnv tools/call over HTTP /mcp": Caller(mcp)}
        for p in paths.values():  # warm-up: servers, sessions, sockets
            p.block()
            p.times.clear()
        for _ in range(args.calls // BLOCK):
            for p in paths.values():
                p.block()
        for s in sessions:
            s.close()
    base = statistics.median(paths["MCPToolEnv.step (in process)"].times)
    rows = [[name, f"{statistics.median(p.times):.2f}", f"{pct(p.times, 0.99):.2f}",
             f"{statistics.median(p.times) / base:.2f}x", f"+{statistics.median(p.times) - base:.2f}"]
            for name, p in paths.items()]
    print_table(f"one tool call, {args.calls} per path ({TOOL} on polygon, stdio)",
                ["path", "median ms", "p99 ms", "vs step", "added ms"], rows)


if __name__ == "__main__":
    main()
