"""The endpoint: who gets in (tokens, runs, hosts), sessions bound to runs, both eras, end_run, replicas."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mcphost.facts.server import FactsServer
from mcphost.guard import HttpGuard
from mcphost.models import RunStatus
from mcphost.protocol import AgentRunContext
from mcphost.stores import Stores, open_stores
from tests.mcphost.facts._helpers import (
    ERAS,
    LEGACY,
    MODERN,
    RunHandle,
    Served,
    admit_run,
    connect,
    fails,
    ok,
    raises_mcp_error,
    serve_facts,
)

INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
ACCEPT = "application/json, text/event-stream"


async def post(
    served: Served,
    run_id: str,
    *,
    token: str | None,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx2.Response:
    sent = {"accept": ACCEPT, "content-type": "application/json", **(headers or {})}
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(timeout=10) as http:
        return await http.post(served.url(run_id), json=body or INITIALIZE, headers=sent)


def rpc_error(response: httpx2.Response) -> dict[str, Any]:
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] is None
    return body["error"]


async def assert_refused_and_audited(
    served: Served, run: RunHandle, response: httpx2.Response, reason: str
) -> None:
    assert response.status_code == 401
    assert rpc_error(response) == {"code": -32001, "message": reason}
    assert response.headers["www-authenticate"] == (
        f'Bearer realm="mcphost", error="invalid_token", error_description="{reason}"'
    )
    assert "Traceback" not in response.text
    (row,) = [r for r in await served.audit(run) if r.tool == "http POST"][-1:]
    assert (row.outcome, row.code, row.bytes_out) == ("refused", "unauthorized", len(response.content))
    assert row.bytes_in > 0


async def test_a_request_without_a_token_is_refused_with_401_and_audited(served: Served) -> None:
    run = await served.start_run()
    response = await post(served, run.run_id, token=None)
    await assert_refused_and_audited(served, run, response, "missing Authorization: Bearer token")
    basic = await post(served, run.run_id, token=None, headers={"authorization": f"Basic {run.token}"})
    await assert_refused_and_audited(served, run, basic, "missing Authorization: Bearer token")


async def test_a_tampered_token_is_refused_with_401_and_audited(served: Served) -> None:
    run = await served.start_run()
    tampered = run.token[:-1] + ("A" if run.token[-1] != "A" else "B")
    response = await post(served, run.run_id, token=tampered)
    await assert_refused_and_audited(served, run, response, "token does not belong to this run")
    assert tampered not in response.text


async def test_a_token_of_run_a_on_run_b_path_is_refused_with_401_and_audited_on_b(served: Served) -> None:
    a = await served.start_run(conversation_id="conv-a")
    b = await served.start_run(conversation_id="conv-b")
    response = await post(served, b.run_id, token=a.token)
    await assert_refused_and_audited(served, b, response, "token does not belong to this run")
    assert await served.audit(a) == []
    with raises_mcp_error("token does not belong to this run"):
        async with connect(served, a, path_run_id=b.run_id, mode=MODERN) as client:
            await client.list_tools()


async def test_a_token_of_a_finished_run_is_refused_with_401_and_audited(served: Served) -> None:
    run = await served.start_run()
    assert (await post(served, run.run_id, token=run.token)).status_code == 200
    await served.finish(run)
    response = await post(served, run.run_id, token=run.token)
    await assert_refused_and_audited(served, run, response, f"run {run.run_id} is not active")


async def test_an_unknown_run_is_404_with_the_reason(served: Served) -> None:
    run = await served.start_run()
    response = await post(served, "run_01NOSUCHRUN0000000000000000", token=run.token)
    assert response.status_code == 404
    assert rpc_error(response)["message"] == "run run_01NOSUCHRUN0000000000000000 does not exist"
    weird = await post(served, "..%2Fetc", token=run.token)
    assert weird.status_code == 404


async def test_refusals_past_the_refusal_budget_are_refused_but_not_audited(stores: Stores) -> None:
    async with serve_facts(stores, refusal_audits_per_s=0.0, refusal_audit_burst=20) as served:
        run = await served.start_run()
        statuses = [(await post(served, run.run_id, token="x" * 43)).status_code for _ in range(30)]
        assert set(statuses) == {401}
        audited = [r for r in await served.audit(run) if r.tool == "http POST"]
        assert len(audited) == 20


async def test_tools_list_shows_only_what_the_grant_allows_and_other_tools_are_unauthorized(
    served: Served,
) -> None:
    run = await served.start_run(permissions={"history": ["page"]})
    for mode in ERAS:
        async with connect(served, run, mode=mode) as client:
            assert {t.name for t in (await client.list_tools()).tools} == {"run_context", "history_page"}
            assert (await client.list_resource_templates()).resource_templates == []
            refused = await fails(client, "state_get", {"scope": "conversation", "key": "k"})
            assert refused["code"] == "unauthorized"
            unknown = await fails(client, "no_such_tool")
            assert unknown["code"] == "not_found"
            host_tool = await fails(client, "mail__send", {})
            assert host_tool["code"] == "unauthorized"
    rows = [(r.tool, r.outcome, r.code) for r in await served.audit(run)]
    assert (
        rows
        == [
            ("state_get", "refused", "unauthorized"),
            ("no_such_tool", "error", "not_found"),
            ("mail__send", "refused", "unauthorized"),
        ]
        * 2
    )


async def test_a_handshake_session_belongs_to_the_run_and_token_that_opened_it(served: Served) -> None:
    a = await served.start_run(conversation_id="conv-a")
    b = await served.start_run(conversation_id="conv-b")
    opened = await post(served, a.run_id, token=a.token)
    session_id = opened.headers["mcp-session-id"]
    assert served.facts.open_sessions(a.run_id) == 1
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    session = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
    on_b = await post(served, b.run_id, token=b.token, body=listing, headers=session)
    assert on_b.status_code == 404
    assert rpc_error(on_b)["message"] == "Session not found"
    wrong_token = await post(served, a.run_id, token=b.token, body=listing, headers=session)
    assert wrong_token.status_code == 401
    own = await post(served, a.run_id, token=a.token, body=listing, headers=session)
    assert own.status_code == 200
    assert "history_page" in own.text


@pytest.mark.parametrize("mode", ERAS)
async def test_handshake_clients_get_a_session_and_2026_clients_none(served: Served, mode: str) -> None:
    run = await served.start_run()
    async with connect(served, run, mode=mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == LEGACY else MODERN)
        await ok(client, "history_page")
        assert served.facts.open_sessions(run.run_id) == (1 if mode == LEGACY else 0)
    assert served.facts.open_sessions(run.run_id) == 0


async def test_an_auto_client_negotiates_2026_through_discover(served: Served) -> None:
    run = await served.start_run()
    async with connect(served, run, mode="auto") as client:
        assert client.protocol_version == MODERN
        await ok(client, "run_context")


async def test_a_foreign_host_or_origin_is_refused_against_dns_rebinding(served: Served) -> None:
    run = await served.start_run()
    host = await post(served, run.run_id, token=run.token, headers={"host": "evil.example"})
    assert host.status_code == 421
    origin = await post(served, run.run_id, token=run.token, headers={"origin": "http://evil.example"})
    assert origin.status_code == 403
    local = await post(served, run.run_id, token=run.token, headers={"origin": "http://localhost:3000"})
    assert local.status_code == 200
    assert await served.audit(run) == []


async def test_configured_hostnames_and_origins_are_accepted(stores: Stores) -> None:
    guard = HttpGuard(allowed_hosts=["mcp.example.com"], allowed_origins=["https://app.example.com"])
    async with serve_facts(stores, guard=guard) as served:
        run = await served.start_run()
        named = {"host": "mcp.example.com", "origin": "https://app.example.com"}
        assert (await post(served, run.run_id, token=run.token, headers=named)).status_code == 200
        other = {"host": "mcp.example.com", "origin": "https://other.example.com"}
        assert (await post(served, run.run_id, token=run.token, headers=other)).status_code == 403


class BlockingContexts:
    """A context provider that holds `run_context` calls of one run until released."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.blocked: str | None = None
        self.entered = anyio.Event()

    async def __call__(self, run_id: str) -> AgentRunContext | None:
        if run_id == self.blocked:
            self.entered.set()
            await anyio.sleep_forever()
        return self.served.contexts.get(run_id)


@pytest.mark.parametrize("mode", ERAS)
async def test_end_run_cancels_an_in_flight_call_which_answers_cancelled(stores: Stores, mode: str) -> None:
    holder: list[BlockingContexts] = []

    async def provider(run_id: str) -> AgentRunContext | None:
        return await holder[0](run_id)

    async with serve_facts(stores, context_provider=provider) as served:
        holder.append(blocking := BlockingContexts(served))
        run = await served.start_run()
        blocking.blocked = run.run_id
        answers: list[dict[str, Any]] = []
        async with connect(served, run, mode=mode) as client:

            async def call() -> None:
                answers.append(await fails(client, "run_context"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                with anyio.fail_after(10):
                    await blocking.entered.wait()
                assert served.facts.in_flight(run.run_id) == 1
                await served.finish(run)
            assert served.facts.in_flight(run.run_id) == 0
            assert answers[0]["code"] == "cancelled"
            with raises_mcp_error("is not active"):
                await client.call_tool("history_page", {})
        rows = [(r.tool, r.outcome, r.code) for r in await served.audit(run)]
        assert rows[0] == ("run_context", "error", "cancelled")
        assert served.facts.open_sessions(run.run_id) == 0


async def test_a_second_host_process_serves_the_same_run_and_sees_it_end(
    served: Served, database_url: str, tmp_path: Path
) -> None:
    run = await served.start_run()
    async with (
        open_stores(database_url, tmp_path / "replica") as replica_stores,
        serve_facts(replica_stores, grant_ttl_s=0.0) as replica,
    ):
        replica.contexts.update(served.contexts)
        async with connect(replica, run, mode=MODERN) as client:
            assert (await ok(client, "run_context"))["run_id"] == run.run_id
        # The run ends on the first process; the replica learns it from the database.
        await served.finish(run)
        response = await post(replica, run.run_id, token=run.token)
        assert response.status_code == 401
        assert rpc_error(response)["message"] == f"run {run.run_id} is not active"


async def test_the_sweeper_closes_sessions_of_runs_that_ended_elsewhere(stores: Stores) -> None:
    async with serve_facts(stores, grant_ttl_s=0.0) as served:
        run = await served.start_run()
        await post(served, run.run_id, token=run.token)
        assert served.facts.open_sessions(run.run_id) == 1
        await served.facts.sweep()
        assert served.facts.open_sessions(run.run_id) == 1  # still active: kept
        await stores.runs.transition(run.run_id, RunStatus.COMPLETED)  # another host ended it
        await served.facts.sweep()
        assert served.facts.open_sessions(run.run_id) == 0


async def test_a_request_while_the_server_is_not_running_is_503(stores: Stores) -> None:
    facts = FactsServer(stores)
    run = await admit_run(stores)
    transport = httpx2.ASGITransport(app=facts.asgi_app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        response = await http.post(
            f"/runs/{run.run_id}/mcp",
            json=INITIALIZE,
            headers={"authorization": f"Bearer {run.token}", "accept": ACCEPT},
        )
    assert response.status_code == 503
    assert rpc_error(response)["message"] == "the MCP server is not running"


@asynccontextmanager
async def session_stream(served: Served, run: RunHandle) -> AsyncGenerator[httpx2.Response]:
    """The run's open GET stream on a handshake-era session it just opened."""
    opened = await post(served, run.run_id, token=run.token)
    session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (
        await post(served, run.run_id, token=run.token, body=initialized, headers=session)
    ).status_code == 202
    headers = {"authorization": f"Bearer {run.token}", "accept": "text/event-stream", **session}
    async with (
        httpx2.AsyncClient(timeout=10) as http,
        http.stream("GET", served.url(run.run_id), headers=headers) as stream,
    ):
        assert stream.status_code == 200
        yield stream


async def test_end_run_closes_the_runs_sessions_and_ends_their_streams(served: Served) -> None:
    run = await served.start_run()
    async with session_stream(served, run) as stream:
        await served.finish(run)
        with anyio.fail_after(5):
            async for _ in stream.aiter_bytes():
                pass  # the stream ends once the session is closed
    assert served.facts.open_sessions(run.run_id) == 0


async def test_close_ends_the_streams_of_open_sessions_and_refuses_every_request_after(
    served: Served,
) -> None:
    # What the host awaits before its HTTP server stops: no response is left for it to wait on.
    run = await served.start_run()
    async with session_stream(served, run) as stream:
        with anyio.fail_after(5):
            await served.facts.close()  # the run stays active: only the server stops serving
            async for _ in stream.aiter_bytes():
                pass  # the stream ends once its session is closed
    response = await post(served, run.run_id, token=run.token)
    assert response.status_code == 503
    assert rpc_error(response) == {"code": -32603, "message": "the MCP server is shutting down"}
