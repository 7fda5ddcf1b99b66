"""Serve a fake model API under uvicorn on a free 127.0.0.1 port inside the test's event loop.

Owns only the listening socket and the server task: the fake's routes and what it records belong to
the fake (`anthropic.py`, `openai.py`). The server never binds anything but 127.0.0.1, and it is stopped
(bounded) when the context exits, even with streams still open.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import anyio
import uvicorn
from starlette.types import ASGIApp


@asynccontextmanager
async def serve_loopback(app: ASGIApp) -> AsyncGenerator[str]:
    """Serve `app` on a free 127.0.0.1 port; yields its base URL (`http://127.0.0.1:<port>`)."""
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only when the listening
    # socket says TCP, and without it each answer waits out Nagle and a delayed ACK (~40 ms).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                while not server.started:  # noqa: ASYNC110  # uvicorn exposes only a flag
                    await anyio.sleep(0.01)
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                server.should_exit = True
                server.force_exit = True  # hanging streams must not hold the test open
    finally:
        sock.close()
