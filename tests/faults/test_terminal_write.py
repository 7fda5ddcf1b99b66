"""Fault suite: the write that ends a run fails (full disk, read-only database, a refused write).

On SQLite and PostgreSQL. The fault is a driver `OperationalError` on the statements that record a run's
end (`faultkit.SqlFault`); everything above the driver is real. What must hold: the close retries with
back-off; what it could not write, the sweeper writes later, with the outcome the run really had; a
conversation's queue moves on; a result stream ends with `event: end`, or with `event: error` and a code
when its reads keep failing — never in silence; and nothing a client sees carries SQL or user text.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.models import Run, RunStatus
from mcphost.orchestrator import _tuning as orchestrator_module
from mcphost.stores.runs import ACTIVE_STATUSES
from tests.e2e.httpkit import api_settings, parse_sse, served
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


# -- helpers -----------------------------------------------------------------------------------------


async def test_a_failed_write_is_logged_without_the_user_text_of_its_parameters(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    # The driver's error names the statement; the values it bound (a run's results, its transcript)
    # are user text, and stay out of the log as they stay out of what a client sees.
    caplog.set_level(logging.WARNING)  # the drivers' own loggers as `mcphost serve` sets them
    caplog.set_level(logging.DEBUG, logger="mcphost")
    async with SqlFault(host.stores.db, result_insert, message="disk I/O error").installed() as fault:
        fault.arm(times=2)
        admission = await host.orchestrator.submit(message(f"hello {SECRET}", bot="echo"))
        with anyio.fail_after(60):
            run = await host.orchestrator.wait(admission.run.run_id)
    assert fault.failures == 2
    assert run.status.is_terminal
    formatter = logging.Formatter()
    logged = [
        record.getMessage() + (formatter.formatException(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    ]
    failures = [text for text in logged if "disk I/O error" in text]
    assert failures, logged  # the failure is logged, with the driver's message
    assert any("insert into run_results" in text.lower() for text in failures), failures  # and its SQL
    assert not [text for text in logged if SECRET in text]
