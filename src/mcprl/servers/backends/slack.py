"""Slack Web API: list channels, read history, post, search; plus `reset` for the offline workspace."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from mcprl.servers.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError, UpstreamError, suggest
from mcprl.servers.offline.slack import Message, Workspace, check_limit, check_text

if TYPE_CHECKING:
    from mcprl.servers.backends.http import ApiClient


class ChannelInfo(BaseModel):
    id: str
    name: str
    topic: str
    num_members: int
    is_archived: bool
    read_only: bool


class ChannelList(BaseModel):
    channels: list[ChannelInfo]


class SlackMessage(BaseModel):
    ts: str
    user: str  # user name (offline) or user id (live)
    text: str


class ChannelHistory(BaseModel):
    channel: str
    messages: list[SlackMessage]  # newest first
    has_more: bool


class PostedMessage(BaseModel):
    channel: str
    ts: str
    text: str


class MessageMatch(SlackMessage):
    channel: str


class SearchMatches(BaseModel):
    query: str
    total: int
    matches: list[MessageMatch]  # newest first


class ResetResult(BaseModel):
    messages: int  # messages in the restored workspace


class SlackBackend(Protocol):
    """`episode` (from the call's `_meta`, see `mcprl.episode`) keeps an episode's posts to itself offline."""

    def list_channels(self) -> ChannelList: ...
    def post_message(self, channel: str, text: str, episode: str | None = None) -> PostedMessage: ...
    def channel_history(self, channel: str, limit: int, episode: str | None = None) -> ChannelHistory: ...
    def search_messages(self, query: str, limit: int, episode: str | None = None) -> SearchMatches: ...
    def reset(self, episode: str | None = None) -> ResetResult: ...


class OfflineSlack:
    """The seeded `Workspace`; messages show user names."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def _message(self, m: Message) -> SlackMessage:
        return SlackMessage(ts=m.ts, user=self.workspace.user(m.user).name, text=m.text)

    def list_channels(self) -> ChannelList:
        return ChannelList(channels=[ChannelInfo(**vars(c)) for c in self.workspace.channels])

    def post_message(self, channel: str, text: str, episode: str | None = None) -> PostedMessage:
        msg = self.workspace.post(channel, text, episode=episode)
        return PostedMessage(channel=self.workspace.channel(channel).name, ts=msg.ts, text=msg.text)

    def channel_history(self, channel: str, limit: int = 10, episode: str | None = None) -> ChannelHistory:
        check_limit(limit)
        ws = self.workspace
        msgs = ws.history(channel, None, episode)
        return ChannelHistory(
            channel=ws.channel(channel).name, messages=[self._message(m) for m in msgs[:limit]], has_more=len(msgs) > limit
        )

    def search_messages(self, query: str, limit: int = 10, episode: str | None = None) -> SearchMatches:
        total, hits = self.workspace.search(query, limit, episode)
        ws = self.workspace
        return SearchMatches(
            query=query,
            total=total,
            matches=[MessageMatch(channel=ws.channel(m.channel).name, **self._message(m).model_dump()) for m in hits],
        )

    def reset(self, episode: str | None = None) -> ResetResult:
        return ResetResult(messages=self.workspace.reset(episode))


_ERRORS = {
    "channel_not_found": NotFoundError,
    "is_archived": PermissionDeniedError,
    "restricted_action": PermissionDeniedError,
    "restricted_action_read_only_channel": PermissionDeniedError,
    "not_in_channel": PermissionDeniedError,
    "msg_too_long": InvalidArgumentError,
    "no_text": InvalidArgumentError,
}


class LiveSlack:
    """slack.com/api with a bot token (Bearer header). search.messages needs a user token (xoxp-).

    A real workspace is one shared state: `episode` is accepted and ignored, so episodes see each other's posts.
    """

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def _call(self, method: str, params: dict[str, Any], *, post: bool = False) -> dict:
        body = self.api.post(f"/{method}", params) if post else self.api.get(f"/{method}", params)
        if body.get("ok"):
            return body
        error = str(body.get("error", "unknown_error"))
        if error in ("invalid_auth", "not_authed", "account_inactive", "token_revoked"):
            raise UpstreamError(f"slack refused the token ({error}): check {self.api.key_env}")
        if error == "not_allowed_token_type":
            raise UpstreamError(f"slack {method} is not allowed with this token type (search.messages needs a user token, xoxp-)")
        if error == "ratelimited":
            raise UpstreamError(f"slack rate limit reached for {method}: retry later")
        raise _ERRORS.get(error, UpstreamError)(
            f"slack {method} failed: {error} (channel/query: {params.get('channel') or params.get('query')!r})"
        )

    def _channels(self) -> list[dict]:
        body = self._call(
            "conversations.list", {"types": "public_channel,private_channel", "exclude_archived": "false", "limit": 200}
        )
        return body.get("channels", [])

    def _resolve(self, channel: str) -> tuple[str, str]:
        """(id, name) of a channel given by name, '#name' or id."""
        key = channel.strip().lstrip("#")
        channels = self._channels()
        for c in channels:
            if key in (c.get("id"), c.get("name")):
                return c["id"], c.get("name", key)
        if re.fullmatch(r"[CGD][A-Z0-9]{8,}", key):
            return key, key
        raise NotFoundError(f"unknown channel {channel!r}: {suggest(key, [c.get('name', '') for c in channels])}")

    def list_channels(self) -> ChannelList:
        return ChannelList(
            channels=[
                ChannelInfo(
                    id=c["id"],
                    name=c.get("name", c["id"]),
                    topic=(c.get("topic") or {}).get("value", ""),
                    num_members=int(c.get("num_members", 0)),
                    is_archived=bool(c.get("is_archived", False)),
                    read_only=bool(c.get("is_read_only", False)),
                )
                for c in self._channels()
            ]
        )

    def post_message(self, channel: str, text: str, episode: str | None = None) -> PostedMessage:
        check_text(text)
        channel_id, name = self._resolve(channel)
        body = self._call("chat.postMessage", {"channel": channel_id, "text": text}, post=True)
        return PostedMessage(channel=name, ts=str(body.get("ts", "")), text=(body.get("message") or {}).get("text", text))

    def channel_history(self, channel: str, limit: int = 10, episode: str | None = None) -> ChannelHistory:
        check_limit(limit)
        channel_id, name = self._resolve(channel)
        body = self._call("conversations.history", {"channel": channel_id, "limit": limit})
        return ChannelHistory(
            channel=name,
            messages=[
                SlackMessage(
                    ts=m.get("ts", ""), user=m.get("user") or m.get("username") or m.get("bot_id", ""), text=m.get("text", "")
                )
                for m in body.get("messages", [])[:limit]
            ],
            has_more=bool(body.get("has_more", False)),
        )

    def search_messages(self, query: str, limit: int = 10, episode: str | None = None) -> SearchMatches:
        check_limit(limit)
        if not query.strip():
            raise InvalidArgumentError("query is empty: pass words to find")
        found = self._call("search.messages", {"query": query, "count": limit, "sort": "timestamp"}).get("messages", {})
        return SearchMatches(
            query=query,
            total=int(found.get("total", 0)),
            matches=[
                MessageMatch(
                    channel=(m.get("channel") or {}).get("name", ""),
                    ts=m.get("ts", ""),
                    user=m.get("username") or m.get("user", ""),
                    text=m.get("text", ""),
                )
                for m in found.get("matches", [])[:limit]
            ],
        )

    def reset(self, episode: str | None = None) -> ResetResult:
        raise InvalidArgumentError("reset_workspace only works on the offline backend: a real workspace is never reset")
