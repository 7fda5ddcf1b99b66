"""Issue 10, item 4: PostgreSQL connections terminated under load gave HTTP 500s, runs failed with the raw
SQL statement and its parameters in error.message, and streams ended with neither `end` nor `error`.

Fault suite: PostgreSQL drops the host's connections while it is under load.

PostgreSQL only. Clients post events (retrying a 503 with the same `event_id`, as a careful client does)
and follow each run's result stream, while every backend of the test's database is terminated again and
again (`faultkit.PostgresKiller`: `pg_terminate_backend` filtered by the database's name, never the
killer's own session). What must hold once the killing stops: no HTTP 500; every acknowledged event has a
terminal run and no run is left queued or running; every stream ended with `event: end` or
`event: error`; and no error a client saw carries SQL, parameters or the user's text.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.models import RunStatus
from mcphost.orchestrator import _tuning as orchestrator_module
from mcphost.stores.runs import ACTIVE_STATUSES
from tests._postgres import NO_POSTGRES, POSTGRES_URL, fresh_postgres_database
from tests.e2e.httpkit import api_settings, event_body, parse_sse, served
from tests.faults.faultkit import PostgresKiller

pytestmark = pytest.mark.postgres

SECRET = "user-secret-91c2"
EVENTS = 24
CLIENT_ATTEMPTS = 20


@pytest.fixture
async def postgres_url(postgres_template: str | None) -> AsyncGenerator[str, None]:
    """A migrated PostgreSQL database of this test's own (dropped connections are a PostgreSQL fault)."""
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    async with fresh_postgres_database(POSTGRES_URL, template=postgres_template) as url:
        yield url


@pytest.fixture
async def host(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncGenerator[Host, None]:
    monkeypatch.setattr(orchestrator_module, "SWEEP_S", 0.5)
    async with open_host(api_settings(postgres_url, tmp_path / "data")) as opened:
        yield opened


async def test_a_host_survives_its_postgres_connections_being_killed_under_load(
    host: Host, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 10, item 4: PostgreSQL connections terminated under load gave HTTP 500s, runs failed with the
    raw SQL statement and its parameters in error.message, and streams ended with neither `end` nor `error`."""
    caplog.set_level(logging.WARNING)
    killer = PostgresKiller(postgres_url)
    statuses: list[int] = []
    bodies: list[str] = []
    acknowledged: dict[str, str] = {}
    streams: dict[str, str] = {}

    async def client(http: httpx2.AsyncClient, i: int) -> None:
        conversation, event_id = f"c{i % 6}", f"evt-load-{i}"
        if i % 2:
            body = event_body("flood:40", bot="bad", conversation=conversation, event_id=event_id)
        else:
            body = event_body(f"hello {SECRET}", bot="echo", conversation=conversation, event_id=event_id)
        for _ in range(CLIENT_ATTEMPTS):
            response = await http.post("/v1/events", json=body)
            statuses.append(response.status_code)
            if response.status_code == 202:
                run_id = response.json()["run_id"]
                acknowledged[body["event_id"]] = run_id
                break
            bodies.append(response.text)
            await anyio.sleep(float(response.headers.get("Retry-After", "1")) / 10)
        else:
            return
        for _ in range(CLIENT_ATTEMPTS):
            stream = await http.get(f"/v1/runs/{run_id}/results", headers={"Accept": "text/event-stream"})
            statuses.append(stream.status_code)
            if stream.status_code != 200:
                bodies.append(stream.text)
                await anyio.sleep(0.1)
                continue
            streams[run_id] = stream.text
            events = parse_sse(stream.text)
            if events and events[-1].event == "end":
                return
            await anyio.sleep(0.1)  # an `error` event: resume, as a client would

    stop = anyio.Event()
    try:
        async with served(host) as url, httpx2.AsyncClient(base_url=url, timeout=120) as http:
            async with anyio.create_task_group() as load:
                load.start_soon(killer.keep_killing, 0.15, stop)
                async with anyio.create_task_group() as clients:
                    for i in range(EVENTS):
                        clients.start_soon(client, http, i)
                        await anyio.sleep(0.05)
                    with anyio.fail_after(60):
                        while len(acknowledged) < EVENTS // 2:  # noqa: ASYNC110
                            await anyio.sleep(0.1)
                    stop.set()
            with anyio.fail_after(90):
                for run_id in acknowledged.values():
                    await host.orchestrator.wait(run_id)
            unfinished = [
                r
                for status in ACTIVE_STATUSES
                for r in (await host.stores.runs.list(status=RunStatus(status), limit=100)).items
            ]
            runs = [await host.stores.runs.get(run_id) for run_id in acknowledged.values()]
    finally:
        await killer.aclose()

    assert killer.killed > 0
    assert 500 not in statuses
    assert set(statuses) <= {200, 202, 503}
    assert len(acknowledged) == EVENTS  # every client got its event in, retrying 503s
    assert unfinished == []
    assert all(r.status.is_terminal for r in runs)
    for run in runs:
        if run.error is not None:
            assert SECRET not in run.error.message
            assert "[SQL" not in run.error.message
    for text in [*bodies, *streams.values()]:
        assert "[SQL" not in text
        assert "parameters" not in text
    for run_id, text in streams.items():
        last = parse_sse(text)[-1]
        assert last.event in ("end", "error"), run_id
    # Every stream was followed to its end (resuming after an `error` event).
    assert all(parse_sse(t)[-1].event == "end" for t in streams.values())
    formatter = logging.Formatter()
    logged = "\n".join(
        r.getMessage() + (formatter.formatException(r.exc_info) if r.exc_info else "") for r in caplog.records
    )
    assert "another operation is in progress" not in logged
    assert SECRET not in logged  # the retries' warnings name the statement, never the values it bound
