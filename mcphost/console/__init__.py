"""The web console: static pages at `/console/` (and `/`, which redirects there), shipped in the package.

Owns serving the console's files — HTML, one ES module per page, one stylesheet — with the headers that
keep them to themselves (a Content-Security-Policy that allows only this origin's scripts, styles and
requests, no framing, no referrer). Does not own any data: the pages read and act through the public
`/v1` API through the TypeScript client (`static/client.js`) and the user's API key (kept in the tab's
`sessionStorage` once entered), so the console can do nothing a `/v1` client could not, and the API
stays its only contract.

Invariants:
- Nothing built at install time and nothing fetched from elsewhere: the files under `static/` are what
  the browser runs, so the console works offline and `git diff` shows every change to it. `client.js` is
  generated (`npm run bundle` in clients/typescript) and committed; a test fails when it is stale.
- The files hold nothing secret; the API middleware (`api/_middleware.py`) applies the host's Host and Origin checks to them (as to
  `/v1`) but no API key, since the login prompt itself must load. Every datum they show comes from `/v1`,
  which asks for the key.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

from mcphost.guard import declare_access

STATIC_DIR = Path(__file__).parent / "static"
PREFIX = "/console"

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' blob:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
"""On every console file. `no-cache` revalidates (ETag), so an upgraded host never runs stale modules."""


class _Files:
    """`StaticFiles` over `static/` with `HEADERS` on every file it answers (a missing one is the app's
    JSON 404, like any unknown path)."""

    def __init__(self) -> None:
        self.files = StaticFiles(directory=STATIC_DIR, html=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.files(scope, receive, headed)


async def _home(request: Request) -> Response:
    return RedirectResponse(f"{PREFIX}/", status_code=307)


def is_console_path(path: str) -> bool:
    """`/` or a path under `/console`: the pages the API middleware puts behind the Host and Origin checks."""
    return path == "/" or path == PREFIX or path.startswith(f"{PREFIX}/")


def routes() -> list[BaseRoute]:
    """`/` (a redirect to `/console/`) and the console's files under `/console/`."""
    return [
        declare_access(Route("/", _home, methods=["GET"]), "site"),
        declare_access(Mount(PREFIX, app=_Files(), name="console"), "site"),
    ]
