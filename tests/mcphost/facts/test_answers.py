"""Every facts tool's answer is exactly its published model, over the real endpoint in both protocol eras.

For each tool of the tool table (a tool added without a call here fails), the real SDK `Client` calls a
real facts server over real stores; the answer's `structuredContent` must validate against the runner
SDK's model with unknown fields refused (`STRICT_CONTEXT`: a field the host added but the model lacks
fails), and dump back to exactly itself (a field the model has but the host no longer sends, or sends
differently, fails). `tools/list` must publish that model's JSON Schema as the tool's `outputSchema`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

import pytest

import mcphost_runners.sdk
from mcphost.facts._keyed import LIST_VALUE_BYTES
from mcphost.facts._tools import FACTS_TOOLS
from mcphost.protocol import STRICT_CONTEXT, JSONObject
from mcphost.protocol.facts import FACTS_ANSWERS, FACTS_TOOL_NAMES, KnowledgeChunk
from mcphost.stores import Stores
from mcphost_runners.sdk import RunAPI
from tests.mcphost.facts._helpers import ERAS, connect, ok, serve_facts
from tests.mcphost.stores.factories import nested_json, overwrite_json


class Retriever:
    async def retrieve(
        self, kb_id: str, query: str, *, top_k: int, filters: JSONObject | None
    ) -> Sequence[KnowledgeChunk]:
        meta: JSONObject = {"title": "Guide", "start_line": 1}
        return [KnowledgeChunk(chunk_id="c1", document="guide.md", text=query, score=1.5, metadata=meta)]


@pytest.mark.parametrize("mode", ERAS)
async def test_every_tool_answers_exactly_the_model_it_publishes(stores: Stores, mode: str) -> None:
    async with serve_facts(stores, knowledge=Retriever()) as served:
        run = await served.start_run()
        shared = await stores.artifacts.put_bytes(
            b"\x00\x01",
            name="a.bin",
            mime_type="application/octet-stream",
            max_bytes=64,
            conversation_id="conv-1",
        )
        big = "x" * (LIST_VALUE_BYTES // 2 + 1)  # two of them do not fit inline in one state_list page
        blob = base64.b64encode(b"\x00blob").decode()
        steps: list[tuple[str, JSONObject]] = [
            ("run_context", {}),
            ("history_page", {}),
            ("history_page", {"limit": 1, "include_artifacts": True}),
            ("history_search", {"query": "hello"}),
            ("events_get", {"event_id": run.event.event_id}),
            ("events_page", {}),
            ("artifacts_metadata", {"artifact_id": shared.artifact_id}),
            ("artifacts_read", {"artifact_id": shared.artifact_id, "length": 1}),
            ("artifacts_create", {"name": "n.md", "mime_type": "text/markdown", "text": "# n"}),
            ("state_get", {"scope": "runner", "key": "a"}),
            ("state_set", {"scope": "runner", "key": "a", "value": {"n": 1}}),
            ("state_set", {"scope": "runner", "key": "b", "value": None}),
            ("state_set", {"scope": "runner", "key": "c", "value": big}),
            ("state_set", {"scope": "runner", "key": "d", "value": big}),
            ("state_set", {"scope": "runner", "key": "e", "value": "deep later"}),
            ("state_get", {"scope": "runner", "key": "a"}),
            ("state_list", {"scope": "runner"}),
            ("state_delete", {"scope": "runner", "key": "a"}),
            ("state_delete", {"scope": "runner", "key": "a"}),
            ("storage_get", {"area": "plugin", "key": "k"}),
            ("storage_set", {"area": "plugin", "key": "k", "value_base64": blob}),
            ("storage_get", {"area": "plugin", "key": "k"}),
            ("storage_list", {"area": "plugin"}),
            ("storage_delete", {"area": "plugin", "key": "k"}),
            ("storage_delete", {"area": "plugin", "key": "k"}),
            ("knowledge_list", {}),
            ("knowledge_retrieve", {"kb_id": "kb-docs", "query": "ship"}),
        ]
        # The model tools need host models: tests/mcphost/proxy/test_model_tools.py checks their answers.
        missing = [
            name
            for name in FACTS_TOOLS
            if name not in {called for called, _ in steps} and not name.startswith("models_")
        ]
        assert missing == [], f"tools without a call here: {missing}; add one"
        answers: dict[str, list[JSONObject]] = {}
        async with connect(served, run, mode=mode) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            for name in listed:  # answers are the runner SDK's models (mcphost_runners.sdk re-exports them)
                assert listed[name].output_schema == FACTS_TOOLS[name].answer.model_json_schema(), name
            for name, arguments in steps:
                answer = await ok(client, name, arguments)
                parsed = FACTS_TOOLS[name].answer.model_validate(answer, context=STRICT_CONTEXT)
                assert parsed.model_dump(mode="json") == answer, name
                answers.setdefault(name, []).append(answer)

            # Rows stored too deep to serve give the answers' error shapes.
            owner = json.dumps(list(run.grant.state_scope_id("runner") or ()), separators=(",", ":"))
            deep = nested_json(100)
            await overwrite_json(stores, "state", "value", deep, scope="runner", owner=owner, key="e")
            await overwrite_json(stores, "events", "payload", deep, event_id=run.event.event_id)
            for name, arguments in [
                ("state_list", {"scope": "runner"}),
                ("events_get", {"event_id": run.event.event_id}),
                ("events_page", {}),
            ]:
                answer = await ok(client, name, arguments)
                parsed = FACTS_TOOLS[name].answer.model_validate(answer, context=STRICT_CONTEXT)
                assert parsed.model_dump(mode="json") == answer, name
                answers[name].append(answer)

    # Every shape a tool can answer was among them (found or not, inline, omitted or unservable).
    assert [a["found"] for a in answers["state_get"]] == [False, True]
    assert "size" not in answers["state_get"][0]
    assert [a["found"] for a in answers["storage_get"]] == [False, True]
    assert [a["deleted"] for a in answers["state_delete"] + answers["storage_delete"]] == [True, False] * 2
    first, second = ([(i["key"], sorted(i)) for i in a["items"]] for a in answers["state_list"])
    sent = ["key", "size", "updated_at"]
    assert first == [
        ("a", [*sent, "value"]),
        ("b", [*sent, "value"]),  # a stored null is sent as a value
        ("c", [*sent, "value"]),
        ("d", [*sent, "value_omitted"]),
        ("e", [*sent, "value"]),
    ]
    assert second[-1] == ("e", ["error", *sent])
    assert "data_error" not in answers["events_get"][0]
    assert answers["events_get"][1]["data_error"]["code"] == "runtime_error"


def test_the_runner_sdk_has_a_call_and_the_model_of_every_tool() -> None:
    assert tuple(FACTS_TOOLS) == FACTS_TOOL_NAMES
    for name in FACTS_TOOL_NAMES:
        assert callable(getattr(RunAPI, name, None)), f"RunAPI has no method {name!r}"
        model = FACTS_ANSWERS[name]
        if model.__name__ in mcphost_runners.sdk.__all__:
            assert getattr(mcphost_runners.sdk, model.__name__) is model
