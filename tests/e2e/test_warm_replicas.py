"""One warm session on every replica: two real `mcphost serve` processes on one database; a run of a
`warm = true` agent starts on the first, and its session endpoint, called on the second with the session
token the runner was given, is served as that run; once the run ends, both refuse it.

On PostgreSQL (the replica set-up) and on a SQLite file. The run is a probe run that writes its warm
session's URL and token to a file and stays running (`warm:`), so the test talks to the endpoint itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.replicas import WARM_CONVERSATION, Replicas, start_held_run

pytestmark = pytest.mark.timeout(300)  # two server start-ups on a loaded machine

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


async def run_context_via(url: str, headers: dict[str, str]) -> dict[str, object]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client,  # pyright: ignore[reportArgumentType]
    ):
        result = await client.call_tool("run_context", {})
    assert not result.is_error, result.content
    (text,) = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return json.loads(text)


async def refused(url: str, headers: dict[str, str]) -> httpx2.Response:
    sent = {**headers, "accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with httpx2.AsyncClient(timeout=10) as http:
        return await http.post(url, json=PING, headers=sent)


async def test_a_warm_session_is_served_by_the_other_replica_and_refused_by_both_once_its_run_ends(
    replicas: Replicas, tmp_path: Path
) -> None:
    session_file = tmp_path / "session.json"
    first_url, second_url = replicas.urls
    async with httpx2.AsyncClient(base_url=first_url, timeout=10) as api:
        run_id, text = await start_held_run(api, WARM_CONVERSATION, "warm", session_file)
        session = json.loads(text)
        url: str = session["url"]
        headers: dict[str, str] = session["headers"]
        assert url.startswith(first_url)  # handed out by the host that runs it
        path = url.removeprefix(first_url)
        assert path.startswith("/sessions/ses_")

        on_replica = await run_context_via(second_url + path, headers)
        assert on_replica["run_id"] == run_id

        await api.post(f"/v1/runs/{run_id}/cancel")
        with anyio.fail_after(60):
            while (await api.get(f"/v1/runs/{run_id}")).json()["run"]["status"] == "running":  # noqa: ASYNC110  # the end is written by the host's process
                await anyio.sleep(0.05)
        answers = [await refused(base + path, headers) for base in (first_url, second_url)]
        assert [a.status_code for a in answers] == [403, 403]
        assert all("has no active run" in a.json()["error"]["message"] for a in answers)
        audit = (await api.get(f"/v1/runs/{run_id}/audit")).json()
    rows = [(row["tool"], row["outcome"]) for row in audit["items"]]
    # The replica's call, then both refusals, audited on the run that ended.
    assert rows == [("run_context", "ok"), ("http POST session", "refused"), ("http POST session", "refused")]
