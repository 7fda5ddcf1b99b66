"""What a bridge connects to, and what ends it: the failures, and SIGINT/SIGTERM.

Owns the bridge's configuration (`BridgeConfig`), the headers every request carries (`http_headers`), and
the judgement of an HTTP refusal (`judge`): 401/403, or a 404 that is not a JSON-RPC error for a request id,
ends the bridge with a one-line reason and the error its pending requests are answered with. Does not own
sending anything (`relay`). Standard library only, like the whole package.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, cast

from mcphost_bridge._lines import INVALID_REQUEST, Message, envelope, error_reply

__all__ = [
    "CONNECTION_CLOSED",
    "DEFAULT_TOKEN_ENV",
    "REFUSED",
    "WATCHED",
    "BridgeConfig",
    "BridgeError",
    "Failure",
    "StoppedError",
    "http_headers",
    "jsonrpc_error",
    "judge",
    "raise_stopped",
    "status_error",
]

DEFAULT_TOKEN_ENV = "MCPHOST_RUN_TOKEN"
"""The environment variable the bearer token is read from unless `--token-env` names another."""
CONNECTION_CLOSED = -32000
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
REFUSED = frozenset({401, 403})
WATCHED = frozenset({401, 403, 404})


@dataclass(frozen=True)
class BridgeConfig:
    """What one bridge connects to and how."""

    url: str
    """The Streamable HTTP MCP endpoint, e.g. `http://127.0.0.1:8765/runs/run_01.../mcp`."""
    token: str | None = field(default=None, repr=False)
    """Sent as `Authorization: Bearer <token>` on every HTTP request; never logged."""
    headers: Mapping[str, str] = field(default_factory=dict[str, str])
    """Extra headers sent on every HTTP request."""
    timeout: float = 10.0
    """Seconds allowed to connect, and for each step of shutting down."""
    token_env: str = DEFAULT_TOKEN_ENV
    """Where the token came from, named in the hint when the server refuses a request sent without one."""


class BridgeError(Exception):
    """The bridge cannot go on; the message is one line fit for stderr."""


def http_headers(extra: Mapping[str, str], token: str | None) -> dict[str, str]:
    """The headers of every HTTP request: the extra ones, and the bearer token when there is one."""
    headers = dict(extra)
    if token:
        # The token wins over an `Authorization` given as an extra header: two would be ambiguous.
        headers = {name: value for name, value in headers.items() if name.lower() != "authorization"}
        headers["Authorization"] = f"Bearer {token}"
    return headers


@dataclass(frozen=True)
class Failure:
    description: str
    """The one-line stderr message."""
    reply_code: int = CONNECTION_CLOSED
    reply_message: str = ""
    """The error sent to requests still awaiting an answer (the server's own words when it gave any)."""


def judge(
    config: BridgeConfig, endpoint: str, status: int, body: bytes, *, has_session: bool
) -> Failure | None:
    """The failure a 401/403/404 means, or None for a 404 that is a JSON-RPC error for a request id
    (a 2026 server answers an unknown method so)."""
    error = jsonrpc_error(body)
    if status == 404 and error is not None and error.get("id") is not None:
        return None
    said = str(error["error"]["message"]) if error is not None else ""
    code = int(error["error"]["code"]) if error is not None else CONNECTION_CLOSED
    if status in REFUSED:
        hint = "" if config.token else f" (no token was sent: set {config.token_env})"
        reason = said or "no reason given"
        return Failure(f"{endpoint} refused the request (HTTP {status}): {reason}{hint}", code, said)
    detail = f": {said}" if said else ""
    if has_session:
        description = (
            f"{endpoint} no longer knows this session (HTTP 404{detail}); restart the client for a new one"
        )
    else:
        description = f"{endpoint} was not found (HTTP 404{detail}); check --url"
    return Failure(description, code, said)


def jsonrpc_error(body: bytes) -> dict[str, Any] | None:
    try:
        message = envelope(json.loads(body))
    except (ValueError, RecursionError):
        return None
    return message if message is not None and "error" in message else None


def status_error(request_id: int | str, status: int, body: bytes, *, has_session: bool) -> Message:
    """The answer to a request the endpoint refused with a status that does not end the bridge: the
    JSON-RPC error in the body, else one for the status (as the SDK's transport answers)."""
    error = jsonrpc_error(body)
    if error is not None:
        return {"jsonrpc": "2.0", "id": request_id, "error": error["error"]}
    if status == 404:
        code, text = (
            (INVALID_REQUEST, "Session terminated") if has_session else (METHOD_NOT_FOUND, "Not Found")
        )
        return cast("Message", error_reply(request_id, code, text))
    return cast("Message", error_reply(request_id, INTERNAL_ERROR, "Server returned an error response"))


class StoppedError(Exception):
    """SIGINT or SIGTERM arrived."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_stopped(signum: int, frame: FrameType | None) -> None:
    # Once is enough to leave cleanly; a second signal while leaving ends the process at once.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    raise StoppedError(signum)
