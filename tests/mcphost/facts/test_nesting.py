"""JSON nesting over the real MCP endpoint: arguments nested past `MAX_JSON_DEPTH` are a tool error and
store nothing; a value stored that deep anyway (by an older host, or straight into the database) is an
error for that one value, never a failed call, page or context."""

from __future__ import annotations

import json

import pytest

from mcphost.protocol import MAX_JSON_DEPTH
from mcphost_runners.sdk import StateList
from tests.mcphost.facts._helpers import MODERN, Served, connect, fails, ok, table_fingerprint
from tests.mcphost.facts.test_scope import last_audit
from tests.mcphost.stores.factories import nested_json, overwrite_json


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("state_set", {"scope": "conversation", "key": "deep", "value": json.loads(nested_json(200))}),
        ("state_set", {"scope": "runner", "key": "deep", "value": json.loads(nested_json(MAX_JSON_DEPTH))}),
        (
            "knowledge_retrieve",
            {"kb_id": "kb-docs", "query": "q", "filters": {"f": json.loads(nested_json(70))}},
        ),
    ],
)
async def test_arguments_nested_past_the_limit_are_an_invalid_argument_tool_error(
    served: Served, tool: str, arguments: dict[str, object]
) -> None:
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        before = await table_fingerprint(served.stores)
        data = await fails(client, tool, arguments)
        assert data["code"] == "invalid_argument", data
        assert "arguments: arrays/objects nest more than 64 levels deep" in data["message"]
        assert data["details"] == {"field": "arguments", "max_depth": MAX_JSON_DEPTH}
        row = await last_audit(served, run)
        assert (row.tool, row.outcome, row.code) == (tool, "error", "invalid_argument")
        assert await table_fingerprint(served.stores) == before
        # Exactly at the limit (the arguments object counts as one level) is accepted.
        flat = {"scope": "runner", "key": "deep", "value": json.loads(nested_json(MAX_JSON_DEPTH - 1))}
        await ok(client, "state_set", flat)
        assert (await ok(client, "state_get", {"scope": "runner", "key": "deep"}))["value"] == flat["value"]


@pytest.mark.parametrize("depth", [300, 5000])
async def test_a_stored_state_value_too_deep_to_serve_is_an_error_for_that_key_only(
    served: Served, depth: int
) -> None:
    run = await served.start_run()
    owner = run.grant.state_scope_id("runner")
    assert owner is not None
    async with connect(served, run, mode=MODERN) as client:
        for key in ("a", "bad", "c"):
            await ok(client, "state_set", {"scope": "runner", "key": key, "value": {"key": key}})
        await overwrite_json(
            served.stores,
            "state",
            "value",
            nested_json(depth),
            scope="runner",
            owner=json.dumps(list(owner), separators=(",", ":")),
            key="bad",
        )

        got = await fails(client, "state_get", {"scope": "runner", "key": "bad"})
        assert (got["code"], got["retryable"]) == ("runtime_error", False)
        assert "'bad' nests arrays/objects more than 64 levels deep" in got["message"]
        assert "mcphost state delete runner bad" in got["message"]
        assert "DELETE /v1/state/runner/bad" in got["message"]

        listed = (await ok(client, "state_list", {"scope": "runner"}))["items"]
        assert [(i["key"], i.get("value"), "error" in i) for i in listed] == [
            ("a", {"key": "a"}, False),
            ("bad", None, True),
            ("c", {"key": "c"}, False),
        ]
        assert listed[1]["error"]["code"] == "runtime_error"
        typed = StateList.model_validate(await ok(client, "state_list", {"scope": "runner"}))
        assert [i.error is not None for i in typed.items] == [False, True, False]

    # A run that starts now gets a context whose state snapshot names the bad key instead of failing.
    second = await served.start_run(conversation_id="conv-2")
    assert second.grant.state_scope_id("runner") == owner
    async with connect(served, second, mode=MODERN) as client:
        state = (await ok(client, "run_context"))["state"]
        assert state["runner"] == {"a": {"key": "a"}, "c": {"key": "c"}}
        [error] = state["errors"]
        assert (error["scope"], error["key"], error["code"]) == ("runner", "bad", "runtime_error")
        assert "mcphost state delete" in error["message"]

        # The run itself can clear it, as an operator can.
        assert (await ok(client, "state_delete", {"scope": "runner", "key": "bad"}))["deleted"] is True
        listed = (await ok(client, "state_list", {"scope": "runner"}))["items"]
        assert [(i["key"], "error" in i) for i in listed] == [("a", False), ("c", False)]


async def test_a_tool_outside_the_grant_is_unauthorized_whatever_its_arguments(served: Served) -> None:
    run = await served.start_run(permissions={"history": ["page"]})
    deep = {"scope": "conversation", "key": "k", "value": json.loads(nested_json(200))}
    async with connect(served, run, mode=MODERN) as client:
        data = await fails(client, "state_set", deep)
        assert data["code"] == "unauthorized", data
        row = await last_audit(served, run)
        assert (row.tool, row.outcome, row.code) == ("state_set", "refused", "unauthorized")
        data = await fails(client, "up__echo", {"x": json.loads(nested_json(200))})
        assert data["code"] == "unauthorized", data
