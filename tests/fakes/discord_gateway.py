"""A fake Discord Gateway on 127.0.0.1: a websockets server speaking the Gateway's op codes, and the
HTTP API beside it (`GET /gateway/bot` naming the websocket's URL; channel messages accepted).

Speaks 10 HELLO (with `heartbeat_ms`), 1 HEARTBEAT → 11 ACK (unless `skip_acks` says to ignore the next
ones), 2 IDENTIFY → 0 DISPATCH READY (a new session; a wrong token closes with 4004), 6 RESUME →
the dispatches after the client's `seq` (every one when `replay_all`, as a duplicate delivery would)
then RESUMED, and, when a test says so, 7 RECONNECT and 9 INVALID_SESSION. `dispatch` numbers an
event and sends it to the live connection (a dropped one loses it until the RESUME replays it);
`send_raw` sends any frame; `drop` cuts the TCP connection without a close frame.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

BOT_ID = "900000000000000001"


class FakeGateway:
    def __init__(self, token: str, *, heartbeat_ms: int = 45000) -> None:
        self.token = token
        self.heartbeat_ms = heartbeat_ms
        self.seq = 0
        self.events: list[dict[str, Any]] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.skip_acks = 0
        self.replay_all = False
        self.connections: list[ServerConnection] = []
        self.posted: list[dict[str, Any]] = []
        self.ws_url = ""
        self._sessions = 0
        self.app = Starlette(
            routes=[
                Route("/gateway/bot", self.gateway_bot, methods=["GET"]),
                Route("/channels/{chat}/messages", self.message, methods=["POST"]),
            ]
        )

    async def gateway_bot(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bot {self.token}":
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
        return JSONResponse({"url": self.ws_url, "shards": 1, "session_start_limit": {"remaining": 999}})

    async def message(self, request: Request) -> Response:
        self.posted.append(await request.json())
        return JSONResponse({"id": str(700 + len(self.posted)), "channel_id": request.path_params["chat"]})

    def serve(self) -> Any:
        """`async with fake.serve() as server:` listens on a free 127.0.0.1 port (sets `ws_url`)."""
        return serve(self.handler, "127.0.0.1", 0, max_size=None, compression=None, ping_interval=None)

    def bound(self, server: Server) -> None:
        port = next(iter(server.sockets)).getsockname()[1]
        self.ws_url = f"ws://127.0.0.1:{port}"

    @property
    def live(self) -> ServerConnection | None:
        return self.connections[-1] if self.connections else None

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    async def _send(self, ws: ServerConnection, payload: dict[str, Any]) -> None:
        with contextlib.suppress(ConnectionClosed):
            await ws.send(json.dumps(payload))

    async def handler(self, ws: ServerConnection) -> None:
        self.connections.append(ws)
        await self._send(ws, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}})
        try:
            async for message in ws:
                frame = json.loads(message)
                op, data = frame.get("op"), frame.get("d")
                if op == 1:
                    self.heartbeats += 1
                    if self.skip_acks > 0:
                        self.skip_acks -= 1
                    else:
                        await self._send(ws, {"op": 11})
                elif op == 2:
                    self.identifies.append(data)
                    if data.get("token") != self.token:
                        await ws.close(4004, "Authentication failed.")
                        return
                    self._sessions += 1
                    ready: dict[str, Any] = {"v": 10, "session_id": f"session-{self._sessions}", "resume_gateway_url": self.ws_url,
                             "user": {"id": BOT_ID, "username": "mcphost-bot", "bot": True}, "guilds": []}  # fmt: skip
                    await self._send(ws, {"op": 0, "t": "READY", "s": self._next(), "d": ready})
                elif op == 6:
                    self.resumes.append(data)
                    for event in self.events:
                        if self.replay_all or event["s"] > (data.get("seq") or 0):
                            await self._send(ws, event)
                    await self._send(ws, {"op": 0, "t": "RESUMED", "s": self._next(), "d": {}})
        except ConnectionClosed:
            pass  # the client went away (a test's drop, or the host shutting down)

    async def dispatch(self, kind: str, data: dict[str, Any]) -> int:
        seq = self._next()
        event: dict[str, Any] = {"op": 0, "t": kind, "s": seq, "d": data}
        self.events.append(event)
        if self.live is not None:
            await self._send(self.live, event)
        return seq

    async def send_raw(self, frame: str | bytes) -> None:
        assert self.live is not None
        with contextlib.suppress(ConnectionClosed):
            await self.live.send(frame)

    async def send_op(self, op: int, data: Any = None) -> None:
        await self.send_raw(json.dumps({"op": op, "d": data}))

    def drop(self) -> None:
        assert self.live is not None
        self.live.transport.abort()


def message(
    message_id: str, content: str, *, author: str = "111", bot: bool = False, **extra: Any
) -> dict[str, Any]:
    return {"id": message_id, "channel_id": "C1", "guild_id": "G1", "content": content,
            "author": {"id": author, "username": f"user{author}", "bot": bot}, "mentions": [],
            "attachments": [], "timestamp": "2026-12-05T00:00:00+00:00", **extra}  # fmt: skip
