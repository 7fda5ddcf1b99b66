"""`POST /v1/events?wait=true`, `GET /v1/state/...`, SSE results named by type and ISO 8601 twins of
epoch fields, through the real app over a real host (SQLite file or PostgreSQL, real plugin
subprocesses). Bad input is a 400 that stores nothing; a wait that times out never cancels its run.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import pytest

from mcphost.api import _endpoints as endpoints
from mcphost.api import openapi
from mcphost.app import Host, open_host
from mcphost.common.timestamps import is_epoch_field, iso8601
from mcphost.models import RunStatus
from tests._json import obj_or_none
from tests.e2e.httpkit import api_settings, asgi_client, event_body, parse_sse, row_counts

ECHO_OWNER = {"runner_id": "plugin:mcphost/echo/default", "binding_id": "echo", "conversation_id": "c1"}


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:
        yield opened


def error_of(response: httpx2.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["code"] == code, body
    assert "Traceback" not in response.text
    return body["error"]


# -- POST /v1/events?wait=true -----------------------------------------------------------------------


async def test_wait_true_answers_the_ended_run_with_its_results_and_message(
    client: httpx2.AsyncClient,
) -> None:
    response = await client.post("/v1/events", params={"wait": "true"}, json=event_body("hello there"))
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["done"] is True
    assert answer["created"] is True
    assert answer["status"] == "completed"
    assert answer["run"]["run_id"] == answer["run_id"]
    assert answer["run"]["status"] == "completed"
    assert answer["run"]["ended_at_iso"].endswith("Z")
    assert response.headers["location"] == f"/v1/runs/{answer['run_id']}"
    types = [r["type"] for r in answer["results"]]
    assert "message.delta" not in types  # folded into message.completed
    assert types[-1] == "run.completed"
    assert answer["results_complete"] is True
    assert answer["next_after"] == answer["results"][-1]["seq"]
    assert answer["message"] is not None
    assert "hello there" in answer["message"]["content"]

    # The same event again (its event_id) waits on, and answers, the same run.
    again = await client.post(
        "/v1/events", params={"wait": "true"}, json=event_body("hello there", event_id=answer["event_id"])
    )
    assert again.status_code == 200
    assert again.json()["run_id"] == answer["run_id"]
    assert again.json()["created"] is False


async def test_wait_true_follows_a_run_executing_here_without_reading_its_results_back(
    host: Host, client: httpx2.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer is gathered as the run's results are published (persisted first), as a result stream
    follows them: the store is written once and read for nothing."""
    reads: list[str] = []
    listed = host.stores.results.list

    async def counted(run_id: str, **kwargs: Any) -> Any:
        reads.append(run_id)
        return await listed(run_id, **kwargs)

    monkeypatch.setattr(host.stores.results, "list", counted)
    response = await client.post("/v1/events", params={"wait": "true"}, json=event_body("hello there"))
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [r["type"] for r in answer["results"]][-1] == "run.completed"
    assert answer["results_complete"] is True
    assert reads == []
    stored = await listed(answer["run_id"], after=0, limit=100)
    assert answer["results"] == [{"seq": r.seq, **r.payload} for r in stored if r.type != "message.delta"]


async def test_a_wait_answer_stops_at_its_bounds_and_names_where_to_go_on(
    client: httpx2.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(endpoints, "RESULTS_PAGE_LIMIT", 50)
    monkeypatch.setattr(endpoints, "WAIT_SCAN_PAGES", 2)
    flooded = await client.post(
        "/v1/events", params={"wait": "true"}, json=event_body("flood:300", bot="bad")
    )
    assert flooded.status_code == 200, flooded.text
    answer = flooded.json()
    assert answer["done"] is True  # a bound stops the reading, not the wait
    assert answer["status"] == "completed"
    assert answer["results"] == []  # only deltas were read
    assert answer["results_complete"] is False
    rest = await client.get(
        f"/v1/runs/{answer['run_id']}/results",
        params={"after": answer["next_after"]},
        headers={"accept": "application/json"},
    )
    assert rest.status_code == 200, rest.text
    items = cast("list[dict[str, Any]]", rest.json()["results"])
    assert items[0]["seq"] == answer["next_after"] + 1  # nothing skipped
    assert items[-1]["type"] == "run.completed"

    monkeypatch.setattr(endpoints, "WAIT_RESULTS", 2)
    kept = (
        await client.post("/v1/events", params={"wait": "true"}, json=event_body("hi", conversation="c2"))
    ).json()
    assert [r["type"] for r in kept["results"]] == ["message.completed", "state.updated"]
    assert kept["results_complete"] is False
    assert kept["next_after"] == kept["results"][-1]["seq"]
    assert kept["message"] is not None


async def test_a_wait_that_times_out_answers_202_and_leaves_the_run_going(
    host: Host, client: httpx2.AsyncClient
) -> None:
    response = await client.post(
        "/v1/events", params={"wait": "true", "timeout_s": "0.5"}, json=event_body("slow:3", bot="bad")
    )
    assert response.status_code == 202, response.text
    answer = response.json()
    assert answer["done"] is False
    assert answer["status"] in ("queued", "running")
    assert answer["run"]["ended_at"] is None
    assert answer["run"]["ended_at_iso"] is None
    with anyio.fail_after(30):
        run = await host.orchestrator.wait(answer["run_id"])
    assert run.status is RunStatus.COMPLETED  # never cancelled by the wait
    joined = await client.post(
        "/v1/events",
        params={"wait": "true", "timeout_s": "30"},
        json=event_body("slow:3", bot="bad", event_id=answer["event_id"]),
    )
    assert joined.status_code == 200
    assert joined.json()["done"] is True


@pytest.mark.parametrize(
    "params",
    [
        {"wait": "true", "timeout_s": "nan"},
        {"wait": "true", "timeout_s": "inf"},
        {"wait": "true", "timeout_s": "-inf"},
        {"wait": "true", "timeout_s": "1e308"},
        {"wait": "true", "timeout_s": "3601"},
        {"wait": "true", "timeout_s": "0"},
        {"wait": "true", "timeout_s": "-1"},
        {"wait": "true", "timeout_s": "soon"},
        {"timeout_s": "5"},
        {"wait": "true", "stream": "true"},
        {"wait": "maybe"},
    ],
)
async def test_a_bad_wait_is_400_and_stores_nothing(
    host: Host, client: httpx2.AsyncClient, params: dict[str, str]
) -> None:
    before = await row_counts(host.stores)
    error = error_of(
        await client.post("/v1/events", params=params, json=event_body("x")), 400, "invalid_argument"
    )
    assert error["message"].startswith("query")
    # Refused by what `wait` and `timeout_s` accept, not as unknown parameters.
    assert error["details"]["errors"][0]["type"] != "extra_forbidden", error
    assert await row_counts(host.stores) == before


# -- GET /v1/state/{scope}[/{key}] -------------------------------------------------------------------


async def test_state_is_read_by_owner_as_a_run_reads_it(host: Host, client: httpx2.AsyncClient) -> None:
    owner = (ECHO_OWNER["runner_id"], ECHO_OWNER["binding_id"], "c1", "")
    for key in ("a", "b", "c"):
        await host.stores.state.set("conversation", owner, key, {"k": key})
    await host.stores.state.set("conversation", (*owner[:2], "c2", ""), "a", "another owner")

    one = await client.get("/v1/state/conversation/b", params=ECHO_OWNER)
    assert one.status_code == 200, one.text
    value = one.json()
    assert value["value"] == {"k": "b"}
    assert value["owner"] == list(owner)
    assert value["unservable"] is False
    assert value["updated_at_iso"] == iso8601(value["updated_at"])

    first = (await client.get("/v1/state/conversation", params={**ECHO_OWNER, "limit": 2})).json()
    assert [e["key"] for e in first["items"]] == ["a", "b"]
    assert first["has_more"] is True
    assert first["items"][0]["updated_at_iso"].endswith("Z")
    rest = await client.get(
        "/v1/state/conversation", params={**ECHO_OWNER, "limit": 2, "cursor": first["next_cursor"]}
    )
    assert [e["key"] for e in rest.json()["items"]] == ["c"]
    prefixed = await client.get("/v1/state/conversation", params={**ECHO_OWNER, "prefix": "c"})
    assert [e["key"] for e in prefixed.json()["items"]] == ["c"]
    other = await client.get("/v1/state/conversation", params={**ECHO_OWNER, "conversation_id": "c2"})
    assert [e["value"] for e in other.json()["items"]] == ["another owner"]


@pytest.mark.parametrize(
    ("path", "params", "status"),
    [
        ("/v1/state/conversation/missing", ECHO_OWNER, 404),
        ("/v1/state/galaxy/a", ECHO_OWNER, 400),  # unknown scope
        ("/v1/state/galaxy", ECHO_OWNER, 400),
        ("/v1/state/conversation/a", {"runner_id": "r", "binding_id": "b"}, 400),  # no conversation_id
        ("/v1/state/conversation", {**ECHO_OWNER, "actor_id": "u1"}, 400),  # not part of the owner
        ("/v1/state/conversation/bad key", ECHO_OWNER, 400),
        ("/v1/state/conversation", {**ECHO_OWNER, "cursor": "forged"}, 400),
        ("/v1/state/conversation", {**ECHO_OWNER, "prefix": "a b"}, 400),
        ("/v1/state/conversation", {**ECHO_OWNER, "limit": "1000"}, 400),
    ],
)
async def test_bad_state_reads_are_refused(
    client: httpx2.AsyncClient, path: str, params: dict[str, str], status: int
) -> None:
    error_of(
        await client.get(path, params=params), status, "not_found" if status == 404 else "invalid_argument"
    )


# -- SSE names and ISO 8601 twins --------------------------------------------------------------------


async def test_stream_results_are_named_by_their_type_and_the_frame_events_keep_their_names(
    client: httpx2.AsyncClient,
) -> None:
    response = await client.post("/v1/events", params={"stream": "true"}, json=event_body("named"))
    events = parse_sse(response.text)
    assert events[0].event == "run"
    assert events[-1].event == "end"
    middle = events[1:-1]
    assert middle
    assert all(e.event == e.data["type"] and e.id == str(e.data["seq"]) for e in middle)


async def test_every_epoch_field_of_an_answer_has_its_iso_twin_and_passthrough_json_has_none(
    host: Host, client: httpx2.AsyncClient
) -> None:
    body = event_body("iso", data={"sent_at": 5, "deep": {"created_at": 6}})
    admitted = (await client.post("/v1/events", params={"wait": "true"}, json=body)).json()
    run_id = admitted["run_id"]
    view = (await client.get(f"/v1/runs/{run_id}")).json()
    assert view["run"]["created_at_iso"] == iso8601(view["run"]["created_at"])
    assert view["grant"]["deadline_at_iso"] == iso8601(view["grant"]["deadline_at"])
    assert view["attempts"][0]["created_at_iso"] == iso8601(view["attempts"][0]["created_at"])
    parsed = datetime.datetime.fromisoformat(view["run"]["created_at_iso"])
    assert abs(parsed.timestamp() - view["run"]["created_at"]) < 0.001
    records = (await client.get(f"/v1/runs/{run_id}/records")).json()
    event = records["events"][0]
    assert event["created_at_iso"] == iso8601(event["created_at"])
    assert event["payload"]["data"] == {"sent_at": 5, "deep": {"created_at": 6}}  # untouched
    assert records["context"]["event"]["event_time_iso"] == iso8601(records["context"]["event"]["event_time"])

    def twins(value: object) -> None:
        """Every epoch key of the model-made JSON has its twin (payloads skipped)."""
        mapping = obj_or_none(value)
        if mapping is not None:
            for key, item in mapping.items():
                if key in ("payload", "data", "input", "metadata"):
                    continue
                if is_epoch_field(key) and (item is None or isinstance(item, float)):
                    assert f"{key}_iso" in mapping, key
                twins(item)
        elif isinstance(value, list):
            for item in cast(list[object], value):
                twins(item)

    for answer in (
        view,
        records,
        (await client.get("/v1/runs")).json(),
        (await client.get("/v1/conversations")).json(),
    ):
        twins(answer)


def test_the_document_types_every_iso_twin_and_the_stream_items() -> None:
    doc = openapi()
    schemas = doc["components"]["schemas"]
    run = schemas["Run"]["properties"]
    for name in ("created_at", "started_at", "ended_at", "deadline_at"):
        assert run[f"{name}_iso"]["anyOf"][0] == {"type": "string", "format": "date-time"}
    assert "created_at_iso" in schemas["ConversationRecord"]["properties"]
    assert "updated_at_iso" in schemas["StateEntry"]["properties"]
    stream = doc["paths"]["/v1/runs/{run_id}/results"]["get"]["responses"]["200"]["content"][
        "text/event-stream"
    ]
    names = [item["properties"]["event"] for item in stream["schema"]["oneOf"]]
    assert {"const": "end"} in names
    assert {"const": "run"} in names
    assert any("message.delta" in n.get("enum", []) for n in names)
