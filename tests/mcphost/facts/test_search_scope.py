"""`history_search` and `knowledge_retrieve` over the per-run endpoint stay in the run's scope, whatever the
stored texts hold and whatever the query says.

The attack: another conversation (or knowledge base) stores text holding this scope's full-text token as
the index once spelled it (`s`/`k` + hex of the ids on SQLite, + md5 on PostgreSQL), next to words this
run will search for; and the run's own query carries FTS5 / tsquery syntax and other scopes' tokens.
Each call goes through the SDK client with the run's token, as a runner makes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from mcphost.config import KnowledgeBaseConfig
from mcphost.knowledge.bases import KnowledgeBases
from mcphost.protocol import JSONObject
from mcphost.stores import Stores
from tests._json import arr, obj, obj_or_none
from tests.mcphost.facts._helpers import ERAS, MODERN, Served, connect, fails, serve_facts, structured
from tests.mcphost.stores.test_search_scope import injections, kb_tokens, thread_tokens


async def _found(client: Client, tool: str, arguments: JSONObject, key: str, field: str) -> set[str] | None:
    """The `field` of each entry of the result's `key` list (history: item ids; knowledge: documents), or
    None when the query was refused as having no words."""
    result = await client.call_tool(tool, arguments)
    data = structured(result)
    if result.is_error:
        assert data["code"] == "invalid_argument", data
        return None
    entries = arr(data[key])
    out: set[str] = set()
    for entry in entries:
        hit = obj_or_none(entry)
        shown = obj(hit["item"] if key == "hits" and hit is not None else entry)
        value = shown[field]
        assert isinstance(value, str)
        out.add(value)
    return out


async def _history(client: Client, query: str) -> set[str] | None:
    return await _found(client, "history_search", {"query": query, "top_k": 50}, "hits", "item_id")


async def _actors(client: Client, query: str) -> set[str] | None:
    return await _found(client, "history_search", {"query": query, "top_k": 50}, "hits", "actor_id")


async def _documents(client: Client, kb_id: str, query: str) -> set[str] | None:
    arguments: JSONObject = {"kb_id": kb_id, "query": query, "top_k": 50}
    return await _found(client, "knowledge_retrieve", arguments, "chunks", "document")


@pytest.mark.parametrize("mode", ERAS)
async def test_history_search_never_returns_another_conversations_or_threads_rows(
    served: Served, mode: str
) -> None:
    transcript = served.stores.transcript
    run = await served.start_run(conversation_id="conv-a", text="where is the lighthouse")
    planted = " ".join(thread_tokens("conv-a"))
    await transcript.append(
        conversation_id="conv-b", role="user", content=f"{planted} lighthouse secret of b", actor_id="mallory"
    )
    await transcript.append(
        conversation_id="conv-a", thread_id="t1", role="user", content=f"{planted} lighthouse secret of t1"
    )
    await transcript.append(
        conversation_id="conv-a",
        role="assistant",
        content=f"the lighthouse is north {planted}",
        actor_id="user-1",
    )
    own = {item.item_id for item in (await transcript.page("conv-a", limit=50)).items}
    other = " ".join(thread_tokens("conv-b") + thread_tokens("conv-a", "t1"))
    async with connect(served, run, mode=mode) as client:
        assert await _history(client, "lighthouse secret") == own
        assert await _actors(client, "lighthouse secret") == {"user-1"}
        for query in [
            *injections(thread_tokens("conv-a"), thread_tokens("conv-b")),
            other,
            f"{other} secret",
        ]:
            found = await _history(client, query)
            assert found is None or found <= own, query


def _write(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")


async def test_knowledge_retrieve_never_returns_another_knowledge_bases_chunks(
    stores: Stores, tmp_path: Path
) -> None:
    planted = " ".join(kb_tokens("kb-docs"))
    _write(
        tmp_path,
        {
            "docs/pay.md": "# Pay\n\nSalary bands are published every spring.\n",
            "hr/alice.md": f"# Alice\n\n{planted}\n\nAlice's salary is a secret: 99,000.\n",
            "hr/bob.md": f"# {planted}\n\nBob's salary secret.\n",
        },
    )
    bases = KnowledgeBases(
        stores.db,
        {
            "kb-docs": KnowledgeBaseConfig(name="Docs", paths=["docs"]),
            "kb-hr": KnowledgeBaseConfig(name="HR", paths=["hr"]),
        },
        base_dir=tmp_path,
    )
    await bases.ingest("kb-docs")
    await bases.ingest("kb-hr")
    async with serve_facts(stores, knowledge=bases) as served:
        run = await served.start_run()  # granted kb-docs only
        async with connect(served, run, mode=MODERN) as client:
            assert await _documents(client, "kb-docs", "salary secret") == {"docs/pay.md"}
            queries = [
                *injections(kb_tokens("kb-docs"), kb_tokens("kb-hr")),
                "heading : secret",
                "{text}: alice",
            ]
            for query in queries:
                found = await _documents(client, "kb-docs", query)
                assert found is None or found <= {"docs/pay.md"}, query
            refused = await fails(client, "knowledge_retrieve", {"kb_id": "kb-hr", "query": "salary"})
            assert refused["code"] == "unauthorized"
