"""The handshake-era MCP sessions the facts server holds on this process, and how one is closed.

Owns `RunSessions` (the sessions each run opened, with the principal that owns each), `InFlight` (the
requests being served on a session, by session) and `close_session` (a DELETE through the SDK session
manager, the only public way to end a session). Does not own when sessions close (`server.py`:
`end_run`, `close` and the sweeper decide).

Invariants:
- `InFlight` holds a request only while it is served, so it never grows past the requests in flight.
- `close_session` is shielded and bounded (`CLOSE_WAIT_S`): closing never hangs its caller.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from contextlib import contextmanager

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Message, Scope

logger = logging.getLogger(__name__)

CLOSE_WAIT_S = 5.0
"""How long closing one session may take before it is given up."""


class RunSessions:
    """The handshake-era sessions each run opened on this process, with the principal that owns each."""

    def __init__(self) -> None:
        self._by_run: dict[str, dict[str, AuthenticatedUser]] = {}

    def opened(self, run_id: str, session_id: str, principal: AuthenticatedUser) -> None:
        self._by_run.setdefault(run_id, {})[session_id] = principal

    def closed(self, run_id: str, session_id: str) -> None:
        sessions = self._by_run.get(run_id)
        if sessions is not None:
            sessions.pop(session_id, None)
            if not sessions:
                del self._by_run[run_id]

    def pop(self, run_id: str) -> dict[str, AuthenticatedUser]:
        return self._by_run.pop(run_id, {})

    def runs(self) -> list[str]:
        return list(self._by_run)

    def count(self, run_id: str) -> int:
        return len(self._by_run.get(run_id, {}))


class InFlight:
    """The requests being served on handshake-era sessions (a client's open GET stream among them)."""

    def __init__(self) -> None:
        self._requests: dict[object, tuple[str, str, AuthenticatedUser]] = {}

    @contextmanager
    def serving(self, path: str, session_id: str | None, principal: AuthenticatedUser) -> Generator[None]:
        """Hold the request while the block serves it (a request without a session is not held)."""
        if session_id is None:
            yield
            return
        key = object()
        self._requests[key] = (path, session_id, principal)
        try:
            yield
        finally:
            del self._requests[key]

    def sessions(self) -> dict[str, tuple[str, AuthenticatedUser]]:
        """Each session a request is in flight on: the path it was reached at, and its principal."""
        return {session_id: (path, user) for path, session_id, user in self._requests.values()}


async def close_session(
    manager: StreamableHTTPSessionManager, path: str, session_id: str, principal: AuthenticatedUser
) -> None:
    """End one session the way its client would: a DELETE through the session manager (it also cancels
    the session's pending requests and ends its open streams)."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "DELETE",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(MCP_SESSION_ID_HEADER.lower().encode(), session_id.encode())],
        "client": None,
        "server": None,
        "user": principal,
        "state": {},
    }
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        pass

    with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_WAIT_S):
        try:
            await manager.handle_request(scope, receive, send)
        except Exception:
            logger.exception("closing MCP session %s of %s failed", session_id, path)
