"""The `slack` MCP server: channels, history, posting and search in the shape of Slack's Web API."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import Field

from mcprl.episode import episode_of
from mcprl.servers.backends.slack import ChannelHistory, ChannelList, PostedMessage, ResetResult, SearchMatches, SlackBackend
from mcprl.servers.base import DomainServer

ChannelRef = Annotated[str, Field(description="channel name (e.g. general or #general) or channel id")]
Limit = Annotated[int, Field(description="most messages to return, 1 to 100")]
ADMIN_TOOLS = ("reset_workspace",)  # for task setup and verification; never offer them to an agent


def create_server(backend: SlackBackend) -> DomainServer:
    server = DomainServer("slack", "A Slack workspace: list channels, read channel history, search messages and post messages.")

    @server.tool()
    def list_channels() -> ChannelList:
        """All channels with id, name, topic, member count, and whether each is archived or read-only."""
        return backend.list_channels()

    @server.tool()
    def post_message(
        channel: ChannelRef, text: Annotated[str, Field(description="message text")], ctx: Context
    ) -> PostedMessage:
        """Post a message to a channel (not to archived or read-only channels)."""
        return backend.post_message(channel, text, _episode(ctx))

    @server.tool()
    def get_channel_history(channel: ChannelRef, ctx: Context, limit: Limit = 10) -> ChannelHistory:
        """Recent messages of a channel, newest first."""
        return backend.channel_history(channel, limit, _episode(ctx))

    @server.tool()
    def search_messages(
        query: Annotated[str, Field(description="words that must all appear; narrow with in:#channel or from:@user")],
        ctx: Context,
        limit: Limit = 10,
    ) -> SearchMatches:
        """Search messages across channels, newest first."""
        return backend.search_messages(query, limit, _episode(ctx))

    @server.tool()
    def reset_workspace(ctx: Context) -> ResetResult:
        """Admin only: restore the workspace to its seeded state (offline backend); within an episode, its posts only."""
        return backend.reset(_episode(ctx))

    return server


def _episode(ctx: Context) -> str | None:
    return episode_of(ctx.request_context.meta)
