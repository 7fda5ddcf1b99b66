"""The adapter interface every chat platform implements, and the values that cross it.

Owns the contract between the host and one platform: inbound, `verify` (is this request the
platform's? — a `Verdict`, or an `UnauthorizedError`) and `normalize` (which `ChannelEvent`, if any,
a verified payload is) and `acknowledge` (the body the platform must get back), and `file_request` (how
to download a file a message carried: the `Attachment.locator` in, the URL and headers out); outbound,
`split` and `escape` (the platform's message limit and markup) and `send` / `edit` / `react` / `typing` /
`upload` (its Web API), which raise `ChannelSendError` carrying the platform's rate-limit answer; and the
platform's pacing: `typing_every_s` (how long its typing indicator lasts) and `max_upload_bytes`. Does not own reading
the body, dedupe or admission (`api/_channels.py`), the outbox and retries (`delivery.py`), nor the
configuration (`config.ChannelConfig`).

Invariants:
- `verify` stores nothing and compares secrets and signatures in constant time; it refuses a missing
  or wrong signature, and a signed timestamp outside the channel's `tolerance_s`.
- `normalize` never raises for a verified payload of a kind it does not map: it returns None (the
  request is answered 200 and ignored), so a platform never redelivers what the host will not take.
- A `ChannelEvent.key` is a function of what the platform repeats on a retry (Slack's message
  channel+ts or `event_id`, Telegram's `update_id`, Discord's interaction id): a retry is the same
  event id, so the same run.
- `file_request` sends the bot token only to the platform's own file host (or the channel's `api_base`,
  where a test's fake lives); a locator pointing elsewhere is refused, so a payload cannot make the
  host hand its token to a third party.
- The parts of `split(text)` are each within the platform's limit after `escape`, and a code block
  cut between parts is closed and reopened.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol
from urllib.parse import urlsplit

import httpx2

from mcphost.config import ChannelConfig, ChannelPlatform
from mcphost.errors import InvalidArgumentError, UnauthorizedError
from mcphost.protocol import JSONObject, JSONValue, is_json_array, is_json_object

MAX_DEPTH = 64
"""Deepest JSON nesting an inbound payload may have (the platforms' own are far shallower)."""


@dataclass(frozen=True)
class Target:
    """Where a reply goes; kept in the event's `delivery.reply_target` as JSON."""

    chat: str
    """The platform's chat: a Slack channel, a Telegram chat, a Discord channel (or thread)."""
    thread: str | None = None
    """Slack's `thread_ts`, Telegram's `message_thread_id` (a forum topic)."""
    message: str | None = None
    """The message the event is about (a reply quotes it, a reaction lands on it)."""
    interaction: str | None = None
    """Discord: `<application_id>/<interaction token>`, whose deferred answer the reply fills in."""

    def dumps(self) -> str:
        return json.dumps({k: v for k, v in self.__dict__.items() if v is not None}, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> Target:
        data = json.loads(text)
        if not is_json_object(data) or not isinstance(data.get("chat"), str):
            raise ValueError("a reply target is a JSON object with a string 'chat'")
        fields = {k: v for k, v in data.items() if k in ("chat", "thread", "message", "interaction")}
        if not all(isinstance(v, str) for v in fields.values()):
            raise ValueError("a reply target's fields are strings")
        return cls(**fields)  # pyright: ignore[reportArgumentType]  # checked: every value is a str


@dataclass(frozen=True)
class Verdict:
    """A verified request: its payload, and the answer that ends the exchange when the request is the
    platform's handshake (Slack's `url_verification` challenge, Discord's PING)."""

    payload: JSONObject
    answer: JSONObject | None = None
    retry: int = 0
    """The platform's count of earlier tries of this request (Slack's `X-Slack-Retry-Num`)."""


MAX_ATTACHMENTS = 100
"""Files one event may carry (`EventInput.attachments`' bound); past it the rest are left out, logged."""


@dataclass(frozen=True)
class Attachment:
    """A file a message carried, as the platform announced it: it becomes a lazy artifact whose bytes
    `file_request` locates on its first read (`ArtifactStore.put_lazy`)."""

    locator: JSONObject
    """What `file_request` needs: the file's URL (Slack, Discord) or its `file_id` (Telegram)."""
    name: str | None = None
    mime_type: str = "application/octet-stream"
    size: int | None = None
    """The size the platform declared (checked against `max_attachment_bytes` before any fetch, and
    enforced again while the bytes stream in)."""
    meta: JSONObject = field(default_factory=dict[str, object])  # pyright: ignore[reportAssignmentType]
    """The platform's ids for the file, kept in the event's `data.attachments`."""


def url_files(items: JSONValue | None, *, urls: tuple[str, ...], name: str, mime: str) -> list[Attachment]:
    """The files of a platform's file list that carry a download URL (the first of `urls` present),
    named by its `name` field, typed by its `mime` field, sized by `size`; its id, name, type and size
    kept as `meta`. A file without a URL is left out (one the platform did not share with the bot)."""
    found: list[Attachment] = []
    for item in items if is_json_array(items) else []:
        item = object_of(item)
        url = next((u for u in (text_of(item.get(key)) for key in urls) if u is not None), None)
        if url is None:
            continue
        found.append(
            Attachment(
                locator={"url": url},
                name=text_of(item.get(name)),
                mime_type=text_of(item.get(mime)) or "application/octet-stream",
                size=size_of(item.get("size")),
                meta={k: item[k] for k in ("id", name, mime, "size") if k in item},
            )
        )
    return found


@dataclass(frozen=True)
class ChannelEvent:
    """One platform event, normalized; the route turns it into an `AgentEventEnvelope`."""

    key: str
    """Dedupe key: what the platform repeats on a retry (the event id is `channel:<id>:<key>`)."""
    event_type: str
    source_event_type: str
    chat: str
    target: Target
    thread: str | None = None
    actor: str | None = None
    actor_name: str | None = None
    workspace: str | None = None
    text: str | None = None
    data: JSONObject = field(default_factory=dict[str, object])  # pyright: ignore[reportAssignmentType]
    attachments: list[Attachment] = field(default_factory=list[Attachment])
    """Files the message carried; each becomes a lazy artifact listed in the run's input."""


class ChannelSendError(Exception):
    """A call to the platform's API that did not do what was asked."""

    def __init__(self, message: str, *, retry_after: float | None = None, permanent: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        """The platform's own wait (HTTP 429 `Retry-After`, Telegram's `parameters.retry_after`)."""
        self.permanent = permanent
        """Trying again cannot help (no such chat, bad token, a refused request): the reply is dead."""


class ChannelAdapter(Protocol):
    """What a platform implements (see docs/architecture.md, "Chat channels")."""

    platform: ClassVar[ChannelPlatform]
    max_chars: ClassVar[int]
    """The platform's limit on one message's text."""
    typing_every_s: ClassVar[float | None]
    """How often `typing` is repeated while a run works (the indicator's own lifetime, less a margin);
    None: the platform has no typing indicator for a bot."""
    max_upload_bytes: ClassVar[int]
    """The largest file a bot may upload; a bigger artifact gets a notice instead."""
    channel_id: str
    config: ChannelConfig

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float) -> Verdict: ...
    def normalize(self, verdict: Verdict) -> ChannelEvent | None: ...
    def acknowledge(self, event: ChannelEvent | None) -> JSONObject | None: ...
    async def file_request(
        self, http: httpx2.AsyncClient, locator: JSONObject
    ) -> tuple[str, dict[str, str]]: ...
    def escape(self, text: str) -> str: ...
    def split(self, text: str) -> list[str]: ...
    async def send(self, http: httpx2.AsyncClient, target: Target, text: str, *, part: int) -> str | None: ...
    async def edit(self, http: httpx2.AsyncClient, target: Target, message_id: str, text: str) -> None: ...
    async def react(self, http: httpx2.AsyncClient, target: Target, message_id: str, emoji: str) -> None: ...
    async def typing(self, http: httpx2.AsyncClient, target: Target) -> None: ...
    async def upload(
        self, http: httpx2.AsyncClient, target: Target, name: str, mime_type: str, data: bytes
    ) -> str | None: ...


def text_of(value: JSONValue | None) -> str | None:
    """A payload's id or text field as a non-empty string (platform ids may be JSON integers)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return value if isinstance(value, str) and value else None


def size_of(value: JSONValue | None) -> int | None:
    """A declared file size: a non-negative JSON integer, else None (unknown)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def same_origin(url: str, *bases: str) -> bool:
    """Whether `url` is an http(s) URL on the scheme and host (and port) of one of `bases` (a base may
    be a bare `https://host`)."""
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return False
    return any(
        (parsed.scheme, parsed.netloc.lower()) == ((b := urlsplit(base)).scheme, b.netloc.lower())
        for base in bases
    )


def object_of(value: JSONValue | None) -> JSONObject:
    """A payload's object field, or an empty object when it is missing or something else."""
    return value if is_json_object(value) else {}


class Credentialed:
    """What every adapter keeps: its channel, its configuration and its two credentials."""

    def __init__(self, channel_id: str, config: ChannelConfig, *, secret: str, token: str) -> None:
        self.channel_id = channel_id
        self.config = config
        self._secret = secret
        self._token = token


def refused(channel_id: str, why: str, reason: str) -> UnauthorizedError:
    return UnauthorizedError(f"Request to channel {channel_id!r} refused: {why}", details={"reason": reason})


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")


def _depth(value: object, limit: int) -> int:
    stack: list[tuple[object, int]] = [(value, 1)]
    deepest = 0
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())  # pyright: ignore[reportUnknownVariableType,reportUnknownArgumentType,reportUnknownMemberType]
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)  # pyright: ignore[reportUnknownVariableType,reportUnknownArgumentType]
    return deepest


def json_payload(channel_id: str, body: bytes | str) -> JSONObject:
    """A verified body as a JSON object (RFC 8259: no NaN or Infinity), at most `MAX_DEPTH` deep.

    Raises:
        InvalidArgumentError: anything else.
    """
    try:
        data = json.loads(body, parse_constant=_not_json)
    except (ValueError, RecursionError):
        data = None
    if not is_json_object(data) or _depth(data, MAX_DEPTH) > MAX_DEPTH:
        raise InvalidArgumentError(
            f"Request to channel {channel_id!r}: the payload is not a JSON object of at most {MAX_DEPTH} "
            "levels (RFC 8259 JSON: no NaN or Infinity).",
            details={"reason": "not_json_object"},
        )
    return data


def retry_after(response: httpx2.Response, body: JSONObject | None) -> float | None:
    """The platform's wait in seconds: the `Retry-After` header, else the body's `retry_after` (Discord)
    or `parameters.retry_after` (Telegram); bounded to a day."""
    values: list[object] = [response.headers.get("retry-after")]
    if body is not None:
        values.append(body.get("retry_after"))
        params = body.get("parameters")
        if is_json_object(params):
            values.append(params.get("retry_after"))
    for value in values:
        try:
            seconds = float(value)  # pyright: ignore[reportArgumentType]  # str | int | float, else TypeError
        except (TypeError, ValueError):
            continue
        if seconds == seconds and seconds >= 0:  # not NaN
            return min(seconds, 86400.0)
    return None


async def call(
    http: httpx2.AsyncClient,
    method: str,
    url: str,
    *,
    json_body: JSONObject | None,
    headers: Mapping[str, str],
    form: Mapping[str, str] | None = None,
    files: Mapping[str, tuple[str, bytes, str]] | None = None,
    content: bytes | None = None,
) -> tuple[httpx2.Response, JSONObject | None]:
    """One API request: a JSON body, a form (multipart with `files`, which map a field to (file name,
    bytes, media type)) or raw `content`; the response and its JSON object body (None when it has none).
    A 429 or a 5xx raises a retryable `ChannelSendError`; another 4xx a permanent one."""
    try:
        if json_body is None and (form is not None or files is not None or content is not None):
            response = await http.request(
                method,
                url,
                data=dict(form) if form is not None else None,
                files=dict(files) if files is not None else None,
                content=content,
                headers=dict(headers),
            )
        else:
            response = await http.request(method, url, json=json_body, headers=dict(headers))
    except httpx2.HTTPError as exc:
        raise ChannelSendError(f"{type(exc).__name__}: {exc}"[:300]) from None
    try:
        parsed: object = response.json() if response.content else None
    except ValueError:
        parsed = None
    body = parsed if is_json_object(parsed) else None
    if response.status_code == 429:
        raise ChannelSendError("HTTP 429 (rate limited)", retry_after=retry_after(response, body))
    if response.status_code >= 500:
        raise ChannelSendError(f"HTTP {response.status_code}", retry_after=retry_after(response, body))
    if response.status_code >= 400:
        said = ""
        if body is not None:
            said = str(body.get("description") or body.get("message") or body.get("error") or "")[:200]
        raise ChannelSendError(f"HTTP {response.status_code} {said}".strip(), permanent=True)
    return response, body
