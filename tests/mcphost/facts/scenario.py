"""One pass over every facts tool, resource and prompt, run over HTTP in both eras and through the bridge.

`seed` writes what the pass reads (earlier transcript items, a conversation artifact); `exercise` calls
every tool, both resources and the prompt through whatever `Client` it is given and checks each answer
and the audit rows the calls left behind.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import mcp_types as types
from mcp import Client

from mcphost.grants import ALL_FACTS_TOOLS, MODEL_TOOLS_BY_CALL
from mcphost.stores import ArtifactRecord
from tests.mcphost.facts._helpers import RunHandle, Served, fails, ok


@dataclass(frozen=True)
class Seeded:
    conversation_artifact: ArtifactRecord


async def seed(served: Served, conversation_id: str = "conv-1") -> Seeded:
    """Two earlier conversation items (start the run after this) and a conversation artifact."""
    transcript = served.stores.transcript
    await transcript.append(
        conversation_id=conversation_id, role="user", content="first question about apple pie"
    )
    await transcript.append(
        conversation_id=conversation_id, role="assistant", content="earlier answer with apple"
    )
    artifact = await served.stores.artifacts.put_bytes(
        b"conversation notes\n",
        name="notes.txt",
        mime_type="text/plain",
        max_bytes=1024,
        conversation_id=conversation_id,
    )
    return Seeded(artifact)


_MODEL_TOOLS = frozenset(t for names in MODEL_TOOLS_BY_CALL.values() for t in names)


async def exercise(client: Client, served: Served, run: RunHandle, seeded: Seeded) -> None:
    """Call everything once and check what comes back and what the audit recorded."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    # The model tools need host models and a granted `permissions.models`: tests/mcphost/proxy/test_model_tools.py
    assert set(tools) == ALL_FACTS_TOOLS - _MODEL_TOOLS
    assert tools["history_page"].input_schema["properties"]["limit"]["maximum"] == 100
    assert "newest first" in tools["history_page"].input_schema["properties"]["before_cursor"]["description"]
    calls = 0

    ctx = await ok(client, "run_context")
    calls += 1
    assert ctx["run_id"] == run.run_id
    assert ctx["context"]["mcp"]["headers"] == {}
    assert run.token not in json.dumps(ctx)
    latest = ctx["context"]["latest_cursor"]

    newest = await ok(client, "history_page", {"limit": 2})
    calls += 1
    assert [i["content"] for i in newest["items"]] == ["hello there", "earlier answer with apple"]
    assert newest["has_more"] is True
    back = await ok(client, "history_page", {"before_cursor": latest, "limit": 1})
    older = await ok(client, "history_page", {"before_cursor": back["next_cursor"]})
    forward = await ok(client, "history_page", {"after_cursor": older["items"][0]["cursor"], "limit": 5})
    calls += 3
    assert [i["role"] for i in back["items"]] == ["assistant"]
    assert ([i["content"] for i in older["items"]], older["has_more"]) == (
        ["first question about apple pie"],
        False,
    )
    assert [i["content"] for i in forward["items"]] == ["earlier answer with apple", "hello there"]

    hits = (await ok(client, "history_search", {"query": "APPLE pie"}))["hits"]
    calls += 1
    assert [h["item"]["content"] for h in hits] == [
        "first question about apple pie",
        "earlier answer with apple",
    ]
    assert hits[0]["score"] > hits[1]["score"]
    assert "apple" in hits[0]["snippet"]

    event = await ok(client, "events_get", {"event_id": run.event.event_id})
    calls += 1
    assert event["data"]["input"]["text"] == "hello there"
    page = await ok(client, "events_page", {"event_types": ["message.received"]})
    calls += 1
    assert run.event.event_id in [e["event_id"] for e in page["items"]]

    created = await ok(
        client, "artifacts_create", {"name": "a.md", "mime_type": "text/markdown", "text": "# Hi ü"}
    )
    calls += 1
    assert created["size"] == len("# Hi ü".encode())
    meta = await ok(client, "artifacts_metadata", {"artifact_id": created["artifact_id"]})
    calls += 1
    assert meta["sha256"] == created["sha256"]
    read = await ok(client, "artifacts_read", {"artifact_id": created["artifact_id"]})
    calls += 1
    assert (read["data"], read["encoding"], read["eof"]) == ("# Hi ü", "utf-8", True)
    binary = await ok(
        client,
        "artifacts_create",
        {
            "name": "b.bin",
            "mime_type": "application/octet-stream",
            "base64": base64.b64encode(b"\x00\x01\xff").decode(),
        },
    )
    calls += 1
    part = await ok(
        client, "artifacts_read", {"artifact_id": binary["artifact_id"], "offset": 1, "length": 1}
    )
    calls += 1
    assert (base64.b64decode(part["data"]), part["encoding"], part["eof"]) == (b"\x01", "base64", False)
    shared = await ok(client, "artifacts_read", {"artifact_id": seeded.conversation_artifact.artifact_id})
    calls += 1
    assert shared["data"] == "conversation notes\n"

    await ok(client, "state_set", {"scope": "conversation", "key": "topic", "value": {"name": "pie"}})
    got = await ok(client, "state_get", {"scope": "conversation", "key": "topic"})
    listed = await ok(client, "state_list", {"scope": "conversation", "prefix": "to"})
    deleted = await ok(client, "state_delete", {"scope": "conversation", "key": "topic"})
    calls += 4
    assert got["value"] == {"name": "pie"}
    assert got["found"] is True
    assert [(i["key"], i["value"]) for i in listed["items"]] == [("topic", {"name": "pie"})]
    assert deleted["deleted"] is True

    value = base64.b64encode(b"\x00blob").decode()
    await ok(client, "storage_set", {"area": "plugin", "key": "cache", "value_base64": value})
    stored = await ok(client, "storage_get", {"area": "plugin", "key": "cache"})
    keys = await ok(client, "storage_list", {"area": "plugin"})
    removed = await ok(client, "storage_delete", {"area": "plugin", "key": "cache"})
    calls += 4
    assert stored["value_base64"] == value
    assert [(i["key"], i["size"]) for i in keys["items"]] == [("cache", 5)]
    assert removed["deleted"] is True

    bases = await ok(client, "knowledge_list")
    calls += 1
    assert bases["knowledge_bases"] == [
        {"kb_id": "kb-docs", "name": "Docs", "description": "Product documentation"}
    ]
    missing = await fails(client, "knowledge_retrieve", {"kb_id": "kb-docs", "query": "pie"})
    calls += 1
    assert missing["code"] == "not_found"

    resources = (await client.list_resources()).resources
    assert [str(r.uri) for r in resources] == ["mcphost://run/context"]
    (context_contents,) = (await client.read_resource("mcphost://run/context")).contents
    calls += 1
    assert isinstance(context_contents, types.TextResourceContents)
    assert json.loads(context_contents.text)["run_id"] == run.run_id
    assert run.token not in context_contents.text
    (template,) = (await client.list_resource_templates()).resource_templates
    assert template.uri_template == "mcphost://artifacts/{artifact_id}"
    (artifact_contents,) = (
        await client.read_resource(f"mcphost://artifacts/{created['artifact_id']}")
    ).contents
    calls += 1
    assert isinstance(artifact_contents, types.TextResourceContents)
    assert artifact_contents.text == "# Hi ü"

    (prompt,) = (await client.list_prompts()).prompts
    assert prompt.name == "instructions"
    instructions = await client.get_prompt("instructions")
    calls += 1
    (message,) = instructions.messages
    assert isinstance(message.content, types.TextContent)
    assert "You are a careful assistant." in message.content.text

    audit = await served.audit(run)
    assert len(audit) == calls
    assert [r.seq for r in audit] == list(range(1, calls + 1))
    assert [r.outcome for r in audit].count("error") == 1  # knowledge_retrieve: not_found
    assert audit[0].tool == "run_context"
    assert {r.tool for r in audit} >= (ALL_FACTS_TOOLS - _MODEL_TOOLS) | {"resources/read", "prompts/get"}
    assert all(len(r.args_digest) == 64 and r.duration_ms >= 0 for r in audit)
