"""Host liveness and restart recovery: a dead host's running runs fail and its queued runs are re-queued
on the recovering host; a live host's runs are left alone."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from sqlalchemy import func, select, text

from mcphost.errors import ConflictError
from mcphost.models import Run, RunStatus, new_id
from mcphost.stores import HostRecord, Stores
from mcphost.stores._sql import advisory_key
from mcphost.stores.hosts import Recovery
from tests.mcphost.stores.factories import admitted

REPO = Path(__file__).resolve().parents[3]


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    return int(child.stdout)


async def _register_other(stores: Stores, host_id: str, *, pid: int, hostname: str | None = None) -> None:
    now = time.time()
    record = HostRecord(
        host_id=host_id, pid=pid, hostname=hostname or socket.gethostname(), started_at=now, heartbeat_at=now
    )
    await stores.hosts._register(record)  # pyright: ignore[reportPrivateUsage] -- another process's row, as it writes it


async def _running_on(stores: Stores, host_id: str, conversation_id: str) -> Run:
    run = await admitted(stores, conversation_id, host_id=host_id)
    started = await stores.runs.try_start(run.run_id, host_id=host_id)
    assert started is not None
    return started


@asynccontextmanager
async def _held_elsewhere(stores: Stores, host_id: str) -> AsyncGenerator[None, None]:
    """Make `host_id` provably alive the way another live host process would."""
    if stores.db.dialect == "sqlite":
        await _register_other(stores, host_id, pid=os.getpid())
        yield
        return
    async with stores.db.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(select(func.pg_advisory_lock(advisory_key("host", host_id))))
        try:
            yield
        finally:
            await conn.execute(select(func.pg_advisory_unlock(advisory_key("host", host_id))))


async def test_alive_registers_the_host_and_unregisters_it_on_exit(stores: Stores) -> None:
    async with stores.hosts.alive("host-me") as me:
        assert me.pid == os.getpid()
        assert me.hostname == socket.gethostname()
        assert await stores.hosts.get("host-me") == me
        assert await stores.hosts.is_alive("host-me")
        await stores.hosts.heartbeat("host-me")
        beat = await stores.hosts.get("host-me")
        assert beat is not None
        assert beat.heartbeat_at >= me.heartbeat_at
    assert await stores.hosts.get("host-me") is None
    assert not await stores.hosts.is_alive("host-me")


async def test_a_dead_hosts_running_runs_fail_its_queued_runs_are_requeued_and_a_live_hosts_are_left(
    stores: Stores,
) -> None:
    dead = await _running_on(stores, "host-dead", "c1")
    dead_queued = await admitted(stores, "c1", host_id="host-dead")
    dead_interrupted = await admitted(stores, "c4", host_id="host-dead")
    await stores.runs.request_cancel(dead_interrupted.run_id)
    async with _held_elsewhere(stores, "host-live"):
        live = await _running_on(stores, "host-live", "c2")
        live_queued = await admitted(stores, "c2", host_id="host-live")
        if stores.db.dialect == "sqlite":
            await _register_other(stores, "host-dead", pid=_dead_pid())
        async with stores.hosts.alive("host-me"):
            mine = await _running_on(stores, "host-me", "c3")
            recovered = await stores.hosts.recover_abandoned("host-me")
        assert recovered == Recovery(
            failed=[dead.run_id], cancelled=[dead_interrupted.run_id], requeued=[dead_queued.run_id]
        )
        failed = await stores.runs.get(dead.run_id)
        assert failed.status is RunStatus.FAILED
        assert failed.ended_at is not None
        assert failed.error is not None
        assert failed.error.code == "host.restarted"
        assert failed.error.message.startswith("The host that ran this run stopped before it finished.")
        assert "Submit its event again (same event_id)" in failed.error.message
        assert (await stores.runs.grant(dead.run_id)).revoked
        cancelled = await stores.runs.get(dead_interrupted.run_id)
        assert cancelled.status is RunStatus.CANCELLED
        assert (await stores.runs.grant(dead_interrupted.run_id)).revoked
        # Never started: still queued, in its place, now owned by the recovering host, grant intact.
        requeued = await stores.runs.get(dead_queued.run_id)
        assert requeued == dead_queued.model_copy(update={"host_id": "host-me"})
        assert not (await stores.runs.grant(dead_queued.run_id)).revoked
        assert (await stores.runs.get(live.run_id)).status is RunStatus.RUNNING
        assert not (await stores.runs.grant(live.run_id)).revoked
        assert (await stores.runs.get(live_queued.run_id)).host_id == "host-live"
        assert (await stores.runs.get(mine.run_id)).status is RunStatus.RUNNING
        assert await stores.hosts.get("host-dead") is None


async def test_a_requeued_run_is_adopted_by_one_recovering_host_only(stores: Stores) -> None:
    queued = await admitted(stores, "c1", host_id="host-dead")
    assert await stores.runs.adopt(queued.run_id, host_id="host-a", from_host="host-dead")
    assert not await stores.runs.adopt(queued.run_id, host_id="host-b", from_host="host-dead")
    assert (await stores.runs.get(queued.run_id)).host_id == "host-a"


async def test_a_host_without_a_registration_is_dead(stores: Stores) -> None:
    orphan = await _running_on(stores, "host-gone", "c1")
    async with stores.hosts.alive("host-me"):
        assert (await stores.hosts.recover_abandoned("host-me")).failed == [orphan.run_id]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # PostgreSQL: locks, not machines
async def test_on_sqlite_a_host_on_another_machine_counts_as_alive(stores: Stores) -> None:
    remote = await _running_on(stores, "host-remote", "c1")
    await _register_other(stores, "host-remote", pid=_dead_pid(), hostname="some-other-machine")
    async with stores.hosts.alive("host-me"):
        assert await stores.hosts.recover_abandoned("host-me") == Recovery()
    assert (await stores.runs.get(remote.run_id)).status is RunStatus.RUNNING


async def test_unowned_queued_runs_older_than_this_host_are_requeued_and_newer_ones_left(
    stores: Stores,
) -> None:
    old = await admitted(stores, "c1")
    await anyio.sleep(0.01)
    async with stores.hosts.alive("host-me"):
        await anyio.sleep(0.01)
        new = await admitted(stores, "c2")
        assert await stores.hosts.recover_abandoned("host-me") == Recovery(requeued=[old.run_id])
    assert (await stores.runs.get(old.run_id)).host_id == "host-me"
    assert (await stores.runs.get(new.run_id)).host_id is None


async def test_a_finished_run_of_a_dead_host_is_left_alone(stores: Stores) -> None:
    done = await _running_on(stores, "host-gone", "c1")
    await stores.runs.transition(done.run_id, RunStatus.COMPLETED)
    async with stores.hosts.alive("host-me"):
        assert await stores.hosts.recover_abandoned("host-me") == Recovery()
    assert (await stores.runs.get(done.run_id)).status is RunStatus.COMPLETED


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)  # SQLite: the pid is the proof
async def test_a_host_id_cannot_be_alive_twice_on_postgres(stores: Stores) -> None:
    async with stores.hosts.alive("host-me"):
        with pytest.raises(ConflictError, match="already alive"):
            async with stores.hosts.alive("host-me"):
                pass  # pragma: no cover
    async with stores.hosts.alive("host-me"):
        pass


async def _start_child(database_url: str, data_dir: Path, host_id: str) -> tuple[Process, str]:
    process = await anyio.open_process(
        [sys.executable, "-m", "tests.mcphost.stores.host_child", database_url, str(data_dir), host_id],
        cwd=REPO,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    with anyio.fail_after(30):
        line = (await process.stdout.receive()).decode().strip()
    assert line.startswith("run_"), line
    return process, line


async def test_a_killed_host_process_is_recovered_and_a_running_one_is_not(
    stores: Stores, database_url: str, tmp_path: Path
) -> None:
    children: dict[str, tuple[Process, str]] = {}

    async def start(host_id: str) -> None:
        children[host_id] = await _start_child(database_url, tmp_path / host_id, host_id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(start, "host-victim")
        tg.start_soon(start, "host-survivor")
    (victim, victim_run), (survivor, survivor_run) = children["host-victim"], children["host-survivor"]
    try:
        async with stores.hosts.alive(f"host-{new_id('me')}") as me:
            assert await stores.hosts.is_alive("host-victim")
            assert await stores.hosts.recover_abandoned(me.host_id) == Recovery()
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            for _ in range(200):  # PostgreSQL notices the dropped connection within moments
                if not await stores.hosts.is_alive("host-victim"):
                    break
                await anyio.sleep(0.05)
            else:
                pytest.fail("the killed host still looks alive after 10 s")
            assert await stores.hosts.recover_abandoned(me.host_id) == Recovery(failed=[victim_run])
        assert (await stores.runs.get(victim_run)).status is RunStatus.FAILED
        assert (await stores.runs.get(survivor_run)).status is RunStatus.RUNNING
    finally:
        for process in (victim, survivor):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.aclose()


async def test_the_liveness_keys_live_in_their_own_namespace() -> None:
    assert advisory_key("host", "x") != advisory_key("conversation", "x")
    assert -(2**63) <= advisory_key("host", "x") < 2**63


async def test_the_hosts_table_records_pid_and_hostname(stores: Stores) -> None:
    async with stores.hosts.alive("host-me"), stores.db.read() as session:
        row = (await session.execute(text("SELECT pid, hostname FROM hosts WHERE host_id = 'host-me'"))).one()
    assert (row.pid, row.hostname) == (os.getpid(), socket.gethostname())


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)  # SQLite: the pid is the proof
async def test_a_host_whose_liveness_connection_is_dropped_takes_its_lock_again(stores: Stores) -> None:
    key = advisory_key("host", "host-me")
    lock_holder = text(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND ((classid::bigint << 32) | objid::bigint) = :key"
    )
    async with stores.hosts.alive("host-me"):
        async with stores.db.read() as session:
            pid = (await session.execute(lock_holder, {"key": key})).scalar_one()
            assert (await session.execute(select(func.pg_terminate_backend(pid)))).scalar_one()
        for _ in range(100):  # the server drops the lock with the session...
            if not await stores.hosts.is_alive("host-me"):
                break
            await anyio.sleep(0.05)
        else:
            pytest.fail("the lock was not released when its session was terminated")
        for _ in range(200):  # ...and the host takes it again on a new connection
            if await stores.hosts.is_alive("host-me"):
                break
            await anyio.sleep(0.05)
        else:
            pytest.fail("the host did not take its liveness lock again within 10 s")
    assert not await stores.hosts.is_alive("host-me")
