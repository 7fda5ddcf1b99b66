"""The bridge's HTTP side in the standard library: one connection per exchange, redirects kept in the origin,
proxies from the environment, and Server-Sent Events read line by line.

Owns opening an exchange with the endpoint and reading its body (a JSON document or an SSE stream). It does
not own what is sent or what an answer means (`relay`).

Invariants:
- Connecting is bounded by `timeout`; reading is not (a tool may take as long as the client lets it), except
  for exchanges opened with `bounded=True` (the DELETE on the way out).
- An exchange can be aborted from another thread (`Exchange.abort`): its socket is shut down, so a read
  blocked on it returns at once. That is how a 2026-era request is cancelled (closing its response stream is
  the signal) and how open streams end when the bridge leaves.
- A redirect is followed (at most `MAX_REDIRECTS` times) only when it keeps the method (307/308, or any
  status for a GET) and stays on the endpoint's origin — as the SDK's transport does; any other comes back
  as the response it is, and the caller reports it.
- `http_proxy`/`https_proxy`/`no_proxy` are honoured as httpx does; `urllib.request` is imported for that
  only when one of them is set.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

__all__ = ["Event", "EventStreamError", "Exchange", "Http", "display_url", "read_events"]

MAX_REDIRECTS = 20
MAX_EVENT_BYTES = 32 * 1024 * 1024
"""Largest SSE event accepted (the same as the largest stdin line)."""
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


class EventStreamError(Exception):
    """An SSE stream broke a rule (an event past `MAX_EVENT_BYTES`)."""


@dataclass(frozen=True)
class Event:
    """One dispatched Server-Sent Event."""

    event: str
    data: str
    id: str | None
    """The stream's last event id as of this event (SSE keeps it across events)."""
    retry: int | None
    """The reconnection delay in milliseconds, when this event set one."""


class Exchange:
    """One HTTP request and its response on a connection of its own."""

    def __init__(self, connection: http.client.HTTPConnection) -> None:
        self.connection = connection
        self.response: http.client.HTTPResponse | None = None
        self.redirect: str | None = None
        """Where the response redirects to, when it is a redirect that was not followed."""
        self._aborted = False

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def status(self) -> int:
        assert self.response is not None
        return self.response.status

    def header(self, name: str) -> str:
        assert self.response is not None
        return self.response.getheader(name) or ""

    @property
    def content_type(self) -> str:
        return self.header("content-type").split(";", 1)[0].strip().lower()

    def read(self, limit: int) -> bytes:
        """The body, or its first `limit` + 1 bytes."""
        assert self.response is not None
        return self.response.read(limit + 1)

    def abort(self) -> None:
        """End the exchange from any thread: a blocked read returns."""
        self._aborted = True
        sock = self.connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.connection.close()


class Http:
    """Opens exchanges with one endpoint, with its default headers."""

    def __init__(self, url: str, headers: Mapping[str, str], timeout: float) -> None:
        self.url = url
        self._headers = dict(headers)
        self._timeout = timeout

    def open(
        self,
        method: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        *,
        bounded: bool = False,
        on_connect: list[Exchange] | None = None,
    ) -> Exchange:
        """Send a request and read the response's head; `on_connect` receives each exchange as it starts.

        Raises:
            ConnectionError: Connecting failed or timed out (`ConnectTimeoutError` for the latter).
            OSError, http.client.HTTPException: The exchange failed after connecting.
        """
        url = self.url
        sent = {**self._headers, **headers}
        redirects = 0
        while True:
            exchange = Exchange(self._connection(url))
            if on_connect is not None:
                on_connect.append(exchange)
            try:
                exchange.connection.connect()
            except TimeoutError as exc:
                exchange.close()
                raise ConnectTimeoutError(f"no connection within {self._timeout:g}s") from exc
            except OSError as exc:
                exchange.close()
                raise ConnectError(str(exc) or type(exc).__name__) from exc
            if exchange.aborted:
                exchange.close()
                raise ConnectionAbortedError("the exchange was aborted")
            if not bounded and exchange.connection.sock is not None:
                exchange.connection.sock.settimeout(None)
            exchange.connection.request(method, self._target(url), body=body, headers=sent)
            exchange.response = exchange.connection.getresponse()
            location = self._redirect(exchange, method, url)
            if location is None:
                return exchange
            if not _same_origin(location, self.url) or redirects == MAX_REDIRECTS:
                exchange.redirect = display_url(location)
                return exchange
            exchange.response.read()
            exchange.close()
            url, redirects = location, redirects + 1

    @staticmethod
    def _redirect(exchange: Exchange, method: str, url: str) -> str | None:
        status = exchange.status
        if status not in (301, 302, 303, 307, 308) or not exchange.header("location"):
            return None
        if method != "GET" and status not in (307, 308):
            exchange.redirect = display_url(urljoin(url, exchange.header("location")))
            return None
        return urljoin(url, exchange.header("location"))

    def _connection(self, url: str) -> http.client.HTTPConnection:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
        proxy = _proxy_for(url)
        https = parts.scheme == "https"
        if proxy is None:
            kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
            return kind(host, port, timeout=self._timeout)
        proxy_parts = urlsplit(proxy)
        proxy_host, proxy_port = proxy_parts.hostname or "", proxy_parts.port or 80
        if https:
            connection = http.client.HTTPSConnection(proxy_host, proxy_port, timeout=self._timeout)
            connection.set_tunnel(host, port)
            return connection
        return http.client.HTTPConnection(proxy_host, proxy_port, timeout=self._timeout)

    @staticmethod
    def _target(url: str) -> str:
        if _proxy_for(url) is not None and urlsplit(url).scheme == "http":
            return url  # absolute form, for the proxy
        parts = urlsplit(url)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class ConnectError(ConnectionError):
    """The endpoint could not be reached."""


class ConnectTimeoutError(ConnectError, TimeoutError):
    """No connection within the timeout."""


def read_events(exchange: Exchange) -> Iterator[Event]:
    """The events of an SSE response, in order, until the stream ends.

    Raises:
        EventStreamError: An event grew past `MAX_EVENT_BYTES`.
    """
    response = exchange.response
    assert response is not None
    data: list[str] = []
    size = 0
    event = ""
    last_id: str | None = None
    retry: int | None = None
    while True:
        raw = response.readline(MAX_EVENT_BYTES + 1)
        if not raw:
            return
        size += len(raw)
        if size > MAX_EVENT_BYTES:
            raise EventStreamError(f"an event is longer than {MAX_EVENT_BYTES} bytes")
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data or event:
                yield Event(event or "message", "\n".join(data), last_id, retry)
            data, size, event, retry = [], 0, "", None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value
        elif name == "retry" and value.isdigit():
            retry = int(value)


def display_url(url: str) -> str:
    """`url` without userinfo, query or fragment, which may carry secrets."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        return "the endpoint"


def _same_origin(url: str, endpoint: str) -> bool:
    a, b = urlsplit(url), urlsplit(endpoint)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


def _proxy_for(url: str) -> str | None:
    if not any(os.environ.get(name) or os.environ.get(name.upper()) for name in _PROXY_VARIABLES):
        return None
    import urllib.request  # only when a proxy is configured: it costs an import of its own

    parts = urlsplit(url)
    bypass: Any = getattr(urllib.request, "proxy_bypass_environment")  # noqa: B009 (untyped in typeshed)
    if bypass(parts.netloc):
        return None
    proxies = urllib.request.getproxies_environment()
    return proxies.get(parts.scheme) or proxies.get("all")
