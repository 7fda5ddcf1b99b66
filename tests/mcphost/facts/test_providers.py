"""The seams the host plugs in: host tools (`<server>__<tool>`) and knowledge retrieval, with fake peers."""

from __future__ import annotations

from collections.abc import Sequence

import mcp_types as types

from mcphost.errors import NotFoundError
from mcphost.facts.providers import KnowledgeChunk
from mcphost.models import RunGrant
from mcphost.protocol import JSONObject
from mcphost.stores import Stores
from tests.mcphost.facts._helpers import ERAS, connect, fails, ok, serve_facts


class UpstreamTools:
    """A gateway double: a few upstream tools, some outside every grant, one failing, one crashing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, JSONObject]] = []

    async def list_tools(self, grant: RunGrant) -> Sequence[types.Tool]:
        schema: JSONObject = {"type": "object", "properties": {"q": {"type": "string"}}}
        names = ["search__web", "search__news", "search__boom", "mail__send", "history_page", "plain"]
        return [types.Tool(name=name, description=f"upstream {name}", input_schema=schema) for name in names]

    async def call_tool(self, grant: RunGrant, name: str, arguments: JSONObject) -> types.CallToolResult:
        self.calls.append((grant.run_id, name, arguments))
        if name == "search__boom":
            raise RuntimeError("upstream exploded at /srv/secret/path")
        if name == "search__news":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="not_found: no news")],
                structured_content={"code": "not_found", "message": "no news"},
                is_error=True,
            )
        text = f"results for {arguments.get('q')}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


class Retriever:
    async def retrieve(
        self, kb_id: str, query: str, *, top_k: int, filters: JSONObject | None
    ) -> Sequence[KnowledgeChunk]:
        if kb_id == "kb-empty":
            raise NotFoundError(f"Knowledge base {kb_id!r} has no documents yet.")
        chunk = KnowledgeChunk(
            chunk_id="c1", document="guide.md", text=f"about {query}", score=1.5, metadata={}
        )
        return [chunk] * (top_k + 3)


async def test_granted_host_tools_are_listed_and_called_and_others_refused(stores: Stores) -> None:
    upstream = UpstreamTools()
    async with serve_facts(stores, host_tools=upstream) as served:
        run = await served.start_run()
        for mode in ERAS:
            async with connect(served, run, mode=mode) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                assert [n for n in names if "__" in n] == ["search__web", "search__news", "search__boom"]
                assert names.count("history_page") == 1
                result = await client.call_tool("search__web", {"q": "pie"})
                assert not result.is_error
                assert result.content == [types.TextContent(type="text", text="results for pie")]
                assert (await fails(client, "mail__send", {"to": "x"}))["code"] == "unauthorized"
                news = await client.call_tool("search__news", {})
                assert news.is_error
                assert news.structured_content == {"code": "not_found", "message": "no news"}
                boom = await fails(client, "search__boom", {})
                assert boom["code"] == "runtime_error"
                assert "secret" not in str(boom)
        assert [name for _, name, _ in upstream.calls] == ["search__web", "search__news", "search__boom"] * 2
        assert {run_id for run_id, _, _ in upstream.calls} == {run.run_id}
        rows = [(r.tool, r.outcome, r.code) for r in await served.audit(run)]
        assert (
            rows
            == [
                ("search__web", "ok", None),
                ("mail__send", "refused", "unauthorized"),
                ("search__news", "error", "not_found"),
                ("search__boom", "error", "runtime_error"),
            ]
            * 2
        )


async def test_a_run_without_the_tools_permission_sees_no_host_tools(stores: Stores) -> None:
    upstream = UpstreamTools()
    async with serve_facts(stores, host_tools=upstream) as served:
        run = await served.start_run(permissions={"history": ["page"]})
        async with connect(served, run) as client:
            assert all("__" not in t.name for t in (await client.list_tools()).tools)
            assert (await fails(client, "search__web", {}))["code"] == "unauthorized"
    assert upstream.calls == []


async def test_knowledge_retrieval_goes_to_the_retriever_within_the_grant(stores: Stores) -> None:
    async with serve_facts(stores, knowledge=Retriever()) as served:
        run = await served.start_run(agent={"resources": {"knowledge_bases": ["kb-docs", "kb-empty"]}})
        async with connect(served, run) as client:
            found = await ok(client, "knowledge_retrieve", {"kb_id": "kb-docs", "query": "pie", "top_k": 2})
            assert (
                found["chunks"]
                == [
                    {
                        "chunk_id": "c1",
                        "document": "guide.md",
                        "text": "about pie",
                        "score": 1.5,
                        "metadata": {},
                    }
                ]
                * 2
            )
            empty = await fails(client, "knowledge_retrieve", {"kb_id": "kb-empty", "query": "pie"})
            assert empty["code"] == "not_found"
            other = await fails(client, "knowledge_retrieve", {"kb_id": "kb-hr", "query": "pay"})
            assert other["code"] == "unauthorized"
