"""A seeded Slack workspace: users, channels (one archived, one read-only) and December 2025 history.

Market messages quote `MarketData`, so a close price seen in #markets matches polygon and fmp.
The seeded history is fixed; agents' posts are kept per episode (`mcprl.episode`): an episode reads the
seeded history plus its own posts, never another episode's, and `reset()` restores the seeded state.
Timestamps come from fixed dates and the episode's post count, never from the clock, so an episode's
results depend only on its own calls. With a journal (a file the client keeps across restarts of this
server: `$MCPRL_STATE_DIR`), every post and reset is appended to it and replayed at start, so a server
that crashed and restarted mid-rollout still holds every episode's posts.
"""

from __future__ import annotations

import calendar
import datetime as dt
import hashlib
import json
import random
import re
import statistics
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from mcprl.servers.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError, suggest
from mcprl.servers.offline.market import MarketData

MAX_TEXT_CHARS = 4000
ALERT_SIGMAS = 2.0  # #alerts posts a day a stock moved this many of its own daily standard deviations
BOT_USER = "finbot"  # who the agent posts as
MAX_EPISODES = 65_536  # episodes whose posts are kept (a few hundred bytes each); the least recently used go first


@dataclass(frozen=True)
class User:
    id: str
    name: str
    real_name: str
    title: str
    is_bot: bool = False


@dataclass(frozen=True)
class Channel:
    id: str
    name: str
    topic: str
    num_members: int
    is_archived: bool = False
    read_only: bool = False  # only admins and integrations may post


@dataclass(frozen=True)
class Message:
    channel: str  # channel id
    ts: str  # Slack-style "seconds.micros"; unique and increasing
    user: str  # user id
    text: str


def _slack_id(prefix: str, name: str) -> str:
    return prefix + "0" + hashlib.sha1(name.encode()).hexdigest()[:8].upper()


_USERS = tuple(
    User(_slack_id("U", name), name, real, title, bot)
    for name, real, title, bot in (
        ("maria.chen", "Maria Chen", "Head of Research", False),
        ("david.okafor", "David Okafor", "Equity Analyst", False),
        ("priya.natarajan", "Priya Natarajan", "Portfolio Manager", False),
        ("tom.becker", "Tom Becker", "Trader", False),
        ("sofia.alvarez", "Sofia Alvarez", "Quant Developer", False),
        ("james.wilson", "James Wilson", "Operations", False),
        ("alertbot", "Alert Bot", "Price alerts", True),
        (BOT_USER, "Finance Assistant", "AI assistant", True),
    )
)

_CHANNELS = tuple(
    Channel(_slack_id("C", name), name, topic, members, archived, read_only)
    for name, topic, members, archived, read_only in (
        ("general", "Company-wide announcements", 8, False, False),
        ("markets", "Daily market moves and price chatter", 7, False, False),
        ("earnings", "Earnings season coverage", 6, False, False),
        ("research", "Equity research notes and valuation", 6, False, False),
        ("trading-desk", "Trade ideas and execution", 5, False, False),
        ("random", "Non-work banter", 8, False, False),
        ("alerts", "Automated price alerts (read-only)", 8, False, True),
        ("q3-planning-2024", "Q3 2024 planning (archived)", 4, True, False),
    )
)

_GENERAL = (
    "Reminder: the office is closed on Dec 25 for Christmas and markets are shut that day.",
    "Year-end review meetings run Dec 15-19; please book a slot with your manager.",
    "The Q1 2026 research calendar is in the shared drive; comments by Jan 9.",
    "Welcome Sofia to the quant team! She will own the factor models.",
    "Holiday party is on Dec 18 at 6pm on the 12th floor.",
    "Reminder: expense reports for 2025 are due by Jan 5.",
)
_RANDOM = (
    "Anyone up for lunch at the ramen place today?",
    "The coffee machine on 11 is fixed, finally.",
    "Secret santa names are out, check your email.",
    "Who left the giant monitor in the kitchen?",
    "Snow day tomorrow? The forecast says 6 inches.",
)
_ARCHIVED = (
    "Kickoff for Q3 2024 planning: goals doc is shared.",
    "Draft coverage list for Q3 2024 is ready for review.",
    "Q3 2024 planning is wrapped up; archiving this channel.",
)


def _epoch(date: str, hour: int, minute: int) -> int:
    return calendar.timegm(dt.datetime.fromisoformat(f"{date}T{hour:02d}:{minute:02d}:00").timetuple())


_NOW_EPOCH = _epoch("2025-12-31", 21, 30)  # posts land just after this (UTC), one second apart


class Workspace:
    """The workspace state for one seed; thread-safe (tool calls run in worker threads).

    Posts made without an episode id share one list (a human's client, the CLI); each episode id has
    its own, bounded by `MAX_EPISODES` (rollouts never end with a call, so the oldest are dropped).
    """

    def __init__(self, market: MarketData | None = None, seed: int = 0, journal: Path | None = None) -> None:
        self.market = market if market is not None else MarketData(seed)
        self.users = _USERS
        self.channels = _CHANNELS
        self._users_by_id = {u.id: u for u in _USERS}
        self._users_by_name = {u.name: u for u in _USERS}
        self._lock = threading.Lock()
        self._shared: list[Message] = []
        self._episodes: OrderedDict[str, list[Message]] = OrderedDict()
        self._journal = None
        if journal is not None:
            self._replay(journal)
            self._journal = journal.open("a", encoding="utf-8")
            if journal.stat().st_size and not journal.read_bytes().endswith(b"\n"):
                self._journal.write("\n")  # end the line a crash cut short, or the next entry would join it

    def _replay(self, journal: Path) -> None:
        """Redo the journal's posts and resets; a line cut by a crash mid-write is the last one, and skipped."""
        if not journal.exists():
            return
        for line in journal.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry["op"] == "post":
                self.post(entry["channel"], entry["text"], entry["user"], entry["episode"])
            else:
                self.reset(entry["episode"])

    def _record(self, **entry: object) -> None:
        """Append one change (call with the lock held); a whole line per write, so a crash cuts at most one."""
        if self._journal is not None:
            self._journal.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self._journal.flush()

    @cached_property
    def _seeded(self) -> tuple[Message, ...]:
        return self._seed_history()

    def _posts(self, episode: str | None) -> list[Message]:
        """The posts `episode` made (call with the lock held); marks the episode as recently used."""
        if episode is None:
            return self._shared
        posts = self._episodes.setdefault(episode, [])
        self._episodes.move_to_end(episode)
        while len(self._episodes) > MAX_EPISODES:
            self._episodes.popitem(last=False)
        return posts

    def _messages(self, episode: str | None) -> list[Message]:
        """What `episode` sees (call with the lock held); seeded on first use, as seeding reads every ticker's prices."""
        if episode in self._episodes:
            self._episodes.move_to_end(episode)
        posts = self._shared if episode is None else self._episodes.get(episode, [])
        return [*self._seeded, *posts]

    # --- lookups --------------------------------------------------------

    def channel(self, ref: str) -> Channel:
        """Resolve a channel by name, '#name' or id."""
        key = ref.strip().lstrip("#")
        for ch in self.channels:
            if key in (ch.name, ch.id) or key.lower() == ch.name:
                return ch
        raise NotFoundError(f"unknown channel {ref!r}: {suggest(key, [c.name for c in self.channels])}")

    def user(self, user_id: str) -> User:
        return self._users_by_id[user_id]

    # --- reads ----------------------------------------------------------

    def history(self, channel: str, limit: int | None = 10, episode: str | None = None) -> list[Message]:
        """Newest first, like conversations.history; limit None returns the whole channel."""
        if limit is not None:
            check_limit(limit)
        ch = self.channel(channel)
        with self._lock:
            msgs = [m for m in self._messages(episode) if m.channel == ch.id]
        return sorted(msgs, key=lambda m: m.ts, reverse=True)[:limit]

    def search(self, query: str, limit: int = 10, episode: str | None = None) -> tuple[int, list[Message]]:
        """All words must match (case-insensitive); `in:#channel` and `from:@user` narrow it. Newest first."""
        check_limit(limit)
        words, channel_id, user_id = [], None, None
        for token in query.split():
            if token.startswith("in:"):
                channel_id = self.channel(token[3:]).id
            elif token.startswith("from:"):
                name = token[5:].lstrip("@")
                if name not in self._users_by_name:
                    raise NotFoundError(f"unknown user {name!r}: {suggest(name, list(self._users_by_name))}")
                user_id = self._users_by_name[name].id
            else:
                words.extend(re.findall(r"[a-z0-9$.%+-]+", token.lower()))
        if not words and channel_id is None and user_id is None:
            raise InvalidArgumentError("query is empty: pass words to find, e.g. 'AAPL closed' or 'revenue in:#earnings'")
        with self._lock:
            hits = [
                m
                for m in self._messages(episode)
                if (channel_id is None or m.channel == channel_id)
                and (user_id is None or m.user == user_id)
                and all(w in m.text.lower() for w in words)
            ]
        hits.sort(key=lambda m: m.ts, reverse=True)
        return len(hits), hits[:limit]

    # --- writes ---------------------------------------------------------

    def post(self, channel: str, text: str, user: str = BOT_USER, episode: str | None = None) -> Message:
        ch = self.channel(channel)
        if ch.is_archived:
            raise PermissionDeniedError(f"channel #{ch.name} is archived: post in an active channel ({self._active()})")
        if ch.read_only:
            raise PermissionDeniedError(
                f"channel #{ch.name} is read-only (automated alerts only): post in one of {self._active()}"
            )
        check_text(text)
        with self._lock:
            posts = self._posts(episode)
            msg = Message(ch.id, f"{_NOW_EPOCH + len(posts) + 1}.000000", self._users_by_name[user].id, text)
            posts.append(msg)
            self._record(op="post", channel=ch.id, text=text, user=user, episode=episode)
        return msg

    def reset(self, episode: str | None = None) -> int:
        """Forget `episode`'s posts, or without one every post; returns how many messages the seeded history holds."""
        with self._lock:
            if episode is None:
                self._shared.clear()
                self._episodes.clear()
            else:
                self._episodes.pop(episode, None)
            self._record(op="reset", episode=episode)
            return len(self._seeded)

    def _active(self) -> str:
        return ", ".join(f"#{c.name}" for c in self.channels if not c.is_archived and not c.read_only)

    # --- seeding --------------------------------------------------------

    def _seed_history(self) -> tuple[Message, ...]:
        m = self.market
        rng = random.Random(f"mcprl:{m.seed}:slack")
        humans = [u for u in _USERS if not u.is_bot]
        december = [d for d in m.days if d >= "2025-12-01"]
        raw: list[tuple[str, int, int, str, str, str]] = []  # date, hour, minute, channel, user name, text

        def add(date: str, channel: str, user: str, text: str) -> None:
            raw.append((date, rng.randint(14, 21), rng.randint(0, 59), channel, user, text))

        for text in _GENERAL:
            add(rng.choice(december), "general", rng.choice(("maria.chen", "james.wilson")), text)
        for text in _RANDOM:
            add(rng.choice(december), "random", rng.choice(humans).name, text)
        for i, text in enumerate(_ARCHIVED):
            add(f"2024-0{7 + i}-15", "q3-planning-2024", "maria.chen", text)
        symbols = list(m.symbols)
        position = {d: i for i, d in enumerate(m.days)}

        def session(sym: str, date: str) -> tuple[float, float]:
            """Close on `date` and its change from the previous close, in percent."""
            bars = m.bars(sym)
            bar, prev = bars[position[date]], bars[position[date] - 1]
            return bar.close, (bar.close / prev.close - 1) * 100

        for _ in range(16):
            sym, date = rng.choice(symbols), rng.choice(december)
            close, change = session(sym, date)
            add(
                date,
                "markets",
                rng.choice(("tom.becker", "priya.natarajan", "david.okafor")),
                f"{sym} closed at ${close:.2f} on {date}, {change:+.2f}% on the day.",
            )
        for sym in rng.sample(symbols, 10):
            q = m.income_statements(sym, "quarter")[0]
            date = rng.choice([d for d in m.days if "2025-10-20" <= d <= "2025-11-07"])
            add(
                date,
                "earnings",
                "david.okafor",
                f"{sym} Q3 2025: revenue ${q.revenue / 1e9:.1f}B, net income ${q.net_income / 1e9:.1f}B, EPS ${q.eps:.2f}.",
            )
        for sym in rng.sample(symbols, 8):
            pe, eps = m.pe_ratio(sym), m.ttm_eps(sym)
            fy = m.income_statements(sym)[0]
            valuation = f"trades at {pe}x TTM EPS of ${eps:.2f}" if pe else f"has negative TTM EPS (${eps:.2f})"
            add(
                rng.choice(december),
                "research",
                rng.choice(("maria.chen", "david.okafor")),
                f"Note: {sym} {valuation}; FY2024 revenue was ${fy.revenue / 1e9:.1f}B.",
            )
        for sym in rng.sample(symbols, 6):
            low, high = m.year_range(sym)
            date = rng.choice(december)
            add(
                date,
                "trading-desk",
                rng.choice(("tom.becker", "priya.natarajan")),
                f"Watching {sym}: 52-week range ${low:.2f}-${high:.2f}, closed ${session(sym, date)[0]:.2f} on {date}.",
            )
        sigma = {sym: statistics.pstdev(session(sym, d)[1] for d in m.days[1:]) for sym in symbols}
        for date in december:
            for sym in symbols:
                close, change = session(sym, date)
                if abs(change) >= ALERT_SIGMAS * sigma[sym]:
                    add(date, "alerts", "alertbot", f"Price alert: {sym} moved {change:+.1f}% on {date} (close ${close:.2f}).")
        channel_ids = {c.name: c.id for c in _CHANNELS}
        raw.sort(key=lambda r: (r[0], r[1], r[2], r[3], r[4], r[5]))
        return tuple(
            Message(channel_ids[ch], f"{_epoch(date, hour, minute)}.{i:06d}", self._users_by_name[user].id, text)
            for i, (date, hour, minute, ch, user, text) in enumerate(raw)
        )


def check_text(text: str) -> None:
    if not text.strip():
        raise InvalidArgumentError("text is empty: pass the message to post")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidArgumentError(f"text is {len(text)} characters: the limit is {MAX_TEXT_CHARS}")


def check_limit(limit: int) -> None:
    """Message limits are 1 to 100, as in the Slack API."""
    if not 1 <= limit <= 100:
        raise InvalidArgumentError(f"limit {limit} is out of range: use 1 to 100")
