"""`GET /v1/knowledge`, `GET /v1/knowledge/{kb_id}/search`, `GET /v1/tools` and the binding fields of
`GET /v1/agents`, through the real app over a real host on both stores: knowledge bases ingested from real
files, a real stdio MCP server (tests/fakes/upstream_tools.py) as the upstream, a command that does not
exist as a broken one."""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator
from pathlib import Path

import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.config import HookConfig, KnowledgeBaseConfig, ToolServerConfig
from tests.e2e.httpkit import api_settings, asgi_client, row_counts
from tests.mcphost.gateway.test_host_tools import UPSTREAM
from tests.mcphost.hostkit import ECHO_RUNNER, agent
from tests.mcphost.test_api import error_of

ENV_SECRET = "env-value-that-must-not-leak"
HEADER_SECRET = "header-value-that-must-not-leak"
URL_SECRET = "url-password-that-must-not-leak"

GUIDE = """# Installing

Unpack the archive and run the installer. The installer asks for a licence key.

# Backups

Backups run every night at two. A backup keeps thirty days of snapshots.
"""


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(GUIDE, encoding="utf-8")
    (docs / "faq.txt").write_text("Snapshots are compressed. Restores take minutes.\n", encoding="utf-8")
    base = api_settings(database_url, tmp_path / "data")
    librarian = agent(
        "librarian",
        ECHO_RUNNER,
        event_types=["message.received", "ticket.opened"],
        resources={"knowledge_bases": ["docs"], "tools": ["fake__echo", "fake__get*"]},
    )
    settings = base.model_copy(
        update={
            "agents": [*base.agents, librarian],
            "knowledge": {
                "docs": KnowledgeBaseConfig(
                    name="Product docs", description="How it works", paths=[str(docs)]
                ),
                "empty": KnowledgeBaseConfig(name="Never ingested", paths=[str(tmp_path / "nothing")]),
            },
            "tools": {
                "fake": ToolServerConfig(
                    command=[sys.executable, UPSTREAM, "stdio"], env={"FAKE_SECRET": ENV_SECRET}, timeout_s=20
                ),
                "gone": ToolServerConfig(command=[str(tmp_path / "no-such-server")], timeout_s=5),
                "remote": ToolServerConfig(
                    url=f"http://user:{URL_SECRET}@127.0.0.1:9/mcp?token={URL_SECRET}#frag",
                    headers={"Authorization": f"Bearer {HEADER_SECRET}"},
                ),
            },
            "hooks": {
                "tickets": HookConfig(verify="bearer", secret="s" * 16, event_type="ticket.opened"),
                "named": HookConfig(verify="bearer", secret="s" * 16, agent="echo"),
            },
        }
    )
    async with open_host(settings) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:
        yield opened


async def test_knowledge_lists_every_base_with_its_sources_counts_readiness_and_agents(
    host: Host, client: httpx2.AsyncClient
) -> None:
    before = (await client.get("/v1/knowledge")).json()["knowledge_bases"]
    assert [kb["kb_id"] for kb in before] == ["docs", "empty"]
    assert before[0]["ready"] is False
    assert (before[0]["documents"], before[0]["chunks"], before[0]["last_ingested_at"]) == (0, 0, None)

    report = await host.knowledge.ingest("docs")
    assert len(report.added) == 2
    rows = await row_counts(host.stores)
    answer = await client.get("/v1/knowledge")
    assert answer.status_code == 200, answer.text
    docs, empty = answer.json()["knowledge_bases"]
    assert docs["name"] == "Product docs"
    assert docs["description"] == "How it works"
    assert docs["paths"] == list(host.settings.knowledge["docs"].paths)
    assert docs["documents"] == 2
    assert docs["chunks"] == report.chunks > 0
    assert docs["ready"] is True
    assert docs["last_ingested_at"] is not None
    assert docs["agents"] == ["librarian"]
    assert (empty["ready"], empty["agents"]) == (False, [])
    assert await row_counts(host.stores) == rows  # reading stores nothing
    error_of(await client.get("/v1/knowledge?x=1"), 400, "invalid_argument")


async def test_a_search_answers_what_the_runs_knowledge_tool_answers_cut_to_the_limit(
    host: Host, client: httpx2.AsyncClient
) -> None:
    await host.knowledge.ingest("docs")
    answer = await client.get("/v1/knowledge/docs/search", params={"q": "backup snapshots", "limit": "5"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["kb_id"], body["query"]) == ("docs", "backup snapshots")
    hits = body["hits"]
    assert hits, body
    assert "Backups run every night" in hits[0]["text"]
    assert hits[0]["document"].endswith("guide.md")
    assert hits[0]["metadata"]["heading"].endswith("Backups")
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    same = await host.knowledge.retrieve("docs", "backup snapshots", top_k=5)
    assert hits == [c.model_dump(mode="json") for c in same]

    one = (await client.get("/v1/knowledge/docs/search", params={"q": "snapshots", "limit": "1"})).json()
    assert len(one["hits"]) == 1
    nothing = await client.get("/v1/knowledge/docs/search", params={"q": "zeppelin"})
    assert (nothing.status_code, nothing.json()["hits"]) == (200, [])


async def test_a_search_refuses_bad_input_precisely_and_unknown_or_unready_bases_with_404(
    host: Host, client: httpx2.AsyncClient
) -> None:
    await host.knowledge.ingest("docs")
    rows = await row_counts(host.stores)
    search = "/v1/knowledge/docs/search"
    assert "query.q" in error_of(await client.get(search), 400, "invalid_argument")["message"]
    for q in ["", "x" * 2001, "a\x00b"]:
        message = error_of(await client.get(search, params={"q": q}), 400, "invalid_argument")["message"]
        assert "query.q" in message, message
    assert (
        "words" in error_of(await client.get(search, params={"q": "?!"}), 400, "invalid_argument")["message"]
    )
    for limit in ["0", "51", "-1", "NaN", "Infinity", "1e400", str(2**64), "9" * 5000, "2.5", "ten"]:
        message = error_of(
            await client.get(search, params={"q": "backup", "limit": limit}), 400, "invalid_argument"
        )["message"]
        assert "query.limit" in message, (limit, message)
    error_of(await client.get(search, params=[("q", "a"), ("q", "b")]), 400, "invalid_argument")
    error_of(await client.get(search, params={"q": "backup", "top_k": "3"}), 400, "invalid_argument")

    unknown = error_of(await client.get("/v1/knowledge/nope/search", params={"q": "x"}), 404, "not_found")
    assert "'nope' is not configured" in unknown["message"]
    unready = error_of(await client.get("/v1/knowledge/empty/search", params={"q": "x"}), 404, "not_found")
    assert "has not been ingested" in unready["message"]
    error_of(await client.get("/v1/knowledge/a%00b/search", params={"q": "x"}), 400, "invalid_argument")
    assert await row_counts(host.stores) == rows


async def test_tools_show_each_upstream_its_state_its_tools_and_the_agents_granted_them(
    client: httpx2.AsyncClient,
) -> None:
    idle = await client.get("/v1/tools")
    assert idle.status_code == 200, idle.text
    servers = {s["server"]: s for s in idle.json()["servers"]}
    assert set(servers) == {"fake", "gone", "remote"}
    assert (servers["fake"]["state"], servers["fake"]["tools"]) == ("idle", [])  # nothing was contacted
    assert servers["fake"]["agents"] == ["librarian"]

    answer = await client.get("/v1/tools", params={"connect": "true"})
    assert answer.status_code == 200, answer.text
    servers = {s["server"]: s for s in answer.json()["servers"]}
    fake = servers["fake"]
    assert (fake["transport"], fake["target"], fake["state"]) == ("stdio", sys.executable, "ready")
    assert fake["last_error"] is None
    assert fake["connects"] == 1
    tools = {t["name"]: t for t in fake["tools"]}
    assert tools["fake__echo"]["tool"] == "echo"
    assert tools["fake__echo"]["description"] == "Repeat the text back."
    assert tools["fake__echo"]["params"] == [{"name": "text", "type": "string", "required": True}]
    assert tools["fake__echo"]["agents"] == ["librarian"]
    assert tools["fake__get_time"]["tool"] == "get.time"
    assert tools["fake__get_time"]["agents"] == ["librarian"]
    assert tools["fake__forecast"]["agents"] == []
    assert {"name": "reason", "type": "string", "required": False} in tools["fake__fail"]["params"]

    gone = servers["gone"]
    assert gone["state"] == "backoff"
    assert gone["last_error"]
    assert (gone["tools"], gone["agents"]) == ([], [])
    remote = servers["remote"]
    assert (remote["transport"], remote["target"]) == ("http", "http://127.0.0.1:9/mcp")
    for secret in (ENV_SECRET, HEADER_SECRET, URL_SECRET, "FAKE_SECRET"):
        assert secret not in answer.text

    for bad in ["maybe", "\x00", "2"]:
        message = error_of(await client.get("/v1/tools", params={"connect": bad}), 400, "invalid_argument")
        assert "query.connect" in message["message"]


async def test_agents_carry_their_bindings_hooks_and_granted_resources(client: httpx2.AsyncClient) -> None:
    agents = {a["id"]: a for a in (await client.get("/v1/agents")).json()["agents"]}
    librarian = agents["librarian"]
    assert librarian["event_types"] == ["message.received", "ticket.opened"]
    assert librarian["match"] == {"bot_id": "librarian"}
    assert librarian["hooks"] == ["tickets"]  # names no agent, sends an event type it takes
    assert librarian["tools"] == ["fake__echo", "fake__get*"]
    assert librarian["knowledge_bases"] == ["docs"]
    assert agents["echo"]["hooks"] == ["named"]
    assert (agents["echo"]["tools"], agents["echo"]["knowledge_bases"]) == ([], [])
