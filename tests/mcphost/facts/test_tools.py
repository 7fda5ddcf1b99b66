"""Every facts tool, resource and prompt over HTTP with the SDK client, in both protocol eras."""

from __future__ import annotations

import json

import pytest

from mcphost.facts import granted_tools
from mcphost.facts._listing import LISTING
from mcphost.facts._results import digest_arguments
from mcphost.facts._tools import FACTS_TOOLS, built_listing
from mcphost.grants import ALL_FACTS_TOOLS
from mcphost.models import RunGrant
from tests.mcphost.facts._helpers import ERAS, MODERN, Served, connect
from tests.mcphost.facts.scenario import exercise, seed


@pytest.mark.parametrize("mode", ERAS)
async def test_every_tool_resource_and_prompt_answers_over_http(served: Served, mode: str) -> None:
    seeded = await seed(served)
    run = await served.start_run()
    async with connect(served, run, mode=mode) as client:
        await exercise(client, served, run, seeded)


def test_the_committed_listing_is_what_the_tools_models_build() -> None:
    """`tools.json` (what `tools/list` and a run's context show) is the table built afresh: a tool, a
    description or a model changed without regenerating the listing fails here."""
    listed = json.loads(LISTING.read_text(encoding="utf-8"))
    assert listed == built_listing(), "tools.json is stale: run `uv run python -m mcphost.facts.listing`"
    assert list(listed) == list(FACTS_TOOLS)
    for name, spec in FACTS_TOOLS.items():
        assert spec.tool == spec.build(), name


def test_a_granted_listing_is_the_callers_own() -> None:
    """Each call parses the listing anew: a caller that changes what it got changes no other's."""
    grant = RunGrant.model_construct(tools=frozenset({"history_page", "state_get"}))
    first = granted_tools(grant)
    assert [t["name"] for t in first] == [name for name in FACTS_TOOLS if name in grant.tools]
    first[0]["description"] = "changed"
    assert granted_tools(grant)[0]["description"] == FACTS_TOOLS[first[0]["name"]].description


def test_every_argument_of_every_tool_is_described_for_the_model() -> None:
    assert frozenset(FACTS_TOOLS) == ALL_FACTS_TOOLS
    for name, spec in FACTS_TOOLS.items():
        schema = spec.tool.input_schema
        assert schema["type"] == "object"
        assert schema.get("additionalProperties") is False, name
        assert spec.tool.description
        for field, prop in schema.get("properties", {}).items():
            assert prop.get("description"), f"{name}.{field} has no description"


async def test_the_audit_digest_is_of_the_canonical_arguments(served: Served) -> None:
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        await client.call_tool("history_page", {"limit": 5, "include_artifacts": False})
        await client.call_tool("history_page", {"include_artifacts": False, "limit": 5})
        await client.call_tool("history_page", {"limit": 6, "include_artifacts": False})
    first, second, third = await served.audit(run)
    expected, size = digest_arguments({"include_artifacts": False, "limit": 5})
    assert first.args_digest == second.args_digest == expected
    assert third.args_digest != expected
    assert first.bytes_in == size
