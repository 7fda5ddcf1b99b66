"""Issue 10, item 4: a database error put the SQL statement and its parameters (user text) into what a
client saw."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.models import RunStatus
from mcphost.orchestrator import _tuning as orchestrator_module
from tests.e2e.httpkit import api_settings, event_body, parse_sse, served
from tests.faults.faultkit import SqlFault, result_insert, run_insert
from tests.faults.test_terminal_write import SECRET


@pytest.fixture
async def host(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncGenerator[Host, None]:
    monkeypatch.setattr(orchestrator_module, "TERMINAL_RETRY_S", 0.5)
    monkeypatch.setattr(orchestrator_module, "SWEEP_S", 0.2)
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


async def test_a_database_error_with_user_text_never_reaches_a_client(host: Host) -> None:
    """Issue 10, item 4: a database error put the SQL statement and its parameters (user text) into what a
    client saw."""
    results = SqlFault(host.stores.db, result_insert, message=f"disk I/O error: {SECRET}")
    async with results.installed(), served(host) as url, httpx2.AsyncClient(base_url=url, timeout=60) as http:
        # The run's results fail to store: with its end (they are its last), then alone (the journal's
        # second try, without the end); its host-made terminal result is stored.
        results.arm(times=2)
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
            run_insert,
            message=f"attempt to write a readonly database: {SECRET}",
        )
        async with admit.installed():
            admit.arm()
            refused = await http.post("/v1/events", json=event_body(f"again {SECRET}", conversation="s2"))
        full = SqlFault(
            host.stores.db,
            run_insert,
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
