"""Wake-ups between two hosts on one PostgreSQL database (`stores/wakeups.py`): readers, queued runs and
cancels of another host's runs move on notifications alone, the listener survives its connection being
killed, and lost notifications only delay.

Every test but the last sets every poll interval to an hour, so only a notification can wake a waiter:
a broken wake-up path hangs the test until its `fail_after`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import pytest
from sqlalchemy import func, select

from mcphost.app import Host, open_host
from mcphost.models import RunStatus
from mcphost.orchestrator import _tuning as orchestrator_module
from mcphost.stores import wakeups as wakeups_module
from mcphost.stores.wakeups import parse
from tests.mcphost.hostkit import host_settings, message, wait_running

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def no_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("QUEUE_POLL_S", "NOTIFIED_RECHECK_S", "CANCEL_POLL_S", "LOCAL_RECHECK_S"):
        monkeypatch.setattr(orchestrator_module, name, 3600.0)


@pytest.fixture
async def hosts(shared_postgres: str, tmp_path: Path) -> AsyncGenerator[tuple[Host, Host], None]:
    async with (
        open_host(host_settings(shared_postgres, tmp_path / "a")) as a,
        open_host(host_settings(shared_postgres, tmp_path / "b")) as b,
    ):
        assert a.orchestrator.listener is not None
        assert b.orchestrator.listener is not None
        yield a, b


async def _follow_from_other_host(a: Host, b: Host, conversation: str) -> None:
    """A run on `a`; `b` follows its results, waits for it and queues a run behind it in its conversation."""
    admission = await a.orchestrator.submit(message("slow:1", conversation=conversation))
    run_id = admission.run.run_id
    await wait_running(a, run_id)
    following_since = time.time()
    with anyio.fail_after(60):
        behind = await b.orchestrator.submit(message("ok", conversation=conversation))
        assert behind.run.status is RunStatus.QUEUED  # its conversation is busy on `a`
        types = [item.type async for item in b.orchestrator.results(run_id)]
        ended = await b.orchestrator.wait(run_id)
        after = await b.orchestrator.wait(behind.run.run_id)
    assert types == ["message.completed", "run.completed"]
    assert ended.status is RunStatus.COMPLETED
    assert ended.host_id == a.orchestrator.host_id
    assert (ended.ended_at or 0) > following_since  # `b` was waiting when it ended, not reading it late
    assert (after.status, after.host_id) == (RunStatus.COMPLETED, b.orchestrator.host_id)


def test_a_wake_up_payload_is_parsed_and_an_unknown_one_ignored() -> None:
    assert parse("results run_1") == ("results", "run_1")
    assert parse("end run_1") == ("end", "run_1")
    assert parse("cancel run_1") == ("cancel", "run_1")
    assert parse("later run_1") is None
    assert parse("end") is None


@pytest.mark.slow
async def test_readers_and_queued_runs_on_another_host_are_woken_by_notifications(
    hosts: tuple[Host, Host], no_polling: None
) -> None:
    a, b = hosts
    await _follow_from_other_host(a, b, "c-follow")


@pytest.mark.slow
async def test_a_cancel_from_another_host_stops_the_run_through_a_notification(
    hosts: tuple[Host, Host], no_polling: None
) -> None:
    a, b = hosts
    admission = await a.orchestrator.submit(message("slow:120", conversation="c-cancel"))
    run_id = admission.run.run_id
    await wait_running(a, run_id)
    await b.orchestrator.cancel(run_id)
    with anyio.fail_after(60):
        ended = await b.orchestrator.wait(run_id)
    assert ended.status is RunStatus.CANCELLED


@pytest.mark.slow
async def test_the_listener_reconnects_after_its_connection_is_terminated(
    hosts: tuple[Host, Host], no_polling: None
) -> None:
    a, b = hosts
    for host in (a, b):
        listener = host.orchestrator.listener
        assert listener is not None
        pid = listener.server_pid
        assert pid is not None
        async with host.stores.db.read() as session:
            assert (await session.execute(select(func.pg_terminate_backend(pid)))).scalar_one()
        for _ in range(600):
            if listener.connects >= 2 and listener.server_pid is not None:
                break
            await anyio.sleep(0.05)
        assert listener.connects == 2
        assert listener.server_pid != pid
    await _follow_from_other_host(a, b, "c-reconnected")


@pytest.mark.slow
async def test_lost_notifications_only_delay_waiters_until_the_safety_poll(
    hosts: tuple[Host, Host], monkeypatch: pytest.MonkeyPatch
) -> None:
    def lost(_payload: str) -> None:  # every notification is dropped where it arrives
        return None

    monkeypatch.setattr(wakeups_module, "parse", lost)
    monkeypatch.setattr(orchestrator_module, "NOTIFIED_RECHECK_S", 0.5)
    a, b = hosts
    await _follow_from_other_host(a, b, "c-lost")
    admission = await a.orchestrator.submit(message("slow:120", conversation="c-lost-cancel"))
    await wait_running(a, admission.run.run_id)
    await b.orchestrator.cancel(admission.run.run_id)
    with anyio.fail_after(60):
        assert (await b.orchestrator.wait(admission.run.run_id)).status is RunStatus.CANCELLED
