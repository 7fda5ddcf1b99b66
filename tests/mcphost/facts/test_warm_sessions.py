"""The warm session endpoint `/sessions/{session_id}/mcp`: one stable URL and token across the runs of a
conversation, serving the grant of the run it is bound to and refusing everything between runs."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcphost.stores import Stores
from mcphost.warm import WarmSessions
from tests.mcphost.facts.conftest import ERAS, RunHandle, Served, fails, ok, raises_mcp_error, serve_facts

SESSION = WarmSessions.session_id("agent-a", "conv-w", None)


@asynccontextmanager
async def session_client(
    served: Served, warm: WarmSessions, mode: str, token: str | None = None
) -> AsyncGenerator[Client]:
    headers = {"Authorization": f"Bearer {token or warm.token(SESSION)}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        transport = streamable_http_client(f"{served.base_url}/sessions/{SESSION}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


async def start_bound(served: Served, warm: WarmSessions, **options: object) -> RunHandle:
    run = await served.start_run(conversation_id="conv-w", **options)  # pyright: ignore[reportArgumentType] -- test options pass through to admit_run
    warm.bind(SESSION, run.run_id)
    return run


@pytest.mark.parametrize("mode", ERAS)
async def test_one_session_client_serves_each_runs_grant_and_is_refused_between_runs(
    stores: Stores, mode: str
) -> None:
    warm = WarmSessions()
    async with serve_facts(stores, warm=warm) as served:
        first = await start_bound(served, warm, permissions={"history": ["page"]})
        async with session_client(served, warm, mode) as client:
            # Bound to the first run: its grant, its audit.
            assert {t.name for t in (await client.list_tools()).tools} == {"run_context", "history_page"}
            assert (await ok(client, "run_context"))["run_id"] == first.run_id
            refused = await fails(client, "state_get", {"scope": "conversation", "key": "k"})
            assert refused["code"] == "unauthorized"

            await served.finish(first)
            assert warm.run_of(SESSION) is None
            with raises_mcp_error("has no active run") as caught:
                await client.call_tool("run_context", {})
            assert caught

            # The next run of the conversation binds the same endpoint: the same client goes on.
            second = await start_bound(served, warm)
            assert (await ok(client, "run_context"))["run_id"] == second.run_id
            await ok(client, "state_get", {"scope": "conversation", "key": "k"})
            await served.finish(second)

        assert [(r.tool, r.outcome) for r in await served.audit(first)] == [
            ("run_context", "ok"),
            ("state_get", "refused"),
        ]
        assert [(r.tool, r.outcome) for r in await served.audit(second)] == [
            ("run_context", "ok"),
            ("state_get", "ok"),
        ]


async def test_a_session_never_bound_or_with_a_wrong_token_is_refused(stores: Stores) -> None:
    warm = WarmSessions()
    async with serve_facts(stores, warm=warm) as served:
        url = f"{served.base_url}/sessions/{SESSION}/mcp"
        body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        async with httpx2.AsyncClient(timeout=10) as http:
            unbound = await http.post(
                url, json=body, headers={**headers, "authorization": f"Bearer {warm.token(SESSION)}"}
            )
            run = await start_bound(served, warm)
            wrong = await http.post(url, json=body, headers={**headers, "authorization": "Bearer mst_nope"})
            other = await http.post(
                url,
                json=body,
                headers={**headers, "authorization": f"Bearer {WarmSessions().token(SESSION)}"},
            )
            malformed = await http.post(f"{served.base_url}/sessions/nope/mcp", json=body, headers=headers)
            await served.finish(run)
        assert unbound.status_code == 403
        assert "has no active run" in unbound.json()["error"]["message"]
        assert (wrong.status_code, other.status_code) == (401, 401)
        assert wrong.json()["error"]["message"] == "token does not belong to this session"
        assert malformed.status_code == 404


async def test_without_warm_sessions_the_session_path_is_404(served: Served) -> None:
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(f"{served.base_url}/sessions/{SESSION}/mcp", json={})
    assert response.status_code == 404


def test_the_session_token_is_stable_per_host_process_and_differs_between_sessions() -> None:
    warm = WarmSessions()
    other_session = WarmSessions.session_id("agent-a", "conv-w", "thread-1")
    assert other_session != SESSION
    assert warm.token(SESSION) == warm.token(SESSION)
    assert warm.token(SESSION) != warm.token(other_session)
    assert WarmSessions().token(SESSION) != warm.token(SESSION)
    warm.bind(SESSION, "run_a")
    warm.bind(SESSION, "run_b")  # the session moved on: ending run_a must not unbind run_b
    assert warm.unbind_run("run_a") is None
    assert warm.run_of(SESSION) == "run_b"
    assert warm.unbind_run("run_b") == SESSION
    assert warm.run_of(SESSION) is None
