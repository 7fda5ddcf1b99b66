"""The warm session endpoint `/sessions/{session_id}/mcp`: one stable URL and token across the runs of a
conversation, served by every replica on the database as the run it is bound to, refusing (and leaving
evidence of) everything between runs, and tracing each call under the current run."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcphost import tracing
from mcphost.context import with_trace
from mcphost.errors import StorageUnavailableError
from mcphost.facts.server import FactsServer
from mcphost.protocol import AgentRunContext
from mcphost.stores import Stores, open_stores
from mcphost.stores.warm import WarmSessionStore
from mcphost.warm import WarmSessions
from tests.mcphost.facts._helpers import ERAS, RunHandle, Served, fails, ok, raises_mcp_error, serve_facts

SESSION = WarmSessions.session_id("agent-a", "conv-w", None)
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
JSON_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
REFUSED = ("http POST session", "refused", "unauthorized")


@asynccontextmanager
async def session_client(
    base_url: str, warm: WarmSessions, mode: str, token: str | None = None
) -> AsyncGenerator[Client]:
    headers = {"Authorization": f"Bearer {token or warm.token(SESSION)}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        transport = streamable_http_client(f"{base_url}/sessions/{SESSION}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


async def start_bound(served: Served, warm: WarmSessions, **options: object) -> RunHandle:
    """Start a run of the session's conversation whose context offers the session: its start
    transaction binds it, as the orchestrator's does."""

    def offer(ctx: AgentRunContext) -> AgentRunContext:
        return warm.offer(ctx, agent_id="agent-a", public_url=served.base_url)

    return await served.start_run(conversation_id="conv-w", revise=offer, **options)  # pyright: ignore[reportArgumentType] -- test options pass through to admit_run


async def post(base_url: str, token: str | None) -> httpx2.Response:
    headers = dict(JSON_HEADERS)
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(timeout=10) as http:
        return await http.post(f"{base_url}/sessions/{SESSION}/mcp", json=PING, headers=headers)


@pytest.mark.parametrize("mode", ERAS)
async def test_one_session_client_serves_each_runs_grant_and_is_refused_between_runs(
    stores: Stores, mode: str
) -> None:
    warm = await WarmSessions.open(WarmSessionStore(stores.db))
    async with serve_facts(stores, warm=warm) as served:
        first = await start_bound(served, warm, permissions={"history": ["page"]})
        assert await warm.current_run(SESSION) == first.run_id
        async with session_client(served.base_url, warm, mode) as client:
            # Bound to the first run: its grant, its audit.
            assert {t.name for t in (await client.list_tools()).tools} == {"run_context", "history_page"}
            assert (await ok(client, "run_context"))["run_id"] == first.run_id
            refused = await fails(client, "state_get", {"scope": "conversation", "key": "k"})
            assert refused["code"] == "unauthorized"

            await served.finish(first)
            assert await warm.current_run(SESSION) is None
            with raises_mcp_error("has no active run") as caught:
                await client.call_tool("run_context", {})
            assert caught

            # The next run of the conversation binds the same endpoint: the same client goes on.
            second = await start_bound(served, warm)
            assert (await ok(client, "run_context"))["run_id"] == second.run_id
            await ok(client, "state_get", {"scope": "conversation", "key": "k"})
            await served.finish(second)

        first_rows = [(r.tool, r.outcome, r.code) for r in await served.audit(first)]
        # The call refused between the runs is evidence about the first run's warm process.
        assert first_rows[:2] == [("run_context", "ok", None), ("state_get", "refused", "unauthorized")]
        assert REFUSED in first_rows[2:]
        second_rows = [(r.tool, r.outcome) for r in await served.audit(second)]
        assert second_rows[:2] == [("run_context", "ok"), ("state_get", "ok")]


async def test_refusals_are_audited_on_the_sessions_run_or_logged_when_it_never_had_one(
    stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    warm = await WarmSessions.open(WarmSessionStore(stores.db))
    other_key = WarmSessions(WarmSessionStore(stores.db), key=b"k" * 32)
    calls: list[tuple[str, str]] = []

    def on_call(tool: str, outcome: str) -> None:
        calls.append((tool, outcome))

    async with serve_facts(stores, warm=warm, on_call=on_call) as served:
        with caplog.at_level(logging.WARNING, logger="mcphost.facts.server"):
            never = await post(served.base_url, warm.token(SESSION))
        run = await start_bound(served, warm)
        missing = await post(served.base_url, None)
        wrong = await post(served.base_url, "mst_nope")
        foreign = await post(served.base_url, other_key.token(SESSION))
        await served.finish(run)
        ended = await post(served.base_url, warm.token(SESSION))
        async with httpx2.AsyncClient(timeout=10) as http:
            malformed = await http.post(
                f"{served.base_url}/sessions/nope/mcp", json=PING, headers=JSON_HEADERS
            )
        audit = [(r.tool, r.outcome, r.code) for r in await served.audit(run)]

    assert never.status_code == 403
    assert "has no active run" in never.json()["error"]["message"]
    assert [r.getMessage() for r in caplog.records if SESSION in r.getMessage()] == [
        f"refused POST on warm session {SESSION}, which no run serves or served (HTTP 403): "
        + never.json()["error"]["message"]
    ]
    assert ("http POST session", "refused") in calls  # counted although no audit row could hold it
    assert (missing.status_code, wrong.status_code, foreign.status_code) == (401, 401, 401)
    assert missing.json()["error"]["message"] == "missing Authorization: Bearer token"
    assert wrong.json()["error"]["message"] == "token does not belong to this session"
    assert "mst_nope" not in wrong.text
    assert ended.status_code == 403
    assert malformed.status_code == 404
    # Three refused while the run was current, one after it ended: each an audit row of that run.
    assert audit == [REFUSED] * 4
    assert calls.count(("http POST session", "refused")) == 5


class FailingWarmStore(WarmSessionStore):
    """The session store, its run reads raising `failure` while it is set (a database that went away)."""

    failure: Exception | None = None

    async def current_run(self, session_id: str) -> str | None:
        if self.failure is not None:
            raise self.failure
        return await super().current_run(session_id)

    async def latest_run(self, session_id: str) -> str | None:
        if self.failure is not None:
            raise self.failure
        return await super().latest_run(session_id)


OUTAGE = StorageUnavailableError("The host's storage is unavailable: the database cannot be reached.")


@asynccontextmanager
async def failing_session_endpoint(
    stores: Stores,
) -> AsyncGenerator[tuple[FailingWarmStore, httpx2.AsyncClient]]:
    """The facts server over a session store that fails on demand, called in-process: an exception the
    endpoint lets through reaches the test instead of becoming uvicorn's 500."""
    store = FailingWarmStore(stores.db)
    facts = FactsServer(stores, warm=WarmSessions(store, key=await store.key()))
    transport = httpx2.ASGITransport(app=facts.asgi_app)
    async with (
        facts.running(),
        httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=JSON_HEADERS) as http,
    ):
        yield store, http


async def test_a_storage_outage_reading_the_sessions_run_is_503_and_any_other_error_propagates(
    stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    async with failing_session_endpoint(stores) as (store, http):
        token = {"authorization": f"Bearer {WarmSessions(store, key=await store.key()).token(SESSION)}"}
        store.failure = OUTAGE
        with caplog.at_level(logging.WARNING, logger="mcphost.facts.server"):
            response = await http.post(f"/sessions/{SESSION}/mcp", json=PING, headers=token)
        assert response.status_code == 503
        assert response.json()["error"] == {
            "code": -32603,
            "message": "the host cannot read warm sessions right now; retry",
        }
        [record] = [r for r in caplog.records if SESSION in r.getMessage()]
        assert "the database cannot be reached" in record.getMessage()
        assert record.exc_info is None  # an outage, not a bug: no traceback

        store.failure = RuntimeError("a bug in the session store")
        with pytest.raises(RuntimeError, match="a bug in the session store"):
            await http.post(f"/sessions/{SESSION}/mcp", json=PING, headers=token)


async def test_a_storage_outage_finding_the_run_to_audit_a_refusal_on_still_refuses_and_any_other_error_propagates(
    stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    async with failing_session_endpoint(stores) as (store, http):
        wrong = {"authorization": "Bearer mst_nope"}
        store.failure = OUTAGE
        with caplog.at_level(logging.WARNING, logger="mcphost.facts.server"):
            response = await http.post(f"/sessions/{SESSION}/mcp", json=PING, headers=wrong)
        assert response.status_code == 401
        assert response.json()["error"]["message"] == "token does not belong to this session"
        [record] = [r for r in caplog.records if "to audit a refusal on" in r.getMessage()]
        assert "the database cannot be reached" in record.getMessage()
        assert record.exc_info is None

        store.failure = RuntimeError("a bug in the session store")
        with pytest.raises(RuntimeError, match="a bug in the session store"):
            await http.post(f"/sessions/{SESSION}/mcp", json=PING, headers=wrong)


async def test_without_warm_sessions_the_session_path_is_404(served: Served) -> None:
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(f"{served.base_url}/sessions/{SESSION}/mcp", json={})
    assert response.status_code == 404


async def test_the_session_token_key_is_the_databases_and_tokens_differ_between_sessions(
    stores: Stores, tmp_path: Path
) -> None:
    store = WarmSessionStore(stores.db)
    warm = await WarmSessions.open(store)
    again = await WarmSessions.open(store)
    other_session = WarmSessions.session_id("agent-a", "conv-w", "thread-1")
    assert other_session != SESSION
    assert warm.token(SESSION) == again.token(SESSION)
    assert warm.token(SESSION) != warm.token(other_session)
    assert WarmSessions(store, key=b"k" * 32).token(SESSION) != warm.token(SESSION)
    assert warm.token_matches(SESSION, again.token(SESSION))
    assert not warm.token_matches(other_session, warm.token(SESSION))
    with pytest.raises(ValueError, match="at least 16 bytes"):
        WarmSessions(store, key=b"short")
    assert await warm.current_run(SESSION) is None
    assert await warm.latest_run(SESSION) is None


@pytest.mark.parametrize("mode", ERAS)
async def test_every_replica_serves_the_session_as_its_run_and_refuses_it_at_once_when_the_run_ends(
    stores: Stores, database_url: str, tmp_path: Path, mode: str
) -> None:
    """Two hosts on one database: the run starts on A, its warm process's calls land on B."""
    warm_a = await WarmSessions.open(WarmSessionStore(stores.db))
    async with (
        open_stores(database_url, tmp_path / "data-b") as stores_b,
        serve_facts(stores, warm=warm_a) as host_a,
        # B trusts its cached grants for an hour: a session must not be served from any cache.
        serve_facts(
            stores_b, warm=await WarmSessions.open(WarmSessionStore(stores_b.db)), grant_ttl_s=3600
        ) as host_b,
    ):
        warm_b = host_b.facts.warm
        assert warm_b is not None
        assert warm_b.token(SESSION) == warm_a.token(SESSION)  # one key, shared through the database
        run = await start_bound(host_a, warm_a, permissions={"history": ["page"]})
        async with session_client(host_b.base_url, warm_a, mode) as on_b:
            assert (await ok(on_b, "run_context"))["run_id"] == run.run_id
            assert {t.name for t in (await on_b.list_tools()).tools} == {"run_context", "history_page"}
            refused = await fails(on_b, "state_get", {"scope": "conversation", "key": "k"})
            assert refused["code"] == "unauthorized"

            await host_a.finish(run)  # the end commits on A; B is told nothing
            with raises_mcp_error("has no active run") as caught_b:
                await on_b.call_tool("run_context", {})
            assert caught_b
        on_a = await post(host_a.base_url, warm_a.token(SESSION))
        assert on_a.status_code == 403
        assert "has no active run" in on_a.json()["error"]["message"]
        audit = [(r.tool, r.outcome, r.code) for r in await host_a.audit(run)]
    # B served and audited the run's calls; both refusals after its end are the run's evidence too.
    assert audit[:2] == [("run_context", "ok", None), ("state_get", "refused", "unauthorized")]
    assert audit[2:].count(REFUSED) >= 2


async def test_a_warm_call_is_a_span_of_the_current_run_whatever_trace_its_process_was_spawned_with(
    stores: Stores,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    first_parent = "00-11111111111111111111111111111111-1111111111111111-01"
    second_parent = "00-22222222222222222222222222222222-2222222222222222-01"
    try:
        warm = await WarmSessions.open(WarmSessionStore(stores.db))
        async with serve_facts(stores, warm=warm) as served:
            first = await start_bound(served, warm)
            served.contexts[first.run_id] = with_trace(first.context, {"traceparent": first_parent})
            async with session_client(served.base_url, warm, "2026-07-28") as client:
                # The warm process was spawned in the first run: it sends that run's context every time.
                spawned = {"traceparent": first_parent}
                await client.call_tool("run_context", {}, meta=spawned)  # pyright: ignore[reportArgumentType] -- `_meta` is an open mapping
                await served.finish(first)
                second = await start_bound(served, warm)
                served.contexts[second.run_id] = with_trace(second.context, {"traceparent": second_parent})
                await client.call_tool("run_context", {}, meta=spawned)  # pyright: ignore[reportArgumentType] -- `_meta` is an open mapping
                await served.finish(second)
    finally:
        tracing.use(None)
        provider.shutdown()
    calls = [s for s in exporter.get_finished_spans() if s.name == "tools/call run_context"]
    assert len(calls) == 2
    seen: list[tuple[str, str, str]] = []
    for span in calls:
        assert span.parent is not None
        assert span.attributes is not None
        seen.append(
            (
                str(span.attributes[tracing.RUN_ID]),
                f"{span.parent.trace_id:032x}",
                f"{span.parent.span_id:016x}",
            )
        )
        assert span.attributes[tracing.WARM_SESSION] == SESSION
    assert seen == [
        (first.run_id, "1" * 32, "1" * 16),
        (second.run_id, "2" * 32, "2" * 16),
    ]
