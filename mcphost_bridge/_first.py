"""The first exchange of a bridge, relayed with the standard library while the SDK is still importing.

Owns answering the client's first message — `initialize` (handshake era) or `server/discover` (2026 era) —
before `mcp`, `httpx2` and `pydantic` are loaded: importing them takes most of a second on an idle machine
and several on a busy one, and clients give a stdio server about a second to answer before they drop it.
Does not own anything after that first answer: `FirstExchange` hands the endpoint's answer to the relay,
which replays it to the SDK transport (`relay._WatchedClient`) so the transport takes the session id from
it exactly as from a live response, and the header stamp learns the negotiated version.

Invariants:
- Imports nothing but the standard library (`__main__` loads the relay in a thread meanwhile).
- The answer is the endpoint's own, never the bridge's: the message goes out as the relay would send it
  (same headers, same token), and the JSON-RPC response that comes back is written to stdout as one line.
  Notifications the endpoint sends on the same SSE stream before it are written first, in order; nothing
  is written until the answer is in.
- Anything out of the ordinary — another first message, a proxy in the environment, a redirect, a status
  other than 200, a body that is not one JSON-RPC answer, a connection failure — writes nothing: the first
  line goes back unread to the relay, which sends it itself and reports failures as it always does (the
  endpoint then sees that first message twice, which only happens on the way to an error).
- Connecting is bounded by `timeout`; waiting for the answer is not (as in the relay: the client decides
  how long an answer may take).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, cast
from urllib.parse import urlsplit

__all__ = ["DEFAULT_TOKEN_ENV", "FirstExchange", "first_exchange", "http_headers"]

logger = logging.getLogger(__name__)

FIRST_METHODS = frozenset({"initialize", "server/discover"})
"""The first messages answered here: the ones a client sends before anything else, in each era."""
DEFAULT_TOKEN_ENV = "MCPHOST_RUN_TOKEN"
"""The environment variable the bearer token is read from unless `--token-env` names another."""
# The SDK's spellings (`mcp_types`, `mcp.shared.inbound`), repeated so as not to import it; a test pins them.
MODERN_VERSIONS = frozenset({"2026-07-28"})
VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
_MAX_FIRST_LINE = 1024 * 1024
_MAX_ANSWER_BYTES = 4 * 1024 * 1024
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class FirstExchange:
    """What the first exchange leaves for the relay."""

    unread: bytes
    """stdin bytes the relay must read before the rest of stdin (the first line too when it was not sent)."""
    request: Mapping[str, Any] | None = None
    """The first message, when it was sent and answered here."""
    answer: bytes = b""
    """The endpoint's JSON-RPC answer to it (JSON), already written to stdout."""
    session_id: str | None = None
    """The `Mcp-Session-Id` the endpoint gave with the answer (handshake era)."""


def http_headers(extra: Mapping[str, str], token: str | None) -> dict[str, str]:
    """The headers of every HTTP request: the extra ones, and the bearer token when there is one."""
    headers = dict(extra)
    if token:
        # The token wins over an `Authorization` given as an extra header: two would be ambiguous.
        headers = {name: value for name, value in headers.items() if name.lower() != "authorization"}
        headers["Authorization"] = f"Bearer {token}"
    return headers


def first_exchange(
    url: str,
    headers: Mapping[str, str],
    *,
    timeout: float,
    stdin_fd: int,
    stdout: BinaryIO,
) -> FirstExchange:
    """Read the first stdin line and, when it is an opening message, relay it and write the answer."""
    unread = _read_first_line(stdin_fd)
    line, newline, _ = unread.partition(b"\n")
    if not newline:
        return FirstExchange(unread)
    request = _opening(line)
    if request is None or _proxied():
        return FirstExchange(unread)
    try:
        answered = _post(url, headers, request, timeout=timeout, stdout=stdout)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        logger.debug("the first exchange falls back to the relay: %s", exc)
        return FirstExchange(unread)
    if answered is None:
        return FirstExchange(unread)
    answer, session_id = answered
    rest = unread[len(line) + 1 :]
    return FirstExchange(rest, request=request, answer=answer, session_id=session_id)


def _read_first_line(fd: int) -> bytes:
    data = bytearray()
    while b"\n" not in data and len(data) <= _MAX_FIRST_LINE:
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _json_object(data: bytes) -> dict[str, Any] | None:
    """`data` parsed, when it is one JSON object."""
    try:
        parsed: Any = json.loads(data)
    except ValueError:
        return None
    return cast("dict[str, Any]", parsed) if isinstance(parsed, dict) else None


def _opening(line: bytes) -> dict[str, Any] | None:
    """The first message as the relay would send it (envelope members only), if it is an opening one."""
    message = _json_object(line)
    if message is None:
        return None
    request_id = message.get("id")
    valid_id = isinstance(request_id, str) or (type(request_id) is int and abs(request_id) < 2**53)
    params = message.get("params", {})
    if message.get("jsonrpc") != "2.0" or not valid_id or message.get("method") not in FIRST_METHODS:
        return None
    if not isinstance(params, dict) or set(message) - {"jsonrpc", "id", "method", "params"}:
        return None
    return message


def _mcp_headers(request: Mapping[str, Any]) -> dict[str, str] | None:
    """The per-message headers `_stamp.HeaderStamp` gives an opening message; None when unsure."""
    if request["method"] == "initialize":
        return {}  # the handshake is the negotiation: no version header
    params = cast("Mapping[str, Any]", request.get("params") or {})
    meta: Any = params.get("_meta")
    version: Any = cast("Mapping[str, Any]", meta).get(VERSION_META_KEY) if isinstance(meta, dict) else None
    if version not in MODERN_VERSIONS:
        return None  # the relay knows the eras; leave anything else to it
    return {VERSION_HEADER: version, METHOD_HEADER: request["method"]}


def _proxied() -> bool:
    return any(os.environ.get(name) or os.environ.get(name.upper()) for name in _PROXY_VARIABLES)


def _post(
    url: str, headers: Mapping[str, str], request: Mapping[str, Any], *, timeout: float, stdout: BinaryIO
) -> tuple[bytes, str | None] | None:
    mcp_headers = _mcp_headers(request)
    if mcp_headers is None:
        return None
    parts = urlsplit(url)
    if parts.scheme == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=timeout
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    body = json.dumps(request, separators=(",", ":"), ensure_ascii=False).encode()
    sent = {
        **headers,
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        **mcp_headers,
    }
    try:
        connection.connect()
        if connection.sock is not None:
            connection.sock.settimeout(None)  # connecting is bounded, waiting for the answer is not
        connection.request("POST", path, body=body, headers=sent)
        response = connection.getresponse()
        if response.status != 200:
            return None
        kind = (response.getheader("content-type") or "").split(";", 1)[0].strip().lower()
        session_id = response.getheader("mcp-session-id")
        if kind == "application/json":
            answer = response.read(_MAX_ANSWER_BYTES + 1)
            if len(answer) > _MAX_ANSWER_BYTES or not _answers(answer, request["id"]):
                return None
            _write(stdout, answer)
            return answer, session_id
        if kind == "text/event-stream":
            return _from_events(response, request["id"], stdout, session_id)
        return None
    finally:
        connection.close()


def _from_events(
    response: http.client.HTTPResponse, request_id: Any, stdout: BinaryIO, session_id: str | None
) -> tuple[bytes, str | None] | None:
    """Read SSE events until the answer, then write the notifications before it and the answer."""
    data: list[bytes] = []
    notifications: list[bytes] = []
    read = 0
    while True:
        raw = response.readline(_MAX_ANSWER_BYTES + 1)
        read += len(raw)
        if not raw or read > _MAX_ANSWER_BYTES:
            return None  # the stream ended (or grew too long) before the answer
        field = raw.rstrip(b"\r\n")
        if field.startswith(b"data:"):
            data.append(field[5:].removeprefix(b" "))
            continue
        if field:
            continue  # `id:`, `event:`, `retry:`, comments
        if not data:
            continue  # a priming event, or a blank line
        payload, data = b"\n".join(data), []
        if _answers(payload, request_id):
            for notification in notifications:
                _write(stdout, notification)
            _write(stdout, payload)
            return payload, session_id
        if not _is_notification(payload):
            return None  # a server request before the answer: the relay is better placed for it
        notifications.append(payload)


def _answers(payload: bytes, request_id: Any) -> bool:
    answer = _json_object(payload)
    if answer is None:
        return False
    same_id = type(answer.get("id")) is type(request_id) and answer.get("id") == request_id
    return answer.get("jsonrpc") == "2.0" and same_id and (("result" in answer) != ("error" in answer))


def _is_notification(payload: bytes) -> bool:
    notification = _json_object(payload)
    return (
        notification is not None and "id" not in notification and isinstance(notification.get("method"), str)
    )


def _write(stdout: BinaryIO, payload: bytes) -> None:
    line = json.dumps(json.loads(payload), separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    stdout.write(line)
    stdout.flush()
