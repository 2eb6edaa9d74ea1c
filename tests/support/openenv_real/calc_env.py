"""A real openenv 0.10.0 MCPEnvironment, served as openenv serves one: `python calc_env.py PORT RESET_LOG`.

reset(a, b) sets the task; FastMCP tools `add` and `submit`; a correct `submit` scores 1.0 and ends the episode
(openenv gives tool calls no reward by itself, so step_async adds it). Every reset appends a line to RESET_LOG,
so the test can tell the rewards came from here.
"""

from __future__ import annotations

import sys

import uvicorn
from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Observation, State

RESET_LOG = sys.argv[2] if len(sys.argv) > 2 else "/dev/null"


class CalcEnv(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("calc")
        self.target, self.steps, self.episode = 0, 0, None

        @mcp.tool()
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @mcp.tool()
        def submit(answer: str) -> str:
            """Submit the final answer."""
            return "submitted"

        super().__init__(mcp)

    def reset(self, seed=None, episode_id=None, a: int = 1, b: int = 2, **kwargs) -> Observation:
        self.target, self.steps, self.episode = int(a) + int(b), 0, episode_id
        with open(RESET_LOG, "a") as log:
            log.write(f"{a}+{b}\n")
        return Observation(done=False, reward=None, metadata={"question": f"What is {a} + {b}?"})

    async def step_async(self, action, timeout_s=None, **kwargs) -> Observation:
        obs = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        self.steps += 1
        if isinstance(action, CallToolAction) and action.tool_name == "submit":
            right = str(action.arguments.get("answer", "")).strip().rstrip(".") == str(self.target)
            obs.reward, obs.done = (1.0 if right else 0.0), True
        else:
            obs.reward = 0.0
            obs.done = self.steps >= 6
        return obs

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Observation:
        return Observation(done=False, reward=0.0, metadata={"error": "call add or submit"})

    @property
    def state(self) -> State:
        return State(episode_id=self.episode, step_count=self.steps)


app = create_app(CalcEnv, CallToolAction, CallToolObservation, env_name="calc", max_concurrent_envs=8)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
