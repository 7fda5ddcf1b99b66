"""Issue 10, item 3: a run whose end could not be written stayed running and wedged its conversation's
queue."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.models import RunStatus
from mcphost.orchestrator import _tuning as orchestrator_module
from tests.e2e.httpkit import api_settings, event_body, parse_sse, served, wait_status
from tests.faults.faultkit import SqlFault, terminal_run_update
from tests.faults.test_terminal_write import SECRET, unfinished_runs


@pytest.fixture
async def host(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncGenerator[Host, None]:
    monkeypatch.setattr(orchestrator_module, "TERMINAL_RETRY_S", 0.5)
    monkeypatch.setattr(orchestrator_module, "SWEEP_S", 0.2)
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


async def test_a_run_whose_end_cannot_be_written_is_ended_by_the_sweeper_and_its_queue_moves_on(
    host: Host,
) -> None:
    """Issue 10, item 3: a run whose end could not be written stayed running and wedged its conversation's
    queue."""
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
    assert [e.data["type"] for e in events if e.event not in ("run", "end", "error")][-1] == "run.completed"
    assert (await host.stores.runs.get(first)).error is None  # the outcome it really had
    assert (await host.stores.runs.grant(first)).revoked
    assert await unfinished_runs(host) == []
