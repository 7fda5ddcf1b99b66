"""`HttpGuard`: the one Host, Origin and API key policy of the host's HTTP server.

Owns which `Host` and `Origin` headers the server answers (protection against DNS rebinding and
cross-site requests) and the API key of `/v1`. Both `/v1` (through `api/_middleware.py`; webhooks excepted, they
prove their sender by signature) and `/runs/{run_id}/mcp` (through `facts/server.py`) ask the same guard. Does not own how a refusal is written (the `/v1` error
body in `api/_errors.py`, the JSON-RPC body in `facts/server.py`) nor the run token of the MCP endpoint
(`facts/server.py`).

Invariants:
- Both paths ask `site_refusal` first, so the same `Host` and `Origin` headers get the same verdict (and
  message) on both, with or without an API key.
- `Host` must be a loopback name (`localhost`, any loopback IP address, IPv6 in brackets) or an allowed
  host (`[host] allowed_hosts` and the public URL's host; a name without a port allows every port). So a
  loopback-bound server answers only loopback names unless configured: a page whose own name was made to
  resolve to 127.0.0.1 (DNS rebinding) is refused. A server listening on a non-loopback address (which
  needs an API key, `serving.check_listen`) is reached by names it cannot know and serves any `Host`.
- `Origin`, when sent, must be a loopback origin (http or https, any port) or one of
  `[host] allowed_origins`, on every server: a web page elsewhere never drives the host. On `/v1` the
  origins of `[host] cors_origins` are accepted too (the browser UIs the CORS answers are for); the MCP
  endpoint does not accept them.
- The API key is compared in constant time (SHA-256 digests); no key or token is logged or echoed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.datastructures import Headers

from mcphost.config import Settings

LOOPBACK_NAMES: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    """A loopback name or address (`localhost`, `127.0.0.0/8`, `::1`; brackets allowed)."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _strip_port(value: str) -> str:
    """`value` without a trailing `:port` (an IPv6 address keeps its colons)."""
    head, sep, port = value.rpartition(":")
    return head if sep and port.isdigit() and not head.endswith(":") else value


def _hostname(netloc: str) -> str | None:
    """The host name of `host[:port]` (IPv6 without brackets), None when it does not parse."""
    try:
        return urllib.parse.urlsplit(f"//{netloc}").hostname
    except ValueError:
        return None


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: `status` is 421 (Host), 403 (Origin) or 401 (API key)."""

    status: int
    message: str


class HttpGuard:
    """The Host, Origin and API key checks of every request to `/v1` and `/runs/{run_id}/mcp`."""

    def __init__(
        self,
        *,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
        api_key: str | None = None,
        any_host: bool = False,
        cors_origins: Sequence[str] = (),
    ) -> None:
        """
        Args:
            allowed_hosts: `Host` values served besides loopback names, e.g. "mcp.example.com" (any
                port) or "mcp.example.com:8443".
            allowed_origins: `Origin` values accepted besides loopback origins.
            api_key: the key `/v1` requires (`Authorization: Bearer <key>`); None: no key.
            any_host: serve every `Host` (the server listens on a non-loopback address).
            cors_origins: `Origin` values accepted on `/v1` only (`api_refusal`), exactly as given.
        """
        self._hosts = frozenset(h.lower() for h in allowed_hosts)
        self._origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)
        self._key_digest = hashlib.sha256(api_key.encode()).digest() if api_key else None
        self._any_host = any_host
        self._cors = frozenset(o.lower().rstrip("/") for o in cors_origins)

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpGuard:
        """The guard of a host listening on `[host] listen` (see `serving.serve` for `--listen`)."""
        hosts = list(settings.host.allowed_hosts)
        public = urllib.parse.urlsplit(settings.public_url)
        if public.hostname and not is_loopback(public.hostname):
            hosts += [public.netloc, public.hostname]
        listen_host = settings.host.listen.rpartition(":")[0]
        return cls(
            allowed_hosts=hosts,
            allowed_origins=settings.host.allowed_origins,
            api_key=settings.host.api_key,
            any_host=bool(listen_host) and not is_loopback(listen_host),
            cors_origins=settings.host.cors_origins,
        )

    def host_allowed(self, value: str) -> bool:
        """Whether a `Host` header value (`name[:port]`) is served."""
        value = value.lower()
        if self._any_host or value in self._hosts or _strip_port(value) in self._hosts:
            return True
        name = _hostname(value)
        return name is not None and is_loopback(name)

    def origin_allowed(self, value: str) -> bool:
        """Whether an `Origin` header value is accepted."""
        value = value.lower().rstrip("/")
        if value in self._origins or _strip_port(value) in self._origins:
            return True
        scheme, _, netloc = value.partition("://")
        name = _hostname(netloc)
        return scheme in ("http", "https") and name is not None and is_loopback(name)

    def site_refusal(self, headers: Headers, *, cors: bool = False) -> Refusal | None:
        """The Host and Origin checks both paths share; `cors`: also accept `cors_origins` (`/v1`)."""
        host = headers.get("host", "")
        if not self.host_allowed(host):
            return Refusal(
                421,
                f"Host {host[:100]!r} is not served here (DNS-rebinding protection); add the name to "
                "[host] allowed_hosts if clients reach the host by it.",
            )
        origin = headers.get("origin")
        if origin is not None and not (
            self.origin_allowed(origin) or (cors and origin.lower().rstrip("/") in self._cors)
        ):
            return Refusal(
                403,
                f"Origin {origin[:100]!r} may not use this host (cross-site requests are refused); add it "
                "to [host] allowed_origins to allow it.",
            )
        return None

    def api_refusal(self, headers: Headers) -> Refusal | None:
        """`/v1`: the Host and Origin checks, then the API key when one is configured."""
        refused = self.site_refusal(headers, cors=True)
        if refused is not None or self._key_digest is None:
            return refused
        scheme, _, token = headers.get("authorization", "").partition(" ")
        presented = hashlib.sha256(token.strip().encode()).digest()
        if scheme.lower() != "bearer" or not hmac.compare_digest(presented, self._key_digest):
            return Refusal(
                401,
                "Missing or wrong API key: send 'Authorization: Bearer <key>' with the key configured as "
                "[host] api_key (or MCPHOST_API_KEY).",
            )
        return None
