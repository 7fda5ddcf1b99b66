"""`mcphost.client` against the real app under uvicorn (both stores): every resource, its typed answers,
its errors, the blocking `Client`, and result streams resumed with `Last-Event-ID` after a connection is
cut mid-stream."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import pytest

from mcphost.app import Host, open_host
from mcphost.client import APIConnectionError, APIError, AsyncClient, Client, ResultEvent
from mcphost.client.models import Admitted, RunView
from mcphost.protocol.results import MessageCompleted, MessageDelta, RunCompleted, StateUpdated
from tests.e2e.httpkit import api_settings, event_body, served
from tests.mcphost.client.proxykit import cutting_proxy
from tests.mcphost.hostkit import ECHO_RUNNER, agent


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    settings = api_settings(database_url, tmp_path / "data")
    cron = agent("cron", ECHO_RUNNER, event_types=["schedule.triggered"], match={})
    async with open_host(settings.model_copy(update={"agents": [*settings.agents, cron]})) as opened:
        yield opened


@pytest.fixture
async def url(host: Host) -> AsyncGenerator[str, None]:
    async with served(host) as served_url:
        yield served_url


async def test_an_event_is_sent_and_its_run_read_listed_and_waited_for(url: str) -> None:
    async with AsyncClient(url) as client:
        admitted = await client.events.send(event_body("hello", conversation="sent"))
        assert isinstance(admitted, Admitted)
        assert admitted.created
        ended = await client.runs.wait(admitted.run_id, timeout_s=60)
        assert isinstance(ended, RunView)
        assert (ended.run.run_id, ended.run.status, ended.run.error) == (admitted.run_id, "completed", None)
        assert [a.run_id for a in ended.attempts] == [admitted.run_id]
        again = await client.events.send(event_body("hello", conversation="sent", event_id=admitted.event_id))
        assert (again.run_id, again.created) == (admitted.run_id, False)
        page = await client.runs.list(conversation_id="sent", limit=10)
        assert [r.run_id for r in page.items] == [admitted.run_id]
        assert (page.has_more, page.next_cursor) == (False, None)
        shown = await client.runs.get(admitted.run_id)
        assert shown.run == ended.run


async def test_a_streamed_event_yields_typed_protocol_results_then_its_end(url: str) -> None:
    async with (
        AsyncClient(url) as client,
        client.events.stream(event_body("hi there", conversation="s")) as stream,
    ):
        items = [item async for item in stream]
    assert stream.end is not None
    assert stream.run_id is not None
    assert (stream.end.run_id, stream.end.status, stream.end.error) == (stream.run_id, "completed", None)
    assert [i.seq for i in items] == list(range(1, len(items) + 1))
    results = [i.result for i in items]
    assert isinstance(results[-1], RunCompleted)
    assert [type(r) for r in results] == [MessageDelta, MessageCompleted, StateUpdated, RunCompleted]
    completed = [r for r in results if isinstance(r, MessageCompleted)]
    assert completed
    assert completed[0].data.message.content == "hi there"
    async with AsyncClient(url) as client, client.runs.stream(stream.run_id, after=1) as replay:
        assert [i.seq for i in [item async for item in replay]] == [i.seq for i in items[1:]]


async def test_a_failed_run_ends_its_stream_with_the_error(url: str) -> None:
    async with AsyncClient(url) as client:
        async with client.events.stream(event_body("fail", bot="bad")) as stream:
            end = await stream.until_end()
        assert (end.status, end.error and end.error.code) == ("failed", "runner.error")
        assert (await client.runs.wait(end.run_id)).run.error is not None


async def test_an_error_answer_raises_api_error_with_the_bodys_code_message_details_and_status(
    url: str,
) -> None:
    async with AsyncClient(url) as client:
        with pytest.raises(APIError) as refused:
            await client.events.send(event_body("x", agent_id="ghost"))
        assert (refused.value.status, refused.value.code) == (404, "not_found")
        assert "ghost" in refused.value.message
        with pytest.raises(APIError) as streamed:
            async with client.events.stream(event_body("x", agent_id="ghost")) as stream:
                await stream.until_end()
        assert (streamed.value.status, streamed.value.code) == (404, "not_found")
        with pytest.raises(APIError) as bad:
            await client.runs.list(limit=1000)
        assert (bad.value.status, bad.value.code) == (400, "invalid_argument")
        assert bad.value.details["errors"][0]["loc"] == "query.limit"
        with pytest.raises(APIError) as missing:
            await client.runs.get("run_missing/../x")
        assert (missing.value.status, missing.value.code) == (404, "not_found")


async def test_a_server_that_is_not_there_raises_api_connection_error() -> None:
    with anyio.fail_after(30):
        async with AsyncClient("http://127.0.0.1:9", reconnects=0) as client:
            with pytest.raises(APIConnectionError, match=r"cannot reach mcphost at http://127\.0\.0\.1:9"):
                await client.runs.list()
            with pytest.raises(APIConnectionError):
                async with client.events.stream(event_body("hi")) as stream:
                    await stream.until_end()


async def test_a_running_run_is_cancelled_and_waits_end_cancelled(url: str, host: Host) -> None:
    async with AsyncClient(url) as client:
        admitted = await client.events.send(event_body("slow:30", bot="bad", conversation="slow"))
        answer = await client.runs.cancel(admitted.run_id, reason="enough")
        assert (answer.run_id, answer.cancel_requested) == (admitted.run_id, True)
        ended = await client.runs.wait(admitted.run_id, timeout_s=60)
        assert ended.run.status == "cancelled"
        assert ended.run.error is not None
        assert ended.run.error.code == "cancelled"
        slow = await client.events.send(event_body("slow:30", bot="bad", conversation="slow2"))
        with pytest.raises(TimeoutError):
            await client.runs.wait(slow.run_id, timeout_s=0.5)


async def test_approvals_are_listed_read_and_decided(url: str, host: Host) -> None:
    async with AsyncClient(url) as client:
        admitted = await client.events.send(event_body("hi", conversation="appr"))
        await client.runs.wait(admitted.run_id)
        asked = await host.stores.approvals.request(admitted.run_id, "action", {"action": "merge"})
        pending = await client.approvals.list(status="pending")
        assert [(a.approval_id, a.kind, a.status) for a in pending.items] == [
            (asked.approval_id, "action", "pending")
        ]
        assert (await client.approvals.get(asked.approval_id)).request == {"action": "merge"}
        decided = await client.approvals.decide(asked.approval_id, "deny", note="not today")
        assert (decided.status, decided.note) == ("denied", "not today")
        with pytest.raises(APIError) as conflict:
            await client.approvals.decide(asked.approval_id, "approve")
        assert (conflict.value.status, conflict.value.code) == (409, "conflict")


async def test_schedules_are_created_read_paused_resumed_listed_and_deleted(url: str) -> None:
    async with AsyncClient(url) as client:
        created = await client.schedules.create(
            {"id": "nightly", "cron": "0 3 * * *", "agent": "cron", "text": "hi"}
        )
        assert (created.id, created.origin, created.paused, created.spec.cron) == (
            "nightly",
            "api",
            False,
            "0 3 * * *",
        )
        assert created.next_fire_at is not None
        assert (await client.schedules.pause("nightly")).paused
        assert not (await client.schedules.resume("nightly")).paused
        assert [s.id for s in (await client.schedules.list()).items] == ["nightly"]
        assert (await client.schedules.get("nightly")).spec.text == "hi"
        deleted = await client.schedules.delete("nightly")
        assert (deleted.schedule_id, deleted.deleted) == ("nightly", True)
        with pytest.raises(APIError) as gone:
            await client.schedules.get("nightly")
        assert gone.value.status == 404


async def test_a_conversations_transcript_and_event_log_are_paged(url: str) -> None:
    async with AsyncClient(url) as client:
        admitted = await client.events.send(event_body("remember this", conversation="conv"))
        await client.runs.wait(admitted.run_id)
        transcript = await client.conversations.transcript("conv", limit=10)
        assert ("user", "remember this") in [(t.role, t.content) for t in transcript.items]
        assert all(t.conversation_id == "conv" for t in transcript.items)
        events = await client.conversations.events("conv", event_type=["message.received"])
        assert [e.event_id for e in events.items] == [admitted.event_id]


async def test_the_api_key_goes_as_a_bearer_and_a_missing_one_is_401(
    database_url: str, tmp_path: Path
) -> None:
    key = "k-" + "y" * 30
    async with (
        open_host(api_settings(database_url, tmp_path / "data", api_key=key)) as host,
        served(host) as url,
    ):
        async with AsyncClient(url, api_key="") as anonymous:
            with pytest.raises(APIError) as refused:
                await anonymous.runs.list()
            assert (refused.value.status, refused.value.code) == (401, "unauthorized")
        async with AsyncClient(url, api_key=key) as client:
            assert (await client.runs.list()).items == []


async def test_the_blocking_client_does_what_the_async_one_does(url: str) -> None:
    def blocking() -> tuple[list[ResultEvent], str, str]:
        with Client(url) as client:
            with client.events.stream(event_body("sync", conversation="sync")) as stream:
                items = list(stream)
            assert stream.end is not None
            assert stream.run_id is not None
            waited = client.runs.wait(stream.run_id, timeout_s=60)
            with pytest.raises(APIError) as refused:
                client.runs.get("run_missing")
            assert refused.value.status == 404
            started = time.monotonic()
            slow = client.events.send(event_body("slow:30", bot="bad", conversation="sync-slow"))
            with pytest.raises(TimeoutError):
                client.runs.wait(slow.run_id, timeout_s=0.5)
            assert time.monotonic() - started < 10
            client.runs.cancel(slow.run_id)
            return items, stream.end.status, waited.run.status

    items, end_status, waited = await anyio.to_thread.run_sync(blocking)
    assert isinstance(items[-1].result, RunCompleted)
    assert (end_status, waited) == ("completed", "completed")


async def test_a_stream_cut_mid_event_resumes_with_last_event_id_and_hands_each_result_out_once(
    url: str,
) -> None:
    async with cutting_proxy(url, b"id: 3\n", cut=lambda n: n < 2) as proxy, AsyncClient(proxy.url) as client:
        async with client.events.stream(event_body("flood:40", bot="bad", conversation="cut")) as stream:
            seqs = [item.seq async for item in stream]
        assert stream.end is not None
        assert stream.end.status == "completed"
        run_id = stream.run_id
        assert run_id is not None
        assert seqs == list(range(1, 42))  # 40 deltas and run.completed, each once
        assert proxy.cuts == 2
        first, second, third = proxy.requests[:3]
        assert first.startswith(b"POST /v1/events?stream=true ")
        assert second.startswith(f"GET /v1/runs/{run_id}/results ".encode())
        assert b"\r\nlast-event-id: 2\r\n" in second.lower()  # the partial event 3 was not taken
        assert b"\r\nlast-event-id: 2\r\n" in third.lower()  # cut again at 3: resumed from 2 again

        with anyio.fail_after(30):
            async with cutting_proxy(url, b"id: 1\n", cut=lambda n: True) as always:
                async with AsyncClient(always.url, reconnects=2) as flaky:
                    with pytest.raises(APIConnectionError, match="dropped 3 times in a row"):
                        async with flaky.runs.stream(run_id) as doomed:
                            await doomed.until_end()
                assert always.cuts == 3


async def test_runtimes_are_listed_drained_disabled_enabled_and_a_local_run_has_no_runtime(
    url: str, host: Host
) -> None:
    record, _ = await host.stores.runtimes.add("builder-1", {"pool": "a"})
    async with AsyncClient(url) as client:
        (listed,) = (await client.runtimes.list()).runtimes
        assert (listed.runtime_id, listed.name, listed.state, listed.labels, listed.runs) == (
            record.runtime_id,
            "builder-1",
            "online",
            {"pool": "a"},
            [],
        )
        assert (await client.runtimes.drain("builder-1")).state == "draining"
        assert (await client.runtimes.disable("builder-1")).state == "disabled"
        assert (await client.runtimes.enable(record.runtime_id)).state == "online", "by name or id"
        with pytest.raises(APIError) as missing:
            await client.runtimes.drain("nope")
        assert (missing.value.status, missing.value.code) == (404, "not_found")
        admitted = await client.events.send(event_body("hello", conversation="local"))
        await client.runs.wait(admitted.run_id, timeout_s=60)
        placement = await client.runs.runtime(admitted.run_id)
        assert (placement.run_id, placement.runtime) == (admitted.run_id, None)

    def blocking() -> str:
        with Client(url) as client:
            return client.runtimes.drain("builder-1").state

    assert await anyio.to_thread.run_sync(blocking) == "draining"
