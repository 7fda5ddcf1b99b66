"""Errors → HTTP, the one place: every `HostError` becomes `{error: {code, message, details}}` with its status.

Owns the error body, the headers some statuses carry (`WWW-Authenticate` on 401, `Retry-After` on 503,
`Content-Range` on 416), the exception handlers the app installs (`EXCEPTION_HANDLERS`) and `CatchAll`,
the last line behind them. Endpoints and middleware raise or call `host_error_response`; none builds an
error body by hand. Does not own the error tree (`mcphost.errors`) nor the facts endpoint's JSON-RPC
refusals (`facts/server.py`).

Invariants:
- An unknown route is a 404 and a wrong method a 405, each with a message that says what to do.
- Anything that is not a `HostError` is a bug: logged with its traceback and answered with a generic 500
  that carries no internals. A storage error's cause (driver text, SQL) goes to the log only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcphost.common.challenge import bearer_challenge
from mcphost.errors import HostError, StorageUnavailableError, find_error

logger = logging.getLogger(__name__)

_HTTP_CODES: dict[int, str] = {
    400: "invalid_argument",
    401: "unauthorized",
    404: "not_found",
    405: "invalid_argument",
    409: "conflict",
    413: "payload_too_large",
    429: "rate_limited",
}


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": details or {}}}
    return JSONResponse(body, status_code=status, headers=headers)


def host_error_response(exc: HostError) -> JSONResponse:
    headers: dict[str, str] = {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = bearer_challenge(exc.message)
    if exc.status == 503:
        headers["Retry-After"] = "5"
    if exc.status == 416 and isinstance(exc.details.get("size"), int):
        headers["Content-Range"] = f"bytes */{exc.details['size']}"
    return error_response(exc.status, exc.code, exc.message, exc.details, headers)


async def _on_host_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HostError)
    if exc.status >= 500:
        # A storage error's message is fixed; its cause (driver text, SQL) goes to the log only.
        logger.warning("%s %s failed: %s", request.method, request.url.path, exc.__cause__ or exc.message)
    return host_error_response(exc)


async def _on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    method, path = request.method, request.url.path
    if exc.status_code == 404:
        message = f"No route {path[:200]!r}; the API is described at /openapi.json."
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        message = f"Method {method} is not allowed on {path[:200]!r}; allowed: {allowed or 'none'}."
    else:
        message = exc.detail
    code = _HTTP_CODES.get(exc.status_code, "runtime_error" if exc.status_code >= 500 else "invalid_argument")
    return error_response(exc.status_code, code, message, headers=dict(exc.headers or {}))


async def _on_disconnect(request: Request, exc: Exception) -> Response:
    # The client went away while sending its body: nobody reads this answer.
    return error_response(400, "invalid_argument", "The client disconnected before sending the whole body.")


def storage_unavailable(reason: str) -> StorageUnavailableError:
    return StorageUnavailableError(f"The host's storage is unavailable: {reason}", details={"reason": reason})


EXCEPTION_HANDLERS: Mapping[Any, Callable[[Request, Exception], Coroutine[Any, Any, Response]]] = {
    HostError: _on_host_error,
    HTTPException: _on_http_exception,
    ClientDisconnect: _on_disconnect,
}
"""The app's exception handlers (`Starlette(exception_handlers=...)`)."""


class CatchAll:
    """The last line: an exception no handler took is logged and answered with a generic 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            host_error = find_error(exc, HostError)
            if host_error is not None and not started:
                await host_error_response(host_error)(scope, receive, send)
                return
            if isinstance(exc, ClientDisconnect):
                return
            logger.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                response = error_response(
                    500, "runtime_error", "The host failed while handling this request; the error is logged."
                )
                await response(scope, receive, send)
