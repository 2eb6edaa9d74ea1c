"""MCP tools as a skyrl_gym ToolGroup: each tool takes its arguments dict and returns a JSON string."""

from __future__ import annotations

import functools
import json
from typing import Any

from skyrl_gym.tools.core import ToolGroup

from mcprl.tools.errors import ToolError
from mcprl.tools.faults import FaultConfig
from mcprl.tools.sync import SyncToolManager

GROUP_NAME = "MCPToolGroup"


class MCPToolGroup(ToolGroup):
    """One episode's tools: every call carries `episode`, so stateful servers keep the episode's state apart."""

    def __init__(self, tools: SyncToolManager, timeout: float | None = None, name: str = GROUP_NAME,
                 episode: str | None = None, faults: FaultConfig | None = None, task: str = "") -> None:
        self.tools = tools
        self.timeout = timeout
        self.episode = episode
        self.faults, self.task, self.calls = faults, task, 0  # injected faults: by task and call number
        super().__init__(name)

    def _register_tools(self) -> None:
        for info in self.tools.list_tools():
            self._tool_registry[info.name] = functools.partial(self.call, info.name)

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """JSON payload `{ok, data | error, error_type, latency_ms}` (+ `injected_fault`); never raises."""
        fault = self._fault(name)
        self.calls += 1
        result = self.tools.execute_tool(name, arguments, self.timeout, episode=self.episode, fault=fault)
        return json.dumps(result, ensure_ascii=False, default=str)

    def _fault(self, name: str) -> str | None:
        if self.faults is None or not self.faults.active:
            return None
        try:
            info = self.tools.manager.resolve(name)
        except ToolError:  # an unknown tool fails as it is
            return None
        return self.faults.draw(self.task, self.calls, info.server, info.tool)

    def execute_tool(self, name: str, *args: Any, **kwargs: Any) -> str:
        # Unknown names go to the manager too, whose error names the closest matches.
        return self.call(name, *args, **kwargs)
