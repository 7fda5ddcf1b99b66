"""Slack: the Events API, slash commands and interactivity in; `chat.postMessage` and friends out.

Owns Slack's request signature (`v0=` HMAC-SHA256 over `v0:<timestamp>:<body>`, checked by
`slack_sdk`'s `SignatureVerifier` after our own timestamp window), its `url_verification` handshake,
the mapping of its payloads to events, mrkdwn escaping and its Web API calls. Does not own the adapter
contract (`_adapter.py`).

Invariants:
- A message's key is `msg:<channel>:<ts>`, so the `message` and `app_mention` events of one message,
  and every retry of either (`X-Slack-Retry-Num`), are one event; other events key on `event_id`,
  slash commands on `trigger_id`, block actions on `trigger_id`.
- Messages with a `bot_id` (the bot's own and other bots') and `bot_message` subtypes are ignored.
- Slack has no typing indicator for an Events API bot (`typing_every_s` is None): a streamed reply's
  placeholder message is what shows the run is working.
- A file goes up as `slack_sdk`'s `files_upload_v2` sends it: `files.getUploadURLExternal` (form:
  `filename`, `length`), the bytes POSTed to the `upload_url` it answers, then
  `files.completeUploadExternal` sharing the file in the chat and thread.
- Text sent is mrkdwn-escaped (`&`, `<`, `>`), so a reply can neither ping `<!channel>` nor a user by
  accident nor break a link; its parts measure at most `max_chars` escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar
from urllib.parse import parse_qs

import httpx2

from mcphost.channels._adapter import (
    Attachment,
    ChannelEvent,
    ChannelSendError,
    Credentialed,
    Target,
    Verdict,
    call,
    json_payload,
    object_of,
    refused,
    same_origin,
    text_of,
    url_files,
)
from mcphost.channels._text import split_text
from mcphost.config import ChannelPlatform
from mcphost.errors import InvalidArgumentError
from mcphost.protocol import JSONObject, is_json_array

RETRYABLE_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "request_timeout", "service_unavailable"}
)
"""Slack `error` codes (HTTP 200, `ok: false`) that may pass; every other one is permanent."""
FILES_HOST = "https://files.slack.com"
"""Where Slack serves `url_private_download`; the bot token goes nowhere else (but `api_base`)."""
MESSAGE_EVENTS = frozenset({None, "thread_broadcast", "file_share", "me_message"})
"""`message` subtypes that are a user's message."""


def _signed(secret: str, now: float, body: bytes, stamp: str, signature: str) -> bool:
    """`slack_sdk`'s check, its clock set to `now`. Imported on the first Slack request, not at start-up:
    `slack_sdk.signature` loads the package, whose `__init__` imports the whole Web API client."""
    from slack_sdk.signature import Clock, SignatureVerifier

    class At(Clock):
        def now(self) -> float:
            return now

    return SignatureVerifier(secret, At()).is_valid(body, stamp, signature)


def _files(event: JSONObject) -> list[Attachment]:
    """A message's `files[]`, each located by its `url_private_download` (or `url_private`); a file
    Slack did not share with the bot (`file_access: check_file_info`) has neither."""
    return url_files(
        event.get("files"), urls=("url_private_download", "url_private"), name="name", mime="mimetype"
    )


class SlackAdapter(Credentialed):
    platform: ClassVar[ChannelPlatform] = "slack"
    max_chars: ClassVar[int] = 4000
    """Slack cuts a message's `text` at 40,000 characters, and renders past about 4,000 poorly."""
    typing_every_s: ClassVar[float | None] = None
    max_upload_bytes: ClassVar[int] = 1024 * 1024 * 1024
    """Slack's limit on one file: 1 GB."""

    # -- inbound ------------------------------------------------------------------------------------

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float) -> Verdict:
        stamp = headers.get("x-slack-request-timestamp", "")
        signature = headers.get("x-slack-signature", "")
        if not stamp or not signature:
            raise refused(
                self.channel_id,
                "missing X-Slack-Request-Timestamp or X-Slack-Signature.",
                "missing_signature",
            )
        if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12):
            raise refused(self.channel_id, "X-Slack-Request-Timestamp is not a Unix time.", "bad_timestamp")
        if abs(now - int(stamp)) > self.config.tolerance_s:
            raise refused(
                self.channel_id,
                f"X-Slack-Request-Timestamp is more than {self.config.tolerance_s:g} s from the host's clock.",
                "stale_timestamp",
            )
        if not _signed(self._secret, now, body, stamp, signature):
            raise refused(
                self.channel_id,
                "X-Slack-Signature does not match the body and the signing secret.",
                "bad_signature",
            )
        payload = self._parse(headers.get("content-type", ""), body)
        retry = headers.get("x-slack-retry-num", "0")
        tries = int(retry) if retry.isascii() and retry.isdigit() and len(retry) < 6 else 0
        if payload.get("type") == "url_verification":
            return Verdict(payload, answer={"challenge": payload.get("challenge")}, retry=tries)
        return Verdict(payload, retry=tries)

    def _parse(self, content_type: str, body: bytes) -> JSONObject:
        if not content_type.startswith("application/x-www-form-urlencoded"):
            return json_payload(self.channel_id, body)
        try:
            form = parse_qs(body.decode(), keep_blank_values=True, strict_parsing=False, max_num_fields=100)
        except (UnicodeDecodeError, ValueError):
            raise InvalidArgumentError(
                f"Request to channel {self.channel_id!r}: the form body is not UTF-8 URL-encoded fields.",
                details={"reason": "bad_form"},
            ) from None
        fields: JSONObject = {k: v[0] for k, v in form.items()}
        if isinstance(fields.get("payload"), str):  # interactivity: the JSON is in a `payload` field
            return {"interactive": json_payload(self.channel_id, str(fields["payload"]))}
        return {"slash_command": fields}

    def normalize(self, verdict: Verdict) -> ChannelEvent | None:
        payload = verdict.payload
        if "slash_command" in payload:
            return self._command(object_of(payload["slash_command"]))
        if "interactive" in payload:
            return self._interaction(object_of(payload["interactive"]))
        if payload.get("type") != "event_callback":
            return None
        event = object_of(payload.get("event"))
        kind = text_of(event.get("type"))
        team = text_of(payload.get("team_id"))
        event_id = text_of(payload.get("event_id"))
        if kind is None or event_id is None:
            return None
        if kind in ("message", "app_mention"):
            return self._message(kind, event, team, event_id)
        if kind in ("reaction_added", "reaction_removed"):
            item = object_of(event.get("item"))
            chat, ts = text_of(item.get("channel")), text_of(item.get("ts"))
            if chat is None or ts is None:
                return None
            return ChannelEvent(
                key=event_id, event_type="reaction.added" if kind == "reaction_added" else "reaction.removed",
                source_event_type=kind, chat=chat, target=Target(chat, message=ts), actor=text_of(event.get("user")),
                workspace=team, data={"reaction": event.get("reaction"), "message_id": ts},
            )  # fmt: skip
        if kind in ("member_joined_channel", "member_left_channel"):
            chat = text_of(event.get("channel"))
            if chat is None:
                return None
            joined = kind == "member_joined_channel"
            return ChannelEvent(
                key=event_id, event_type="group.member_joined" if joined else "group.member_left",
                source_event_type=kind, chat=chat, target=Target(chat), actor=text_of(event.get("user")),
                workspace=team, data={"inviter": event.get("inviter")} if joined and "inviter" in event else {},
            )  # fmt: skip
        return None

    def _message(self, kind: str, event: JSONObject, team: str | None, event_id: str) -> ChannelEvent | None:
        chat = text_of(event.get("channel"))
        subtype = text_of(event.get("subtype"))
        if chat is None:
            return None
        if subtype == "message_changed":
            message = object_of(event.get("message"))
            ts = text_of(message.get("ts"))
            if ts is None or message.get("bot_id") is not None:
                return None
            return ChannelEvent(
                key=event_id, event_type="message.edited", source_event_type="message_changed", chat=chat,
                thread=text_of(message.get("thread_ts")), actor=text_of(message.get("user")), workspace=team,
                text=text_of(message.get("text")), target=Target(chat, text_of(message.get("thread_ts")), ts),
                data={"message_id": ts},
            )  # fmt: skip
        if subtype == "message_deleted":
            ts = text_of(event.get("deleted_ts"))
            previous = object_of(event.get("previous_message"))
            if ts is None or previous.get("bot_id") is not None:
                return None
            return ChannelEvent(
                key=event_id, event_type="message.recalled", source_event_type="message_deleted", chat=chat,
                thread=text_of(previous.get("thread_ts")), actor=text_of(previous.get("user")), workspace=team,
                target=Target(chat, text_of(previous.get("thread_ts"))), data={"message_id": ts},
            )  # fmt: skip
        ts = text_of(event.get("ts"))
        if subtype not in MESSAGE_EVENTS or event.get("bot_id") is not None or ts is None:
            return None
        thread = text_of(event.get("thread_ts"))
        data: JSONObject = {"message_id": ts, "channel_type": event.get("channel_type") or None}
        if kind == "app_mention":
            data["mention"] = True
        return ChannelEvent(
            key=f"msg:{chat}:{ts}", event_type="message.received", source_event_type=kind, chat=chat,
            thread=thread, actor=text_of(event.get("user")), workspace=team, text=text_of(event.get("text")),
            target=Target(chat, thread, ts), data=data, attachments=_files(event),
        )  # fmt: skip

    def _command(self, form: JSONObject) -> ChannelEvent | None:
        chat, trigger = text_of(form.get("channel_id")), text_of(form.get("trigger_id"))
        if chat is None or trigger is None:
            return None
        return ChannelEvent(
            key=f"cmd:{trigger}", event_type="command.invoked", source_event_type="slash_command", chat=chat,
            actor=text_of(form.get("user_id")), actor_name=text_of(form.get("user_name")),
            workspace=text_of(form.get("team_id")), text=text_of(form.get("text")), target=Target(chat),
            data={"command": form.get("command"), "args": form.get("text") or ""},
        )  # fmt: skip

    def _interaction(self, payload: JSONObject) -> ChannelEvent | None:
        if payload.get("type") != "block_actions":
            return None
        chat = text_of(object_of(payload.get("channel")).get("id")) or text_of(
            object_of(payload.get("container")).get("channel_id")
        )
        trigger = text_of(payload.get("trigger_id"))
        actions = payload.get("actions")
        action = object_of(actions[0]) if is_json_array(actions) and actions else {}
        if chat is None or trigger is None:
            return None
        message = object_of(payload.get("message"))
        thread = text_of(message.get("thread_ts"))
        return ChannelEvent(
            key=f"act:{trigger}", event_type="interaction.submitted", source_event_type="block_actions",
            chat=chat, thread=thread, actor=text_of(object_of(payload.get("user")).get("id")),
            workspace=text_of(object_of(payload.get("team")).get("id")), text=text_of(action.get("value")),
            target=Target(chat, thread, text_of(message.get("ts"))),
            data={"action_id": action.get("action_id"), "value": action.get("value"), "block_id": action.get("block_id")},
        )  # fmt: skip

    def acknowledge(self, event: ChannelEvent | None) -> JSONObject | None:
        return None  # an empty 200: Slack shows nothing for it, even after a slash command

    async def file_request(self, http: httpx2.AsyncClient, locator: JSONObject) -> tuple[str, dict[str, str]]:
        """A file's private URL, fetched with the bot token (the app needs the `files:read` scope)."""
        url = str(locator.get("url") or "")
        if not same_origin(url, FILES_HOST, self.config.base_url):
            raise ChannelSendError(
                f"Slack file URL {url[:200]!r} is not on {FILES_HOST}; the bot token is not sent there.",
                permanent=True,
            )
        return url, {"authorization": f"Bearer {self._token}"}

    # -- outbound -----------------------------------------------------------------------------------

    def escape(self, text: str) -> str:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    def split(self, text: str) -> list[str]:
        return split_text(text, self.max_chars, lambda part: len(self.escape(part)))

    async def _api(
        self,
        http: httpx2.AsyncClient,
        method: str,
        body: JSONObject,
        *,
        form: Mapping[str, str] | None = None,
    ) -> JSONObject:
        headers = {"authorization": f"Bearer {self._token}"}
        if form is None:
            headers["content-type"] = "application/json; charset=utf-8"
        url = f"{self.config.base_url}/{method}"
        _, answer = await call(
            http, "POST", url, json_body=None if form else body, headers=headers, form=form
        )
        if answer is None or answer.get("ok") is not True:
            error = str((answer or {}).get("error") or "no JSON answer")[:100]
            raise ChannelSendError(f"Slack {method}: {error}", permanent=error not in RETRYABLE_ERRORS)
        return answer

    async def send(self, http: httpx2.AsyncClient, target: Target, text: str, *, part: int) -> str | None:
        body: JSONObject = {"channel": target.chat, "text": self.escape(text), "mrkdwn": True}
        if target.thread is not None:
            body["thread_ts"] = target.thread
        answer = await self._api(http, "chat.postMessage", body)
        return text_of(answer.get("ts"))

    async def edit(self, http: httpx2.AsyncClient, target: Target, message_id: str, text: str) -> None:
        await self._api(
            http, "chat.update", {"channel": target.chat, "ts": message_id, "text": self.escape(text)}
        )

    async def react(self, http: httpx2.AsyncClient, target: Target, message_id: str, emoji: str) -> None:
        name = emoji.strip(":")
        await self._api(
            http, "reactions.add", {"channel": target.chat, "timestamp": message_id, "name": name}
        )

    async def typing(self, http: httpx2.AsyncClient, target: Target) -> None:
        """Slack has no typing indicator for a bot's Web API calls; nothing to do."""

    async def upload(
        self, http: httpx2.AsyncClient, target: Target, name: str, mime_type: str, data: bytes
    ) -> str | None:
        ticket = await self._api(
            http, "files.getUploadURLExternal", {}, form={"filename": name, "length": str(len(data))}
        )
        upload_url, file_id = text_of(ticket.get("upload_url")), text_of(ticket.get("file_id"))
        if upload_url is None or file_id is None:
            raise ChannelSendError(
                "Slack files.getUploadURLExternal: no upload_url or file_id", permanent=True
            )
        await call(
            http, "POST", upload_url, json_body=None, headers={"content-type": mime_type}, content=data
        )
        body: JSONObject = {"files": [{"id": file_id, "title": name}], "channel_id": target.chat}
        if target.thread is not None:
            body["thread_ts"] = target.thread
        await self._api(http, "files.completeUploadExternal", body)
        return file_id
