"""The HTTP API through the real app (`httpx2.ASGITransport`), over a real host: SQLite file or
PostgreSQL, real plugin subprocesses. Each endpoint's happy path and its error statuses; refused
requests store nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from mcphost import __version__
from mcphost.api import ApiLimits, parse_range
from mcphost.app import Host, create_app, open_host
from mcphost.console import is_console_path
from mcphost.errors import InvalidArgumentError
from mcphost.inspection import create_grant
from mcphost.models import RunStatus
from mcphost.runtimes.wire import RUNTIME_PREFIX
from tests._json import obj_or_none
from tests.e2e.httpkit import (
    api_settings,
    asgi_client,
    blob_files,
    event_body,
    parse_sse,
    results_of,
    row_counts,
    state_of,
    wait_status,
)
from tests.mcphost.stores.factories import nested_json, overwrite_json


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host, limits=ApiLimits(max_upload_bytes=64 * 1024)) as opened:
        yield opened


def error_of(response: httpx2.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code, body
    assert "Traceback" not in response.text
    return body["error"]


# -- POST /v1/events ---------------------------------------------------------------------------------


async def test_an_event_is_admitted_with_202_and_a_replay_returns_the_same_run(
    host: Host, client: httpx2.AsyncClient
) -> None:
    body = event_body("hello", event_id="evt-fixed-1")
    first = await client.post("/v1/events", json=body)
    assert first.status_code == 202, first.text
    answer = first.json()
    assert set(answer) == {"run_id", "event_id", "status", "created"}
    assert answer["created"] is True
    assert answer["event_id"] == "evt-fixed-1"
    assert first.headers["location"] == f"/v1/runs/{answer['run_id']}"
    run = await host.orchestrator.wait(answer["run_id"])
    assert run.status is RunStatus.COMPLETED

    again = await client.post("/v1/events", json=body)
    assert again.status_code == 202
    assert again.json() == {**answer, "status": "completed", "created": False}


async def test_stream_true_answers_sse_from_admission_to_the_end(client: httpx2.AsyncClient) -> None:
    response = await client.post("/v1/events", params={"stream": "true"}, json=event_body("streamed"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    assert events[0].event == "run"
    assert events[0].id is None
    run_id = events[0].data["run_id"]
    assert response.headers["x-run-id"] == run_id
    results = results_of(events)
    assert [r["type"] for r in results] == [
        "message.delta",
        "message.completed",
        "state.updated",
        "run.completed",
    ]
    assert [e.event for e in events[1:-1]] == [r["type"] for r in results]  # each result named by its type
    assert [e.id for e in events[1:-1]] == ["1", "2", "3", "4"]
    assert [r["seq"] for r in results] == [1, 2, 3, 4]
    assert all(r["run_id"] == run_id for r in results)
    assert events[-1].event == "end"
    assert events[-1].id is None
    assert events[-1].data == {"run_id": run_id, "status": "completed"}


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b"{not json", "body"),
        (b"", "body"),
        (b"\xff\xfe", "body"),
        (b'{"input": {"text": "x"}}', "body.event_type"),
        (b'{"event_type": "message.received", "surprise": 1}', "body.surprise"),
        (b'{"event_type": "Message Received"}', "body.event_type"),
        (
            b'{"event_type": "message.received", "conversation": {"conversation_id": ""}}',
            "body.conversation.conversation_id",
        ),
        (b"[]", "body"),
    ],
)
async def test_a_bad_event_is_400_naming_the_field_and_stores_nothing(
    host: Host, client: httpx2.AsyncClient, content: bytes, field: str
) -> None:
    before = await row_counts(host.stores)
    response = await client.post("/v1/events", content=content, headers={"content-type": "application/json"})
    error = error_of(response, 400, "invalid_argument")
    assert error["message"].startswith(f"{field}:"), error
    assert error["details"]["errors"][0]["loc"].startswith(field)
    assert await row_counts(host.stores) == before


@pytest.mark.parametrize("depth", [100, 240, 100_000])
async def test_an_event_nested_too_deep_is_400_and_stores_nothing(
    host: Host, client: httpx2.AsyncClient, depth: int
) -> None:
    body = (
        json.dumps(event_body("x")).encode()[:-1] + b', "data": {"d": ' + b"[" * depth + b"]" * depth + b"}}"
    )
    before = await row_counts(host.stores)
    response = await client.post("/v1/events", content=body, headers={"content-type": "application/json"})
    error = error_of(response, 400, "invalid_argument")
    assert "nest more than 64 levels deep" in error["message"], error
    assert error["details"] == {"field": "body", "max_depth": 64}
    assert await row_counts(host.stores) == before
    # 64 levels in all is accepted: the envelope's own object and `data` are two of them.
    flat = json.dumps(event_body("x", data={"d": json.loads("[" * 62 + "]" * 62)}))
    response = await client.post("/v1/events", content=flat, headers={"content-type": "application/json"})
    assert response.status_code == 202, response.text


async def test_delete_state_removes_a_value_too_deep_to_serve_and_refuses_precisely(
    host: Host, client: httpx2.AsyncClient
) -> None:
    runner = "plugin:mcphost/echo/default"
    await host.stores.state.set("runner", (runner,), "bad", 0)
    await host.stores.state.set("runner", (runner,), "good", 1)
    owner = json.dumps([runner], separators=(",", ":"))
    await overwrite_json(
        host.stores, "state", "value", nested_json(300), scope="runner", owner=owner, key="bad"
    )
    ids = {"runner_id": runner}

    missing = error_of(await client.delete("/v1/state/runner/bad"), 400, "invalid_argument")
    assert missing["message"] == "A 'runner' state owner is made of runner_id; missing runner_id."
    extra = error_of(
        await client.delete("/v1/state/runner/bad", params={**ids, "actor_id": "u1"}), 400, "invalid_argument"
    )
    assert "actor_id is not part of it" in extra["message"]
    unknown = error_of(await client.delete("/v1/state/galaxy/bad", params=ids), 400, "invalid_argument")
    assert "Unknown state scope 'galaxy'" in unknown["message"]
    error_of(await client.delete("/v1/state/runner/bad%20key", params=ids), 400, "invalid_argument")
    error_of(
        await client.delete("/v1/state/runner/bad", params={**ids, "colour": "red"}), 400, "invalid_argument"
    )
    assert (await host.stores.state.get("runner", (runner,), "bad")) is not None

    response = await client.delete("/v1/state/runner/bad", params=ids)
    assert response.status_code == 200, response.text
    assert response.json() == {"scope": "runner", "key": "bad", "owner": [runner], "deleted": True}
    assert await host.stores.state.get("runner", (runner,), "bad") is None
    gone = error_of(await client.delete("/v1/state/runner/bad", params=ids), 404, "not_found")
    assert "No 'runner' state value 'bad'" in gone["message"]
    kept = await host.stores.state.get("runner", (runner,), "good")
    assert kept is not None
    assert kept.value == 1
    operation = (await client.get("/openapi.json")).json()["paths"]["/v1/state/{scope}/{key}"]["delete"]
    assert {"runner_id", "conversation_id", "thread_id"} <= {p["name"] for p in operation["parameters"]}
    assert set(operation["responses"]) == {"200", "400", "401", "403", "404"}


async def test_an_event_no_agent_takes_is_404_and_ambiguous_query_is_400(
    host: Host, client: httpx2.AsyncClient
) -> None:
    before = await row_counts(host.stores)
    error_of(await client.post("/v1/events", json=event_body("x", bot="nobody")), 404, "not_found")
    error_of(await client.post("/v1/events", json=event_body("x", agent_id="ghost")), 404, "not_found")
    error = error_of(
        await client.post("/v1/events?stream=maybe", json=event_body("x")), 400, "invalid_argument"
    )
    assert error["message"].startswith("query.stream:")
    error = error_of(
        await client.post("/v1/events?strem=true", json=event_body("x")), 400, "invalid_argument"
    )
    assert error["message"].startswith("query.strem:")
    error = error_of(
        await client.post("/v1/events?stream=1&stream=0", json=event_body("x")), 400, "invalid_argument"
    )
    assert "more than once" in error["message"]
    assert await row_counts(host.stores) == before


async def test_an_oversized_event_body_is_413_and_stores_nothing(
    host: Host, client: httpx2.AsyncClient
) -> None:
    before = await row_counts(host.stores)
    big = b'{"event_type": "message.received", "input": {"text": "' + b"x" * (5 * 1024 * 1024) + b'"}}'
    error_of(await client.post("/v1/events", content=big), 413, "payload_too_large")

    async def chunked() -> AsyncGenerator[bytes, None]:  # no Content-Length: the cap holds while streaming
        for _ in range(80):
            yield b" " * (64 * 1024)

    error_of(await client.post("/v1/events", content=chunked()), 413, "payload_too_large")
    assert await row_counts(host.stores) == before


async def test_a_draining_host_refuses_new_events_with_503(host: Host, client: httpx2.AsyncClient) -> None:
    state_of(client).draining = True
    before = await row_counts(host.stores)
    response = await client.post("/v1/events", json=event_body("late"))
    error_of(response, 503, "runtime_error")
    assert response.headers["retry-after"] == "5"
    error_of(await client.get("/healthz"), 503, "runtime_error")
    assert await row_counts(host.stores) == before


async def test_a_concurrency_reject_is_409(host: Host, client: httpx2.AsyncClient) -> None:
    first = await client.post("/v1/events", json=event_body("slow:5", bot="rej", conversation="r1"))
    assert first.status_code == 202
    error = error_of(
        await client.post("/v1/events", json=event_body("ok", bot="rej", conversation="r1")), 409, "conflict"
    )
    assert error["details"]["active_run_id"] == first.json()["run_id"]
    await host.orchestrator.cancel(first.json()["run_id"])


# -- runs --------------------------------------------------------------------------------------------


async def test_runs_are_listed_newest_first_filtered_and_paged(
    host: Host, client: httpx2.AsyncClient
) -> None:
    ids: list[str] = []
    for i in range(3):
        response = await client.post("/v1/events", json=event_body(f"m{i}", conversation="list-a"))
        ids.append(response.json()["run_id"])
        await host.orchestrator.wait(ids[-1])
    other = (
        await client.post("/v1/events", json=event_body("fail", bot="bad", conversation="list-b"))
    ).json()
    await host.orchestrator.wait(other["run_id"])

    page = (await client.get("/v1/runs", params={"conversation_id": "list-a", "limit": 2})).json()
    assert [r["run_id"] for r in page["items"]] == [ids[2], ids[1]]
    assert page["has_more"] is True
    rest = (
        await client.get(
            "/v1/runs", params={"conversation_id": "list-a", "limit": 2, "cursor": page["next_cursor"]}
        )
    ).json()
    assert [r["run_id"] for r in rest["items"]] == [ids[0]]
    assert rest["has_more"] is False
    failed = (await client.get("/v1/runs", params={"status": "failed"})).json()
    assert [r["run_id"] for r in failed["items"]] == [other["run_id"]]

    error_of(await client.get("/v1/runs", params={"status": "done"}), 400, "invalid_argument")
    error_of(await client.get("/v1/runs", params={"limit": 0}), 400, "invalid_argument")
    error_of(await client.get("/v1/runs", params={"cursor": "garbage"}), 400, "invalid_argument")
    error_of(await client.get("/v1/runs", params={"conversation_id": "bad id"}), 400, "invalid_argument")


async def test_a_run_is_shown_with_its_grant_summary_and_never_its_token(
    host: Host, client: httpx2.AsyncClient
) -> None:
    answer = (await client.post("/v1/events", json=event_body("hi"))).json()
    await host.orchestrator.wait(answer["run_id"])
    response = await client.get(f"/v1/runs/{answer['run_id']}")
    assert response.status_code == 200
    view = response.json()
    assert view["run"]["run_id"] == answer["run_id"]
    assert view["run"]["status"] == "completed"
    assert view["grant"]["conversation_id"] == "c1"
    assert "state_get" in view["grant"]["tools"]
    assert view["grant"]["revoked"] is True
    assert view["grant"]["active"] is False
    assert view["mcp_url"].endswith(f"/runs/{answer['run_id']}/mcp")
    token_hash = (await host.stores.runs.grant(answer["run_id"])).grant.token_hash
    assert token_hash not in response.text
    assert "token" not in response.text
    error_of(await client.get("/v1/runs/run_missing"), 404, "not_found")
    error_of(await client.get(f"/v1/runs/{answer['run_id']}?x=1"), 400, "invalid_argument")


async def test_results_come_as_json_or_sse_after_a_sequence(host: Host, client: httpx2.AsyncClient) -> None:
    run_id = (await client.post("/v1/events", json=event_body("flood:5", bot="bad"))).json()["run_id"]
    await host.orchestrator.wait(run_id)

    page = (await client.get(f"/v1/runs/{run_id}/results", headers={"accept": "application/json"})).json()
    assert [r["seq"] for r in page["results"]] == [1, 2, 3, 4, 5, 6]
    assert page["status"] == "completed"
    assert page["complete"] is True
    assert page["next_after"] == 6
    partial = (
        await client.get(f"/v1/runs/{run_id}/results?after=2&limit=2", headers={"accept": "application/json"})
    ).json()
    assert [r["seq"] for r in partial["results"]] == [3, 4]
    assert partial["complete"] is False
    assert partial["next_after"] == 4

    after = parse_sse((await client.get(f"/v1/runs/{run_id}/results?after=4")).text)
    assert [r["seq"] for r in results_of(after)] == [5, 6]
    resumed = parse_sse(
        (await client.get(f"/v1/runs/{run_id}/results?after=1", headers={"last-event-id": "3"})).text
    )
    assert [r["seq"] for r in results_of(resumed)] == [4, 5, 6]  # Last-Event-ID wins over ?after
    assert resumed[-1].event == "end"

    error_of(
        await client.get(f"/v1/runs/{run_id}/results", headers={"last-event-id": "x"}),
        400,
        "invalid_argument",
    )
    error_of(await client.get(f"/v1/runs/{run_id}/results?after=-1"), 400, "invalid_argument")
    error_of(await client.get("/v1/runs/run_missing/results"), 404, "not_found")


async def test_cancel_ends_a_running_run_and_refuses_finished_or_unknown_runs(
    host: Host, client: httpx2.AsyncClient
) -> None:
    run_id = (await client.post("/v1/events", json=event_body("slow:30", bot="bad"))).json()["run_id"]
    await wait_status(host.stores, run_id, RunStatus.RUNNING)
    error_of(
        await client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "x", "extra": 1}),
        400,
        "invalid_argument",
    )
    response = await client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "the user gave up"})
    assert response.status_code == 202
    assert response.json() == {"run_id": run_id, "status": "running", "cancel_requested": True}
    with anyio.fail_after(20):
        run = await host.orchestrator.wait(run_id)
    assert run.status is RunStatus.CANCELLED
    assert run.error is not None
    assert run.error.details["reason"] == "the user gave up"
    error = error_of(await client.post(f"/v1/runs/{run_id}/cancel"), 409, "conflict")
    assert "cancelled" in error["message"]
    error_of(await client.post("/v1/runs/run_missing/cancel"), 404, "not_found")


async def test_the_audit_of_a_run_is_paged_and_unknown_runs_are_404(
    host: Host, client: httpx2.AsyncClient
) -> None:
    run_id = (await client.post("/v1/events", json=event_body("hi"))).json()["run_id"]
    await host.orchestrator.wait(run_id)
    page = (await client.get(f"/v1/runs/{run_id}/audit")).json()
    assert page == {"items": [], "next_after": 0, "has_more": False}  # echo makes no MCP calls
    error_of(await client.get("/v1/runs/run_missing/audit"), 404, "not_found")
    error_of(await client.get(f"/v1/runs/{run_id}/audit?limit=5000"), 400, "invalid_argument")


# -- conversations -----------------------------------------------------------------------------------


async def test_transcript_and_events_are_paged_with_cursors(host: Host, client: httpx2.AsyncClient) -> None:
    for text in ("one", "two", "three"):
        run_id = (await client.post("/v1/events", json=event_body(text, conversation="talk"))).json()[
            "run_id"
        ]
        await host.orchestrator.wait(run_id)

    first = (await client.get("/v1/conversations/talk/transcript", params={"limit": 4})).json()
    assert [i["content"] for i in first["items"]] == ["three", "three", "two", "two"]
    assert [i["role"] for i in first["items"]] == ["assistant", "user", "assistant", "user"]
    assert first["has_more"] is True
    older = (
        await client.get(
            "/v1/conversations/talk/transcript", params={"limit": 4, "before": first["next_cursor"]}
        )
    ).json()
    assert [i["content"] for i in older["items"]] == ["one", "one"]
    assert older["has_more"] is False

    events = (await client.get("/v1/conversations/talk/events", params={"limit": 2})).json()
    assert len(events["items"]) == 2
    assert events["has_more"] is True
    typed = (
        await client.get(
            "/v1/conversations/talk/events",
            params=[("event_type", "message.received"), ("event_type", "group.member_joined")],
        )
    ).json()
    assert {e["event_type"] for e in typed["items"]} == {"message.received"}
    assert len(typed["items"]) == 3

    error_of(await client.get("/v1/conversations/bad%20id/transcript"), 400, "invalid_argument")
    error_of(await client.get("/v1/conversations/talk/transcript?before=nope"), 400, "invalid_argument")
    error_of(
        await client.get("/v1/conversations/talk/events", params={"before": first["next_cursor"]}),
        400,
        "invalid_argument",
    )  # a transcript cursor is not an events cursor
    empty = (await client.get("/v1/conversations/nobody/transcript")).json()
    assert empty["items"] == []


# -- runners, health, metrics, openapi, routing ------------------------------------------------------


async def test_runners_show_each_plugin_with_its_pid(host: Host, client: httpx2.AsyncClient) -> None:
    view = (await client.get("/v1/runners")).json()
    assert {r["id"] for r in view["runners"]} >= {
        "plugin:mcphost/echo/default",
        "plugin:test/misbehave/default",
        "plugin:test/probe/default",
    }
    plugins = {p["name"]: p for p in view["plugins"]}
    assert plugins["echo"]["state"] == "running"
    assert isinstance(plugins["echo"]["pid"], int)
    assert plugins["echo"]["restarts"] == 0
    assert view["rejected"] == []


async def test_healthz_and_metrics_report_this_process(host: Host, client: httpx2.AsyncClient) -> None:
    health = (await client.get("/healthz")).json()
    assert health["status"] == "ok"
    assert health["host_id"] == host.orchestrator.host_id
    for text in ("hi", "fail"):
        run_id = (
            await client.post("/v1/events", json=event_body(text, bot="bad" if text == "fail" else "echo"))
        ).json()
        await host.orchestrator.wait(run_id["run_id"])
    response = await client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = response.text.splitlines()
    assert 'mcphost_runs_total{status="completed"} 1.0' in lines
    assert 'mcphost_runs_total{status="failed"} 1.0' in lines
    assert 'mcphost_runs_total{status="cancelled"} 0.0' in lines  # every status from the start
    assert 'mcphost_events_admitted_total{outcome="created"} 2.0' in lines
    assert 'mcphost_events_admitted_total{outcome="replayed"} 0.0' in lines
    assert "mcphost_runs_active 0.0" in lines
    assert "mcphost_run_duration_seconds_count 2.0" in lines
    assert 'mcphost_run_duration_seconds_bucket{le="+Inf"} 2.0' in lines
    assert 'mcphost_plugin_restarts_total{plugin="echo"} 0.0' in lines
    assert 'mcphost_plugin_up{plugin="misbehave"} 1.0' in lines
    # Each periodic loop of the host has its failure counter from the start.
    for loop in ("the run sweep", "the cancel poll", "the scheduler", "the continuation sweep"):
        assert any(line.startswith(f'mcphost_loop_failures_total{{loop="{loop}"}} ') for line in lines), loop
    assert any(
        line.startswith("mcphost_build_info{") and f'version="{__version__}"' in line for line in lines
    )
    assert any(line.startswith("process_resident_memory_bytes ") for line in lines)
    assert any(line.startswith("python_info{") for line in lines)
    # Requests by route template, never by raw path: the label set stays bounded.
    assert 'mcphost_http_requests_total{method="POST",route="/v1/events",status="202"} 2.0' in lines
    assert 'mcphost_http_requests_total{method="GET",route="/healthz",status="200"} 1.0' in lines
    await client.get("/v1/runs/run_nope")
    await client.get("/no/such/path")
    again = (await client.get("/metrics")).text.splitlines()
    assert 'mcphost_http_requests_total{method="GET",route="/v1/runs/{run_id}",status="404"} 1.0' in again
    assert 'mcphost_http_requests_total{method="GET",route="<unmatched>",status="404"} 1.0' in again
    assert not any("run_nope" in line or "/no/such" in line for line in again)
    samples = [line for line in again if not line.startswith("#")]
    for line in samples:  # every sample is `name{labels} value` with a number for a value
        float(line.rsplit(" ", 1)[1])
    assert "_created" not in response.text


async def test_unknown_routes_are_404_and_wrong_methods_405_in_json(client: httpx2.AsyncClient) -> None:
    error_of(await client.get("/v1/nothing"), 404, "not_found")
    error_of(await client.get("/nothing"), 404, "not_found")
    response = await client.delete("/v1/runs")
    error = error_of(response, 405, "invalid_argument")
    assert "GET" in response.headers["allow"]
    assert "DELETE" in error["message"]
    error_of(await client.put("/v1/events", json={}), 405, "invalid_argument")


async def test_openapi_documents_every_route_and_its_references_resolve(
    host: Host, client: httpx2.AsyncClient
) -> None:
    doc = (await client.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.1")
    documented = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    app = httpx2.ASGITransport  # the routes themselves, read from the app
    transport = client._transport  # pyright: ignore[reportPrivateUsage]
    assert isinstance(transport, app)
    routes = cast(Starlette, transport.app).router.routes
    routed = {
        (route.path, method)
        for route in routes
        if isinstance(route, Route)  # the routes with methods (a Mount has none)
        for method in (route.methods or ())
        # the MCP endpoint and the model endpoints (a run's, and a warm session's twin of them), the
        # console's pages and the runtime protocol (runtime tokens only, in docs/protocol.md §12) are not
        # part of the API
        if method != "HEAD"
        and not route.path.startswith(("/runs/", "/sessions/", RUNTIME_PREFIX))
        and not is_console_path(route.path)
    }
    assert documented == routed
    schemas = doc["components"]["schemas"]
    assert "AgentEventEnvelope" in schemas
    assert "event_type" in schemas["AgentEventEnvelope"]["properties"]

    def refs(node: object) -> list[str]:
        mapping = obj_or_none(node)
        if mapping is not None:
            ref = mapping.get("$ref")
            found = [ref] if isinstance(ref, str) else []
            return found + [r for value in mapping.values() for r in refs(value)]
        if isinstance(node, list):
            return [r for value in cast(list[object], node) for r in refs(value)]
        return []

    missing = {r for r in refs(doc) if r.removeprefix("#/components/schemas/") not in schemas}
    assert not missing


async def test_a_bug_is_a_logged_generic_500_without_internals(
    host: Host, client: httpx2.AsyncClient, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(**kwargs: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(host.stores.runs, "list", broken)
    with caplog.at_level(logging.ERROR, logger="mcphost.api._errors"):
        response = await client.get("/v1/runs")
    error = error_of(response, 500, "runtime_error")
    assert "secret internals" not in response.text
    assert error["details"] == {}
    assert any("secret internals" in (r.exc_text or "") or r.exc_info for r in caplog.records)


# -- artifacts ---------------------------------------------------------------------------------------


async def test_a_raw_upload_is_stored_with_its_sha256_and_read_back(
    host: Host, client: httpx2.AsyncClient
) -> None:
    data = bytes(range(256)) * 40
    response = await client.post(
        "/v1/artifacts",
        params={"name": "bytes.bin", "conversation_id": "c1"},
        content=data,
        headers={"content-type": "application/x-test"},
    )
    assert response.status_code == 201, response.text
    ref = response.json()
    assert ref == {
        "artifact_id": ref["artifact_id"],
        "name": "bytes.bin",
        "mime_type": "application/x-test",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    meta = (await client.get(f"/v1/artifacts/{ref['artifact_id']}")).json()
    assert meta["conversation_id"] == "c1"
    full = await client.get(f"/v1/artifacts/{ref['artifact_id']}/content")
    assert full.status_code == 200
    assert full.content == data
    assert full.headers["content-type"] == "application/x-test"
    assert full.headers["accept-ranges"] == "bytes"
    assert full.headers["content-disposition"].startswith("attachment")
    assert full.headers["etag"] == f'"{ref["sha256"]}"'


async def test_a_multipart_upload_streams_its_file_part(host: Host, client: httpx2.AsyncClient) -> None:
    data = b"line\r\n--not-a-boundary\r\n" * 500
    response = await client.post(
        "/v1/artifacts",
        files={"file": ("notes.txt", data, "text/plain")},
        data={"conversation_id": "c9"},
    )
    assert response.status_code == 201, response.text
    ref = response.json()
    assert ref["name"] == "notes.txt"
    assert ref["mime_type"] == "text/plain"
    assert ref["sha256"] == hashlib.sha256(data).hexdigest()
    assert (await client.get(f"/v1/artifacts/{ref['artifact_id']}/content")).content == data
    assert (await host.stores.artifacts.get(ref["artifact_id"])).conversation_id == "c9"


async def test_an_uploaded_artifact_is_usable_as_event_input(host: Host, client: httpx2.AsyncClient) -> None:
    ref = (
        await client.post(
            "/v1/artifacts?name=a.txt", content=b"attached", headers={"content-type": "text/plain"}
        )
    ).json()
    body = event_body("see attached", input={"text": "see attached", "attachments": [ref]})
    answer = await client.post("/v1/events", json=body)
    assert answer.status_code == 202, answer.text
    run = await host.orchestrator.wait(answer.json()["run_id"])
    assert run.status is RunStatus.COMPLETED
    inbound = (await host.stores.events.for_run(run.run_id))[0]
    assert inbound.payload["input"]["attachments"] == [ref]
    missing = event_body("x", input={"text": "x", "attachments": [{**ref, "artifact_id": "art_gone"}]})
    error_of(await client.post("/v1/events", json=missing), 404, "not_found")


async def test_an_upload_over_the_cap_is_413_and_nothing_is_stored(
    host: Host, client: httpx2.AsyncClient, tmp_path: Path
) -> None:
    before, files_before = await row_counts(host.stores), blob_files(tmp_path / "data")
    too_big = b"x" * (64 * 1024 + 1)
    error_of(await client.post("/v1/artifacts", content=too_big), 413, "payload_too_large")

    async def chunked() -> AsyncGenerator[bytes, None]:
        for _ in range(20):
            yield b"y" * 8192

    error_of(await client.post("/v1/artifacts", content=chunked()), 413, "payload_too_large")
    error_of(
        await client.post("/v1/artifacts", files={"file": ("big.bin", too_big)}), 413, "payload_too_large"
    )
    assert await row_counts(host.stores) == before
    assert blob_files(tmp_path / "data") == files_before


@pytest.mark.parametrize(
    ("content", "content_type", "words"),
    [
        (b"no boundary here", "multipart/form-data; boundary=xyz", "malformed"),
        (
            b'--xyz\r\nContent-Disposition: form-data; name="file"\r\n\r\nunterminated',
            "multipart/form-data; boundary=xyz",
            "malformed",
        ),
        (
            b'--xyz\r\nContent-Disposition: form-data; name="other"\r\n\r\nv\r\n--xyz--\r\n',
            "multipart/form-data; boundary=xyz",
            "form.other",
        ),
        (b"--xyz--\r\n", "multipart/form-data; boundary=xyz", "no file part"),
        (b"x", "multipart/form-data", "boundary"),
        (b"x", "not a media type", "media type"),
    ],
)
async def test_a_bad_upload_is_400_and_stores_nothing(
    host: Host, client: httpx2.AsyncClient, tmp_path: Path, content: bytes, content_type: str, words: str
) -> None:
    before, files_before = await row_counts(host.stores), blob_files(tmp_path / "data")
    error = error_of(
        await client.post("/v1/artifacts", content=content, headers={"content-type": content_type}),
        400,
        "invalid_argument",
    )
    assert words in error["message"]
    assert await row_counts(host.stores) == before
    assert blob_files(tmp_path / "data") == files_before


async def test_range_downloads_answer_206_and_bad_ranges_416(client: httpx2.AsyncClient) -> None:
    data = b"0123456789"
    ref = (await client.post("/v1/artifacts", content=data)).json()
    url = f"/v1/artifacts/{ref['artifact_id']}/content"
    for header, body, content_range in [
        ("bytes=2-4", b"234", "bytes 2-4/10"),
        ("bytes=7-", b"789", "bytes 7-9/10"),
        ("bytes=-3", b"789", "bytes 7-9/10"),
        ("bytes=5-100", b"56789", "bytes 5-9/10"),
        ("bytes=-50", data, "bytes 0-9/10"),
    ]:
        response = await client.get(url, headers={"range": header})
        assert response.status_code == 206, header
        assert response.content == body
        assert response.headers["content-range"] == content_range
        assert response.headers["content-length"] == str(len(body))
    for header in ("bytes=10-", "bytes=4-2", "bytes=-0", "bytes=a-b", "bytes=-"):
        response = await client.get(url, headers={"range": header})
        error_of(response, 416, "invalid_argument")
        assert response.headers["content-range"] == "bytes */10"
    assert (await client.get(url, headers={"range": "bytes=0-1,4-5"})).status_code == 200  # several: whole
    assert (await client.get(url, headers={"range": "lines=1-2"})).status_code == 200  # other unit: ignored
    error_of(await client.get("/v1/artifacts/art_missing/content"), 404, "not_found")
    error_of(await client.get("/v1/artifacts/art_missing"), 404, "not_found")


def test_parse_range_covers_the_edges() -> None:
    assert parse_range(None, 10) is None
    assert parse_range("bytes=0-0", 10) == (0, 1)
    assert parse_range("bytes=9-9", 10) == (9, 10)
    assert parse_range(" bytes = 1-2 ", 10) == (1, 3)
    with pytest.raises(InvalidArgumentError):
        parse_range("bytes=0-", 0)
    with pytest.raises(InvalidArgumentError):
        parse_range("bytes=1-2-3", 10)


# -- access ------------------------------------------------------------------------------------------


async def test_the_api_key_is_required_on_v1_when_configured(database_url: str, tmp_path: Path) -> None:
    settings = api_settings(database_url, tmp_path / "data", api_key="s3cret-key")
    async with open_host(settings) as host, asgi_client(host) as client:
        missing = await client.get("/v1/runs")
        error_of(missing, 401, "unauthorized")
        challenge = missing.headers["www-authenticate"]
        assert challenge.startswith('Bearer realm="mcphost", error="invalid_token", error_description="')
        assert "Missing or wrong API key: send 'Authorization: Bearer <key>'" in challenge
        error_of(await client.get("/v1/runs", headers={"authorization": "Bearer wrong"}), 401, "unauthorized")
        error_of(
            await client.get("/v1/runs", headers={"authorization": "Basic s3cret-key"}), 401, "unauthorized"
        )
        error_of(await client.get("/v1/nothing"), 401, "unauthorized")  # no route discovery without the key
        before = await row_counts(host.stores)
        error_of(await client.post("/v1/events", json=event_body("x")), 401, "unauthorized")
        assert await row_counts(host.stores) == before
        ok = await client.get("/v1/runs", headers={"authorization": "Bearer s3cret-key"})
        assert ok.status_code == 200
        assert (await client.get("/healthz")).status_code == 200  # outside /v1
        # /metrics needs a key once the host has one ([host] public opens it), the API description not.
        error_of(await client.get("/metrics"), 401, "unauthorized")
        assert (
            await client.get("/metrics", headers={"authorization": "Bearer s3cret-key"})
        ).status_code == 200
        assert (await client.get("/openapi.json")).status_code == 200
        # A key does not lift the Host and Origin checks of a loopback-bound server (guard.py).
        far = {"authorization": "Bearer s3cret-key", "host": "agents.example.com"}
        error_of(await client.get("/v1/runs", headers=far), 401, "unauthorized")


async def test_a_server_listening_beyond_loopback_serves_any_host_but_not_any_origin(
    database_url: str, tmp_path: Path
) -> None:
    settings = api_settings(
        database_url,
        tmp_path / "data",
        api_key="s3cret-key",
        listen="0.0.0.0:8787",
        allowed_origins=["https://app.example.com"],
    )
    key = {"authorization": "Bearer s3cret-key"}
    async with open_host(settings) as host, asgi_client(host) as client:
        far = await client.get("/v1/runs", headers={**key, "host": "10.1.2.3:8787"})
        assert far.status_code == 200
        error_of(await client.get("/v1/runs", headers={"host": "10.1.2.3:8787"}), 401, "unauthorized")
        page = {**key, "host": "agents.example.com", "origin": "https://app.example.com"}
        assert (await client.get("/v1/runs", headers=page)).status_code == 200
        foreign = {**key, "host": "agents.example.com", "origin": "https://x.example"}
        error_of(await client.get("/v1/runs", headers=foreign), 401, "unauthorized")


async def test_without_a_key_v1_serves_only_loopback_hosts_and_origins(host: Host) -> None:
    async with asgi_client(host) as client:
        assert (await client.get("/v1/runs")).status_code == 200
        assert (await client.get("/v1/runs", headers={"host": "localhost:9999"})).status_code == 200
        assert (await client.get("/v1/runs", headers={"origin": "http://127.0.0.1:3000"})).status_code == 200
        error_of(await client.get("/v1/runs", headers={"host": "evil.example"}), 401, "unauthorized")
        before = await row_counts(host.stores)
        error_of(
            await client.post("/v1/events", json=event_body("x"), headers={"origin": "https://evil.example"}),
            401,
            "unauthorized",
        )
        assert await row_counts(host.stores) == before


async def test_an_ended_inspection_grant_cannot_be_cancelled_twice(
    host: Host, client: httpx2.AsyncClient
) -> None:
    made = await create_grant(host.stores, conversation_id="c1", ttl_s=60)
    response = await client.post(f"/v1/runs/{made.run.run_id}/cancel", json={"reason": "done looking"})
    assert response.status_code == 202
    assert response.json()["status"] == "cancelled"
    assert response.json()["cancel_requested"] is False
    record = await host.stores.runs.grant(made.run.run_id)
    assert record.revoked
    error_of(await client.post(f"/v1/runs/{made.run.run_id}/cancel"), 409, "conflict")
    assert time.time() < made.grant.deadline_at


async def test_create_app_opens_the_host_in_its_lifespan(database_url: str, tmp_path: Path) -> None:
    app = create_app(api_settings(database_url, tmp_path / "data"))
    async with (
        app.router.lifespan_context(app),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1") as client,
    ):
        answer = (
            await client.post("/v1/events", params={"stream": "true"}, json=event_body("via lifespan"))
        ).text
        assert parse_sse(answer)[-1].data["status"] == "completed"
        missing = await client.post("/runs/run_nope/mcp", headers={"authorization": "Bearer x"}, json={})
        assert missing.status_code == 404  # the MCP endpoint is routed to the lifespan's facts server


@pytest.mark.parametrize("depth", [300, 5000])
async def test_a_stored_result_too_deep_to_serve_is_an_error_for_that_result_only(
    host: Host, client: httpx2.AsyncClient, depth: int
) -> None:
    admitted = (await client.post("/v1/events", json=event_body("deep result"))).json()
    run = await host.orchestrator.wait(admitted["run_id"])
    assert run.status is RunStatus.COMPLETED
    deep = '{"type": "message.completed", "data": ' + nested_json(depth) + "}"
    await overwrite_json(host.stores, "run_results", "payload", deep, run_id=run.run_id, seq=2)

    page = await client.get(f"/v1/runs/{run.run_id}/results", headers={"accept": "application/json"})
    assert page.status_code == 200, page.text
    items = page.json()["results"]
    assert [r["seq"] for r in items] == [1, 2, 3, 4]
    bad = items[1]
    assert (bad["type"], bad["data"]) == ("message.completed", None)
    assert bad["data_error"]["code"] == "runtime_error"
    assert "more than 64 levels deep" in bad["data_error"]["message"]
    assert [r["type"] for r in items] == [
        "message.delta",
        "message.completed",
        "state.updated",
        "run.completed",
    ]

    streamed = await client.get(f"/v1/runs/{run.run_id}/results", headers={"accept": "text/event-stream"})
    events = parse_sse(streamed.text)
    assert [e.event for e in events] == [
        "message.delta",
        "message.completed",
        "state.updated",
        "run.completed",
        "end",
    ]
    assert results_of(events)[1] == bad


@pytest.mark.parametrize(
    ("field", "body"),
    [
        ("body.event_time", {"event_time": "1700000000"}),
        ("body.event_time", {"event_time": True}),
        ("body.input.attachments.0.size", {"input": {"attachments": [{"artifact_id": "a1", "size": "12"}]}}),
        ("body.input.attachments.0.size", {"input": {"attachments": [{"artifact_id": "a1", "size": 1.0}]}}),
        ("body.input.attachments.0.size", {"input": {"attachments": [{"artifact_id": "a1", "size": True}]}}),
    ],
)
async def test_a_json_body_is_typed_strictly_and_a_query_string_is_not(
    host: Host, client: httpx2.AsyncClient, field: str, body: dict[str, Any]
) -> None:
    before = await row_counts(host.stores)
    error = error_of(
        await client.post("/v1/events", json={**event_body("x"), **body}), 400, "invalid_argument"
    )
    assert error["details"]["errors"][0]["loc"] == field, error
    assert await row_counts(host.stores) == before
    # An integer is a float: event_time 1700000000 is a time. Query strings are strings: limit=2 is 2.
    accepted = await client.post("/v1/events", json={**event_body("x"), "event_time": 1_700_000_000})
    assert accepted.status_code == 202, accepted.text
    listed = await client.get("/v1/runs", params={"limit": "1"})
    assert listed.status_code == 200, listed.text
    assert len(listed.json()["items"]) == 1


async def test_an_upload_may_name_its_expiry_and_a_bad_one_is_400_storing_nothing(
    host: Host, client: httpx2.AsyncClient, tmp_path: Path
) -> None:
    before = time.time()
    ref = (await client.post("/v1/artifacts", params={"expires_in_s": "60"}, content=b"soon")).json()
    meta = (await client.get(f"/v1/artifacts/{ref['artifact_id']}")).json()
    assert before + 60 <= meta["expires_at"] <= time.time() + 60
    counts, files = await row_counts(host.stores), blob_files(tmp_path / "data")
    for value in ("0", "-5", "nan", "inf", "1.5", "1e3", "x", "99999999999999999999999", str(36501 * 86400)):
        error = error_of(
            await client.post("/v1/artifacts", params={"expires_in_s": value}, content=b"other bytes"),
            400,
            "invalid_argument",
        )
        assert "expires_in_s" in error["message"], value
    assert await row_counts(host.stores) == counts
    assert blob_files(tmp_path / "data") == files
