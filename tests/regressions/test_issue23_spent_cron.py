"""Issue 23, found by the schedules fuzz: a cron whose last fire had passed made every schedule route
answer 500 and every scheduler tick fail."""

from __future__ import annotations

import calendar
import time
from pathlib import Path

import anyio

from mcphost.app import open_host
from mcphost.models import AgentConfig
from tests.e2e.httpkit import api_settings, asgi_client
from tests.mcphost.hostkit import ECHO_RUNNER


async def test_a_cron_whose_last_fire_has_passed_leaves_the_schedules_readable(
    database_url: str, tmp_path: Path
) -> None:
    """Issue 23 (found by its fuzz, fixed in 264b127): a 7-field cron naming a year was accepted; once its
    last fire had passed, its stored row failed validation when read back, so every schedule route
    answered 500 and the scheduler's tick failed for every schedule, forever."""
    base = api_settings(database_url, tmp_path / "data")
    ticker = AgentConfig(id="ticker", runner=ECHO_RUNNER, event_types=["schedule.triggered"])
    settings_ = base.model_copy(update={"agents": [*base.agents, ticker]})
    async with open_host(settings_) as host, asgi_client(host) as client:
        at = time.gmtime(time.time() + 3)
        cron = f"{at.tm_min} {at.tm_hour} {at.tm_mday} {at.tm_mon} * {at.tm_sec} {at.tm_year}"  # once
        created = await client.post("/v1/schedules", json={"id": "once", "cron": cron})
        assert created.status_code == 201, created.text
        await anyio.sleep(calendar.timegm(at) - time.time() + 1.5)
        listed = await client.get("/v1/schedules")
        assert listed.status_code == 200, listed.text
        assert listed.json()["items"][0]["next_fire_at"] is None
        one = await client.get("/v1/schedules/once")
        assert (one.status_code, one.json()["next_fire_at"]) == (200, None), one.text
