"""One run context on every replica: two real `mcphost serve` processes on one database answer the same
run's `run_context`, `mcphost://run/context`, `instructions` and `knowledge_list` byte for byte alike,
and the stored context outlives the host that wrote it.

On PostgreSQL (the replica set-up) and on a SQLite file. The run is a probe run that writes its token to
a file and stays running (`keep:`), so the test talks to the run's endpoint on both processes itself.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcphost.stores import open_stores
from tests.e2e.httpkit import PROBE_PROMPT
from tests.e2e.replicas import CONTEXT_CONVERSATION, Replicas, start_held_run
from tests.faults.test_host_kill import Server

pytestmark = pytest.mark.timeout(300)  # three server start-ups on a loaded machine


async def answers(base_url: str, run_id: str, token: str) -> dict[str, str]:
    """The raw text of every context answer a runner can ask a host for."""
    url = f"{base_url}/runs/{run_id}/mcp"
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,  # pyright: ignore[reportArgumentType]
    ):
        tool = await client.call_tool("run_context", {})
        kbs = await client.call_tool("knowledge_list", {})
        resource = await client.read_resource("mcphost://run/context")
        prompt = await client.get_prompt("instructions")
    assert not tool.is_error, tool.content
    assert not kbs.is_error, kbs.content
    (tool_text,) = [c.text for c in tool.content if isinstance(c, types.TextContent)]
    (kbs_text,) = [c.text for c in kbs.content if isinstance(c, types.TextContent)]
    (resource_text,) = [c.text for c in resource.contents if isinstance(c, types.TextResourceContents)]
    (prompt_text,) = [m.content.text for m in prompt.messages if isinstance(m.content, types.TextContent)]
    return {
        "run_context": tool_text,
        "run_context.structured": json.dumps(tool.structured_content),
        "knowledge_list": kbs_text,
        "knowledge_list.structured": json.dumps(kbs.structured_content),
        "resource": resource_text,
        "instructions": prompt_text,
    }


async def test_two_hosts_on_one_database_serve_the_same_run_context(
    replicas: Replicas, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    first_url, second_url = replicas.urls
    async with httpx2.AsyncClient(base_url=first_url, timeout=10) as api:
        run_id, token = await start_held_run(api, CONTEXT_CONVERSATION, "keep", token_file)

        on_owner = await answers(first_url, run_id, token)  # the host running it (its memory)
        on_replica = await answers(second_url, run_id, token)  # the other host (the runs table)
        assert on_replica == on_owner

        ctx = json.loads(on_owner["run_context"])
        assert token not in json.dumps(on_owner)
        assert ctx["config"]["prompt"] == PROBE_PROMPT
        assert ctx["context"]["latest_cursor"] is not None
        assert set(ctx["runtime"]["static_refs"]) == {"instructions", "tools", "resources"}
        assert on_owner["instructions"] == (
            f"{PROBE_PROMPT}\n\nSkills:\n- triage (Ticket triage): Sort new tickets by urgency."
        )
        assert json.loads(on_owner["knowledge_list"]) == {
            "knowledge_bases": [{"kb_id": "handbook", "name": "Handbook", "description": "How we work"}]
        }
        await api.post(f"/v1/runs/{run_id}/cancel")
    replicas.stop()

    # A restarted host (and anything else that opens the database) finds the context as it was served.
    restarted = Server(replicas.config, tmp_path / "serve-3.log")
    try:
        await restarted.ready()
        async with open_stores(replicas.database_url, tmp_path / "data") as stores:
            stored = await stores.runs.context(run_id)
            run = await stores.runs.get(run_id)
    finally:
        restarted.process.send_signal(signal.SIGTERM)
        restarted.process.wait(timeout=60)
    assert run.status.is_terminal
    assert stored is not None
    assert stored.model_dump(mode="json") == json.loads(on_owner["run_context"])
