"""Issue 10, item 6: while a crashed plugin restarted, every new run of its runners failed runner.crashed at
once, so one poison event broke unrelated conversations.

Fault: a plugin that crashes on a poison event, then crash-loops, on a SQLite file and on PostgreSQL.

The real host (`open_host`) with the real misbehaving plugin process and the default plugin timings; the
operator's view is read through the real HTTP API. It ends with every event in a terminal run and no run
`running` or `queued`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from mcphost.app import Host, open_host
from mcphost.models import RunStatus
from mcphost.plugins.process import PluginTimings
from tests.e2e.httpkit import asgi_client
from tests.mcphost.hostkit import error_code, host_settings, message, run_event
from tests.plugins.support import eventually


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(host_settings(database_url, tmp_path / "data")) as opened:
        yield opened


async def test_a_poison_event_fails_only_its_run_and_a_crash_loop_fails_fast_with_the_reason(
    host: Host,
) -> None:
    """Issue 10, item 6: while a crashed plugin restarted, every new run of its runners failed
    runner.crashed at once, so one poison event broke unrelated conversations."""
    plugin = host.supervisor.get("misbehave")
    defaults = PluginTimings()  # the timings an operator gets
    limit, window = defaults.crash_loop_limit, defaults.crash_loop_window

    # The poison event fails its own run; an unrelated conversation's event arriving while the plugin
    # restarts waits for the new process instead of failing runner.crashed with it.
    poisoned = await run_event(host, message("crash", conversation="poison"))
    assert error_code(poisoned) == "runner.crashed"
    assert plugin.state == "restarting"
    unrelated = await run_event(host, message("ok", conversation="unrelated"))
    assert (unrelated.status, unrelated.error) == (RunStatus.COMPLETED, None)
    assert plugin.restarts == 1

    # The poison keeps coming: each run waits for the restart the previous crash caused, then crashes it.
    for _ in range(limit - 1):
        again = await run_event(host, message("crash", conversation="poison"))
        assert error_code(again) == "runner.crashed"
    await eventually(lambda: plugin.state == "failed", timeout=30, what="the crash loop verdict")

    async with asgi_client(host) as client:
        view = (await client.get("/v1/runners")).json()
    [status] = [p for p in view["plugins"] if p["name"] == "misbehave"]
    assert status["state"] == "failed"
    assert status["last_error"].startswith(
        f"crash loop: ended {limit} times within {window:g} s (last: exited with code 7"
    )

    # Runs of the failed plugin fail at once with that reason; other plugins serve as before.
    refused = await run_event(host, message("ok", conversation="unrelated"))
    assert refused.status is RunStatus.FAILED
    assert error_code(refused) == "runner.crashed"
    assert refused.error is not None
    assert f"crash loop: ended {limit} times within {window:g} s" in refused.error.message
    assert (await run_event(host, message("hello", bot="echo", conversation="echo"))).error is None

    for status_ in (RunStatus.RUNNING, RunStatus.QUEUED):
        assert (await host.stores.runs.list(status=status_)).items == []
