"""Every facts tool, resource and prompt over HTTP with the SDK client, in both protocol eras."""

from __future__ import annotations

import pytest

from mcphost.facts._results import digest_arguments
from mcphost.facts._tools import FACTS_TOOLS
from mcphost.grants import ALL_FACTS_TOOLS
from tests.mcphost.facts._helpers import ERAS, MODERN, Served, connect
from tests.mcphost.facts.scenario import exercise, seed


@pytest.mark.parametrize("mode", ERAS)
async def test_every_tool_resource_and_prompt_answers_over_http(served: Served, mode: str) -> None:
    seeded = await seed(served)
    run = await served.start_run()
    async with connect(served, run, mode=mode) as client:
        await exercise(client, served, run, seeded)


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
