"""What the console reads that `/v1` did not have — `GET /v1/agents`, `GET /v1/runs/{run_id}/records`, the
grant's `layers` — and how the console's files are served (redirect, headers, Host/Origin checks, no API
key), through the real app over a real host on both stores."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator
from pathlib import Path

import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.console import HEADERS, STATIC_DIR
from tests.e2e.httpkit import api_settings, asgi_client, event_body, row_counts
from tests.mcphost.hostkit import ECHO_RUNNER
from tests.mcphost.test_api import error_of

KEY = "console-key-0123456789abcdef"


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:
        yield opened


async def ended_run(host: Host, client: httpx2.AsyncClient, text: str) -> str:
    admitted = await client.post("/v1/events", json=event_body(text, conversation="console"))
    assert admitted.status_code == 202, admitted.text
    run_id = str(admitted.json()["run_id"])
    await host.orchestrator.wait(run_id)
    return run_id


async def test_records_hold_the_context_without_its_token_the_event_log_and_the_transcript(
    host: Host, client: httpx2.AsyncClient
) -> None:
    run_id = await ended_run(host, client, "hello records")
    answer = await client.get(f"/v1/runs/{run_id}/records")
    assert answer.status_code == 200, answer.text
    records = answer.json()
    assert set(records) == {"run_id", "context", "events", "transcript"}
    assert records["run_id"] == run_id
    assert records["context"]["run_id"] == run_id
    assert records["context"]["input"]["text"] == "hello records"
    mcp = records["context"]["context"]["mcp"]  # the run token never leaves the host
    assert "Authorization" not in mcp["headers"]
    assert "MCPHOST_RUN_TOKEN" not in mcp["bridge"]["env"]
    assert records["events"][0]["kind"] == "inbound"
    assert all(e["run_id"] == run_id for e in records["events"])
    assert [t["role"] for t in records["transcript"]][:1] == ["user"]
    assert records["transcript"][0]["content"] == "hello records"


async def test_records_of_an_unknown_run_are_404_and_a_stray_parameter_is_400(
    client: httpx2.AsyncClient,
) -> None:
    error_of(await client.get("/v1/runs/run_nope/records"), 404, "not_found")
    error_of(await client.get("/v1/runs/run_nope/records?limit=5"), 400, "invalid_argument")
    error_of(await client.get("/v1/runs/run%00x/records"), 400, "invalid_argument")


async def test_a_runs_grant_shows_what_the_manifest_and_the_agent_layers_offered(
    host: Host, client: httpx2.AsyncClient
) -> None:
    run_id = await ended_run(host, client, "layers")
    grant = (await client.get(f"/v1/runs/{run_id}")).json()["grant"]
    layers = grant["layers"]
    assert (layers["runner_id"], layers["agent_id"]) == (ECHO_RUNNER, "echo")
    assert set(layers) >= {
        "manifest",
        "tools",
        "knowledge_bases",
        "state_scopes",
        "state_write",
        "storage_areas",
    }
    assert "token_hash" not in grant


async def test_agents_lists_every_configured_agent_without_prompt_or_config(
    host: Host, client: httpx2.AsyncClient
) -> None:
    before = await row_counts(host.stores)
    answer = await client.get("/v1/agents")
    assert answer.status_code == 200, answer.text
    agents = {a["id"]: a for a in answer.json()["agents"]}
    assert set(agents) == {a.id for a in host.settings.agents}
    assert agents["echo"] == {
        "id": "echo",
        "runner": ECHO_RUNNER,
        "event_types": ["message.received"],
        "match": {"bot_id": "echo"},
        "concurrency": "enqueue",
        "timeout_s": None,
        "hooks": [],
        "tools": [],
        "knowledge_bases": [],
    }
    assert "You are the probe." not in answer.text  # the probe agent's prompt stays in the config
    error_of(await client.get("/v1/agents?x=1"), 400, "invalid_argument")
    assert await row_counts(host.stores) == before


async def test_the_console_is_served_at_slash_with_its_headers(client: httpx2.AsyncClient) -> None:
    home = await client.get("/")
    assert (home.status_code, home.headers["location"]) == (307, "/console/")
    page = await client.get("/console/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/console/runs.js">' in page.text
    for name, value in HEADERS.items():
        assert page.headers[name] == value
    module = await client.get("/console/api.js")
    assert module.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    missing = await client.get("/console/nothing.js")
    error_of(missing, 404, "not_found")
    escape = await client.get("/console/../pyproject.toml")
    assert escape.status_code == 404


def test_every_console_page_reaches_the_api_only_through_the_typescript_client() -> None:
    """The pages import `client` from api.js, whose one `fetch` is the client's (it adds the key and asks
    for it on a 401); nothing else opens a request or a stream of its own."""
    own = re.compile(r"\bfetch\(|EventSource|XMLHttpRequest|getReader\(")
    pages = sorted(STATIC_DIR.glob("*.js"))
    assert len(pages) > 10
    for module in pages:
        if module.name in ("client.js", "api.js"):
            continue
        code = module.read_text(encoding="utf-8")
        assert not own.search(code), f"{module.name} talks to the host on its own"
        assert '} from "/console/api.js";' in code, f"{module.name} does not import the console's door"
    door = (STATIC_DIR / "api.js").read_text(encoding="utf-8")
    assert 'from "/console/client.js"' in door
    assert len(own.findall(door)) == 1, "api.js's one fetch is keyedFetch, the client's"
    assert "fetch: keyedFetch" in door
    bundle = (STATIC_DIR / "client.js").read_text(encoding="utf-8")
    assert "export class McphostClient" in bundle


async def test_the_console_needs_no_key_but_keeps_the_host_and_origin_checks(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        open_host(api_settings(database_url, tmp_path / "data", api_key=KEY)) as host,
        asgi_client(host) as client,
    ):
        assert (await client.get("/console/")).status_code == 200  # the login prompt must load
        error_of(await client.get("/v1/agents"), 401, "unauthorized")
        assert (await client.get("/v1/agents", headers={"Authorization": f"Bearer {KEY}"})).status_code == 200
        rebound = await client.get("/console/", headers={"Host": "attacker.example"})
        assert rebound.status_code == 421
        assert "DNS-rebinding" in rebound.json()["error"]["message"]
        foreign = await client.get("/console/run.js", headers={"Origin": "https://attacker.example"})
        assert foreign.status_code == 403
        assert (await client.get("/", headers={"Host": "attacker.example"})).status_code == 421


async def test_runs_filter_by_agent_and_time_window_and_refuse_bad_values_precisely(
    host: Host, client: httpx2.AsyncClient
) -> None:
    echo = await ended_run(host, client, "by echo")
    admitted = await client.post(
        "/v1/events", json=event_body("slow:1", bot="bad", conversation="console-bad")
    )
    assert admitted.status_code == 202, admitted.text
    bad = str(admitted.json()["run_id"])
    await host.orchestrator.wait(bad)
    first = (await client.get(f"/v1/runs/{echo}")).json()["run"]["created_at"]
    second = (await client.get(f"/v1/runs/{bad}")).json()["run"]["created_at"]

    async def listed(**query: str) -> list[str]:
        answer = await client.get("/v1/runs", params=query)
        assert answer.status_code == 200, answer.text
        return [r["run_id"] for r in answer.json()["items"]]

    assert await listed(agent="bad") == [bad]
    assert await listed(agent="echo") == [echo]
    assert await listed(agent="nobody") == []
    between = f"{(first + second) / 2:.6f}"  # times are read to the microsecond
    assert await listed(since=between) == [bad]
    assert await listed(until=between) == [echo]
    assert await listed(since=f"{first - 1:.6f}", until=between, agent="echo") == [echo]
    assert await listed(since=between, agent="echo") == []
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(first - 3600))
    assert await listed(since=iso) == [bad, echo]

    for query, where in [
        ({"since": "yesterday"}, "query.since"),
        ({"until": "2026-12-03T10:00:00"}, "timezone"),
        ({"agent": "a b"}, "query.agent"),
        ({"since": str(second), "until": str(first)}, "is after until"),
    ]:
        assert (
            where in error_of(await client.get("/v1/runs", params=query), 400, "invalid_argument")["message"]
        )
