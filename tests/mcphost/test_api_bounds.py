"""Every integer, float and stored string the HTTP API accepts, at and past its bounds, on SQLite and
PostgreSQL: the answer is a precise 400 naming the field (or a 416 for a byte range), never a 500, and a
refused request stores nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path

import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.stores import MAX_RUN_SEQ
from mcphost.stores._cursor import CursorKind
from tests.e2e.httpkit import api_settings, asgi_client, event_body, row_counts
from tests.mcphost.test_api import error_of

BAD_INTEGERS = ["-1", str(2**63), str(2**64), str(10**100), "abc", "1.5", "", "0x10", "\u0661"]
"""Query values no integer parameter takes (U+0661 is an Arabic-Indic digit one: `int()` would read it)."""
HUGE = [2**63, 2**64, 10**100]


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:
        yield opened


def cursor(host: Host, kind: CursorKind, value: int | str) -> str:
    """A cursor this host signed (so only its content can be wrong)."""
    return host.stores.cursors.encode(kind, value)


async def a_finished_run(host: Host, client: httpx2.AsyncClient) -> str:
    response = await client.post("/v1/events", json=event_body("hello", conversation="talk"))
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    await host.orchestrator.wait(run_id)
    return run_id


def refused(response: httpx2.Response, field: str) -> None:
    error = error_of(response, 400, "invalid_argument")
    assert error["message"].startswith(field), (field, error["message"])


async def test_integer_query_parameters_refuse_every_value_outside_their_range(
    host: Host, client: httpx2.AsyncClient
) -> None:
    run_id = await a_finished_run(host, client)
    as_json = {"accept": "application/json"}
    routes: list[tuple[str, str, dict[str, str]]] = [
        ("/v1/runs", "limit", {}),
        (f"/v1/runs/{run_id}/results", "after", as_json),
        (f"/v1/runs/{run_id}/results", "limit", as_json),
        (f"/v1/runs/{run_id}/audit", "after", {}),
        (f"/v1/runs/{run_id}/audit", "limit", {}),
        ("/v1/conversations/talk/transcript", "limit", {}),
        ("/v1/conversations/talk/events", "limit", {}),
    ]
    for path, name, headers in routes:
        for value in BAD_INTEGERS:
            refused(await client.get(path, params={name: value}, headers=headers), f"query.{name}")
    for path, name in [("/v1/runs", "limit"), (f"/v1/runs/{run_id}/audit", "limit")]:
        refused(await client.get(path, params={name: "0"}), f"query.{name}")
    # Per-run sequences (results, audit) are 32-bit columns on PostgreSQL: `after` stops there.
    for path, headers in [(f"/v1/runs/{run_id}/results", as_json), (f"/v1/runs/{run_id}/audit", {})]:
        refused(
            await client.get(path, params={"after": str(MAX_RUN_SEQ + 1)}, headers=headers), "query.after"
        )

    # The edges that are in range answer.
    for after in ("0", str(MAX_RUN_SEQ)):
        results = await client.get(f"/v1/runs/{run_id}/results", params={"after": after}, headers=as_json)
        assert results.status_code == 200, results.text
        audit = await client.get(f"/v1/runs/{run_id}/audit", params={"after": after})
        assert audit.status_code == 200, audit.text
    top = await client.get(f"/v1/runs/{run_id}/results", params={"after": str(MAX_RUN_SEQ)}, headers=as_json)
    assert top.json()["results"] == []
    assert top.json()["next_after"] == MAX_RUN_SEQ


async def test_a_last_event_id_past_the_sequence_range_is_400(host: Host, client: httpx2.AsyncClient) -> None:
    run_id = await a_finished_run(host, client)
    for value in (str(MAX_RUN_SEQ + 1), str(2**63), str(10**100), "-1", "x", "1.0"):
        response = await client.get(f"/v1/runs/{run_id}/results", headers={"last-event-id": value})
        refused(response, "header Last-Event-ID")


async def test_byte_ranges_past_64_bits_are_416_or_the_whole_content_never_500(
    client: httpx2.AsyncClient,
) -> None:
    ref = (await client.post("/v1/artifacts", content=b"0123456789")).json()
    url = f"/v1/artifacts/{ref['artifact_id']}/content"
    for big in HUGE:
        # A start past the end is unsatisfiable; a suffix or an end past the end clamps to the content.
        for header, status in [
            (f"bytes={big}-", 416),
            (f"bytes=-{big}", 206),
            (f"bytes=0-{big}", 206),
            (f"bytes={big}-{big + 1}", 416),
        ]:
            response = await client.get(url, headers={"range": header})
            assert response.status_code == status, (header, response.status_code, response.text)
            if status == 206:
                assert response.content == b"0123456789", header
                assert response.headers["content-range"] == "bytes 0-9/10", header
            else:
                assert response.headers["content-range"] == "bytes */10", header


EVENT_FIELDS: list[tuple[str, str]] = [
    # (a JSON body with one bad value spliced in as raw text, the field the 400 must name)
    ('"event_time": NaN', "body.event_time"),
    ('"event_time": Infinity', "body.event_time"),
    ('"event_time": -Infinity', "body.event_time"),
    ('"event_time": 1e400', "body.event_time"),
    ('"data": {"x": [1, NaN]}', "body.data.x.1"),
    ('"data": {"x": Infinity}', "body.data.x"),
    (f'"data": {{"n": {2**63}}}', "body.data.n"),
    (f'"data": {{"n": {-(2**63) - 1}}}', "body.data.n"),
    (f'"data": {{"n": {10**100}}}', "body.data.n"),
    ('"data": {"t": "a\\u0000b"}', "body.data.t"),
    ('"data": {"t": "\\ud800"}', "body.data.t"),
    ('"data": {"k\\u0000": 1}', "body.data"),
    ('"data": {"\\udc00": 1}', "body.data"),
    ('"input": {"text": "nul \\u0000 inside"}', "body.input.text"),
    ('"input": {"text": "half \\ud83d pair"}', "body.input.text"),
    ('"input": {"contents": [{"type": "text", "text": "\\u0000"}]}', "body.input.contents.0.text"),
    ('"actor": {"actor_id": "u1", "actor_name": "a\\u0000"}', "body.actor.actor_name"),
    ('"actor": {"actor_id": "u1", "metadata": {"k": "\\u0000"}}', "body.actor.metadata.k"),
    ('"actor": {"actor_id": "u1", "metadata": {"k": NaN}}', "body.actor.metadata.k"),
    ('"actor": {"actor_id": "u\\u0000"}', "body.actor.actor_id"),
    ('"event_id": "evt\\u0000"', "body.event_id"),
    ('"source_event_type": "x\\u0000"', "body.source_event_type"),
    ('"subject": {"subject_type": "t", "subject_id": "s", "data": {"v": -Infinity}}', "body.subject.data.v"),
    ('"delivery": {"max_message_size": 18446744073709551616}', "body.delivery.max_message_size"),
]


async def test_query_strings_and_path_ids_with_nul_or_surrogates_are_400(
    host: Host, client: httpx2.AsyncClient
) -> None:
    run_id = await a_finished_run(host, client)
    before = await row_counts(host.stores)
    for path in ("/v1/conversations/talk/events", "/v1/conversations/talk/transcript"):
        refused(await client.get(path, params={"thread_id": "t\x00"}), "query.thread_id")
    refused(
        await client.get("/v1/conversations/talk/events", params={"event_type": "message.\x00"}),
        "query.event_type",
    )
    refused(await client.get("/v1/runs", params={"conversation_id": "c\x00"}), "query.conversation_id")
    refused(await client.get("/v1/runs", params={"cursor": "\x00"}), "query.cursor")
    refused(await client.post("/v1/artifacts", params={"name": "a\x00.txt"}, content=b"x"), "query.name")
    refused(await client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "r\x00"}), "body.reason")
    for path in (
        "/v1/runs/run%00x",
        "/v1/runs/run%00x/results",
        "/v1/runs/run%00x/audit",
        "/v1/artifacts/art%00x",
        "/v1/artifacts/art%00x/content",
        "/v1/conversations/c%00x/transcript",
        "/v1/conversations/c%00x/events",
    ):
        error_of(await client.get(path), 400, "invalid_argument")
    # %ED%A0%80 (an encoded lone surrogate) is not UTF-8: it decodes to U+FFFD replacements, an id no run has.
    error_of(await client.get("/v1/runs/%ED%A0%80"), 404, "not_found")
    assert await row_counts(host.stores) == before


async def test_the_same_refusals_hold_for_a_streamed_ingest(host: Host, client: httpx2.AsyncClient) -> None:
    body = json.dumps(event_body("hello"))[:-1] + ', "event_time": NaN}'
    response = await client.post(
        "/v1/events", params={"stream": "true"}, content=body, headers={"content-type": "application/json"}
    )
    refused(response, "body.event_time")
