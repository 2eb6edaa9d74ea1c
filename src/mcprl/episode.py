"""Episode isolation over MCP: every tool call of an episode carries the episode's id in the request's `_meta`.

A stateful server keys its mutable state by this id (the offline Slack workspace keeps each episode's
posts apart), so concurrent rollouts neither see each other's writes nor shift each other's outputs
(a post's timestamp), and an episode's tool results depend only on its own calls: the same actions give
the same observations whatever ran before or beside it. Calls without the key share one state, as any
other MCP client (an IDE, `mcprl tools call`) expects. Servers that do not know the key ignore it.

Episode state must also survive a crash of the server: the client gives every stdio server it starts a
directory in `$MCPRL_STATE_DIR` that outlives restarts of that server; a stateful server journals its
changes there and replays them when it starts again.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

EPISODE_META_KEY = "mcprl/episode"
STATE_DIR_ENV = "MCPRL_STATE_DIR"


def new_episode() -> str:
    return uuid.uuid4().hex


def episode_meta(episode: str | None) -> dict[str, str] | None:
    """The `_meta` a tool call of `episode` sends (None: no episode, shared state)."""
    return {EPISODE_META_KEY: episode} if episode else None


def episode_of(meta: Mapping[str, Any] | None) -> str | None:
    """The episode a request's `_meta` names, or None."""
    value = (meta or {}).get(EPISODE_META_KEY)
    return str(value) if value else None
