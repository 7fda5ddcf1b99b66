"""`run_context`, the context resource and the instructions prompt: from the host's copy without the token,
or rebuilt from the stores when the host has none."""

from __future__ import annotations

import json

import mcp_types as types

from mcphost.facts._context import redact
from mcphost.grants import hash_token
from mcphost.protocol import AgentRunContext, SkillInfo
from mcphost.stores import Stores
from tests.mcphost.facts.conftest import MODERN, Served, connect, ok, serve_facts


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


async def test_without_a_context_provider_the_context_is_rebuilt_from_the_stores(stores: Stores) -> None:
    async with serve_facts(stores, context_provider=None) as served:
        run = await served.start_run(thread_id="t1", text="from the store")
        await stores.state.set("conversation", run.grant.state_scope_id("conversation") or (), "mood", "calm")
        async with connect(served, run, mode=MODERN) as client:
            ctx = await ok(client, "run_context")
            (message,) = (await client.get_prompt("instructions")).messages
            names = await ok(client, "knowledge_list")
    assert ctx["run_id"] == run.run_id
    assert ctx["event"]["event_id"] == run.event.event_id
    assert ctx["conversation"]["thread_id"] == "t1"
    assert ctx["actor"]["actor_id"] == "user-1"
    assert ctx["input"]["text"] == "from the store"
    assert ctx["context"]["latest_cursor"] == run.context.context.latest_cursor
    assert ctx["context"]["available_apis"]["history_page"] is True
    assert ctx["context"]["mcp"] is None
    assert ctx["state"]["conversation"] == {"mood": "calm"}
    assert ctx["config"] == {}
    assert ctx["runtime"]["deadline_at"] == run.grant.deadline_at
    assert run.token not in json.dumps(ctx)
    assert isinstance(message.content, types.TextContent)
    assert message.content.text == "No instructions were configured for this agent."
    assert names["knowledge_bases"] == [{"kb_id": "kb-docs", "name": "kb-docs", "description": ""}]


async def test_a_provider_that_no_longer_has_the_run_falls_back_to_the_rebuild(served: Served) -> None:
    run = await served.start_run()
    del served.contexts[run.run_id]
    async with connect(served, run, mode=MODERN) as client:
        ctx = await ok(client, "run_context")
    assert ctx["event"]["event_id"] == run.event.event_id
    assert ctx["config"] == {}
