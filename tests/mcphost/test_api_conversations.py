"""`GET /v1/conversations` and `DELETE /v1/conversations/{id}` through the real app over a real host
(SQLite file or PostgreSQL, real plugin subprocesses): newest activity first, paged and filtered; a
delete removes everything the conversation left (runs and what hangs off them, the event log, the
transcript, conversation state, artifacts and their blobs) and nothing of another conversation, and is
refused with nothing deleted while a run of it is active.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from sqlalchemy import func, select

from mcphost.app import Host, open_host
from mcphost.models import RunStatus
from mcphost.stores import Stores
from mcphost.stores.tables import (
    ArtifactRow,
    AuditRow,
    ConversationRow,
    EventRow,
    RunResultRow,
    RunRow,
    StateRow,
    TranscriptRow,
)
from tests.e2e.httpkit import api_settings, asgi_client, blob_files, event_body, row_counts, wait_status


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


async def run_in(
    host: Host, client: httpx2.AsyncClient, conversation: str, text: str = "hi", **kw: Any
) -> str:
    response = await client.post("/v1/events", json=event_body(text, conversation=conversation, **kw))
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    with anyio.fail_after(60):
        await host.orchestrator.wait(run_id)
    return run_id


async def rows_of(stores: Stores, conversation: str) -> dict[str, int]:
    """Rows that belong to `conversation`, by table."""
    runs = select(RunRow.run_id).where(RunRow.conversation_id == conversation)
    queries = {
        "runs": select(func.count()).select_from(RunRow).where(RunRow.conversation_id == conversation),
        "results": select(func.count()).select_from(RunResultRow).where(RunResultRow.run_id.in_(runs)),
        "audit": select(func.count()).select_from(AuditRow).where(AuditRow.run_id.in_(runs)),
        "events": select(func.count()).select_from(EventRow).where(EventRow.conversation_id == conversation),
        "transcript": select(func.count())
        .select_from(TranscriptRow)
        .where(TranscriptRow.conversation_id == conversation),
        "artifacts": select(func.count())
        .select_from(ArtifactRow)
        .where(ArtifactRow.conversation_id == conversation),
        "state": select(func.count())
        .select_from(StateRow)
        .where(StateRow.scope == "conversation", StateRow.owner.contains(f'"{conversation}"')),
        "conversations": select(func.count())
        .select_from(ConversationRow)
        .where(ConversationRow.conversation_id == conversation),
    }
    async with stores.db.read() as session:
        return {name: int(await session.scalar(query) or 0) for name, query in queries.items()}


# -- GET /v1/conversations ---------------------------------------------------------------------------


async def test_conversations_are_listed_newest_activity_first_and_paged(
    host: Host, client: httpx2.AsyncClient
) -> None:
    for conversation in ("conv-a", "conv-b", "conv-c"):
        await run_in(host, client, conversation)
    await run_in(host, client, "conv-a", "again")  # conv-a is active again: first

    first = await client.get("/v1/conversations", params={"limit": 2})
    assert first.status_code == 200, first.text
    page = first.json()
    assert [c["conversation_id"] for c in page["items"]] == ["conv-a", "conv-c"]
    assert page["has_more"] is True
    top = page["items"][0]
    assert top["runs"] == 2
    assert top["agent_id"] == "echo"
    assert top["actor_id"] == "u1"
    assert top["last_activity_at"] >= top["created_at"]
    assert top["created_at_iso"].endswith("Z")
    assert top["last_activity_at_iso"].endswith("Z")
    rest = (await client.get("/v1/conversations", params={"limit": 2, "cursor": page["next_cursor"]})).json()
    assert [c["conversation_id"] for c in rest["items"]] == ["conv-b"]
    assert rest["has_more"] is False
    assert rest["next_cursor"] is None


async def test_conversations_are_filtered_by_id_prefix_agent_and_actor(
    host: Host, client: httpx2.AsyncClient
) -> None:
    await run_in(host, client, "support_1")  # `_` is no wildcard
    await run_in(host, client, "supportX1")
    await run_in(host, client, "sales-1", actor={"actor_id": "u2"})
    await run_in(host, client, "probe-1", bot="probe", text="ok")

    def ids(answer: httpx2.Response) -> list[str]:
        assert answer.status_code == 200, answer.text
        return [c["conversation_id"] for c in answer.json()["items"]]

    assert ids(await client.get("/v1/conversations", params={"prefix": "support_"})) == ["support_1"]
    assert ids(await client.get("/v1/conversations", params={"prefix": "support"})) == [
        "supportX1",
        "support_1",
    ]
    assert ids(await client.get("/v1/conversations", params={"actor": "u2"})) == ["sales-1"]
    assert ids(await client.get("/v1/conversations", params={"agent": "probe"})) == ["probe-1"]
    assert ids(await client.get("/v1/conversations", params={"agent": "nobody"})) == []


@pytest.mark.parametrize(
    "params",
    [
        {"cursor": "not-a-cursor"},
        {"limit": "0"},
        {"limit": "101"},
        {"prefix": "a%"},
        {"prefix": ""},
        {"agent": "no spaces"},
        {"surprise": "1"},
    ],
)
async def test_a_bad_conversations_query_is_400(client: httpx2.AsyncClient, params: dict[str, str]) -> None:
    error_of(await client.get("/v1/conversations", params=params), 400, "invalid_argument")


async def test_a_cursor_of_another_list_is_400(host: Host, client: httpx2.AsyncClient) -> None:
    await run_in(host, client, "c-1")
    await run_in(host, client, "c-2")
    runs = (await client.get("/v1/runs", params={"limit": 1})).json()
    error = error_of(
        await client.get("/v1/conversations", params={"cursor": runs["next_cursor"]}), 400, "invalid_argument"
    )
    assert "runs" in error["message"]


# -- DELETE /v1/conversations/{id} -------------------------------------------------------------------


async def test_deleting_a_conversation_removes_everything_it_left_and_nothing_else(
    host: Host, client: httpx2.AsyncClient, tmp_path: Path
) -> None:
    upload = await client.post(
        "/v1/artifacts", params={"conversation_id": "doomed", "name": "a.txt"}, content=b"only in doomed"
    )
    assert upload.status_code == 201, upload.text
    shared = await client.post(
        "/v1/artifacts", params={"conversation_id": "kept", "name": "b.txt"}, content=b"in both"
    )
    again = await client.post(
        "/v1/artifacts", params={"conversation_id": "doomed", "name": "c.txt"}, content=b"in both"
    )
    assert shared.status_code == again.status_code == 201
    await run_in(host, client, "doomed")
    await run_in(host, client, "doomed", "twice")
    await run_in(host, client, "kept")
    owner = ("plugin:mcphost/echo/default", "echo", "doomed", "")
    await host.stores.state.set("conversation", owner, "note", {"x": 1})
    await host.stores.state.set("conversation", (*owner[:2], "kept", ""), "note", {"x": 2})
    before_doomed = await rows_of(host.stores, "doomed")
    assert before_doomed["runs"] == 2
    assert before_doomed["events"] == 2
    assert before_doomed["transcript"] >= 4
    assert before_doomed["artifacts"] == 2
    assert before_doomed["results"] > 0
    before_kept = await rows_of(host.stores, "kept")
    blobs_before = blob_files(tmp_path / "data")

    response = await client.delete("/v1/conversations/doomed")
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["conversation_id"] == "doomed"
    assert (answer["runs"], answer["events"], answer["artifacts"]) == (2, 2, 2)
    assert answer["transcript"] == before_doomed["transcript"]
    assert answer["state"] >= 1
    assert answer["blob_bytes"] == len(b"only in doomed")  # the shared blob stays for `kept`

    assert await rows_of(host.stores, "doomed") == dict.fromkeys(before_doomed, 0)
    assert await rows_of(host.stores, "kept") == before_kept
    assert len(blob_files(tmp_path / "data")) == len(blobs_before) - 1
    kept_bytes = await client.get(f"/v1/artifacts/{shared.json()['artifact_id']}/content")
    assert kept_bytes.content == b"in both"
    error_of(await client.get(f"/v1/artifacts/{upload.json()['artifact_id']}"), 404, "not_found")
    listed = (await client.get("/v1/conversations")).json()["items"]
    assert [c["conversation_id"] for c in listed] == ["kept"]
    error_of(await client.delete("/v1/conversations/doomed"), 404, "not_found")  # gone: a second is 404

    # The conversation starts afresh on its next event.
    await run_in(host, client, "doomed", "back")
    assert (await rows_of(host.stores, "doomed"))["runs"] == 1


async def test_deleting_a_conversation_with_an_active_run_is_409_and_deletes_nothing(
    host: Host, client: httpx2.AsyncClient
) -> None:
    await run_in(host, client, "busy")
    run_id = (
        await client.post("/v1/events", json=event_body("slow:30", bot="bad", conversation="busy"))
    ).json()["run_id"]
    await wait_status(host.stores, run_id, RunStatus.RUNNING)
    before = await row_counts(host.stores)
    error = error_of(await client.delete("/v1/conversations/busy"), 409, "conflict")
    assert run_id in error["message"]
    assert error["details"]["run_id"] == run_id
    assert await row_counts(host.stores) == before
    await host.orchestrator.cancel(run_id)
    with anyio.fail_after(30):
        await host.orchestrator.wait(run_id)
    assert (await client.delete("/v1/conversations/busy")).status_code == 200


async def test_deleting_an_unknown_or_malformed_conversation_is_refused(
    host: Host, client: httpx2.AsyncClient
) -> None:
    before = await row_counts(host.stores)
    error_of(await client.delete("/v1/conversations/never-seen"), 404, "not_found")
    error_of(await client.delete("/v1/conversations/bad%20id"), 400, "invalid_argument")
    error_of(await client.delete("/v1/conversations/x?surprise=1"), 400, "invalid_argument")
    assert await row_counts(host.stores) == before
