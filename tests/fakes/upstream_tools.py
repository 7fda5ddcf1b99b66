"""A real MCP tool server for gateway tests: `python tests/fakes/upstream_tools.py stdio | http PORT [TOKEN]`.

Tools: `echo`, `forecast` (structured), `picture` (an image), `get.time` (a dotted name), `fail` (an
`is_error` result), `crash` (the process exits mid-call), `hang` (never answers), `huge` (a result of N
KiB), `pid` (tells restarts apart), `whoami` (the `x-token` header it got, HTTP only), `trace`
(the `traceparent` it got as a header and in `_meta`) and `grow` (adds a
tool and sends `tools/list_changed`). Over HTTP, a TOKEN makes every request without `x-token: TOKEN` a
401. A standalone script (no imports from the repository), so it runs from any working directory.
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from pydantic import BaseModel

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

server = MCPServer("fake-upstream", instructions="Test tools.", log_level="WARNING")


class Forecast(BaseModel):
    city: str
    temperature_c: float
    summary: str


@server.tool(description="Repeat the text back.")
def echo(text: str) -> str:
    return text


@server.tool(description="A made-up forecast.")
def forecast(city: str) -> Forecast:
    return Forecast(city=city, temperature_c=21.5, summary=f"Sunny in {city}")


@server.tool(description="A 1x1 PNG.")
def picture() -> Image:
    return Image(data=PNG_1X1, format="png")


@server.tool(name="get.time", description="A fixed time.")
def get_time() -> str:
    return "12:00"


@server.tool(description="Always fails with a tool error.")
def fail(reason: str = "it broke") -> str:
    raise ToolError(reason)


@server.tool(description="Exit the server process in the middle of the call.")
def crash() -> str:
    os._exit(3)


@server.tool(description="Never answer (or answer after `seconds`).")
async def hang(seconds: float = 3600.0) -> str:
    await anyio.sleep(seconds)
    return "woke up"


@server.tool(description="A text result of `kilobytes` KiB.")
def huge(kilobytes: int) -> str:
    line = "The quick brown fox jumps over the lazy dog. " * 20 + "\n"
    return (line * (kilobytes * 1024 // len(line) + 1))[: kilobytes * 1024]


@server.tool(description="This process's id.")
def pid() -> int:
    return os.getpid()


@server.tool(description="The x-token header of the request (HTTP only).")
def whoami(ctx: Context) -> str:
    headers = ctx.headers or {}
    return str(headers.get("x-token", "none"))


@server.tool(description="The W3C trace context the request carried: HTTP headers and `_meta`.")
def trace(ctx: Context) -> dict[str, str | None]:
    headers = ctx.headers or {}
    meta = ctx.request_context.meta or {}
    return {
        "header_traceparent": headers.get("traceparent"),
        "header_tracestate": headers.get("tracestate"),
        "meta_traceparent": meta.get("traceparent"),
    }


@server.tool(description="Add a tool named `name` and tell the client the tool list changed.")
async def grow(name: str, ctx: Context) -> str:
    def added() -> str:
        return f"I am {name}"

    server.add_tool(added, name=name, description=f"Added at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


def _http_app(token: str | None) -> Any:
    app = server.streamable_http_app(host="127.0.0.1")
    if token is None:
        return app

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"x-token", b"").decode() != token:
                body = b'{"error": "missing or wrong x-token"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def main(argv: list[str]) -> None:
    if argv[:1] == ["stdio"]:
        server.run("stdio")
    elif argv[:1] == ["http"] and len(argv) >= 2:
        import uvicorn

        token = argv[2] if len(argv) > 2 else None
        uvicorn.run(_http_app(token), host="127.0.0.1", port=int(argv[1]), log_level="warning")
    else:
        sys.exit("usage: upstream_tools.py stdio | http PORT [TOKEN]")


if __name__ == "__main__":
    main(sys.argv[1:])
