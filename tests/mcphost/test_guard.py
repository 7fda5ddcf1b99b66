"""The one Host, Origin and API key policy: its rules, and `/v1` and `/runs/{run_id}/mcp` agreeing on it."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.datastructures import Headers

from mcphost.app import open_host
from mcphost.config import Settings
from mcphost.guard import OPEN, ApiKey, Caller, HttpGuard, Refusal, Role, is_loopback
from mcphost.inspection import create_grant
from tests.e2e.httpkit import api_settings, serve_app

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"

# (Host, Origin or None): loopback names and origins, configured ones, DNS rebinding, cross-site pages.
HEADER_CASES: list[tuple[str, str | None]] = [
    ("127.0.0.1:8787", None),
    ("localhost:9999", None),
    ("[::1]:8787", None),
    ("127.0.0.2", None),
    ("mcp.example.com", None),
    ("mcp.example.com:8443", None),
    ("evil.example:8787", None),
    ("localhost.evil.example", None),
    ("", None),
    ("127.0.0.1:8787", "http://localhost:3000"),
    ("127.0.0.1:8787", "https://[::1]"),
    ("127.0.0.1:8787", "https://app.example.com"),
    ("127.0.0.1:8787", "https://app.example.com:444"),
    ("127.0.0.1:8787", "https://evil.example"),
    ("127.0.0.1:8787", "http://127.0.0.1.evil.example"),
    ("127.0.0.1:8787", "null"),
    ("mcp.example.com", "https://mcp.example.com"),
]


def headers(host: str, origin: str | None = None, **extra: str) -> Headers:
    raw = {"host": host, **({"origin": origin} if origin is not None else {}), **extra}
    return Headers(raw)


def status(refused: Refusal | None) -> int | None:
    return None if refused is None else refused.status


def test_loopback_names_and_addresses() -> None:
    for name in ["localhost", "LOCALHOST", "127.0.0.1", "127.9.9.9", "::1", "[::1]"]:
        assert is_loopback(name), name
    for name in ["0.0.0.0", "10.0.0.1", "localhost.evil.example", "evil.example", "", "::"]:
        assert not is_loopback(name), name


def test_a_loopback_bound_guard_serves_only_loopback_and_configured_hosts() -> None:
    guard = HttpGuard(allowed_hosts=["mcp.example.com"])
    for host in ["127.0.0.1:8787", "localhost", "[::1]:8787", "mcp.example.com", "mcp.example.com:8443"]:
        assert guard.site_refusal(headers(host)) is None, host
    for host in ["evil.example", "evil.example:8787", "localhost.evil.example", "", "[::1"]:
        refused = guard.site_refusal(headers(host))
        assert status(refused) == 421, host
        assert refused is not None
        assert "allowed_hosts" in refused.message


def test_an_allowed_host_with_a_port_allows_only_that_port() -> None:
    guard = HttpGuard(allowed_hosts=["mcp.example.com:8443"])
    assert guard.site_refusal(headers("mcp.example.com:8443")) is None
    assert guard.site_refusal(headers("mcp.example.com:9000")) is not None
    assert guard.site_refusal(headers("mcp.example.com")) is not None


def test_origins_must_be_loopback_or_configured_even_when_any_host_is_served() -> None:
    for guard in [
        HttpGuard(allowed_origins=["https://app.example.com"]),
        HttpGuard(allowed_origins=["https://app.example.com"], any_host=True, api_key="k"),
    ]:
        for origin in [
            "http://localhost:3000",
            "https://127.0.0.1",
            "https://app.example.com",
            "https://app.example.com:444/",
        ]:
            assert guard.site_refusal(headers("127.0.0.1", origin)) is None, origin
        for origin in [
            "https://evil.example",
            "http://127.0.0.1.evil.example",
            "null",
            "file://",
            "ftp://localhost",
        ]:
            assert status(guard.site_refusal(headers("127.0.0.1", origin))) == 403, origin


def test_a_guard_bound_beyond_loopback_serves_any_host() -> None:
    guard = HttpGuard(any_host=True, api_key="k")
    assert guard.site_refusal(headers("10.1.2.3:8787")) is None
    assert guard.site_refusal(headers("agents.example.com")) is None


def test_the_api_key_is_checked_after_host_and_origin() -> None:
    guard = HttpGuard(api_key="s3cret")
    assert guard.api_refusal(headers("127.0.0.1", authorization="Bearer s3cret")) is None
    for value in ["", "Bearer wrong", "Basic s3cret", "bearer"]:
        refused = guard.api_refusal(headers("127.0.0.1", authorization=value))
        assert status(refused) == 401, value
        assert refused is not None
        assert "s3cret" not in refused.message
    assert status(guard.api_refusal(headers("evil.example", authorization="Bearer s3cret"))) == 421
    assert HttpGuard().api_refusal(headers("127.0.0.1")) is None  # no key configured


def test_each_key_authenticates_as_its_name_and_role_and_an_empty_key_never_does() -> None:
    def key(name: str, role: Role, secret: str) -> ApiKey:
        return ApiKey(Caller(name, role), hashlib.sha256(secret.encode()).digest())

    guard = HttpGuard(api_key="adm", keys=[key("ro", "reader", "r-key"), key("blank", "admin", "")])
    found = guard.authenticate(headers("127.0.0.1", authorization="Bearer r-key"))
    assert found == Caller("ro", "reader")
    assert guard.authenticate(headers("127.0.0.1", authorization="Bearer adm")) == Caller("api_key", "admin")
    # A hash of the empty key configured by mistake does not open the host to requests without a key.
    for value in ["", "Bearer", "Bearer ", "Bearer  "]:
        assert status(guard.api_refusal(headers("127.0.0.1", authorization=value))) == 401, value
    assert HttpGuard().authenticate(headers("127.0.0.1")) == OPEN
    assert guard.is_public("openapi") is False
    assert HttpGuard().is_public("metrics") is True  # without keys nothing needs one
    assert HttpGuard(keys=[key("ro", "reader", "r")], public=["metrics"]).is_public("metrics") is True


def test_the_guard_of_the_settings_follows_listen_public_url_and_allowed_lists(tmp_path: Path) -> None:
    def guard(**host: Any) -> HttpGuard:
        return HttpGuard.from_settings(Settings.model_validate({"host": {"data_dir": str(tmp_path), **host}}))

    assert guard().site_refusal(headers("agents.example.com")) is not None
    public = guard(public_url="https://agents.example.com:8443/base")
    assert public.site_refusal(headers("agents.example.com")) is None
    assert public.site_refusal(headers("agents.example.com:8443")) is None
    assert guard(allowed_hosts=["agents.example.com"]).site_refusal(headers("agents.example.com")) is None
    assert guard(listen="[::1]:8787").site_refusal(headers("agents.example.com")) is not None
    exposed = guard(listen="0.0.0.0:8787", api_key="k")
    assert exposed.site_refusal(headers("agents.example.com")) is None
    assert exposed.site_refusal(headers("127.0.0.1", "https://evil.example")) is not None


@pytest.mark.parametrize("listen", ["127.0.0.1:8787", "0.0.0.0:8787"])
async def test_v1_and_the_mcp_endpoint_answer_the_same_host_and_origin_headers_alike(
    database_url: str, tmp_path: Path, listen: str
) -> None:
    settings = api_settings(
        database_url,
        tmp_path / "data",
        listen=listen,
        api_key="s3cret-key",
        allowed_hosts=["mcp.example.com"],
        allowed_origins=["https://app.example.com"],
    )
    async with open_host(settings) as host, serve_app(host) as served:
        made = await create_grant(host.stores, conversation_id="c1", ttl_s=60)
        mcp_url = f"{served.url}/runs/{made.run.run_id}/mcp"
        verdicts: list[tuple[str, str | None, bool]] = []
        async with httpx2.AsyncClient(timeout=30) as http:
            for host_header, origin in HEADER_CASES:
                sent = {"host": host_header, **({"origin": origin} if origin is not None else {})}
                api = await http.get(
                    f"{served.url}/v1/runs", headers={**sent, "authorization": "Bearer s3cret-key"}
                )
                mcp = await http.post(
                    mcp_url,
                    json=INITIALIZE,
                    headers={**sent, "authorization": f"Bearer {made.token}", "accept": ACCEPT},
                )
                case = f"Host {host_header!r}, Origin {origin!r}"
                assert api.status_code in (200, 401), (case, api.text)
                assert mcp.status_code in (200, 403, 421), (case, mcp.text)
                served_api, served_mcp = api.status_code == 200, mcp.status_code == 200
                assert served_api == served_mcp, case
                if not served_api:  # the same reason, in each path's error body
                    assert api.json()["error"]["message"] == mcp.json()["error"]["message"], case
                verdicts.append((host_header, origin, served_api))
        refused = {(h, o) for h, o, ok in verdicts if not ok}
        # Foreign origins are refused wherever the server listens; foreign hosts only on loopback.
        assert ("127.0.0.1:8787", "https://evil.example") in refused
        assert ("127.0.0.1:8787", "null") in refused
        assert (("evil.example:8787", None) in refused) is (listen == "127.0.0.1:8787")
        assert ("mcp.example.com", None) not in refused
        assert ("127.0.0.1:8787", "https://app.example.com") not in refused
