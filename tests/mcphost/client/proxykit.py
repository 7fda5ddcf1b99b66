"""A loopback TCP proxy for client tests that cuts connections mid-stream, as a dropped network does.

Each connection is relayed to the target; the ones `cut` selects are closed (both sides, abruptly) right
after the server's bytes up to and including `marker` have been relayed, so the client holds a partial
SSE event and must resume. What each connection sent is kept, to check the resume request.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
from anyio.abc import SocketAttribute, SocketStream


@dataclass
class Proxy:
    url: str
    requests: list[bytes] = field(default_factory=list[bytes])
    """What each connection sent, in order of connection."""
    cuts: int = 0


@asynccontextmanager
async def cutting_proxy(target: str, marker: bytes, cut: Callable[[int], bool]) -> AsyncGenerator[Proxy]:
    """A proxy to `target` (http://host:port) that cuts connection n (from 0) after `marker` when `cut(n)`."""
    parts = urlsplit(target)
    assert parts.hostname is not None
    assert parts.port is not None
    host, port = parts.hostname, parts.port
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    proxy = Proxy(url=f"http://127.0.0.1:{listener.extra(SocketAttribute.local_port)}")

    async def relay(client: SocketStream) -> None:
        index = len(proxy.requests)
        proxy.requests.append(b"")
        async with client, await anyio.connect_tcp(host, port) as upstream, anyio.create_task_group() as tg:

            async def up() -> None:
                async for chunk in client:
                    proxy.requests[index] += chunk
                    await upstream.send(chunk)

            async def down() -> None:
                seen = b""
                async for chunk in upstream:
                    if cut(index) and marker in seen + chunk:
                        end = (seen + chunk).index(marker) + len(marker) - len(seen)
                        await client.send(chunk[:end])
                        proxy.cuts += 1
                        tg.cancel_scope.cancel()  # both sockets close as the task group ends
                        return
                    seen += chunk
                    await client.send(chunk)
                tg.cancel_scope.cancel()

            tg.start_soon(up)
            tg.start_soon(down)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, relay)
        yield proxy
        tg.cancel_scope.cancel()
