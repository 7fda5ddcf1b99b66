"""Fuzz the schedule endpoints (`POST /v1/schedules`, `GET`/`DELETE /v1/schedules/{id}`, `pause`, `resume`)
on SQLite and PostgreSQL.

Hypothesis draws schedule bodies from a cron grammar (5, 6 and 7 fields of numbers in and out of range,
ranges, steps, lists, `L`/`W`/`#`, names, `@` macros, huge numbers, NUL, overlong), periods (`every` as text
and integers, zero, negative, past 366 days, past int64, floats, booleans), time zones (IANA names, unknown,
path-like, NUL, huge), ids (valid, odd, taken) and the event's fields with hand-written bad values. Each goes
to the real app through `Exerciser` (no 5xx, no traceback, the documented error body, a refusal changes no
row); a created schedule is then read back (`GET` one and all: its next fire time is computed), paused,
resumed and deleted, and odd ids are sent to every `{schedule_id}` route.

The scheduler's loop still wakes on every change and computes every stored schedule's next fire, but as of
a year ago, so nothing comes due: a fire would write rows between requests, and the fuzz must see only
what the requests wrote. A tick that raises fails the test.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import strategies as st

from mcphost.app import Host, open_host
from mcphost.models import AgentConfig
from mcphost.schedules import Scheduler
from tests.e2e.httpkit import api_settings, asgi_client
from tests.fuzz._figures import examples, store_of, tally
from tests.fuzz.test_api_fuzz import BASE, LIMITS, RAW_VALUES, Exerciser, Sent, run_generated
from tests.mcphost.hostkit import ECHO_RUNNER

JSON_HEADERS = {"content-type": "application/json"}
YEAR_S = 366 * 24 * 3600


@pytest.fixture
async def host(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncGenerator[Host, None]:
    failures: list[BaseException] = []
    tick = Scheduler.tick

    async def tick_a_year_ago(self: Scheduler, now: float) -> float:
        try:
            await tick(self, now - YEAR_S)
        except Exception as exc:
            failures.append(exc)
            raise
        return time.time() + 3600  # woken by the next change

    monkeypatch.setattr(Scheduler, "tick", tick_a_year_ago)
    base = api_settings(database_url, tmp_path / "data")
    ticker = AgentConfig(id="ticker", runner=ECHO_RUNNER, event_types=["schedule.triggered", "fuzz.tick"])
    async with open_host(base.model_copy(update={"agents": [*base.agents, ticker]})) as opened:
        yield opened
    assert not failures, failures


def field() -> st.SearchStrategy[str]:
    number = st.one_of(
        st.integers(min_value=0, max_value=61), st.integers(min_value=-5, max_value=10**6), st.just(2**64)
    ).map(str)
    atom = st.one_of(
        st.just("*"),
        number,
        st.tuples(number, number).map(lambda ab: f"{ab[0]}-{ab[1]}"),
        st.tuples(st.sampled_from(["*", "0", "1-5"]), number).map(lambda sn: f"{sn[0]}/{sn[1]}"),
        st.sampled_from(
            ["L", "W", "15W", "LW", "5L", "1#2", "7#5", "MON", "jan", "SUN-SAT", "?", "H", "H/5"]
        ),
    )
    return st.lists(atom, min_size=1, max_size=3).map(",".join)


def plausible_crons() -> st.SearchStrategy[str]:
    """Five fields, each in its range or a step that may leave it (`*/99`)."""
    bounds = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
    parts = [
        st.one_of(
            st.just("*"),
            st.integers(lo, hi).map(str),
            st.integers(1, 120).map(lambda n: f"*/{n}"),
            st.tuples(st.integers(lo, hi), st.integers(lo, hi)).map(lambda ab: f"{min(ab)}-{max(ab)}"),
        )
        for lo, hi in bounds
    ]
    return st.tuples(*parts).map(" ".join)


def crons() -> st.SearchStrategy[str]:
    fields = st.integers(min_value=4, max_value=8).flatmap(
        lambda n: st.lists(field(), min_size=n, max_size=n)
    )
    return st.one_of(
        plausible_crons(),
        fields.map(" ".join),
        st.sampled_from(
            [
                "@yearly",
                "@hourly",
                "@reboot",
                "@every 5m",
                "* * * * * * 2026",
                "0 0 1 1 * 0 2999",
                "0 0 29 2 *",
                "0 0 30 2 *",
                "0 0 31 4 *",
                "*/0 * * * *",
                "0 0 * * 8",
                "* * * * *\x00",
                "* * * * * " + "1" * 200,
                "\t* * * * *\n",
                "",
                " ",
            ]
        ),
        st.text(max_size=30),
    )


ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/St_Johns",
    "Asia/Kathmandu",
    "Pacific/Kiritimati",
    "Etc/GMT+12",
    "EST5EDT",
    "localtime",
    "posixrules",
    "Factory",
    "",
    "Mars/Phobos",
    "../../etc/passwd",
    "/etc/localtime",
    "UTC\x00",
    "utc",
    "Europe/" + "x" * 200,
]
EVERIES = [
    '"10s"',
    '"1s"',
    '"366d"',
    '"367d"',
    '"0s"',
    '"-5m"',
    '" 5 m "',
    '"1.5s"',
    '"999999999d"',
    '"10S"',
    "0",
    "1",
    "-1",
    str(366 * 24 * 3600),
    str(366 * 24 * 3600 + 1),
    str(2**63),
    str(2**64),
    "1.0",
    "true",
    "null",
    "[]",
]


def specs() -> st.SearchStrategy[bytes]:
    ids = st.one_of(
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True),
        st.sampled_from(
            ["s1", "s1", "x" * 100, "x" * 101, "-x", "a b", "a/b", "a\x00b", "\u00e9t\u00e9", ""]
        ),
    )
    timetable = st.one_of(
        crons().map(lambda c: f'"cron": {json.dumps(c)}'),
        st.sampled_from(EVERIES).map(lambda e: f'"every": {e}'),
        st.tuples(crons(), st.sampled_from(EVERIES)).map(
            lambda ce: f'"cron": {json.dumps(ce[0])}, "every": {ce[1]}'
        ),
        st.sampled_from(RAW_VALUES).map(lambda raw: f'"cron": {raw}'),
        st.sampled_from(RAW_VALUES).map(lambda raw: f'"every": {raw}'),
        st.just(""),
    )
    zone = st.one_of(
        st.none(),
        st.sampled_from(ZONES).map(json.dumps),
        st.text(max_size=20).map(json.dumps),
        st.sampled_from(RAW_VALUES[:8]),
    )
    extra = st.one_of(
        st.none(),
        st.sampled_from(
            [
                '"event_type": "fuzz.tick"',
                '"event_type": "nobody.listens"',
                '"event_type": "NOT A TYPE"',
                '"agent": "ticker"',
                '"agent": "echo"',
                '"agent": "ghost"',
                '"conversation_id": "c-s"',
                '"conversation_id": "no spaces"',
                '"misfire": "run_once"',
                '"misfire": "later"',
                '"text": "hi"',
                '"data": {"n": 1}',
                '"paused": true',
            ]
        ),
        st.tuples(
            st.sampled_from(["text", "data", "conversation_id", "misfire"]), st.sampled_from(RAW_VALUES)
        ).map(lambda kv: f'"{kv[0]}": {kv[1]}'),
    )

    def body(parts: tuple[str, str, str | None, str | None]) -> bytes:
        schedule_id, when, tz, more = parts
        fields = [f'"id": {json.dumps(schedule_id)}'] + [
            f for f in (when, tz and f'"timezone": {tz}', more) if f
        ]
        return ("{" + ", ".join(fields) + "}").encode("utf-8", "surrogatepass")

    usable = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
    plausible = st.one_of(
        plausible_crons().map(lambda c: f'"cron": {json.dumps(c)}'),
        st.sampled_from(EVERIES[:3]).map(lambda e: f'"every": {e}'),
    )
    return st.one_of(
        st.tuples(usable, plausible, st.none() | st.sampled_from(ZONES[:10]).map(json.dumps), st.none()).map(
            body
        ),
        st.tuples(ids, timetable, zone, extra).map(body),
        st.tuples(ids, timetable, zone, extra).map(body),
        st.sampled_from(
            [
                b"",
                b"[]",
                b"not json",
                b'{"id": "s"',
                b"\xff",
                *(r.encode("utf-8", "surrogatepass") for r in RAW_VALUES),
            ]
        ),
    )


ODD_PATHS = [
    "%00",
    "x" * 101,
    "x" * 3000,
    "..",
    "%2F",
    "%ED%A0%80",
    "%FF",
    "a%20b",
    "s1%0A",
    "does-not-exist",
]


async def test_generated_schedules(host: Host, database_url: str, tmp_path: Path) -> None:
    figures = tally("schedules", store_of(database_url))
    async with asgi_client(host, limits=LIMITS) as client:
        exerciser = Exerciser(host, client, tmp_path / "data", figures)
        created: list[str] = []

        async def request(method: str, path: str, body: bytes | None = None) -> int | None:
            sent = Sent(method, BASE + path, JSON_HEADERS, body)
            response = await exerciser.send(sent)
            if response is None:
                return None
            exerciser.check_answer(sent, response)
            return response.status_code

        async def exercise(item: tuple[bytes, int]) -> None:
            body, odd = item
            status = await request("POST", "/v1/schedules", body)
            if status == 201:
                schedule_id = json.loads(body)["id"]
                created.append(schedule_id)
                quoted = urllib.parse.quote(schedule_id, safe="")
                assert await request("GET", f"/v1/schedules/{quoted}") == 200
                assert await request("GET", "/v1/schedules") == 200
                assert await request("POST", f"/v1/schedules/{quoted}/pause") == 200
                assert await request("POST", f"/v1/schedules/{quoted}/resume") == 200
                assert await request("POST", "/v1/schedules", body) == 409  # the id is taken
                assert await request("DELETE", f"/v1/schedules/{quoted}") == 200
            path = f"/v1/schedules/{ODD_PATHS[odd % len(ODD_PATHS)]}"
            method, suffix = [("GET", ""), ("DELETE", ""), ("POST", "/pause"), ("POST", "/resume")][odd % 4]
            await request(method, path + suffix)

        def each(item: tuple[bytes, int]) -> None:
            anyio.from_thread.run(exercise, item)

        strategy = st.tuples(specs(), st.integers(min_value=0, max_value=10**6))
        await anyio.to_thread.run_sync(run_generated, "POST /v1/schedules", strategy, each, examples(8) * 10)
    assert figures.server_errors == 0
    assert created, "no generated schedule was valid"
    assert figures.statuses.get("400", 0) > len(created), figures.statuses
