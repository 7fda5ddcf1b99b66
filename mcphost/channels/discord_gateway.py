"""Discord Gateway: the websocket over which Discord delivers messages, edits, deletions, reactions and
member changes (interactions keep arriving over HTTP, `discord.py`).

Owns one `[channels.<id>] platform = "discord"`, `gateway = true` connection: the URL from
`GET <api_base>/gateway/bot`, IDENTIFY with `INTENTS`, heartbeats at HELLO's interval with ACK
tracking, RESUME with the session id and last sequence after a drop, INVALID_SESSION and RECONNECT,
reconnecting with capped, jittered back-off; and the mapping of its dispatches to `ChannelEvent`s
(`dispatch_event`). Does not own admission (`ingest`, the same path as `POST /v1/channels/{id}`:
`api._channels.admit_channel_event`), nor the lease store.

Invariants:
- One host of those sharing the database holds the connection: it runs only under the lease
  `channel:<id>:gateway` (`LeaseStore`, renewed every `LEASE_TERM_S / 3` while connected); a host that
  loses it disconnects, and another takes over within `LEASE_TERM_S` of a holder's death.
- The sequence number advances only after a dispatch was admitted (or deliberately skipped), so an
  event the host failed to store is replayed by the RESUME that follows the reconnect; a replayed
  event that was admitted dedupes on its event id (`channel:<id>:<key>`), never a second run.
- A heartbeat not ACKed before the next one is due is a zombie connection: it is closed and resumed.
- A frame that is not a JSON object, a binary frame, or a dispatch that cannot be mapped is logged
  with what was wrong and skipped; the connection stays up. A frame past `MAX_FRAME_BYTES` closes the
  connection (websocket code 1009) and the RESUME replays what followed it.
- Close codes that no retry can fix (4004 bad token, 4013/4014 intents) stop this channel's Gateway
  with an error saying what to change; the host keeps running. Any other failure (the database down
  while renewing the lease or admitting, a bug) is logged and retried after the back-off: the
  Gateway task never takes the host down.
- The bot's own messages and reactions, and other bots' messages, are ignored.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx2
from anyio.abc import TaskStatus
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI, PayloadTooBig

from mcphost.channels._adapter import ChannelEvent, Target, object_of, text_of, url_files
from mcphost.channels.discord import DiscordAdapter
from mcphost.errors import HostError, InvalidArgumentError
from mcphost.protocol import JSONObject, is_json_array, is_json_object
from mcphost.stores.leases import LeaseStore

logger = logging.getLogger(__name__)

DISPATCH, HEARTBEAT, IDENTIFY, RESUME, RECONNECT, INVALID_SESSION, HELLO, HEARTBEAT_ACK = (
    0,
    1,
    2,
    6,
    7,
    9,
    10,
    11,
)
GUILD_MEMBERS, GUILD_MESSAGES, GUILD_MESSAGE_REACTIONS = 1 << 1, 1 << 9, 1 << 10
DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 12, 1 << 15
INTENTS = GUILD_MEMBERS | GUILD_MESSAGES | GUILD_MESSAGE_REACTIONS | DIRECT_MESSAGES | MESSAGE_CONTENT
"""GUILD_MEMBERS and MESSAGE_CONTENT are privileged: enable them on the Developer Portal's Bot page."""
API_VERSION = 10
MAX_FRAME_BYTES = 8 * 1024 * 1024
"""The largest frame read; a larger one closes the connection (1009) and the RESUME replays the rest."""
LEASE_TERM_S = 30.0
BACKOFF_MIN_S, BACKOFF_MAX_S = 1.0, 60.0
INVALID_SESSION_WAIT_S = (1.0, 5.0)
"""Discord asks for a random 1-5 s wait before identifying again after INVALID_SESSION."""
HELLO_TIMEOUT_S = 20.0
FATAL_CLOSES = {
    4004: "the bot token was refused; check the token variable of the channel",
    4010: "invalid shard",
    4011: "the bot is in too many guilds for one connection (sharding is required)",
    4012: "invalid Gateway API version",
    4013: "invalid intents",
    4014: "disallowed intents: enable MESSAGE CONTENT INTENT and SERVER MEMBERS INTENT on the Developer "
    "Portal's Bot page",
}
"""Close codes after which reconnecting cannot help."""
FRESH_SESSION_CLOSES = frozenset({4007, 4009})
"""Invalid sequence, session timed out: identify anew instead of resuming."""

Ingest = Callable[[ChannelEvent, bytes], Awaitable[object]]
"""Admits one event (its raw frame alongside); raises `HostError` when it could not be stored."""


class GatewayDroppedError(Exception):
    """The connection ended in a way the next attempt recovers from (by resuming where it can)."""


class GatewayFatalError(Exception):
    """The connection ended in a way no retry fixes (a refused token, disallowed intents)."""


@dataclass
class _Session:
    session_id: str | None = None
    seq: int | None = None
    resume_url: str | None = None
    bot_user: str | None = None


class DiscordGateway:
    """The Gateway connection of one Discord channel, admitting its dispatches through `ingest`."""

    def __init__(self, source: DiscordAdapter, ingest: Ingest, leases: LeaseStore, *, holder: str) -> None:
        self.source = source
        self._ingest = ingest
        self._leases = leases
        self._holder = holder
        self.lease = f"channel:{source.channel_id}:gateway"
        self._session = _Session()
        self.connections = 0
        """Connections opened (identified or resumed) so far."""

    @property
    def channel_id(self) -> str:
        return self.source.channel_id

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the connection while this host holds the lease, reconnecting with back-off, until
        cancelled (or a fatal close)."""
        task_status.started()
        backoff = BACKOFF_MIN_S
        try:
            while True:
                started = time.monotonic()
                try:
                    if not await self._leases.acquire(self.lease, self._holder, term_s=LEASE_TERM_S):
                        await anyio.sleep(LEASE_TERM_S / 3)
                        continue
                    await self._connection()
                except GatewayFatalError as exc:
                    logger.error("channel %s: Discord Gateway stopped: %s", self.channel_id, exc)
                    return
                except GatewayDroppedError as exc:
                    logger.warning(
                        "channel %s: Discord Gateway dropped: %s; reconnecting", self.channel_id, exc
                    )
                except Exception:  # the database, or a bug: never take the host down; try again later
                    logger.exception("channel %s: Discord Gateway failed; reconnecting", self.channel_id)
                if time.monotonic() - started > BACKOFF_MAX_S:
                    backoff = BACKOFF_MIN_S  # it was up a while: this is a new outage
                await anyio.sleep(backoff * random.uniform(0.5, 1.0))
                backoff = min(backoff * 2, BACKOFF_MAX_S)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                try:
                    await self._leases.release(self.lease, self._holder)
                except Exception:  # it lapses within LEASE_TERM_S anyway
                    logger.warning("channel %s: could not release the Gateway lease", self.channel_id)

    async def _gateway_url(self) -> str:
        base = self.source.config.base_url
        try:
            async with httpx2.AsyncClient(timeout=self.source.config.timeout_s) as http:
                response = await http.get(f"{base}/gateway/bot", headers=self.source.auth())
        except httpx2.HTTPError as exc:
            raise GatewayDroppedError(f"GET {base}/gateway/bot failed: {type(exc).__name__}") from None
        if response.status_code == 401:
            raise GatewayFatalError(FATAL_CLOSES[4004])
        try:
            url = text_of(object_of(response.json()).get("url"))
        except ValueError:
            url = None
        if response.status_code != 200 or url is None:
            raise GatewayDroppedError(
                f"GET {base}/gateway/bot answered HTTP {response.status_code} without a url"
            )
        return self._checked(url)

    def _checked(self, url: str) -> str:
        """A Gateway URL the token may be sent to: `wss://`, or `ws://` only when the channel's own
        `api_base` is plain HTTP (a local fake)."""
        scheme = urlsplit(url).scheme
        plain_ok = urlsplit(self.source.config.base_url).scheme == "http"
        if scheme != "wss" and not (scheme == "ws" and plain_ok):
            raise GatewayFatalError(
                f"the Gateway URL {url[:200]!r} is not wss://; the bot token is not sent to it"
            )
        return url

    async def _connection(self) -> None:
        session = self._session
        resuming = (
            session.session_id is not None and session.seq is not None and session.resume_url is not None
        )
        url = session.resume_url if resuming and session.resume_url else await self._gateway_url()
        try:
            async with connect(
                f"{url.rstrip('/')}/?v={API_VERSION}&encoding=json",
                max_size=MAX_FRAME_BYTES,
                ping_interval=None,  # Discord's own heartbeat is the liveness check
                open_timeout=HELLO_TIMEOUT_S,
                close_timeout=2,
                proxy=None,
                compression=None,
            ) as ws:
                await self._converse(ws, resuming=resuming)
        except PayloadTooBig:
            raise GatewayDroppedError(
                f"a frame was larger than {MAX_FRAME_BYTES} bytes (closed with 1009); resuming replays what "
                "followed it"
            ) from None
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            if code in FATAL_CLOSES:
                raise GatewayFatalError(f"close code {code}: {FATAL_CLOSES[code]}") from None
            if code in FRESH_SESSION_CLOSES:
                self._session = _Session()
            if exc.sent is not None and exc.sent.code == 1009:
                raise GatewayDroppedError(
                    f"a frame was larger than {MAX_FRAME_BYTES} bytes (closed with 1009); resuming replays "
                    "what followed it"
                ) from None
            raise GatewayDroppedError(f"the connection closed (code {code})") from None
        except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
            raise GatewayDroppedError(f"could not connect to {url[:200]!r}: {type(exc).__name__}") from None

    async def _converse(self, ws: ClientConnection, *, resuming: bool) -> None:
        with anyio.fail_after(HELLO_TIMEOUT_S):
            hello = _frame(await ws.recv())
        if hello is None or hello.get("op") != HELLO:
            raise GatewayDroppedError("the first frame was not HELLO")
        interval_ms = object_of(hello.get("d")).get("heartbeat_interval")
        if (
            not isinstance(interval_ms, int | float)
            or isinstance(interval_ms, bool)
            or not 0 < interval_ms < 3_600_000
        ):
            raise GatewayDroppedError("HELLO carried no usable heartbeat_interval")
        interval = float(interval_ms) / 1000
        token = self.source.token
        session = self._session
        if resuming:
            await _send(
                ws,
                {"op": RESUME, "d": {"token": token, "session_id": session.session_id, "seq": session.seq}},
            )
        else:
            identify = {"token": token, "intents": INTENTS,
                        "properties": {"os": "linux", "browser": "mcphost", "device": "mcphost"}}  # fmt: skip
            await _send(ws, {"op": IDENTIFY, "d": identify})
        self.connections += 1
        next_beat = time.monotonic() + interval * random.random()
        next_lease = time.monotonic() + LEASE_TERM_S / 3
        acked = True
        while True:
            now = time.monotonic()
            if now >= next_lease:
                if not await self._leases.acquire(self.lease, self._holder, term_s=LEASE_TERM_S):
                    await ws.close()
                    raise GatewayDroppedError(f"another host took the lease {self.lease!r}")
                next_lease = now + LEASE_TERM_S / 3
            if now >= next_beat:
                if not acked:
                    await ws.close(code=4000)
                    raise GatewayDroppedError(f"no heartbeat ACK within {interval:g} s (a zombie connection)")
                await _send(ws, {"op": HEARTBEAT, "d": self._session.seq})
                acked, next_beat = False, now + interval
            message: str | bytes = b""
            with anyio.move_on_after(max(0.0, min(next_beat, next_lease) - time.monotonic())) as waited:
                message = await ws.recv()  # cancelling recv loses nothing (websockets' asyncio client)
            if waited.cancelled_caught:
                continue
            frame = _frame(message)
            if frame is None:
                logger.error(
                    "channel %s: Discord Gateway sent a frame that is not a JSON object (%s); skipped",
                    self.channel_id, _describe(message),
                )  # fmt: skip
                continue
            op = frame.get("op")
            if op == HEARTBEAT_ACK:
                acked = True
            elif op == HEARTBEAT:
                await _send(ws, {"op": HEARTBEAT, "d": self._session.seq})
            elif op == RECONNECT:
                raise GatewayDroppedError("Discord asked for a reconnect (op 7)")
            elif op == INVALID_SESSION:
                if frame.get("d") is not True:
                    self._session = _Session()
                await anyio.sleep(random.uniform(*INVALID_SESSION_WAIT_S))
                raise GatewayDroppedError(
                    "Discord invalidated the session (op 9)"
                    + ("; resuming" if frame.get("d") is True else "; identifying anew")
                )
            elif op == DISPATCH:
                await self._dispatch(frame, message)
            else:
                logger.info("channel %s: Discord Gateway op %r ignored", self.channel_id, op)

    async def _dispatch(self, frame: JSONObject, message: str | bytes) -> None:
        kind, data, seq = text_of(frame.get("t")), frame.get("d"), frame.get("s")
        if not is_json_object(data):
            logger.error(
                "channel %s: Discord Gateway dispatch %r has no object 'd'; skipped", self.channel_id, kind
            )
            self._advance(seq)
            return
        session = self._session
        if kind == "READY":
            session.session_id = text_of(data.get("session_id"))
            url = text_of(data.get("resume_gateway_url"))
            session.resume_url = self._checked(url) if url is not None else None
            session.bot_user = text_of(object_of(data.get("user")).get("id"))
            logger.info("channel %s: Discord Gateway ready (session %s)", self.channel_id, session.session_id)
        elif kind == "RESUMED":
            logger.info("channel %s: Discord Gateway resumed at %s", self.channel_id, session.seq)
        elif kind is not None:
            event = dispatch_event(kind, data, bot_user=session.bot_user, session=session.session_id, seq=seq)
            config = self.source.config
            if event is not None and (config.events is None or event.event_type in config.events):
                raw = message.encode() if isinstance(message, str) else message
                try:
                    await self._ingest(event, raw)
                except InvalidArgumentError as exc:
                    logger.error("channel %s: %s %s not admitted: %s", self.channel_id, kind, event.key, exc)
                except HostError as exc:  # storage down: do not advance, so the RESUME replays it
                    raise GatewayDroppedError(f"{kind} {event.key} could not be admitted: {exc}") from None
        self._advance(seq)

    def _advance(self, seq: object) -> None:
        if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
            self._session.seq = seq


def _frame(message: str | bytes) -> JSONObject | None:
    if not isinstance(message, str):
        return None
    try:
        data = json.loads(message)
    except (ValueError, RecursionError):
        return None
    return data if is_json_object(data) else None


def _describe(message: str | bytes) -> str:
    if isinstance(message, bytes):
        return f"a binary frame of {len(message)} bytes; this client asks for JSON text without compression"
    return f"{len(message)} characters starting {message[:60]!r}"


async def _send(ws: ClientConnection, payload: JSONObject) -> None:
    await ws.send(json.dumps(payload, separators=(",", ":")))


def dispatch_event(
    kind: str, data: JSONObject, *, bot_user: str | None, session: str | None, seq: object
) -> ChannelEvent | None:
    """The event a Gateway dispatch is, or None for one the host does not map (or the bot's own).

    Keys are what a RESUME replays unchanged: a message's id (`msg:`), its id and edit time (`edit:`),
    `del:` + id, a reaction's message, user and emoji (a custom emoji's id, a Unicode one's UTF-8 in
    hex, since an event id holds no emoji), a member's guild, user and join time; a member
    leaving (which carries no id or time) keys on the session and sequence number."""
    guild = text_of(data.get("guild_id"))
    if kind in ("MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE"):
        message_id, chat = text_of(data.get("id")), text_of(data.get("channel_id"))
        author = object_of(data.get("author"))
        actor = text_of(author.get("id"))
        if message_id is None or chat is None:
            return None
        if kind == "MESSAGE_DELETE":
            return ChannelEvent(
                key=f"del:{message_id}", event_type="message.recalled", source_event_type=kind, chat=chat,
                workspace=guild, target=Target(chat), data={"message_id": message_id},
            )  # fmt: skip
        if author.get("bot") is True or (actor is not None and actor == bot_user):
            return None
        common: JSONObject = {"message_id": message_id, "channel_type": "guild" if guild else "dm"}
        mentions = data.get("mentions")
        if bot_user is not None and is_json_array(mentions):
            common["mention"] = any(object_of(m).get("id") == bot_user for m in mentions)
        if kind == "MESSAGE_UPDATE":
            edited = text_of(data.get("edited_timestamp"))
            if edited is None or "content" not in data:
                return None  # an embed unfurled, not an edit
            return ChannelEvent(
                key=f"edit:{message_id}:{edited}", event_type="message.edited", source_event_type=kind, chat=chat,
                actor=actor, actor_name=text_of(author.get("username")), workspace=guild,
                text=text_of(data.get("content")), target=Target(chat, message=message_id), data=common,
            )  # fmt: skip
        files = url_files(data.get("attachments"), urls=("url",), name="filename", mime="content_type")
        text = text_of(data.get("content"))
        if text is None and not files:
            return None  # a system message, or content without the MESSAGE_CONTENT intent
        return ChannelEvent(
            key=f"msg:{message_id}", event_type="message.received", source_event_type=kind, chat=chat,
            actor=actor, actor_name=text_of(author.get("username")), workspace=guild, text=text,
            target=Target(chat, message=message_id), data=common, attachments=files,
        )  # fmt: skip
    if kind == "MESSAGE_REACTION_ADD":
        message_id, chat, user = (
            text_of(data.get("message_id")),
            text_of(data.get("channel_id")),
            text_of(data.get("user_id")),
        )
        emoji = object_of(data.get("emoji"))
        name = text_of(emoji.get("name")) or text_of(emoji.get("id"))
        if message_id is None or chat is None or user is None or user == bot_user or name is None:
            return None
        return ChannelEvent(
            key=f"react:{message_id}:{user}:{text_of(emoji.get('id')) or name.encode().hex()[:64]}",
            event_type="reaction.added",
            source_event_type=kind, chat=chat, actor=user, workspace=guild, target=Target(chat, message=message_id),
            data={"message_id": message_id, "reaction": name},
        )  # fmt: skip
    if kind in ("GUILD_MEMBER_ADD", "GUILD_MEMBER_REMOVE"):
        user = object_of(data.get("user"))
        user_id = text_of(user.get("id"))
        if guild is None or user_id is None or user_id == bot_user:
            return None
        joined = kind == "GUILD_MEMBER_ADD"
        key = (
            f"join:{guild}:{user_id}:{text_of(data.get('joined_at'))}" if joined else f"leave:{session}:{seq}"
        )
        return ChannelEvent(
            key=key, event_type="group.member_joined" if joined else "group.member_left", source_event_type=kind,
            chat=guild, actor=user_id, actor_name=text_of(user.get("username")), workspace=guild,
            target=Target(guild), data={"members": [user_id]},
        )  # fmt: skip
    return None
