"""Telegram: Bot API updates in by webhook; `sendMessage` and friends out, as HTML.

Owns Telegram's webhook check (the `X-Telegram-Bot-Api-Secret-Token` given to `setWebhook`, compared in
constant time), the mapping of updates to events, HTML escaping, and its Bot API calls. Does not own
the adapter contract (`_adapter.py`).

Invariants:
- An event's key is the update's `update_id`: Telegram redelivers an update it got no 2xx for with the
  same id, so a redelivery is the same event. Telegram signs no time: a captured request sent again is
  that same update, the same run.
- Messages from the bot itself (its id is the token's part before `:`) are ignored.
- While a run works, `sendChatAction` `typing` is repeated every 4 s (Telegram shows it for 5 s, or
  until the bot's next message); a file goes up as `sendDocument` (multipart), at most 50 MB.
- Text goes out with `parse_mode = HTML`: `&`, `<` and `>` are escaped, fenced code becomes
  `<pre><code>` and inline code `<code>`; a part is at most 4096 characters of text (tags are not
  counted by Telegram), and a code block cut between parts is closed and reopened.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from typing import ClassVar
from urllib.parse import quote

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
    size_of,
    text_of,
)
from mcphost.channels._text import split_text
from mcphost.config import ChannelConfig, ChannelPlatform
from mcphost.protocol import JSONObject, JSONValue, is_json_array, is_json_object

MEMBER_STATUSES = frozenset({"member", "administrator", "creator"})
_FENCED = re.compile(r"```([A-Za-z0-9_+-]*)\n?(.*?)```", re.DOTALL)
_INLINE = re.compile(r"`([^`\n]+)`")
ATTACHMENT_KINDS = ("document", "audio", "video", "voice", "animation", "video_note", "sticker")
DEFAULT_MIME = {
    "voice": "audio/ogg",
    "video_note": "video/mp4",
    "animation": "video/mp4",
    "sticker": "image/webp",
}
"""The type of a file Telegram sends without `mime_type`."""


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attachments(message: JSONObject) -> list[Attachment]:
    """A message's files, each located by its `file_id` (`getFile` turns it into a download path)."""
    found: list[Attachment] = []
    photos = message.get("photo")
    if is_json_array(photos) and photos and is_json_object(photos[-1]):  # the largest size comes last
        photo = photos[-1]
        if (file_id := text_of(photo.get("file_id"))) is not None:
            found.append(
                Attachment(
                    locator={"file_id": file_id},
                    name="photo.jpg",
                    mime_type="image/jpeg",
                    size=size_of(photo.get("file_size")),
                    meta={
                        "kind": "photo",
                        **{k: v for k, v in photo.items() if k in ("file_id", "file_unique_id", "file_size")},
                    },
                )
            )
    for kind in ATTACHMENT_KINDS:
        item = message.get(kind)
        if is_json_object(item) and (file_id := text_of(item.get("file_id"))) is not None:
            keep = ("file_id", "file_unique_id", "file_name", "mime_type", "file_size")
            found.append(
                Attachment(
                    locator={"file_id": file_id},
                    name=text_of(item.get("file_name")) or kind,
                    mime_type=text_of(item.get("mime_type"))
                    or DEFAULT_MIME.get(kind, "application/octet-stream"),
                    size=size_of(item.get("file_size")),
                    meta={"kind": kind, **{k: v for k, v in item.items() if k in keep}},
                )
            )
    return found


def _chat_int(chat: str) -> int | str:
    return int(chat) if re.fullmatch(r"-?[0-9]{1,20}", chat) else chat


class TelegramAdapter(Credentialed):
    platform: ClassVar[ChannelPlatform] = "telegram"
    max_chars: ClassVar[int] = 4096
    typing_every_s: ClassVar[float | None] = 4.0
    max_upload_bytes: ClassVar[int] = 50 * 1000 * 1000
    """The Bot API's limit on a file a bot sends: 50 MB."""

    def __init__(self, channel_id: str, config: ChannelConfig, *, secret: str, token: str) -> None:
        super().__init__(channel_id, config, secret=secret, token=token)
        self.bot_id = token.partition(":")[0]
        """The bot's own user id: the token's part before `:`."""

    # -- inbound ------------------------------------------------------------------------------------

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float) -> Verdict:
        given = headers.get("x-telegram-bot-api-secret-token", "")
        if not given:
            raise refused(self.channel_id, "missing X-Telegram-Bot-Api-Secret-Token.", "missing_signature")
        if not hmac.compare_digest(given.encode(), self._secret.encode()):
            raise refused(
                self.channel_id,
                "X-Telegram-Bot-Api-Secret-Token is not the channel's secret.",
                "bad_signature",
            )
        return Verdict(json_payload(self.channel_id, body))

    def normalize(self, verdict: Verdict) -> ChannelEvent | None:
        update = verdict.payload
        update_id = update.get("update_id")
        if not isinstance(update_id, int) or isinstance(update_id, bool):
            return None
        key = f"update:{update_id}"
        for field, kind in (("message", "message.received"), ("edited_message", "message.edited")):
            if is_json_object(message := update.get(field)):
                return self._message(key, field, kind, message)
        if is_json_object(query := update.get("callback_query")):
            message = object_of(query.get("message"))
            chat = text_of(object_of(message.get("chat")).get("id"))
            actor = object_of(query.get("from"))
            if chat is None:
                return None
            thread = text_of(message.get("message_thread_id"))
            return ChannelEvent(
                key=key, event_type="interaction.submitted", source_event_type="callback_query", chat=chat,
                thread=thread, actor=text_of(actor.get("id")), actor_name=text_of(actor.get("username")),
                text=text_of(query.get("data")), target=Target(chat, thread, text_of(message.get("message_id"))),
                data={"callback_query_id": query.get("id"), "value": query.get("data"),
                      "message_id": text_of(message.get("message_id"))},
            )  # fmt: skip
        if is_json_object(reaction := update.get("message_reaction")):
            return self._reaction(key, reaction)
        if is_json_object(member := update.get("chat_member")):
            return self._member(key, member)
        if is_json_object(deleted := update.get("deleted_business_messages")):
            chat = text_of(object_of(deleted.get("chat")).get("id"))
            ids = deleted.get("message_ids")
            if chat is None:
                return None
            return ChannelEvent(
                key=key, event_type="message.recalled", source_event_type="deleted_business_messages",
                chat=chat, target=Target(chat), data={"message_ids": ids if is_json_array(ids) else []},
            )  # fmt: skip
        return None

    def _message(self, key: str, field: str, kind: str, message: JSONObject) -> ChannelEvent | None:
        chat = text_of(object_of(message.get("chat")).get("id"))
        sender = object_of(message.get("from"))
        actor = text_of(sender.get("id"))
        if chat is None or (actor is not None and actor == self.bot_id):
            return None
        thread = (
            text_of(message.get("message_thread_id")) if message.get("is_topic_message") is True else None
        )
        message_id = text_of(message.get("message_id"))

        def event(event_type: str, source: str, data: JSONObject, text: str | None = None) -> ChannelEvent:
            return ChannelEvent(
                key=key, event_type=event_type, source_event_type=source, chat=chat, thread=thread,
                actor=actor, actor_name=text_of(sender.get("username")) or text_of(sender.get("first_name")),
                target=Target(chat, thread, message_id), text=text, data=data,
                attachments=_attachments(message),
            )  # fmt: skip

        joined = message.get("new_chat_members")
        if is_json_array(joined) and joined:
            members = [m for m in (text_of(object_of(j).get("id")) for j in joined) if m is not None]
            return event("group.member_joined", "new_chat_members", {"members": list[JSONValue](members)})
        if is_json_object(left := message.get("left_chat_member")):
            return event("group.member_left", "left_chat_member", {"members": [text_of(left.get("id"))]})
        text = text_of(message.get("text")) or text_of(message.get("caption"))
        if text is None and not _attachments(message):
            return None  # a service message (a pinned message, a title change, …)
        data: JSONObject = {"message_id": message_id, "chat_type": object_of(message.get("chat")).get("type")}
        if kind == "message.received" and text is not None and text.startswith("/"):
            command, _, args = text.partition(" ")
            data |= {"command": command.partition("@")[0], "args": args.strip()}
            kind = "command.invoked"
        return event(kind, field, data, text)

    def _reaction(self, key: str, reaction: JSONObject) -> ChannelEvent | None:
        chat = text_of(object_of(reaction.get("chat")).get("id"))
        message_id = text_of(reaction.get("message_id"))
        if chat is None or message_id is None:
            return None

        def emojis(name: str) -> set[str]:
            items = reaction.get(name)
            return {
                str(object_of(r).get("emoji"))
                for r in (items if is_json_array(items) else [])
                if object_of(r).get("emoji")
            }

        new, old = emojis("new_reaction"), emojis("old_reaction")
        added = sorted(new - old)
        user = object_of(reaction.get("user"))
        return ChannelEvent(
            key=key, event_type="reaction.added" if added else "reaction.removed",
            source_event_type="message_reaction", chat=chat, actor=text_of(user.get("id")),
            actor_name=text_of(user.get("username")), target=Target(chat, message=message_id),
            data={"message_id": message_id, "reaction": (added or sorted(old - new) or [None])[0]},
        )  # fmt: skip

    def _member(self, key: str, member: JSONObject) -> ChannelEvent | None:
        chat = text_of(object_of(member.get("chat")).get("id"))
        new, old = object_of(member.get("new_chat_member")), object_of(member.get("old_chat_member"))
        was, now = old.get("status") in MEMBER_STATUSES, new.get("status") in MEMBER_STATUSES
        user = text_of(object_of(new.get("user")).get("id"))
        if chat is None or was == now:
            return None
        return ChannelEvent(
            key=key, event_type="group.member_joined" if now else "group.member_left",
            source_event_type="chat_member", chat=chat, actor=user, target=Target(chat),
            data={"members": [user]},
        )  # fmt: skip

    def acknowledge(self, event: ChannelEvent | None) -> JSONObject | None:
        """A button press is answered in the webhook's own response (`answerCallbackQuery`), which ends
        the client's spinner; other updates get an empty 200."""
        if event is not None and event.source_event_type == "callback_query":
            return {"method": "answerCallbackQuery", "callback_query_id": event.data.get("callback_query_id")}
        return None

    async def file_request(self, http: httpx2.AsyncClient, locator: JSONObject) -> tuple[str, dict[str, str]]:
        """`getFile` for the file's path, then `<api>/file/bot<token>/<file_path>` (the token is in the
        URL; Telegram serves bots files of at most 20 MB)."""
        answer = await self._api(http, "getFile", {"file_id": str(locator.get("file_id") or "")})
        path = text_of(object_of(answer.get("result")).get("file_path"))
        if path is None or path.startswith("/") or ".." in path.split("/"):
            raise ChannelSendError("Telegram getFile: the answer names no usable file_path", permanent=True)
        return f"{self.config.base_url}/file/bot{self._token}/{quote(path)}", {}

    # -- outbound -----------------------------------------------------------------------------------

    def escape(self, text: str) -> str:
        """Markdown-ish text as Telegram HTML: fenced and inline code as `<pre>` / `<code>`, the rest
        escaped."""
        out: list[str] = []
        last = 0
        for match in _FENCED.finditer(text):
            out.append(self._inline(text[last : match.start()]))
            language, code = match.group(1), _html(match.group(2))
            attr = f' class="language-{language}"' if language else ""
            out.append(f"<pre><code{attr}>{code}</code></pre>")
            last = match.end()
        out.append(self._inline(text[last:]))
        return "".join(out)

    @staticmethod
    def _inline(text: str) -> str:
        parts = _INLINE.split(text)  # odd indexes are the code spans
        return "".join(f"<code>{_html(p)}</code>" if i % 2 else _html(p) for i, p in enumerate(parts))

    def split(self, text: str) -> list[str]:
        return split_text(text, self.max_chars)

    async def _api(
        self,
        http: httpx2.AsyncClient,
        method: str,
        body: JSONObject,
        *,
        files: Mapping[str, tuple[str, bytes, str]] | None = None,
    ) -> JSONObject:
        url = f"{self.config.base_url}/bot{self._token}/{method}"
        if files is None:
            _, answer = await call(http, "POST", url, json_body=body, headers={})
        else:
            form = {k: str(v) for k, v in body.items()}
            _, answer = await call(http, "POST", url, json_body=None, headers={}, form=form, files=files)
        if answer is None or answer.get("ok") is not True:
            said = str((answer or {}).get("description") or "no JSON answer")[:200]
            raise ChannelSendError(f"Telegram {method}: {said}", permanent=True)
        return answer

    def _where(self, target: Target) -> JSONObject:
        where: JSONObject = {"chat_id": _chat_int(target.chat)}
        if target.thread is not None and target.thread.isdigit():
            where["message_thread_id"] = int(target.thread)
        return where

    async def send(self, http: httpx2.AsyncClient, target: Target, text: str, *, part: int) -> str | None:
        body = self._where(target) | {"text": self.escape(text), "parse_mode": "HTML"}
        if part == 0 and target.message is not None and target.message.isdigit():
            body["reply_parameters"] = {
                "message_id": int(target.message),
                "allow_sending_without_reply": True,
            }
        answer = await self._api(http, "sendMessage", body)
        return text_of(object_of(answer.get("result")).get("message_id"))

    async def edit(self, http: httpx2.AsyncClient, target: Target, message_id: str, text: str) -> None:
        body: JSONObject = {"chat_id": _chat_int(target.chat), "message_id": int(message_id),
                            "text": self.escape(text), "parse_mode": "HTML"}  # fmt: skip
        await self._api(http, "editMessageText", body)

    async def react(self, http: httpx2.AsyncClient, target: Target, message_id: str, emoji: str) -> None:
        body: JSONObject = {"chat_id": _chat_int(target.chat), "message_id": int(message_id),
                            "reaction": [{"type": "emoji", "emoji": emoji}]}  # fmt: skip
        await self._api(http, "setMessageReaction", body)

    async def typing(self, http: httpx2.AsyncClient, target: Target) -> None:
        await self._api(http, "sendChatAction", self._where(target) | {"action": "typing"})

    async def upload(
        self, http: httpx2.AsyncClient, target: Target, name: str, mime_type: str, data: bytes
    ) -> str | None:
        answer = await self._api(
            http, "sendDocument", self._where(target), files={"document": (name, data, mime_type)}
        )
        return text_of(object_of(answer.get("result")).get("message_id"))

    async def set_webhook(self, http: httpx2.AsyncClient, url: str) -> JSONObject:
        """Point the bot's webhook at `url` with the channel's secret token (`mcphost channels register`)."""
        updates = ["message", "edited_message", "callback_query", "message_reaction", "chat_member",
                   "deleted_business_messages"]  # fmt: skip
        body: JSONObject = {"url": url, "secret_token": self._secret, "allowed_updates": updates}
        return await self._api(http, "setWebhook", body)
