"""MCP tools as a skyrl_gym ToolGroup: each tool takes its arguments dict and returns a JSON string."""

from __future__ import annotations

import functools
import json
from typing import Any

from skyrl_gym.tools.core import ToolGroup

from mcprl.tools.sync import SyncToolManager

GROUP_NAME = "MCPToolGroup"


class MCPToolGroup(ToolGroup):
    """One episode's tools: every call carries `episode`, so stateful servers keep the episode's state apart."""

    def __init__(self, tools: SyncToolManager, timeout: float | None = None, name: str = GROUP_NAME,
                 episode: str | None = None) -> None:
        self.tools = tools
        self.timeout = timeout
        self.episode = episode
        super().__init__(name)

    def _register_tools(self) -> None:
        for info in self.tools.list_tools():
            self._tool_registry[info.name] = functools.partial(self.call, info.name)

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """JSON payload `{ok, data | error, error_type, latency_ms}`; never raises."""
        result = self.tools.execute_tool(name, arguments, self.timeout, episode=self.episode)
        return json.dumps(result, ensure_ascii=False, default=str)

    def execute_tool(self, name: str, *args: Any, **kwargs: Any) -> str:
        # Unknown names go to the manager too, whose error names the closest matches.
        return self.call(name, *args, **kwargs)
