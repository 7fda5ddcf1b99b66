"""Fakes of the Slack, Telegram and Discord Web APIs on 127.0.0.1, speaking their real request shapes.

Each fake checks the bot token the way its platform does, refuses a malformed request with the
platform's own error body (Slack `{"ok": false, "error"}` on HTTP 200, Telegram `{"ok": false,
"error_code", "description"}`, Discord `{"code", "message"}`), enforces the platform's text limit (after
Telegram's HTML parsing), and can be told to fail: `fail` is a list of statuses answered before the next
success (429 with the platform's rate-limit body and `Retry-After`, or a 5xx), `fail_forever` a status
answered always. `messages` keeps what each accepted call posted or edited, with its arrival time.
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
        self.fail_forever: int | None = None
        self.messages: list[Posted] = []
        self.requests: list[tuple[str, float]] = []
        self._next_id = 1000

    def _failure(self) -> int | None:
        if self.fail_forever is not None:
            return self.fail_forever
        return self.fail.pop(0) if self.fail else None

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id


class FakeSlack(_Fake):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.app = Starlette(routes=[Route("/api/{method}", self.api, methods=["POST"])])

    async def api(self, request: Request) -> Response:
        method = request.path_params["method"]
        self.requests.append((method, time.monotonic()))
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"ok": False, "error": "invalid_auth"})
        if not request.headers.get("content-type", "").startswith("application/json"):
            return JSONResponse({"ok": False, "error": "invalid_form_data"})
        status = self._failure()
        if status == 429:
            return JSONResponse({"ok": False, "error": "ratelimited"}, status_code=429,
                                headers={"Retry-After": str(self.retry_after)})  # fmt: skip
        if status is not None:
            return Response("upstream connect error", status_code=status)
        body = json.loads(await request.body())
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
        status = self._failure()
        if status == 429:
            wait = self.retry_after
            return self._error(
                429, f"Too Many Requests: retry after {wait}", parameters={"retry_after": wait}
            )
        if status is not None:
            return self._error(status, "Internal Server Error")
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
            self.messages.append(Posted(method, str(body["chat_id"]), text, body))
            return JSONResponse(
                {
                    "ok": True,
                    "result": {"message_id": message_id, "chat": {"id": body["chat_id"]}, "text": text},
                }
            )
        if method in ("setMessageReaction", "sendChatAction"):
            self.messages.append(
                Posted(
                    method, str(body["chat_id"]), json.dumps(body.get("reaction") or body.get("action")), body
                )
            )
            return JSONResponse({"ok": True, "result": True})
        return self._error(404, "Not Found")


class FakeDiscord(_Fake):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.app = Starlette(
            routes=[
                Route("/channels/{channel}/messages", self.channel_message, methods=["POST"]),
                Route("/webhooks/{app}/{token}/messages/@original", self.original, methods=["PATCH"]),
                Route("/webhooks/{app}/{token}", self.followup, methods=["POST"]),
            ]
        )

    async def _check(self, request: Request, *, bot: bool) -> tuple[Response | None, dict[str, Any]]:
        self.requests.append((request.url.path, time.monotonic()))
        if bot and request.headers.get("authorization") != f"Bot {self.token}":
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401), {}
        status = self._failure()
        if status == 429:
            body = {
                "message": "You are being rate limited.",
                "retry_after": self.retry_after,
                "global": False,
            }
            return JSONResponse(body, status_code=429, headers={"Retry-After": str(self.retry_after)}), {}
        if status is not None:
            return JSONResponse({"message": "Internal Server Error", "code": 0}, status_code=status), {}
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

    def _posted(self, method: str, chat: str, body: dict[str, Any]) -> Response:
        message_id = str(self.new_id())
        self.messages.append(Posted(method, chat, body["content"], body))
        return JSONResponse({"id": message_id, "channel_id": chat, "content": body["content"]})

    async def channel_message(self, request: Request) -> Response:
        refused, body = await self._check(request, bot=True)
        return refused or self._posted("channel", request.path_params["channel"], body)

    async def original(self, request: Request) -> Response:
        refused, body = await self._check(request, bot=False)
        return refused or self._posted("original", request.path_params["token"], body)

    async def followup(self, request: Request) -> Response:
        refused, body = await self._check(request, bot=False)
        return refused or self._posted("followup", request.path_params["token"], body)
