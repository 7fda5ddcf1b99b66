"""Fault suite: the write that ends a run fails (full disk, read-only database, a refused write).

On SQLite and PostgreSQL. The fault is a driver `OperationalError` on the statements that record a run's
end (`faultkit.SqlFault`); everything above the driver is real. What must hold: the close retries with
back-off; what it could not write, the sweeper writes later, with the outcome the run really had; a
conversation's queue moves on; a result stream ends with `event: end`, or with `event: error` and a code
when its reads keep failing — never in silence; and nothing a client sees carries SQL or user text.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.models import Run, RunStatus
from mcphost.orchestrator import _tuning as orchestrator_module
from mcphost.stores.runs import ACTIVE_STATUSES
from tests.e2e.httpkit import api_settings, event_body, parse_sse, served, wait_status
from tests.faults.faultkit import SqlFault, result_insert, result_read, terminal_run_update
from tests.mcphost.hostkit import message
from tests.mcphost.stores.factories import admitted

SECRET = "user-secret-7f3a"
"""User text that must never reach a client through an error."""


@pytest.fixture
async def host(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncGenerator[Host, None]:
    monkeypatch.setattr(orchestrator_module, "TERMINAL_RETRY_S", 0.5)
    monkeypatch.setattr(orchestrator_module, "SWEEP_S", 0.2)
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


async def unfinished_runs(host: Host) -> list[Run]:
    """Runs still queued or running (at most 100 of each)."""
    found: list[Run] = []
    for status in ACTIVE_STATUSES:
        found += (await host.stores.runs.list(status=RunStatus(status), limit=100)).items
    return found


async def test_a_terminal_write_that_fails_a_few_times_is_retried_by_the_close(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(orchestrator_module, "TERMINAL_RETRY_S", 30.0)
    async with SqlFault(host.stores.db, terminal_run_update, message="disk I/O error").installed() as fault:
        fault.arm(times=3)
        admission = await host.orchestrator.submit(message("hello", bot="echo"))
        with anyio.fail_after(60):
            run = await host.orchestrator.wait(admission.run.run_id)
    assert fault.failures == 3
    assert run.status is RunStatus.COMPLETED
    assert (await host.stores.runs.grant(run.run_id)).revoked


async def test_a_run_whose_end_cannot_be_written_is_ended_by_the_sweeper_and_its_queue_moves_on(
    host: Host,
) -> None:
    terminal = SqlFault(host.stores.db, terminal_run_update, message=f"database or disk is full: {SECRET}")
    streamed: list[str] = []
    first = ""

    async def read_stream(http: httpx2.AsyncClient, run_id: str) -> None:
        response = await http.get(f"/v1/runs/{run_id}/results", headers={"Accept": "text/event-stream"})
        streamed.append(response.text)

    async with (
        terminal.installed(),
        served(host) as url,
        httpx2.AsyncClient(base_url=url, timeout=60) as http,
        anyio.create_task_group() as tg,
    ):
        terminal.arm()
        first = (await http.post("/v1/events", json=event_body("one", conversation="q"))).json()["run_id"]
        second = (await http.post("/v1/events", json=event_body("two", conversation="q"))).json()["run_id"]
        tg.start_soon(read_stream, http, first)
        # The first run finished its work but its end is not recorded: the queue waits behind it.
        with anyio.fail_after(30):
            while terminal.failures < 2 or first in host.orchestrator.active_run_ids():  # noqa: ASYNC110
                await anyio.sleep(0.05)
        await anyio.sleep(3 * orchestrator_module.SWEEP_S)  # sweeps that fail too change nothing
        assert (await host.stores.runs.get(first)).status is RunStatus.RUNNING
        assert (await host.stores.runs.get(second)).status is RunStatus.QUEUED
        assert not streamed  # the reader is still waiting, not dropped
        terminal.disarm()  # the disk has room again
        await wait_status(host.stores, first, RunStatus.COMPLETED)
        await wait_status(host.stores, second, RunStatus.COMPLETED)
    events = parse_sse(streamed[0])

    assert [e.event for e in events][-1] == "end"
    assert events[-1].data["status"] == "completed"
    assert [e.data["type"] for e in events if e.event == "message"][-1] == "run.completed"
    assert (await host.stores.runs.get(first)).error is None  # the outcome it really had
    assert (await host.stores.runs.grant(first)).revoked
    assert await unfinished_runs(host) == []


async def test_the_sweeper_fails_a_run_of_this_host_that_no_task_executes(host: Host) -> None:
    # Admitted by this host, then its admission's caller failed: nothing will ever start it.
    orphan = await admitted(host.stores, "q", host_id=host.orchestrator.host_id)
    behind = await host.orchestrator.submit(message("after the orphan", bot="echo", conversation="q"))

    with anyio.fail_after(60):
        lost = await host.orchestrator.wait(orphan.run_id)
        done = await host.orchestrator.wait(behind.run.run_id)
    assert lost.status is RunStatus.FAILED
    assert lost.error is not None
    assert lost.error.code == "host.run_lost"
    assert done.status is RunStatus.COMPLETED
    assert await unfinished_runs(host) == []


async def test_the_sweeper_leaves_runs_of_other_live_hosts_alone(host: Host) -> None:
    # Admitted by another host that is alive: its runs are its own to execute or sweep.
    other = await admitted(host.stores, "elsewhere", host_id="host_other")
    assert await host.orchestrator.sweep() == []
    assert (await host.stores.runs.get(other.run_id)).status is RunStatus.QUEUED


async def test_a_stream_whose_reads_keep_failing_ends_with_an_error_event(host: Host) -> None:
    # A run another live host executes: its stream reads the store (a run of this process is
    # followed in memory, with no reads to fail).
    run_id = (await admitted(host.stores, "elsewhere", host_id="host_other")).run_id
    assert await host.stores.runs.try_start(run_id, host_id="host_other") is not None
    reads = SqlFault(host.stores.db, result_read, message=f"disk I/O error near {SECRET}")
    async with reads.installed(), served(host) as url, httpx2.AsyncClient(base_url=url, timeout=60) as http:
        reads.arm()
        with anyio.fail_after(30):
            stream = await http.get(f"/v1/runs/{run_id}/results", headers={"Accept": "text/event-stream"})
        reads.disarm()
    events = parse_sse(stream.text)
    assert [e.event for e in events] == ["error"]
    assert events[0].data["error"]["code"] == "storage_unavailable"
    assert SECRET not in stream.text
    assert "SELECT" not in stream.text.upper()


async def test_a_database_error_with_user_text_never_reaches_a_client(host: Host) -> None:
    results = SqlFault(host.stores.db, result_insert, message=f"disk I/O error: {SECRET}")
    async with results.installed(), served(host) as url, httpx2.AsyncClient(base_url=url, timeout=60) as http:
        results.arm(times=1)  # the run's first results fail to store; its terminal result is stored
        # The ingest stream, the run's error, and the run read through the API.
        streamed = await http.post(
            "/v1/events", params={"stream": "true"}, json=event_body(f"echo {SECRET}", conversation="s")
        )
        run_id = streamed.headers["X-Run-Id"]
        with anyio.fail_after(60):
            run = await host.orchestrator.wait(run_id)
        shown = await http.get(f"/v1/runs/{run_id}")
        # An HTTP error: the admission itself fails on storage.
        admit = SqlFault(
            host.stores.db,
            lambda s: s.lstrip().upper().startswith("INSERT INTO RUNS"),
            message=f"attempt to write a readonly database: {SECRET}",
        )
        async with admit.installed():
            admit.arm()
            refused = await http.post("/v1/events", json=event_body(f"again {SECRET}", conversation="s2"))
        full = SqlFault(
            host.stores.db,
            lambda s: s.lstrip().upper().startswith("INSERT INTO RUNS"),
            message=f"database or disk is full: {SECRET}",
        )
        async with full.installed():
            full.arm()
            no_room = await http.post("/v1/events", json=event_body(f"more {SECRET}", conversation="s3"))

    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert run.error.code == "storage_unavailable"
    for shown_text in (run.error.message, streamed.text, shown.text, refused.text, no_room.text):
        assert SECRET not in shown_text
        assert "[SQL" not in shown_text
        assert "parameters" not in shown_text
    events = parse_sse(streamed.text)
    assert events[-1].event == "end"
    assert events[-1].data["error"]["code"] == "storage_unavailable"
    assert refused.status_code == 503
    assert refused.headers["Retry-After"]
    assert refused.json()["error"]["code"] == "storage_unavailable"
    assert no_room.status_code == 507
    assert no_room.json()["error"]["code"] == "storage_full"


# -- helpers -----------------------------------------------------------------------------------------
