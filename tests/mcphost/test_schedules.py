"""Schedules: the timetable (`timetable.py`), the scheduler's claims and misfires (`schedules.py`) on both
stores, the `/v1/schedules` API over a real host, and two `mcphost serve` processes sharing PostgreSQL
that fire each `every = "1s"` fire exactly once.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
import zoneinfo
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from pydantic import ValidationError
from sqlalchemy import select

from mcphost import schedules as schedules_module
from mcphost.app import Host, open_host
from mcphost.bindings import Bindings
from mcphost.common.periodic import FAILURES as LOOP_FAILURES
from mcphost.config import settings_from_mapping
from mcphost.errors import ConfigError
from mcphost.models import AgentConfig, AgentEventEnvelope
from mcphost.schedules import MISFIRE_GRACE_S, Scheduler, run_scheduler, schedule_page
from mcphost.stores import Database, Stores
from mcphost.stores.tables import RunRow, ScheduleFireRow
from mcphost.timetable import ScheduleSpec, fire_event_id
from tests.e2e.httpkit import api_settings, asgi_client, event_body, row_counts
from tests.mcphost.hostkit import ECHO_RUNNER
from tests.mcphost.test_serve import Server, mcphost
from tests.mcphost.test_serve import start_server as start_server  # a fixture

CRON_AGENT = AgentConfig(id="cron", runner=ECHO_RUNNER, event_types=["schedule.triggered"])


def spec(**fields: Any) -> ScheduleSpec:
    return ScheduleSpec.model_validate({"id": "s1", "every": "10s", **fields})


# -- the timetable -----------------------------------------------------------------------------------


def test_every_fires_at_the_multiples_of_its_period_since_the_epoch() -> None:
    ten = spec(every="10s")
    assert ten.next_fire(1_000_003.5) == 1_000_010
    assert ten.next_fire(1_000_010) == 1_000_020
    assert ten.last_fire(1_000_019.9) == 1_000_010
    assert spec(every="2m").period_s == 120
    assert spec(every=3600).period_s == 3600
    assert spec(every="1d").period_s == 86400


def test_cron_is_read_in_the_schedule_time_zone_across_a_daylight_saving_change() -> None:
    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    nine = spec(every=None, cron="0 9 * * *", timezone="Europe/Berlin")
    before_dst_ends = datetime.datetime(2026, 10, 23, 12, 0, tzinfo=berlin).timestamp()
    first = nine.next_fire(before_dst_ends)
    assert first is not None
    second = nine.next_fire(first)
    assert second is not None
    assert datetime.datetime.fromtimestamp(first, berlin).hour == 9
    assert datetime.datetime.fromtimestamp(second, berlin).hour == 9
    assert second - first == 25 * 3600  # the night the clocks go back is an hour longer
    assert nine.last_fire(second + 1) == second


def test_a_fire_emits_the_same_event_on_every_replica() -> None:
    s = spec(id="daily", conversation_id="ops", text="report", data={"k": 1}, agent="cron")
    event = s.event(1_000_010)
    assert event.event_id == fire_event_id("daily", 1_000_010) == "schedule:daily:1000010"
    assert event.event_type == "schedule.triggered"
    assert event.source == "scheduler"
    assert event.conversation_id == "ops"
    assert event.input.text == "report"
    assert event.data == {"k": 1}
    assert event.agent_id == "cron"
    assert event.subject is not None
    assert event.subject.subject_id == "daily"
    assert s.event(1_000_010) == event.model_copy(update={"event_time": 1_000_010.0})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"every": None}, "exactly one of 'cron'"),
        ({"cron": "0 * * * *"}, "exactly one of 'cron'"),
        ({"every": None, "cron": "61 * * * *"}, "not a valid cron expression"),
        ({"every": None, "cron": "0 0 30 2 *"}, "never fires"),
        (
            {"every": None, "cron": "*/99 * * * *"},
            "the step 99 in the minute field ('*/99') is past the field's range 0-59; use a step from 1 to 59",
        ),
        (
            {"every": None, "cron": "0 */25 * * *"},
            "the step 25 in the hour field ('*/25') is past the field's range 0-23",
        ),
        ({"every": None, "cron": "0 0 1,5-10/32 * *"}, "the step 32 in the day-of-month field ('5-10/32')"),
        ({"every": None, "cron": "0 0 * */13 *"}, "month field ('*/13') is past the field's range 1-12"),
        ({"every": None, "cron": "0 0 * * 1/7"}, "day-of-week field ('1/7') is past the field's range 0-6"),
        ({"every": None, "cron": "* * * * * */60"}, "second field ('*/60') is past the field's range 0-59"),
        ({"every": None, "cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"every": "0s"}, "between 1 second and 366 days"),
        ({"every": 0}, "between 1 second and 366 days"),
        ({"every": -5}, "between 1 second and 366 days"),
        ({"every": "367d"}, "between 1 second and 366 days"),
        ({"every": 2**70}, "between 1 second and 366 days"),
        ({"every": "10 parsecs"}, "expected a duration"),
        ({"every": True}, "expected a duration"),
        ({"id": "bad id"}, "should match pattern"),
        ({"event_type": "Schedule"}, "should match pattern"),
        ({"misfire": "later"}, "'skip' or 'run_once'"),
        ({"data": {"x": float("nan")}}, "not a finite number"),
        ({"text": "a\x00b"}, ""),
    ],
)
def test_a_bad_schedule_is_refused_naming_what_is_wrong(fields: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValidationError) as caught:
        spec(**fields)
    assert expected in str(caught.value)


def test_config_schedules_load_and_a_repeated_id_is_a_config_error() -> None:
    settings = settings_from_mapping(
        {
            "schedules": [
                {"id": "a", "cron": "*/5 * * * *", "timezone": "Asia/Tokyo"},
                {"id": "b", "every": "1h"},
            ]
        },
        source="t.toml",
        environ={},
    )
    assert [s.id for s in settings.schedules] == ["a", "b"]
    with pytest.raises(ConfigError, match=r"t.toml: schedules: .*'a' is used twice"):
        settings_from_mapping(
            {"schedules": [{"id": "a", "every": "1h"}, {"id": "a", "every": "2h"}]},
            source="t.toml",
            environ={},
        )
    with pytest.raises(ConfigError, match=r"t.toml: schedules\[0\].*step 99 in the minute field.*range 0-59"):
        settings_from_mapping(
            {"schedules": [{"id": "a", "cron": "*/99 * * * *"}]}, source="t.toml", environ={}
        )
    with pytest.raises(ConfigError, match=r"t.toml: schedules\[0\].timezone: unknown time zone"):
        settings_from_mapping(
            {"schedules": [{"id": "a", "cron": "* * * * *", "timezone": "Nowhere/Here"}]},
            source="t.toml",
            environ={},
        )


# -- the scheduler over both stores ------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[AgentEventEnvelope] = []

    async def submit(self, event: AgentEventEnvelope) -> object:
        self.events.append(event)
        return None


def scheduler(stores: Stores, *config: ScheduleSpec) -> tuple[Scheduler, Recorder]:
    recorder = Recorder()
    bindings = Bindings([CRON_AGENT], source="<test>")
    return Scheduler(stores, config, submit=recorder.submit, bindings=bindings, host_id="h"), recorder


async def test_two_schedulers_on_one_database_emit_each_fire_once(stores: Stores) -> None:
    every = spec(id="tick", every="5s")
    await stores.schedules.create(every)
    created = (await stores.schedules.get("tick")).created_at
    a, seen_a = scheduler(stores)
    b, seen_b = scheduler(stores)
    first = every.next_fire(created)
    assert first is not None
    for fire in (first, first + 5, first + 10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.tick, fire + 0.1)
            tg.start_soon(b.tick, fire + 0.1)
    emitted = [e.event_id for e in [*seen_a.events, *seen_b.events]]
    assert sorted(emitted) == [fire_event_id("tick", f) for f in (first, first + 5, first + 10)]
    async with stores.db.read() as session:
        kept = (await session.execute(select(ScheduleFireRow.fire_at))).scalars().all()
    assert kept == [first + 10]  # only the newest claim is kept


async def test_a_failing_tick_is_logged_once_counted_and_retried_until_the_fires_come(
    stores: Stores, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The scheduler is a periodic loop (`common/periodic.py`): a tick whose storage fails is retried
    with back-off from `ERROR_BACKOFF_S`, logged once with its traceback and counted."""
    monkeypatch.setattr(schedules_module, "ERROR_BACKOFF_S", 0.05)
    await stores.schedules.create(spec(id="tick", every="1s"))
    sched, seen = scheduler(stores)
    real = stores.schedules.last_fires
    calls = 0

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise OSError("the disk went away")
        return await real(*args, **kwargs)

    monkeypatch.setattr(stores.schedules, "last_fires", flaky)
    before = LOOP_FAILURES["the scheduler"]
    async with anyio.create_task_group() as tg:
        await tg.start(run_scheduler, sched)
        with anyio.fail_after(20):
            while not seen.events:  # noqa: ASYNC110  (the scheduler's own task)
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    assert LOOP_FAILURES["the scheduler"] - before == 3
    logged = [
        r for r in caplog.records if r.name == "mcphost.common.periodic" and r.levelno >= logging.WARNING
    ]
    assert [r.getMessage().split(";")[0] for r in logged] == ["the scheduler failed"]
    assert logged[0].exc_info is not None
    assert "the disk went away" in str(logged[0].exc_info[1])


async def test_a_late_fire_is_skipped_or_run_once_by_the_misfire_policy(stores: Stores) -> None:
    await stores.schedules.create(spec(id="skipper", every="10s"))
    await stores.schedules.create(spec(id="catcher", every="10s", misfire="run_once"))
    created = (await stores.schedules.get("skipper")).created_at
    latest = (int(created) + 30) // 10 * 10  # at least two fires after the creation were missed
    late = latest + MISFIRE_GRACE_S + 3
    outcomes: list[str] = []
    seen = Recorder()
    bindings = Bindings([CRON_AGENT], source="<test>")
    sched = Scheduler(stores, [], submit=seen.submit, bindings=bindings, on_fire=outcomes.append)

    wake_at = await sched.tick(late)
    assert [e.event_id for e in seen.events] == [fire_event_id("catcher", latest)]
    assert wake_at == latest + 10
    assert (await stores.schedules.last_fires()) == {"skipper": latest, "catcher": latest}

    await sched.tick(latest + 10.5)  # on time again: both fire
    assert sorted(e.event_id for e in seen.events[1:]) == [
        fire_event_id("catcher", latest + 10),
        fire_event_id("skipper", latest + 10),
    ]
    assert sorted(outcomes) == ["fired", "fired", "fired", "skipped"]


async def test_a_paused_schedule_does_not_fire_until_resumed_and_a_deleted_one_never(stores: Stores) -> None:
    await stores.schedules.create(spec(id="p", every="5s"))
    created = (await stores.schedules.get("p")).created_at
    first = spec(every="5s").next_fire(created)
    assert first is not None
    sched, seen = scheduler(stores)
    await stores.schedules.set_paused("p", True)
    await sched.tick(first + 0.5)
    assert seen.events == []
    await stores.schedules.set_paused("p", False)
    await sched.tick(first + 0.5)
    assert [e.event_id for e in seen.events] == [fire_event_id("p", first)]
    await stores.schedules.delete("p")
    await sched.tick(first + 5.5)
    assert len(seen.events) == 1


async def test_a_config_schedule_starts_from_now_and_a_stored_one_with_its_id_stops_the_start(
    stores: Stores,
) -> None:
    config = spec(id="nightly", every="1d")
    sched, seen = scheduler(stores, config)
    assert await sched.tick(time.time()) <= time.time() + 15  # nothing of the past is replayed
    assert seen.events == []
    await sched.check_config()
    await stores.schedules.create(spec(id="nightly", every="1h"))
    with pytest.raises(
        ConfigError, match="'nightly' are both in the config file and created through the API"
    ):
        await sched.check_config()


async def test_a_failing_submit_is_logged_and_the_next_fire_still_happens(
    stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    await stores.schedules.create(spec(id="orphan", every="5s", event_type="nobody.listens"))
    created = (await stores.schedules.get("orphan")).created_at
    first = spec(every="5s").next_fire(created)
    assert first is not None
    bindings = Bindings([CRON_AGENT], source="<test>")

    async def submit(event: AgentEventEnvelope) -> object:
        return bindings.resolve(event)  # NoBindingError, as the orchestrator would raise it

    outcomes: list[str] = []
    sched = Scheduler(stores, [], submit=submit, bindings=bindings, on_fire=outcomes.append)
    await sched.tick(first + 0.5)
    assert await sched.tick(first + 5.5) == first + 10
    assert outcomes == ["refused", "refused"]
    assert "was refused" in caplog.text
    assert (await stores.schedules.last_fires())["orphan"] == first + 5


# -- the API -----------------------------------------------------------------------------------------


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    base = api_settings(database_url, tmp_path / "data")
    settings = base.model_copy(
        update={
            "agents": [*base.agents, CRON_AGENT],
            "schedules": [spec(id="from-config", every=None, cron="0 3 * * *")],
        }
    )
    async with open_host(settings) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:
        yield opened


def error_code(response: httpx2.Response, status: int) -> str:
    assert response.status_code == status, response.text
    return str(response.json()["error"]["code"])


async def test_a_schedule_is_created_listed_paused_resumed_and_deleted(client: httpx2.AsyncClient) -> None:
    created = await client.post(
        "/v1/schedules", json={"id": "hourly", "cron": "0 * * * *", "timezone": "Europe/Berlin", "text": "hi"}
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["origin"] == "api"
    assert body["paused"] is False
    assert body["next_fire_at"] % 3600 == 0
    assert body["next_fire_at"] > time.time()
    assert body["spec"]["text"] == "hi"
    assert body["spec"]["misfire"] == "skip"

    listed = (await client.get("/v1/schedules")).json()["items"]
    assert [(s["id"], s["origin"]) for s in listed] == [("from-config", "config"), ("hourly", "api")]

    paused = await client.post("/v1/schedules/hourly/pause")
    assert paused.json()["paused"] is True
    assert paused.json()["next_fire_at"] is None
    resumed = await client.post("/v1/schedules/hourly/resume")
    assert resumed.json()["paused"] is False
    assert resumed.json()["next_fire_at"] == body["next_fire_at"]
    assert (await client.get("/v1/schedules/hourly")).json()["id"] == "hourly"

    assert (await client.delete("/v1/schedules/hourly")).json() == {"schedule_id": "hourly", "deleted": True}
    assert error_code(await client.get("/v1/schedules/hourly"), 404) == "not_found"
    assert error_code(await client.delete("/v1/schedules/hourly"), 404) == "not_found"
    assert error_code(await client.post("/v1/schedules/hourly/pause"), 404) == "not_found"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"id": "x", "cron": "not cron"}, "not a valid cron expression"),
        ({"id": "x", "cron": "0 0 31 2 *"}, "never fires"),
        ({"id": "x", "cron": "0 0 1 1 * 0 2025"}, "body: cron: '0 0 1 1 * 0 2025' has no fire left"),
        ({"id": "x", "cron": "*/99 * * * *"}, "body: cron: '*/99 * * * *': the step 99 in the minute field"),
        ({"id": "x", "cron": "0 */25 * * *"}, "the step 25 in the hour field"),
        ({"id": "x", "cron": "* * * * *", "timezone": "Europe/Atlantis"}, "unknown time zone"),
        ({"id": "x", "every": "0s"}, "body.every"),
        ({"id": "x", "every": -1}, "body.every"),
        ({"id": "x", "every": 10**18}, "body.every"),
        ({"id": "x", "every": 2**64}, "outside"),
        ({"id": "x", "every": "10s", "text": "nul\u0000"}, "body.text"),
        ({"id": "x\u0000", "every": "10s"}, "body.id"),
        ({"id": "x", "every": "10s", "data": {"n": 2**63}}, "body.data.n"),
        ({"id": "x", "every": "10s", "extra": 1}, "body.extra"),
        ({"id": "x", "every": 1.5}, "body.every"),
        ({"id": "x", "every": "10s", "misfire": "sometimes"}, "body.misfire"),
    ],
)
async def test_a_bad_schedule_body_is_a_400_naming_the_problem_and_stores_nothing(
    host: Host, client: httpx2.AsyncClient, body: dict[str, Any], field: str
) -> None:
    before = await row_counts(host.stores)
    response = await client.post("/v1/schedules", content=json.dumps(body).encode())
    assert error_code(response, 400) == "invalid_argument"
    assert field in response.text
    assert await row_counts(host.stores) == before


async def test_config_schedules_are_read_only_and_their_ids_cannot_be_taken(
    host: Host, client: httpx2.AsyncClient
) -> None:
    assert (
        error_code(await client.post("/v1/schedules", json={"id": "from-config", "every": "1h"}), 409)
        == "conflict"
    )
    for response in (
        await client.delete("/v1/schedules/from-config"),
        await client.post("/v1/schedules/from-config/pause"),
        await client.post("/v1/schedules/from-config/resume"),
    ):
        assert error_code(response, 409) == "conflict"
        assert "edit the file" in response.text
    await client.post("/v1/schedules", json={"id": "twice", "every": "1h"})
    again = await client.post("/v1/schedules", json={"id": "twice", "every": "2h"})
    assert error_code(again, 409) == "conflict"
    assert "exists already" in again.text


async def test_a_schedule_whose_event_no_agent_takes_is_refused_like_its_event(
    client: httpx2.AsyncClient,
) -> None:
    response = await client.post(
        "/v1/schedules", json={"id": "x", "every": "1h", "event_type": "nobody.cares"}
    )
    assert error_code(response, 404) == "not_found"


async def test_an_every_second_schedule_created_through_the_api_runs_its_agent_each_second(
    host: Host, client: httpx2.AsyncClient
) -> None:
    created = await client.post("/v1/schedules", json={"id": "sec", "every": 1, "conversation_id": "beat"})
    assert created.status_code == 201, created.text
    with anyio.fail_after(20):
        while len(runs := (await host.stores.runs.list(conversation_id="beat", limit=10)).items) < 2:  # noqa: ASYNC110  # runs are written by the scheduler's task
            await anyio.sleep(0.1)
    ids = sorted(r.event_id for r in runs)
    fires = [int(i.rsplit(":", 1)[1]) for i in ids]
    assert all(i.startswith("schedule:sec:") for i in ids)
    assert fires[1] - fires[0] >= 1
    assert len(set(fires)) == len(fires)
    # Each fire this host claimed is counted in /metrics by outcome (its submit ran before its run was listed).
    scraped = (await client.get("/metrics")).text
    assert (host.metrics.value("mcphost_schedule_fires_total", outcome="fired") or 0) >= 2
    assert 'mcphost_schedule_fires_total{outcome="skipped"} 0.0' in scraped
    assert 'mcphost_schedule_fires_total{outcome="refused"} 0.0' in scraped


async def test_schedules_are_listed_a_page_at_a_time(host: Host, client: httpx2.AsyncClient) -> None:
    for schedule_id in ("c-three", "a-one", "b-two"):
        created = await client.post("/v1/schedules", json={"id": schedule_id, "every": "1d"})
        assert created.status_code == 201, created.text
    first = (await client.get("/v1/schedules", params={"limit": 2})).json()
    assert [(s["id"], s["origin"]) for s in first["items"]] == [("from-config", "config"), ("a-one", "api")]
    assert first["has_more"] is True
    second = (await client.get("/v1/schedules", params={"limit": 2, "cursor": first["next_cursor"]})).json()
    assert [s["id"] for s in second["items"]] == ["b-two", "c-three"]
    assert (second["has_more"], second["next_cursor"]) == (False, None)
    everything = (await client.get("/v1/schedules")).json()
    assert [s["id"] for s in everything["items"]] == ["from-config", "a-one", "b-two", "c-three"]
    assert everything["has_more"] is False
    runs_cursor = host.stores.cursors.encode("runs", 5)
    for params, fragment in [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"cursor": "not-a-cursor"}, "Malformed schedules cursor"),
        ({"cursor": runs_cursor}, "belongs to 'runs' paging"),
        ({"cursor": host.stores.cursors.encode("schedules", "x:a-one")}, "carries no position"),
    ]:
        refused = await client.get("/v1/schedules", params=params)
        assert error_code(refused, 400) == "invalid_argument"
        assert fragment in refused.text


async def test_a_page_of_schedules_reads_the_stored_ones_up_to_its_end_and_their_claims_only(
    stores: Stores,
) -> None:
    for n in range(30):
        await stores.schedules.create(spec(id=f"s{n:02}", every="1d"))
        await stores.schedules.claim(f"s{n:02}", 86400, outcome="fired", host_id="h", stored=True)
    statements: list[tuple[str, object]] = []

    def seen(_conn: object, _cursor: object, statement: str, parameters: object, *_: object) -> None:
        statements.append((statement, parameters))

    with stores.db.hooks.added("before_cursor_execute", seen):
        page = await schedule_page(
            stores, [spec(id="cfg", every="1h")], limit=3, cursor=None, now=time.time()
        )
    assert [s.id for s in page.items] == ["cfg", "s00", "s01"]
    assert [s.last_fire_at for s in page.items] == [None, 86400, 86400]
    [(listing, bound)] = [(sql, p) for sql, p in statements if "FROM schedules" in sql]
    assert "LIMIT" in listing
    assert 3 in (bound.values() if isinstance(bound, dict) else bound)  # type: ignore[union-attr]  # a DBAPI parameter set
    [(claims, _)] = [(sql, p) for sql, p in statements if "FROM schedule_fires" in sql]
    assert " IN " in claims


async def test_mcphost_schedules_pages_like_mcphost_runs(host: Host, tmp_path: Path) -> None:
    for schedule_id in ("b-two", "a-one"):
        await host.stores.schedules.create(spec(id=schedule_id, every="1d"))
    config = tmp_path / "mcphost.toml"
    config.write_text(
        f'[host]\ndatabase_url = "{host.settings.host.database_url}"\ndata_dir = "{tmp_path / "data"}"\n'
        '[[agents]]\nid = "cron"\nrunner = "plugin:mcphost/echo/default"\nevent_types = ["schedule.triggered"]\n'
        '[[schedules]]\nid = "from-config"\ncron = "0 3 * * *"\n',
        encoding="utf-8",
    )
    first = mcphost("schedules", "--limit", "2", "--config", str(config), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert [line.split()[0] for line in first.stdout.splitlines()] == ["from-config", "a-one"]
    more = first.stderr.strip().splitlines()[-1]
    assert more.startswith("more: mcphost schedules --cursor ")
    cursor = more.rsplit(" ", 1)[1]
    rest = mcphost("schedules", "--json", "--cursor", cursor, "--config", str(config), cwd=tmp_path)
    assert rest.returncode == 0, rest.stderr
    answer = json.loads(rest.stdout)
    assert ([s["id"] for s in answer["schedules"]], answer["next_cursor"]) == (["b-two"], None)
    bad = mcphost("schedules", "--cursor", "nope", "--config", str(config), cwd=tmp_path)
    assert bad.returncode != 0
    assert "Malformed schedules cursor" in bad.stderr
    assert "Traceback" not in bad.stderr


async def test_an_api_event_cannot_take_the_event_id_of_a_coming_fire(
    host: Host, client: httpx2.AsyncClient
) -> None:
    created = await client.post("/v1/schedules", json={"id": "sec", "every": 1, "conversation_id": "beat"})
    assert created.status_code == 201, created.text
    fire_id = fire_event_id("sec", int(time.time()) + 3)
    taken = await client.post("/v1/events", json=event_body("mine", conversation="evil", event_id=fire_id))
    with anyio.fail_after(20):
        while (run := await host.stores.runs.get_by_event(fire_id)) is None:  # noqa: ASYNC110  # the scheduler's task admits it
            await anyio.sleep(0.1)
    assert (run.agent_id, run.conversation_id) == ("cron", "beat")
    assert error_code(taken, 400) == "invalid_argument"
    assert taken.json()["error"]["details"]["reason"] == "reserved_event_id"


# -- two hosts sharing PostgreSQL ---------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.slow
async def test_two_serve_processes_on_one_postgres_run_each_fire_of_an_every_second_schedule_once(
    tmp_path: Path, shared_postgres: str, start_server: Any
) -> None:
    config = tmp_path / "mcphost.toml"
    config.write_text(
        f'[host]\ndatabase_url = "{shared_postgres}"\nlisten = "127.0.0.1:0"\n'
        '[[agents]]\nid = "cron"\nrunner = "plugin:mcphost/echo/default"\nevent_types = ["schedule.triggered"]\n'
        '[[schedules]]\nid = "beat"\nevery = "1s"\nconversation_id = "beat"\nmisfire = "run_once"\n',
        encoding="utf-8",
    )
    servers: list[Server] = []
    for n in range(2):
        servers.append(start_server("--config", str(config), MCPHOST_DATA_DIR=str(tmp_path / f"data{n}")))
    deadline = time.monotonic() + 30
    runs: list[tuple[str, str | None]] = []
    db = Database(shared_postgres)
    try:
        while time.monotonic() < deadline:
            async with db.read() as session:
                runs = [
                    (r.event_id, r.host_id)
                    for r in (
                        await session.execute(select(RunRow).where(RunRow.conversation_id == "beat"))
                    ).scalars()
                ]
            if len(runs) >= 6:
                break
            await anyio.sleep(0.2)
    finally:
        await db.dispose()
    for server in servers:
        assert server.stop()[0] == 0, server.log()
    event_ids = [event_id for event_id, _ in runs]
    assert len(event_ids) >= 6, [s.log() for s in servers]
    assert len(set(event_ids)) == len(event_ids), "a fire ran twice"
    fires = sorted(int(e.rsplit(":", 1)[1]) for e in event_ids)
    shown = mcphost("schedules", "--config", str(config), "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    (listed,) = json.loads(shown.stdout)["schedules"]
    assert listed["id"] == "beat"
    assert listed["last_fire_at"] >= fires[-1]
