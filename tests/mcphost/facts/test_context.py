"""`run_context`, the context resource, the instructions prompt and `knowledge_list`: the context the run
was started with, without its token, the same from the host's copy and from the runs store."""

from __future__ import annotations

import json

import mcp_types as types
from sqlalchemy import update

from mcphost.facts._context import redact
from mcphost.grants import hash_token
from mcphost.protocol import AgentRunContext, SkillInfo
from mcphost.stores import Stores
from mcphost.stores.tables import RunRow
from tests.mcphost.facts._helpers import MODERN, RunHandle, Served, connect, ok, serve_facts


def test_redact_removes_the_token_wherever_the_host_put_it() -> None:
    token = "t0ken-value"
    ctx = AgentRunContext.model_validate(
        {
            "run_id": "run_1",
            "trigger": {"type": "x.y", "source": "api", "timestamp": 1},
            "event": {"event_id": "e", "event_type": "x.y", "event_time": 1, "source": "api"},
            "runtime": {"host_version": "0", "trace_id": "run_1", "deadline_at": 2},
            "context": {
                "mcp": {
                    "url": "http://127.0.0.1/runs/run_1/mcp",
                    "headers": {
                        "Authorization": f"Bearer {token}",
                        "X-Copy": f"bearer {token}",
                        "X-Ok": "fine",
                    },
                    "bridge": {
                        "command": ["python"],
                        "env": {"MCPHOST_RUN_TOKEN": token, "OTHER": token, "K": "v"},
                    },
                }
            },
        }
    )
    clean = redact(ctx, hash_token(token))
    assert token not in clean.model_dump_json()
    assert clean.context.mcp is not None
    assert clean.context.mcp.headers == {"X-Ok": "fine"}
    assert clean.context.mcp.bridge.env == {"K": "v"}
    assert clean.context.mcp.url == "http://127.0.0.1/runs/run_1/mcp"


async def test_the_prompt_carries_the_agents_prompt_and_its_skills(served: Served) -> None:
    run = await served.start_run()
    ctx = served.contexts[run.run_id]
    skills = [SkillInfo(skill_name="pdf", display_name="PDF tools", description="Read PDFs.")]
    served.contexts[run.run_id] = ctx.model_copy(
        update={"resources": ctx.resources.model_copy(update={"skills": skills})}
    )
    async with connect(served, run, mode=MODERN) as client:
        (message,) = (await client.get_prompt("instructions")).messages
    assert isinstance(message.content, types.TextContent)
    assert message.content.text == "You are a careful assistant.\n\nSkills:\n- pdf (PDF tools): Read PDFs."


async def test_without_a_context_provider_the_context_the_run_started_with_is_served(stores: Stores) -> None:
    async with serve_facts(stores, context_provider=None) as served:
        run = await served.start_run(thread_id="t1", text="from the store")
        # Written after the start: the context keeps the snapshot it was started with.
        await stores.state.set("conversation", run.grant.state_scope_id("conversation") or (), "mood", "calm")
        async with connect(served, run, mode=MODERN) as client:
            ctx = await ok(client, "run_context")
            (message,) = (await client.get_prompt("instructions")).messages
            names = await ok(client, "knowledge_list")
    assert ctx == redact(run.context, run.grant.token_hash).model_dump(mode="json")
    assert ctx["input"]["text"] == "from the store"
    assert ctx["context"]["latest_cursor"] is not None
    assert ctx["state"]["conversation"] == {}
    assert ctx["config"]["prompt"] == "You are a careful assistant."
    assert run.token not in json.dumps(ctx)
    assert isinstance(message.content, types.TextContent)
    assert message.content.text == "You are a careful assistant."
    assert names["knowledge_bases"] == [
        {"kb_id": "kb-docs", "name": "Docs", "description": "Product documentation"}
    ]


async def answers(served: Served, run: RunHandle) -> list[str]:
    """The raw text of every context answer a runner can ask for."""
    async with connect(served, run, mode=MODERN) as client:
        tool = await client.call_tool("run_context", {})
        kbs = await client.call_tool("knowledge_list", {})
        resource = await client.read_resource("mcphost://run/context")
        prompt = await client.get_prompt("instructions")
    texts: list[str] = []
    for result in (tool, kbs):
        assert not result.is_error
        texts += [c.text for c in result.content if isinstance(c, types.TextContent)]
        texts.append(json.dumps(result.structured_content))
    texts += [c.text for c in resource.contents if isinstance(c, types.TextResourceContents)]
    texts += [m.content.text for m in prompt.messages if isinstance(m.content, types.TextContent)]
    assert len(texts) == 6
    return texts


async def test_a_run_without_a_stored_context_gets_what_its_row_and_grant_say(served: Served) -> None:
    run = await served.start_run(text="older host")
    del served.contexts[run.run_id]
    async with served.stores.db.write() as session:  # a row written before migration 0007
        await session.execute(update(RunRow).where(RunRow.run_id == run.run_id).values(context=None))
    async with connect(served, run, mode=MODERN) as client:
        ctx = await ok(client, "run_context")
        (message,) = (await client.get_prompt("instructions")).messages
        names = await ok(client, "knowledge_list")
    assert ctx["event"]["event_id"] == run.event.event_id
    assert ctx["input"]["text"] == "older host"
    assert ctx["context"]["latest_cursor"] == run.context.context.latest_cursor
    assert ctx["context"]["mcp"] is None
    assert ctx["config"] == {}
    assert ctx["runtime"]["static_refs"] == {}
    assert isinstance(message.content, types.TextContent)
    assert message.content.text == "No instructions were configured for this agent."
    assert names["knowledge_bases"] == [{"kb_id": "kb-docs", "name": "kb-docs", "description": ""}]
