"""Fakes of the Slack, Telegram and Discord Web APIs on 127.0.0.1, speaking their real request shapes.

Each fake checks the bot token the way its platform does, refuses a malformed request with the
platform's own error body (Slack `{"ok": false, "error"}` on HTTP 200, Telegram `{"ok": false,
"error_code", "description"}`, Discord `{"code", "message"}`), enforces the platform's text limit (after
Telegram's HTML parsing), and can be told to fail: `fail` is a list of statuses answered before the next
success (429 with the platform's rate-limit body and `Retry-After`, or a 5xx), `fail_on` the same per
method (`chat.update`, `editMessageText`, `edit` for Discord's message edits), `fail_forever` a status
answered always. `messages` keeps what each accepted call posted or edited, with its arrival time;
`shown` each message's text now (by its id), `typing` the typing-indicator calls and `files` the
uploaded files' (name, bytes). Edits need a message the fake posted; uploads take each platform's
real shapes (Slack's `files.getUploadURLExternal` → upload URL → `files.completeUploadExternal`,
Telegram's multipart `sendDocument`, Discord's multipart `payload_json` + `files[n]`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TELEGRAM_TAGS = frozenset({"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre",
                           "tg-spoiler", "span", "blockquote", "tg-emoji"})  # fmt: skip


@dataclass
class Posted:
    method: str
    chat: str
    text: str
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


class _Fake:
    retry_after = 0.3

    def __init__(self, token: str) -> None:
        self.token = token
        self.fail: list[int] = []
        self.fail_on: dict[str, list[int]] = {}
        self.fail_forever: int | None = None
        self.messages: list[Posted] = []
        self.requests: list[tuple[str, float]] = []
        self.shown: dict[str, str] = {}
        self.typing: list[tuple[str, float]] = []
        self.files: list[tuple[str, str, bytes]] = []
        """(chat, file name, bytes) of each file shared."""
        self._next_id = 1000

    def _failure(self, method: str = "") -> int | None:
        if self.fail_forever is not None:
            return self.fail_forever
        if self.fail_on.get(method):
            return self.fail_on[method].pop(0)
        return self.fail.pop(0) if self.fail else None

    @staticmethod
    async def read_form(request: Request) -> tuple[dict[str, str], list[tuple[str, str, bytes]]]:
        """A form's fields, and its files as (field, file name, bytes); the spooled files closed."""
        fields: dict[str, str] = {}
        files: list[tuple[str, str, bytes]] = []
        async with request.form() as form:
            for key, value in form.multi_items():
                if isinstance(value, str):
                    fields[key] = value
                else:
                    files.append((key, value.filename or "", await value.read()))
        return fields, files

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id


class FakeSlack(_Fake):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self._uploads: dict[str, tuple[str, int, bytes | None]] = {}
        self.app = Starlette(
            routes=[
                Route("/api/{method}", self.api, methods=["POST"]),
                Route("/upload/{file_id}", self.upload, methods=["POST"]),
            ]
        )

    async def upload(self, request: Request) -> Response:
        """The `upload_url` Slack hands out: the file's bytes, POSTed; its length must be the declared one."""
        file_id = request.path_params["file_id"]
        if file_id not in self._uploads:
            return Response("not found", status_code=404)
        name, length, _ = self._uploads[file_id]
        data = await request.body()
        if len(data) != length:
            return Response(f"length mismatch: declared {length}, got {len(data)}", status_code=400)
        self._uploads[file_id] = (name, length, data)
        return Response(f"OK - {len(data)}", status_code=200)

    async def api(self, request: Request) -> Response:
        method = request.path_params["method"]
        self.requests.append((method, time.monotonic()))
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"ok": False, "error": "invalid_auth"})
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("application/x-www-form-urlencoded"):
            body: dict[str, Any] = dict((await self.read_form(request))[0])
        elif content_type.startswith("application/json"):
            body = json.loads(await request.body())
        else:
            return JSONResponse({"ok": False, "error": "invalid_form_data"})
        status = self._failure(method)
        if status == 429:
            return JSONResponse({"ok": False, "error": "ratelimited"}, status_code=429,
                                headers={"Retry-After": str(self.retry_after)})  # fmt: skip
        if status is not None:
            return Response("upstream connect error", status_code=status)
        if method == "files.getUploadURLExternal":
            length = str(body.get("length", ""))
            if not body.get("filename") or not length.isdigit():
                return JSONResponse({"ok": False, "error": "invalid_arguments"})
            file_id = f"F{self.new_id()}"
            self._uploads[file_id] = (str(body["filename"]), int(length), None)
            return JSONResponse(
                {"ok": True, "upload_url": f"{request.base_url}upload/{file_id}", "file_id": file_id}
            )
        if method == "files.completeUploadExternal":
            given = body.get("files")
            files: list[dict[str, Any]] = (json.loads(given) if isinstance(given, str) else given) or []
            channel = body.get("channel_id")
            for item in files:
                name, _, data = self._uploads.get(str(item.get("id")), ("", 0, None))
                if data is None:
                    return JSONResponse({"ok": False, "error": "file_not_found"})
                self.files.append((str(channel), name, data))
            self.messages.append(Posted(method, str(channel), "", body))
            return JSONResponse({"ok": True, "files": [{"id": f.get("id")} for f in files]})
        channel = body.get("channel")
        if not channel:
            return JSONResponse({"ok": False, "error": "channel_not_found"})
        if method in ("chat.postMessage", "chat.update"):
            text = body.get("text")
            if not text:
                return JSONResponse({"ok": False, "error": "no_text"})
            if len(text) > 40000:
                return JSONResponse({"ok": False, "error": "msg_too_long"})
            ts = body.get("ts") or f"1700000000.{self.new_id():06d}"
            if method == "chat.update" and ts not in self.shown:
                return JSONResponse({"ok": False, "error": "message_not_found"})
            self.shown[ts] = text
            self.messages.append(Posted(method, channel, text, body))
            return JSONResponse(
                {"ok": True, "channel": channel, "ts": ts, "message": {"text": text, "ts": ts}}
            )
        if method == "reactions.add":
            self.messages.append(Posted(method, channel, body.get("name", ""), body))
            return JSONResponse({"ok": True})
        return JSONResponse({"ok": False, "error": "unknown_method"}, status_code=404)


class _TelegramText(HTMLParser):
    """Telegram's HTML parse mode: supported tags only, balanced; the text the user sees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.open: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TELEGRAM_TAGS:
            self.error = f'Bad Request: can\'t parse entities: Unsupported start tag "{tag}"'
        self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open.pop() != tag:
            self.error = f'Bad Request: can\'t parse entities: Unexpected end tag "{tag}"'

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def telegram_visible(text: str) -> tuple[str, str | None]:
    parser = _TelegramText()
    parser.feed(text)
    parser.close()
    if parser.open and parser.error is None:
        parser.error = f"Bad Request: can't parse entities: Can't find end tag corresponding to start tag \"{parser.open[-1]}\""
    return "".join(parser.text), parser.error


class FakeTelegram(_Fake):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.webhooks: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/bot{token}/{method}", self.api, methods=["POST"])])

    @staticmethod
    def _error(code: int, description: str, **extra: Any) -> JSONResponse:
        return JSONResponse(
            {"ok": False, "error_code": code, "description": description, **extra}, status_code=code
        )

    async def api(self, request: Request) -> Response:
        method = request.path_params["method"]
        self.requests.append((method, time.monotonic()))
        if request.path_params["token"] != self.token:
            return self._error(401, "Unauthorized")
        status = self._failure(method)
        if status == 429:
            wait = self.retry_after
            return self._error(
                429, f"Too Many Requests: retry after {wait}", parameters={"retry_after": wait}
            )
        if status is not None:
            return self._error(status, "Internal Server Error")
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            return await self._document(method, request)
        body = json.loads(await request.body())
        if method == "setWebhook":
            self.webhooks.append(body)
            return JSONResponse({"ok": True, "result": True, "description": "Webhook was set"})
        if "chat_id" not in body:
            return self._error(400, "Bad Request: chat_id is empty")
        if method in ("sendMessage", "editMessageText"):
            text = body.get("text") or ""
            if body.get("parse_mode") == "HTML":
                text, error = telegram_visible(text)
                if error is not None:
                    return self._error(400, error)
            if not text.strip():
                return self._error(400, "Bad Request: message text is empty")
            if len(text) > 4096:
                return self._error(400, "Bad Request: message is too long")
            message_id = body.get("message_id") or self.new_id()
            key = f"{body['chat_id']}/{message_id}"
            if method == "editMessageText":
                if key not in self.shown:
                    return self._error(400, "Bad Request: message to edit not found")
                if self.shown[key] == body.get("text"):
                    return self._error(400, "Bad Request: message is not modified: specified new message "
                                       "content and reply markup are exactly the same")  # fmt: skip
            self.shown[key] = body.get("text") or ""
            self.messages.append(Posted(method, str(body["chat_id"]), text, body))
            return JSONResponse(
                {
                    "ok": True,
                    "result": {"message_id": message_id, "chat": {"id": body["chat_id"]}, "text": text},
                }
            )
        if method == "sendChatAction":
            if body.get("action") != "typing":
                return self._error(400, "Bad Request: wrong parameter action in request")
            self.typing.append((str(body["chat_id"]), time.monotonic()))
            return JSONResponse({"ok": True, "result": True})
        if method == "setMessageReaction":
            self.messages.append(
                Posted(
                    method, str(body["chat_id"]), json.dumps(body.get("reaction") or body.get("action")), body
                )
            )
            return JSONResponse({"ok": True, "result": True})
        return self._error(404, "Not Found")

    async def _document(self, method: str, request: Request) -> Response:
        """`sendDocument` as multipart: `chat_id` and the `document` file."""
        form, files = await self.read_form(request)
        documents = [(name, data) for key, name, data in files if key == "document"]
        if method != "sendDocument" or not form.get("chat_id"):
            return self._error(400, "Bad Request: chat_id is empty")
        if len(documents) != 1:
            return self._error(400, "Bad Request: there is no document in the request")
        ((name, data),) = documents
        chat = form["chat_id"]
        self.files.append((chat, name, data))
        self.messages.append(Posted(method, chat, "", dict(form)))
        message_id = self.new_id()
        return JSONResponse({"ok": True, "result": {"message_id": message_id, "chat": {"id": int(chat)},
                                                    "document": {"file_name": name}}})  # fmt: skip


class FakeDiscord(_Fake):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.originals: dict[str, str] = {}
        """Each interaction token's original response message id (its deferred answer)."""
        self.app = Starlette(
            routes=[
                Route("/channels/{channel}/messages", self.channel_message, methods=["POST"]),
                Route("/channels/{channel}/messages/{message}", self.channel_edit, methods=["PATCH"]),
                Route("/channels/{channel}/typing", self.typing_on, methods=["POST"]),
                Route("/webhooks/{app}/{token}/messages/{message}", self.hook_edit, methods=["PATCH"]),
                Route("/webhooks/{app}/{token}", self.followup, methods=["POST"]),
            ]
        )

    async def _check(
        self, request: Request, *, bot: bool, method: str = ""
    ) -> tuple[Response | None, dict[str, Any]]:
        self.requests.append((request.url.path, time.monotonic()))
        if bot and request.headers.get("authorization") != f"Bot {self.token}":
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401), {}
        status = self._failure(method)
        if status == 429:
            body = {
                "message": "You are being rate limited.",
                "retry_after": self.retry_after,
                "global": False,
            }
            return JSONResponse(body, status_code=429, headers={"Retry-After": str(self.retry_after)}), {}
        if status is not None:
            return JSONResponse({"message": "Internal Server Error", "code": 0}, status_code=status), {}
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            return await self._attachments(request)
        body = json.loads(await request.body())
        content = body.get("content") or ""
        if not content or len(content) > 2000:
            errors = {
                "content": {
                    "_errors": [
                        {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}
                    ]
                }
            }
            return JSONResponse(
                {"code": 50035, "message": "Invalid Form Body", "errors": errors}, status_code=400
            ), {}
        return None, body

    async def _attachments(self, request: Request) -> tuple[Response | None, dict[str, Any]]:
        """A message with files: `payload_json` whose `attachments` name each `files[n]` part by id."""
        form, files = await self.read_form(request)
        raw = form.get("payload_json")
        payload: dict[str, Any] = json.loads(raw) if raw is not None else {}
        attachments: list[dict[str, Any]] = payload.get("attachments") or []
        named = {str(a.get("id")) for a in attachments}
        found: list[tuple[str, bytes]] = []
        for key, name, data in files:
            if key.startswith("files["):
                if key[len("files[") : -1] not in named:
                    return JSONResponse({"code": 50035, "message": "Invalid Form Body"}, status_code=400), {}
                found.append((name, data))
        if not found:
            return JSONResponse(
                {"code": 50006, "message": "Cannot send an empty message"}, status_code=400
            ), {}
        return None, payload | {"content": payload.get("content") or "", "files": found}

    def _posted(
        self, method: str, chat: str, body: dict[str, Any], message_id: str | None = None
    ) -> Response:
        message_id = message_id or str(self.new_id())
        for name, data in body.pop("files", []):
            self.files.append((chat, name, data))
        self.shown[message_id] = body["content"]
        self.messages.append(Posted(method, chat, body["content"], body))
        return JSONResponse({"id": message_id, "channel_id": chat, "content": body["content"]})

    async def channel_message(self, request: Request) -> Response:
        refused, body = await self._check(request, bot=True, method="send")
        return refused or self._posted("channel", request.path_params["channel"], body)

    async def channel_edit(self, request: Request) -> Response:
        message = request.path_params["message"]
        if message not in self.shown:
            return JSONResponse({"message": "Unknown Message", "code": 10008}, status_code=404)
        refused, body = await self._check(request, bot=True, method="edit")
        return refused or self._posted("edit", request.path_params["channel"], body, message)

    async def typing_on(self, request: Request) -> Response:
        self.requests.append((request.url.path, time.monotonic()))
        if request.headers.get("authorization") != f"Bot {self.token}":
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
        self.typing.append((request.path_params["channel"], time.monotonic()))
        return Response(status_code=204)

    async def hook_edit(self, request: Request) -> Response:
        token, message = request.path_params["token"], request.path_params["message"]
        if message == "@original":
            refused, body = await self._check(request, bot=False, method="original")
            message = self.originals.setdefault(token, str(self.new_id()))
            return refused or self._posted("original", token, body, message)
        if message not in self.shown:
            return JSONResponse({"message": "Unknown Message", "code": 10008}, status_code=404)
        refused, body = await self._check(request, bot=False, method="edit")
        return refused or self._posted("edit", token, body, message)

    async def followup(self, request: Request) -> Response:
        refused, body = await self._check(request, bot=False, method="followup")
        return refused or self._posted("followup", request.path_params["token"], body)
