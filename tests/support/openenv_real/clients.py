"""openenv's own clients against `mcprl openenv serve`; prints one JSON object of results.

    python clients.py URL episodes PLAN.json   # per task: a solved and a failing episode, with each client
    python clients.py URL slack N              # N concurrent sessions post to one channel and read it back
"""

from __future__ import annotations

import asyncio
import json
import sys

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient


async def generic(url: str, task: dict, answer: str) -> dict:
    async with GenericEnvClient(base_url=url) as env:
        await env.reset(task_id=task["task_id"])
        rewards = []
        for tool, params in task["calls"]:
            r = await env.step({"type": "call_tool", "tool_name": tool, "arguments": params})
            assert r.observation["error"] is None, r.observation
            rewards.append(r.reward)
        r = await env.step({"type": "call_tool", "tool_name": "answer", "arguments": {"answer": answer}})
        rewards.append(r.reward)
        return {"rewards": rewards, "done": r.done, "state": await env.state()}


async def mcp(url: str, task: dict, answer: str) -> dict:
    env = MCPToolClient(base_url=url)
    async with env:
        await env.reset(task_id=task["task_id"])
        tools = [t.name for t in await env.list_tools()]
        results = [await env.call_tool(tool, **params) for tool, params in task["calls"]]
        r = await env.step(CallToolAction(tool_name="answer", arguments={"answer": answer}))
        state = await env.state()
        return {"tools": tools, "results_ok": [x.get("error") is None for x in results], "final_reward": r.reward,
                "done": r.done, "step_count": state.step_count}


async def episodes(url: str, plan: list[dict]) -> dict:
    out = {}
    for task in plan:
        out[task["task_id"]] = {
            "generic_solved": await generic(url, task, task["answer"]),
            "generic_failed": await generic(url, task, task["wrong_answer"]),
            "mcp_solved": await mcp(url, task, task["answer"]),
            "mcp_failed": await mcp(url, task, task["wrong_answer"]),
        }
    return out


async def slack(url: str, n: int, task_id: str) -> dict:
    async def one(i: int) -> list[str]:
        async with GenericEnvClient(base_url=url) as env:
            await env.reset(task_id=task_id)
            await env.step({"type": "call_tool", "tool_name": "post_message",
                            "arguments": {"channel": "trading-desk", "text": f"note {i}"}})
            await asyncio.sleep(0.2)  # every session has posted before anyone reads
            r = await env.step({"type": "call_tool", "tool_name": "get_channel_history",
                                "arguments": {"channel": "trading-desk"}})
            return [m["text"] for m in r.observation["result"]["data"]["messages"] if m["text"].startswith("note")]

    seen = await asyncio.gather(*(one(i) for i in range(n)))
    return {"seen": seen}


if __name__ == "__main__":
    url, mode = sys.argv[1], sys.argv[2]
    if mode == "episodes":
        result = asyncio.run(episodes(url, json.loads(open(sys.argv[3]).read())))
    else:
        result = asyncio.run(slack(url, int(sys.argv[3]), sys.argv[4]))
    print(json.dumps(result, default=str))
