"""The host wired end to end over real HTTP: a plugin runner reads facts from its per-run MCP endpoint,
served by the same app as `/v1`; the orchestrator ends each run's MCP access and counts its calls; a
drain keeps the endpoint up for running runs; inspection grants are served like runs.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcphost.app import Host, open_host
from mcphost.config import SkillConfig, ToolServerConfig
from mcphost.inspection import create_grant
from mcphost.models import RunStatus
from mcphost.protocol import AgentRunContext
from mcphost.serving import drain
from tests._json import structured
from tests.e2e.httpkit import (
    PROBE_PROMPT,
    Served,
    api_settings,
    event_body,
    parse_sse,
    results_of,
    serve_app,
    wait_status,
)
from tests.mcphost.hostkit import MISBEHAVE_RUNNER, REPO, agent, message


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def app(host: Host) -> AsyncGenerator[Served, None]:
    async with serve_app(host) as found:
        yield found


@pytest.fixture
async def http(app: Served) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with httpx2.AsyncClient(base_url=app.url, timeout=httpx2.Timeout(60)) as client:
        yield client


def final_text(body: str) -> str:
    results = results_of(parse_sse(body))
    completed = [
        r for r in results if r["type"] in ("message.completed", "run.completed") and r["data"].get("message")
    ]
    assert completed, results
    return completed[0]["data"]["message"]["content"]


async def test_a_runner_reads_its_context_and_history_over_the_mcp_endpoint_of_the_same_server(
    host: Host, app: Served, http: httpx2.AsyncClient
) -> None:
    first = await http.post(
        "/v1/events", params={"stream": "true"}, json=event_body("earlier words", bot="probe")
    )
    assert final_text(first.text) == "earlier words"
    response = await http.post("/v1/events", params={"stream": "true"}, json=event_body("probe", bot="probe"))
    reply = json.loads(final_text(response.text))
    run_id = parse_sse(response.text)[0].data["run_id"]
    assert reply["url"] == f"{app.url}/runs/{run_id}/mcp"
    assert {"run_context", "history_page", "events_page", "artifacts_read"} <= set(reply["tools"])
    assert "state_set" not in reply["tools"]  # the probe's manifest asks for no state
    assert reply["prompt"] == PROBE_PROMPT  # the live context from the orchestrator, not a rebuild
    assert reply["history"][:3] == ["probe", "earlier words", "earlier words"]

    audit = (await http.get(f"/v1/runs/{run_id}/audit")).json()
    assert [(a["tool"], a["outcome"]) for a in audit["items"]] == [
        ("run_context", "ok"),
        ("history_page", "ok"),
    ]
    metrics = (await http.get("/metrics")).text.splitlines()
    assert 'mcphost_mcp_calls_total{outcome="ok",tool="run_context"} 1.0' in metrics
    assert 'mcphost_mcp_calls_total{outcome="ok",tool="history_page"} 1.0' in metrics
    assert await host.orchestrator.context(run_id) is None  # dropped when the run ended


async def test_a_run_token_is_refused_as_soon_as_its_run_ends(
    host: Host, http: httpx2.AsyncClient, tmp_path: Path
) -> None:
    leak = tmp_path / "token"
    response = await http.post(
        "/v1/events", params={"stream": "true"}, json=event_body(f"leak:{leak}", bot="probe")
    )
    run_id = parse_sse(response.text)[0].data["run_id"]
    assert parse_sse(response.text)[-1].data["status"] == "completed"
    token = leak.read_text()
    # The grant cache would trust the run's last lookup for a moment: only `end_run` refuses it at once.
    refused = await http.post(
        f"/runs/{run_id}/mcp",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == f"run {run_id} is not active"


async def test_a_drain_keeps_the_mcp_endpoint_up_for_running_runs_and_refuses_new_events(
    host: Host, app: Served, http: httpx2.AsyncClient
) -> None:
    state = app.state
    run_id = (await http.post("/v1/events", json=event_body("hold:1.5", bot="probe"))).json()["run_id"]
    await wait_status(host.stores, run_id, RunStatus.RUNNING)
    async with anyio.create_task_group() as tg:
        tg.start_soon(drain, host, state, 20.0)
        await anyio.sleep(0.2)
        assert (await http.post("/v1/events", json=event_body("late"))).status_code == 503
    run = await host.stores.runs.get(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    message = (await host.stores.results.list(run_id))[0].payload["data"]["message"]["content"]
    assert message.startswith("held ")
    assert int(message.removeprefix("held ")) > 5


async def test_a_drain_cancels_what_outlives_the_grace_period(
    host: Host, app: Served, http: httpx2.AsyncClient
) -> None:
    state = app.state
    run_id = (await http.post("/v1/events", json=event_body("slow:60", bot="bad"))).json()["run_id"]
    await wait_status(host.stores, run_id, RunStatus.RUNNING)
    started = time.monotonic()
    await drain(host, state, 0.5)
    assert time.monotonic() - started < 8
    run = await host.stores.runs.get(run_id)
    assert run.status is RunStatus.CANCELLED
    assert run.error is not None
    assert run.error.details["reason"] == "the host is shutting down"


async def test_an_inspection_grant_reads_its_conversation_and_ends_when_revoked_or_expired(
    host: Host, http: httpx2.AsyncClient
) -> None:
    run_id = (await http.post("/v1/events", json=event_body("remember this", conversation="insp"))).json()[
        "run_id"
    ]
    await host.orchestrator.wait(run_id)
    made = await create_grant(host.stores, conversation_id="insp", ttl_s=60)
    url = f"{str(http.base_url).rstrip('/')}/runs/{made.run.run_id}/mcp"
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {made.token}"}, timeout=30) as mcp_http,
        Client(streamable_http_client(url, http_client=mcp_http)) as client,  # pyright: ignore[reportArgumentType]
    ):
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        assert tools == sorted(
            [
                "run_context",
                "history_page",
                "history_search",
                "events_get",
                "events_page",
                "artifacts_metadata",
                "artifacts_read",
            ]
        )
        page = await client.call_tool("history_page", {"limit": 10})
        assert [i["content"] for i in structured(page)["items"]] == ["remember this", "remember this"]
    shown = (await http.get(f"/v1/runs/{made.run.run_id}")).json()
    assert shown["run"]["runner_id"] is None
    assert shown["grant"]["conversation_id"] == "insp"
    assert shown["grant"]["active"] is True

    cancel = await http.post(f"/v1/runs/{made.run.run_id}/cancel")
    assert cancel.json()["status"] == "cancelled"
    refused = await http.post(
        url,
        headers={"Authorization": f"Bearer {made.token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert refused.status_code == 401

    short = await create_grant(host.stores, conversation_id="insp", ttl_s=0.05)
    await anyio.sleep(0.1)
    assert await host.orchestrator.sweep_grants() == [short.run.run_id]
    assert (await host.stores.runs.get(short.run.run_id)).status is RunStatus.COMPLETED
    assert await host.orchestrator.sweep_grants() == []


async def test_the_host_gives_the_facts_server_its_upstream_tools(database_url: str, tmp_path: Path) -> None:
    upstream = ToolServerConfig(
        command=[sys.executable, str(REPO / "tests" / "fakes" / "upstream_tools.py"), "stdio"]
    )
    settings = api_settings(database_url, tmp_path / "data").model_copy(update={"tools": {"up": upstream}})
    async with open_host(settings) as host, serve_app(host) as app:
        made = await create_grant(host.stores, conversation_id="c1", tools=["history_page", "up__echo"])
        url = f"{app.url}/runs/{made.run.run_id}/mcp"
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {made.token}"}, timeout=30) as mcp_http,
            Client(streamable_http_client(url, http_client=mcp_http)) as client,  # pyright: ignore[reportArgumentType]
        ):
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            assert tools == ["history_page", "run_context", "up__echo"]
            echoed = await client.call_tool("up__echo", {"text": "through the gateway"})
            assert not echoed.is_error
            assert "through the gateway" in str(echoed.content)


async def test_a_star_tools_grant_reaches_no_host_tool(database_url: str, tmp_path: Path) -> None:
    upstream = ToolServerConfig(
        command=[sys.executable, str(REPO / "tests" / "fakes" / "upstream_tools.py"), "stdio"]
    )
    settings = api_settings(database_url, tmp_path / "data").model_copy(update={"tools": {"up": upstream}})
    async with open_host(settings) as host, serve_app(host) as app:
        made = await create_grant(host.stores, conversation_id="c1", tools=["*"])
        url = f"{app.url}/runs/{made.run.run_id}/mcp"
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {made.token}"}, timeout=30) as mcp_http,
            Client(streamable_http_client(url, http_client=mcp_http)) as client,  # pyright: ignore[reportArgumentType]
        ):
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            assert not [t for t in tools if "__" in t]
            assert "history_page" in tools
            refused = await client.call_tool("up__echo", {"text": "not granted"})
            assert refused.is_error
            assert "not granted" not in str(refused.content)


async def started_slow_run(host: Host, bot: str) -> tuple[str, AgentRunContext]:
    """A misbehave run that sleeps for 30 s, once it has started: its id and live context."""
    run_id = (await host.orchestrator.submit(message("slow:30", bot=bot))).run.run_id
    for _ in range(600):
        ctx = await host.orchestrator.context(run_id)
        if ctx is not None:
            return run_id, ctx
        await anyio.sleep(0.05)
    raise AssertionError(f"run {run_id} never started")


async def test_budgets_and_browser_origins_come_from_the_config(database_url: str, tmp_path: Path) -> None:
    budgeted = agent("budgeted", MISBEHAVE_RUNNER, budget={"calls": 2})
    base = api_settings(database_url, tmp_path / "data", allowed_origins=["https://app.example.com"])
    settings = base.model_copy(update={"agents": [*base.agents, budgeted]})
    async with open_host(settings) as host, serve_app(host) as app:
        run_id, ctx = await started_slow_run(host, "budgeted")
        assert ctx.context.mcp is not None
        headers = dict(ctx.context.mcp.headers)
        url = f"{app.url}/runs/{run_id}/mcp"
        async with httpx2.AsyncClient(headers=headers, timeout=30) as mcp_http:
            hello = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "browser", "version": "1"},
                },
            }
            accept = {"Accept": "application/json, text/event-stream"}
            allowed = await mcp_http.post(
                url, json=hello, headers={**accept, "Origin": "https://app.example.com"}
            )
            assert allowed.status_code == 200, allowed.text
            assert "serverInfo" in allowed.text
            foreign = await mcp_http.post(
                url, json=hello, headers={**accept, "Origin": "https://evil.example"}
            )
            assert foreign.status_code == 403
            async with Client(streamable_http_client(url, http_client=mcp_http)) as client:  # pyright: ignore[reportArgumentType]
                for _ in range(2):
                    assert not (await client.call_tool("run_context", {})).is_error
                third = await client.call_tool("run_context", {})
                assert third.is_error
                assert "budget of 2 calls" in str(third.content)
        await host.orchestrator.cancel(run_id)
        await host.orchestrator.wait(run_id)


async def test_a_granted_skill_is_in_the_context_and_the_instructions_prompt(
    database_url: str, tmp_path: Path
) -> None:
    skilled = agent("skilled", MISBEHAVE_RUNNER, prompt="Be brief.", resources={"skills": ["triage"]})
    base = api_settings(database_url, tmp_path / "data")
    triage = {"display_name": "Ticket triage", "description": "Sort new tickets by urgency first."}
    settings = base.model_copy(
        update={"agents": [*base.agents, skilled], "skills": {"triage": SkillConfig.model_validate(triage)}}
    )
    async with open_host(settings) as host, serve_app(host) as app:
        run_id, ctx = await started_slow_run(host, "skilled")
        assert [(s.skill_name, s.display_name, s.description) for s in ctx.resources.skills] == [
            ("triage", "Ticket triage", "Sort new tickets by urgency first.")
        ]
        assert ctx.context.mcp is not None
        url = f"{app.url}/runs/{run_id}/mcp"
        async with (
            httpx2.AsyncClient(headers=dict(ctx.context.mcp.headers), timeout=30) as mcp_http,
            Client(streamable_http_client(url, http_client=mcp_http)) as client,  # pyright: ignore[reportArgumentType]
        ):
            prompt = await client.get_prompt("instructions")
            text = str(prompt.messages[0].content)
            assert "Be brief." in text
            assert "triage (Ticket triage): Sort new tickets by urgency first." in text
        await host.orchestrator.cancel(run_id)
        await host.orchestrator.wait(run_id)
