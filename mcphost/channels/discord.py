"""Discord: interactions in (slash commands, buttons, modals); channel messages and interaction
follow-ups out.

Owns Discord's request signature (Ed25519 over `X-Signature-Timestamp` + body, checked against the
application's public key with `cryptography`), its PING, the mapping of interactions to events, and its
HTTP API calls. Discord delivers messages, reactions and member changes only over its Gateway (a
websocket), not to an HTTP endpoint: with `gateway = true` the channel also holds a Gateway connection
(`discord_gateway.py`). Does not own the adapter contract (`_adapter.py`).

Invariants:
- An event's key is the interaction's `id`; the signed timestamp must be within the channel's
  `tolerance_s`, so a captured request is refused once stale and is the same event before.
- An interaction is answered at once with a deferred response (type 5, "thinking…"); the reply's first
  part then edits that response (`PATCH /webhooks/<app>/<token>/messages/@original`) and later parts are
  follow-ups (`POST /webhooks/<app>/<token>`). Without an interaction the reply is a channel message.
- A streamed reply edits its placeholder where it was posted: an interaction's through its webhook
  (`PATCH /webhooks/<app>/<token>/messages/<id>`), a channel message through
  `PATCH /channels/<id>/messages/<id>`. `POST /channels/<id>/typing` is repeated every 8 s while a run
  works (Discord shows it for 10 s). A file is a message with an attachment (multipart `payload_json`
  + `files[0]`), a follow-up for an interaction; at most 10 MiB, Discord's limit for a bot.
- Text is sent as Discord markdown with `allowed_mentions: {"parse": []}`: markdown renders as the run
  wrote it, and no `@everyone`, role or user mention in it pings anyone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar
from urllib.parse import quote

import httpx2
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mcphost.channels._adapter import (
    ChannelEvent,
    ChannelSendError,
    Target,
    Verdict,
    call,
    json_payload,
    object_of,
    refused,
    same_origin,
    text_of,
)
from mcphost.channels._text import split_text
from mcphost.config import ChannelConfig, ChannelPlatform
from mcphost.errors import ConfigError
from mcphost.protocol import JSONObject, is_json_array

PING, COMMAND, COMPONENT, AUTOCOMPLETE, MODAL = 1, 2, 3, 4, 5
THREAD_TYPES = frozenset({10, 11, 12})
"""Channel types that are threads (announcement, public, private)."""
NO_MENTIONS: JSONObject = {"parse": []}
CDN_HOSTS = ("https://cdn.discordapp.com", "https://media.discordapp.net")
"""Where Discord serves attachments."""


def _options(data: JSONObject) -> str:
    """A slash command's options as `name=value` words (sub-commands flattened)."""
    words: list[str] = []
    stack = [data.get("options")]
    while stack:
        options = stack.pop()
        for option in options if is_json_array(options) else []:
            option = object_of(option)
            if "value" in option:
                words.append(f"{option.get('name')}={option.get('value')}")
            else:
                words.append(str(option.get("name")))
                stack.append(option.get("options"))
    return " ".join(words)


class DiscordAdapter:
    platform: ClassVar[ChannelPlatform] = "discord"
    max_chars: ClassVar[int] = 2000
    typing_every_s: ClassVar[float | None] = 8.0
    max_upload_bytes: ClassVar[int] = 10 * 1024 * 1024
    """Discord's limit on a bot's attachments: 10 MiB."""

    def __init__(self, channel_id: str, config: ChannelConfig, *, secret: str, token: str) -> None:
        self.channel_id = channel_id
        self.config = config
        self._token = token
        try:
            self._key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(secret.strip()))
        except ValueError:
            raise ConfigError(
                f"channels.{channel_id}: {config.secret_env} must hold the Discord application's public key "
                "(64 hex digits, from the Developer Portal's General Information page)."
            ) from None

    @property
    def token(self) -> str:
        """The bot token (the Gateway's IDENTIFY and RESUME carry it)."""
        return self._token

    def auth(self) -> dict[str, str]:
        """The bot's `Authorization` header (the Gateway's `GET /gateway/bot`)."""
        return {"authorization": f"Bot {self._token}"}

    # -- inbound ------------------------------------------------------------------------------------

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float) -> Verdict:
        signature = headers.get("x-signature-ed25519", "")
        stamp = headers.get("x-signature-timestamp", "")
        if not signature or not stamp:
            raise refused(
                self.channel_id, "missing X-Signature-Ed25519 or X-Signature-Timestamp.", "missing_signature"
            )
        if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12):
            raise refused(self.channel_id, "X-Signature-Timestamp is not a Unix time.", "bad_timestamp")
        try:
            self._key.verify(bytes.fromhex(signature), stamp.encode() + body)
        except (ValueError, InvalidSignature):
            raise refused(
                self.channel_id,
                "X-Signature-Ed25519 does not match the body and the public key.",
                "bad_signature",
            ) from None
        if abs(now - int(stamp)) > self.config.tolerance_s:
            raise refused(
                self.channel_id,
                f"X-Signature-Timestamp is more than {self.config.tolerance_s:g} s from the host's clock.",
                "stale_timestamp",
            )
        payload = json_payload(self.channel_id, body)
        if payload.get("type") == PING:
            return Verdict(payload, answer={"type": PING})
        return Verdict(payload)

    def normalize(self, verdict: Verdict) -> ChannelEvent | None:
        payload = verdict.payload
        kind = payload.get("type")
        interaction, app, token = (
            text_of(payload.get("id")),
            text_of(payload.get("application_id")),
            text_of(payload.get("token")),
        )
        channel = object_of(payload.get("channel"))
        posted = text_of(payload.get("channel_id")) or text_of(channel.get("id"))
        if kind not in (COMMAND, COMPONENT, MODAL) or None in (interaction, app, token, posted):
            return None
        assert interaction is not None  # checked just above
        assert posted is not None
        user = object_of(object_of(payload.get("member")).get("user")) or object_of(payload.get("user"))
        data = object_of(payload.get("data"))
        in_thread = channel.get("type") in THREAD_TYPES and text_of(channel.get("parent_id")) is not None
        chat = text_of(channel.get("parent_id")) if in_thread else posted
        assert chat is not None
        target = Target(posted, interaction=f"{app}/{token}")
        common: JSONObject = {"interaction_id": interaction}
        if kind == COMMAND:
            args = _options(data)
            name = text_of(data.get("name")) or ""
            event_type, source, text = "command.invoked", "APPLICATION_COMMAND", args or None
            fields: JSONObject = {"command": f"/{name}", "args": args}
        elif kind == COMPONENT:
            values = data.get("values")
            event_type, source = "interaction.submitted", "MESSAGE_COMPONENT"
            text = text_of(data.get("custom_id"))
            fields = {"custom_id": data.get("custom_id"), "values": values if is_json_array(values) else [],
                      "message_id": text_of(object_of(payload.get("message")).get("id"))}  # fmt: skip
        else:
            event_type, source = "interaction.submitted", "MODAL_SUBMIT"
            text = text_of(data.get("custom_id"))
            fields = {"custom_id": data.get("custom_id"), "components": data.get("components") or []}
        return ChannelEvent(
            key=interaction, event_type=event_type, source_event_type=source, chat=chat,
            thread=posted if in_thread else None, actor=text_of(user.get("id")),
            actor_name=text_of(user.get("username")), workspace=text_of(payload.get("guild_id")), text=text,
            target=target, data=common | fields,
        )  # fmt: skip

    def acknowledge(self, event: ChannelEvent | None) -> JSONObject | None:
        """A deferred response (type 5): the user sees "thinking…" until the reply edits it."""
        return {"type": 5}

    async def file_request(self, http: httpx2.AsyncClient, locator: JSONObject) -> tuple[str, dict[str, str]]:
        """An attachment's CDN URL (signed by Discord, fetched without the bot token)."""
        url = str(locator.get("url") or "")
        if not same_origin(url, *CDN_HOSTS, self.config.base_url):
            raise ChannelSendError(
                f"Discord attachment URL {url[:200]!r} is not on Discord's CDN; it is not fetched.",
                permanent=True,
            )
        return url, {}

    # -- outbound -----------------------------------------------------------------------------------

    def escape(self, text: str) -> str:
        return text  # markdown renders as written; mentions are switched off per message instead

    def split(self, text: str) -> list[str]:
        return split_text(text, self.max_chars)

    def _auth(self) -> dict[str, str]:
        return {"authorization": f"Bot {self._token}"}

    def _hook(self, target: Target) -> str | None:
        """The interaction's webhook URL, when the reply answers one."""
        if target.interaction is None:
            return None
        app, _, token = target.interaction.partition("/")
        return f"{self.config.base_url}/webhooks/{quote(app, safe='')}/{quote(token, safe='')}"

    def _messages(self, target: Target) -> str:
        return f"{self.config.base_url}/channels/{quote(target.chat, safe='')}/messages"

    async def send(self, http: httpx2.AsyncClient, target: Target, text: str, *, part: int) -> str | None:
        body: JSONObject = {"content": text, "allowed_mentions": NO_MENTIONS}
        hook = self._hook(target)
        if hook is not None:
            if part == 0:
                _, answer = await call(
                    http, "PATCH", f"{hook}/messages/@original", json_body=body, headers={}
                )
            else:
                _, answer = await call(http, "POST", f"{hook}?wait=true", json_body=body, headers={})
        else:
            if part == 0 and target.message is not None:
                body["message_reference"] = {"message_id": target.message, "fail_if_not_exists": False}
            _, answer = await call(http, "POST", self._messages(target), json_body=body, headers=self._auth())
        return text_of((answer or {}).get("id"))

    async def edit(self, http: httpx2.AsyncClient, target: Target, message_id: str, text: str) -> None:
        body: JSONObject = {"content": text, "allowed_mentions": NO_MENTIONS}
        hook = self._hook(target)
        if hook is not None:
            await call(
                http, "PATCH", f"{hook}/messages/{quote(message_id, safe='@')}", json_body=body, headers={}
            )
        else:
            url = f"{self._messages(target)}/{quote(message_id, safe='')}"
            await call(http, "PATCH", url, json_body=body, headers=self._auth())

    async def react(self, http: httpx2.AsyncClient, target: Target, message_id: str, emoji: str) -> None:
        chat, message = quote(target.chat, safe=""), quote(message_id, safe="")
        url = (
            f"{self.config.base_url}/channels/{chat}/messages/{message}/reactions/{quote(emoji, safe='')}/@me"
        )
        await call(http, "PUT", url, json_body=None, headers=self._auth())

    async def typing(self, http: httpx2.AsyncClient, target: Target) -> None:
        url = f"{self.config.base_url}/channels/{quote(target.chat, safe='')}/typing"
        await call(http, "POST", url, json_body=None, headers=self._auth())

    async def upload(
        self, http: httpx2.AsyncClient, target: Target, name: str, mime_type: str, data: bytes
    ) -> str | None:
        payload = {"attachments": [{"id": 0, "filename": name}], "allowed_mentions": NO_MENTIONS}
        form = {"payload_json": json.dumps(payload, separators=(",", ":"))}
        files = {"files[0]": (name, data, mime_type)}
        hook = self._hook(target)
        if hook is not None:
            _, answer = await call(
                http, "POST", f"{hook}?wait=true", json_body=None, headers={}, form=form, files=files
            )
        else:
            _, answer = await call(
                http,
                "POST",
                self._messages(target),
                json_body=None,
                headers=self._auth(),
                form=form,
                files=files,
            )
        return text_of((answer or {}).get("id"))
