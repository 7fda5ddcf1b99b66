"""`HttpGuard`: the one Host, Origin and API key policy of the host's HTTP server.

Owns which `Host` and `Origin` headers the server answers (protection against DNS rebinding and
cross-site requests), the API keys of `/v1` and the role each has (`[[api_keys]]`, `[host] api_key`),
what each role reaches (`ROLE_REACHES`), which meta endpoints are public (`[host] public`), and the
access every route of the app declares (`declare_access`; the API's routes declare theirs in
`api/_routes.py`, where they are defined). Both `/v1` (through `api/_middleware.py`; webhooks excepted, they
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
  needs an API key, `check_listen`) is reached by names it cannot know and serves any `Host`.
- `Origin`, when sent, must be a loopback origin (http or https, any port) or one of
  `[host] allowed_origins`, on every server: a web page elsewhere never drives the host. On `/v1` the
  origins of `[host] cors_origins` are accepted too (the browser UIs the CORS answers are for); the MCP
  endpoint does not accept them.
- API keys are compared in constant time (SHA-256 digests, every configured key compared on every
  request); no key, hash or token is logged or echoed. A host without any key answers every `/v1`
  request as `OPEN` (an admin without a name), which only a loopback-bound server allows
  (`check_listen`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import urllib.parse
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from starlette.datastructures import Headers
from starlette.routing import BaseRoute

from mcphost.common.served import split_listen
from mcphost.config import API_ROLES, LEGACY_KEY_NAME, ApiRole, PublicEndpoint, Settings
from mcphost.errors import ConfigError, InvalidArgumentError

Role = ApiRole
ROLE_REACHES: Mapping[Role, frozenset[Role]] = {
    "admin": frozenset(API_ROLES),
    "operator": frozenset({"operator", "reader"}),
    "sender": frozenset({"sender"}),
    "reader": frozenset({"reader"}),
}
"""The routes a key of each role may use, by the role each route requires. A `sender` also uses the
routes marked for its own runs (`api/_routes.py`, `own_runs`), seeing only runs its events created."""

Access = Role | Literal["public", "signed", "run-token", "runtime-token", "site"]
"""What a route of the app requires: a key of a role; nothing (`public`); a sender's signature
(`signed`, `/v1/hooks/{source}`); a run or session token (`run-token`, the facts server's MCP
endpoints); a runtime token (`runtime-token`, the runtime protocol under `/v1/runtime/`); or only the Host and Origin checks (`site`, the console's files)."""
ACCESS_ATTRIBUTE = "mcphost_access"

_R = TypeVar("_R", bound=BaseRoute)


def declare_access(route: _R, access: Access) -> _R:
    """`route`, marked with what it requires: every route of the app is, where it is defined (a test
    walks the app's route table and fails on a route without one)."""
    setattr(route, ACCESS_ATTRIBUTE, access)
    return route


def declared_access(route: BaseRoute) -> Access | None:
    """What `declare_access` marked `route` with, or None."""
    value: object = getattr(route, ACCESS_ATTRIBUTE, None)
    if value in (*API_ROLES, "public", "signed", "run-token", "runtime-token", "site"):
        return value  # pyright: ignore[reportReturnType] -- narrowed by the membership test above
    return None


@dataclass(frozen=True)
class Caller:
    """Who a `/v1` request comes from: the name and role of the key it presented."""

    key: str | None
    """The key's name (`[[api_keys]] name`, `api_key` for `[host] api_key`); None on a host without keys."""
    role: Role
    agents: frozenset[str] = frozenset()
    """A sender's `agents`: the agents its events may bind to; empty: any."""

    def reaches(self, required: Role) -> bool:
        """Whether this key may use a route that requires `required`."""
        return required in ROLE_REACHES[self.role]

    @property
    def own_runs_only(self) -> bool:
        """A sender sees only the runs its events created (others are not found, not forbidden)."""
        return self.role == "sender"


OPEN = Caller(key=None, role="admin")
"""Every request of a host without API keys (loopback only)."""


@dataclass(frozen=True)
class ApiKey:
    """One configured key: who presents it, and its SHA-256 (never the key)."""

    caller: Caller
    digest: bytes = field(repr=False)


def _sha256(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def api_keys(settings: Settings, environ: Mapping[str, str] | None = None) -> tuple[ApiKey, ...]:
    """The keys of `/v1`: `[host] api_key` (an admin key named `api_key`) and every `[[api_keys]]`
    entry, each `key_env` read from `environ` (default: the process environment).

    Raises:
        ConfigError: a `key_env` variable that is unset or empty, or two entries with the same key.
    """
    env = os.environ if environ is None else environ
    keys: list[ApiKey] = []
    if settings.host.api_key:
        keys.append(ApiKey(Caller(LEGACY_KEY_NAME, "admin"), _sha256(settings.host.api_key)))
    for index, entry in enumerate(settings.api_keys):
        where = f"{settings.source}: api_keys[{index}] (name {entry.name!r})"
        if entry.key_env is not None:
            value = env.get(entry.key_env, "")
            if not value.strip():
                raise ConfigError(
                    f"{where}.key_env: the environment variable {entry.key_env!r} is not set (or empty), so "
                    "the key has no value. Set it where `mcphost serve` starts, or give the key as "
                    "key_sha256 instead."
                )
            digest = _sha256(value.strip())
        else:
            assert entry.key_sha256 is not None, "the config model requires one of the two"
            digest = bytes.fromhex(entry.key_sha256)
        for other in keys:
            if hmac.compare_digest(other.digest, digest):
                raise ConfigError(
                    f"{where}: its key is also the key of {other.caller.key!r}; one key has one role, so "
                    "give each entry its own key."
                )
        keys.append(ApiKey(Caller(entry.name, entry.role, frozenset(entry.agents)), digest))
    return tuple(keys)


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
        keys: Sequence[ApiKey] = (),
        public: Collection[PublicEndpoint] = (),
        any_host: bool = False,
        cors_origins: Sequence[str] = (),
    ) -> None:
        """
        Args:
            allowed_hosts: `Host` values served besides loopback names, e.g. "mcp.example.com" (any
                port) or "mcp.example.com:8443".
            allowed_origins: `Origin` values accepted besides loopback origins.
            api_key: an admin key (`Authorization: Bearer <key>`), named `api_key`; None: none.
            keys: further keys (`api_keys`). With neither, every `/v1` request is `OPEN`.
            public: the meta endpoints that need no key (`[host] public`).
            any_host: serve every `Host` (the server listens on a non-loopback address).
            cors_origins: `Origin` values accepted on `/v1` only (`api_refusal`), exactly as given.
        """
        self._hosts = frozenset(h.lower() for h in allowed_hosts)
        self._origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)
        legacy = [ApiKey(Caller(LEGACY_KEY_NAME, "admin"), _sha256(api_key))] if api_key else []
        self._keys: tuple[ApiKey, ...] = (*legacy, *keys)
        self._public = frozenset(public)
        self._any_host = any_host
        self._cors = frozenset(o.lower().rstrip("/") for o in cors_origins)

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str] | None = None) -> HttpGuard:
        """The guard of a host listening on `[host] listen` (see `serving.serve` for `--listen`); the
        keys' variables are read from `environ` (default: the process environment).

        Raises:
            ConfigError: see `api_keys`.
        """
        hosts = list(settings.host.allowed_hosts)
        public = urllib.parse.urlsplit(settings.public_url)
        if public.hostname and not is_loopback(public.hostname):
            hosts += [public.netloc, public.hostname]
        listen_host = settings.host.listen.rpartition(":")[0]
        return cls(
            allowed_hosts=hosts,
            allowed_origins=settings.host.allowed_origins,
            keys=api_keys(settings, environ),
            public=settings.host.public,
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

    @property
    def keyed(self) -> bool:
        """Whether `/v1` needs a key (any is configured)."""
        return bool(self._keys)

    def is_public(self, endpoint: PublicEndpoint) -> bool:
        """Whether a meta endpoint answers without a key (`[host] public`, or a host without keys)."""
        return endpoint in self._public or not self._keys

    def authenticate(self, headers: Headers) -> Caller | Refusal:
        """`/v1`: the Host and Origin checks, then the key: who presented it, or the refusal (401).

        Every configured digest is compared, match or not, so the time taken does not say which
        key (or how many) came close."""
        refused = self.site_refusal(headers, cors=True)
        if refused is not None:
            return refused
        if not self._keys:
            return OPEN
        scheme, _, token = headers.get("authorization", "").partition(" ")
        presented = _sha256(token.strip())
        found: Caller | None = None
        for key in self._keys:
            if hmac.compare_digest(presented, key.digest):
                found = key.caller
        if scheme.lower() != "bearer" or not token.strip() or found is None:
            return Refusal(
                401,
                "Missing or wrong API key: send 'Authorization: Bearer <key>' with a key of [[api_keys]] or "
                "[host] api_key (MCPHOST_API_KEY for the mcphost CLI).",
            )
        return found

    def api_refusal(self, headers: Headers) -> Refusal | None:
        """`authenticate`'s refusal, or None when the request may go on."""
        verdict = self.authenticate(headers)
        return verdict if isinstance(verdict, Refusal) else None


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 in brackets) → (host, port)."""
    parsed = split_listen(listen)
    if parsed is None:
        raise InvalidArgumentError(f"--listen expects HOST:PORT such as 127.0.0.1:8787; got {listen!r}.")
    return parsed


def check_listen(host: str, keyed: bool) -> None:
    """Refuse a non-loopback address without an API key (DESIGN §10); `keyed`: any key is configured."""
    if not keyed and not is_loopback(host):
        raise ConfigError(
            f"Refusing to listen on {host!r} without an API key: /v1 would be open to the network. Set "
            "[host] api_key (or MCPHOST_API_KEY) or add [[api_keys]], or listen on 127.0.0.1."
        )


def listen_of(settings: Settings, listen: str | None = None) -> tuple[Settings, str, int]:
    """The settings `mcphost serve` runs with (`listen` replacing `[host] listen`: the guard and the
    default public URL follow the address actually bound) and the host and port to bind. Refused before
    anything starts (the command line checks it before it spawns a plugin): a malformed address, a
    non-loopback one without an API key, a `key_env` that is not set (`api_keys`)."""
    if listen is not None:
        settings = settings.model_copy(update={"host": settings.host.model_copy(update={"listen": listen})})
    bind_host, port = parse_listen(settings.host.listen)
    check_listen(bind_host, bool(api_keys(settings)))
    return settings, bind_host, port
