"""A fake of where Slack, Telegram and Discord serve a message's files, on 127.0.0.1.

Serves `files` (path → bytes) the way each platform does: Slack's `url_private_download` under
`/files/…` only with the bot token (`Authorization: Bearer`, else 403 as Slack's login redirect
would refuse), Telegram's `getFile` (`POST /bot<token>/getFile` → `file_path`) and its download
`GET /file/bot<token>/<file_path>`, and Discord's CDN under `/attachments/…` (no token). It also takes
the replies a run sends (Slack `chat.postMessage`, Telegram `sendMessage`, Discord channel messages)
with the platforms' success shapes, so a run's answer does not dead-letter.

Can be told to fail: `fail[path]` lists statuses answered before the next success, `hang` holds a
path's answer until released, `chunked` paths are streamed without `Content-Length` (a platform that
lies about a file's size is only found out while streaming). `gets` records every file download.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


class FakeFiles:
    def __init__(self, *, slack_token: str, telegram_token: str) -> None:
        self.slack_token = slack_token
        self.telegram_token = telegram_token
        self.files: dict[str, bytes] = {}
        self.fail: dict[str, list[int]] = {}
        self.hang: set[str] = set()
        self.chunked: set[str] = set()
        self.gets: list[str] = []
        self.released = anyio.Event()
        self.app = Starlette(
            routes=[
                Route("/files/{path:path}", self.slack_file, methods=["GET"]),
                Route("/attachments/{path:path}", self.discord_file, methods=["GET"]),
                Route("/file/bot{token}/{path:path}", self.telegram_file, methods=["GET"]),
                Route("/bot{token}/{method}", self.telegram_api, methods=["POST"]),
                Route("/api/{method}", self.slack_api, methods=["POST"]),
                Route("/channels/{chat}/messages", self.discord_message, methods=["POST"]),
            ]
        )

    async def _serve(self, key: str) -> Response:
        self.gets.append(key)
        if key in self.hang:
            await self.released.wait()
        failures = self.fail.get(key)
        if failures:
            return Response("upstream error", status_code=failures.pop(0))
        if key not in self.files:
            return Response("not found", status_code=404)
        data = self.files[key]
        if key in self.chunked:

            async def pieces() -> AsyncIterator[bytes]:
                for start in range(0, len(data), 1024):
                    yield data[start : start + 1024]

            return StreamingResponse(pieces(), media_type="application/octet-stream")
        return Response(data, media_type="application/octet-stream")

    async def slack_file(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {self.slack_token}":
            return Response("login required", status_code=403)
        return await self._serve(f"files/{request.path_params['path']}")

    async def discord_file(self, request: Request) -> Response:
        if "authorization" in request.headers:
            return Response("a CDN URL takes no token", status_code=400)
        return await self._serve(f"attachments/{request.path_params['path']}")

    async def telegram_file(self, request: Request) -> Response:
        if request.path_params["token"] != self.telegram_token:
            return Response("Not Found", status_code=404)
        return await self._serve(f"tg/{request.path_params['path']}")

    async def telegram_api(self, request: Request) -> Response:
        if request.path_params["token"] != self.telegram_token:
            return JSONResponse(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status_code=401
            )
        body = await request.json()
        if request.path_params["method"] == "getFile":
            file_id = str(body.get("file_id"))
            if f"tg/documents/{file_id}" not in self.files:
                return JSONResponse(
                    {"ok": False, "error_code": 400, "description": "Bad Request: invalid file_id"},
                    status_code=400,
                )
            return JSONResponse(
                {"ok": True, "result": {"file_id": file_id, "file_path": f"documents/{file_id}"}}
            )
        return JSONResponse({"ok": True, "result": {"message_id": 1}})

    async def slack_api(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "ts": "1700000001.000100", "channel": "C1"})

    async def discord_message(self, request: Request) -> Response:
        return JSONResponse({"id": "900", "channel_id": request.path_params["chat"]})
