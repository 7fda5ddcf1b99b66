"""Typed reads of JSON in tests: an object, an array, an MCP tool result's structured content.

JSON reaches a test as `Any` (`Response.json()`, `json.loads`, `CallToolResult.structured_content`), and
`isinstance(value, dict)` narrows `Any` to a dict of unknown types. These helpers check the shape the code
under test promises and return it typed (`dict[str, Any]`, `list[Any]`), so a test indexes it without casts;
a value of another shape fails the test with the value in the message (`obj_or_none` only classifies).
"""

from __future__ import annotations

from typing import Any, cast

import mcp_types as types


def obj(value: object) -> dict[str, Any]:
    """`value`, which must be a JSON object."""
    assert isinstance(value, dict), f"expected a JSON object, got {value!r:.300}"
    return cast(dict[str, Any], value)


def obj_or_none(value: object) -> dict[str, Any] | None:
    """`value` if it is a JSON object, else None: for a test that classifies whatever comes back."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def arr(value: object) -> list[Any]:
    """`value`, which must be a JSON array."""
    assert isinstance(value, list), f"expected a JSON array, got {value!r:.300}"
    return cast(list[Any], value)


def structured(result: types.CallToolResult) -> dict[str, Any]:
    """The structured content of a tool result, which must be a JSON object."""
    return obj(result.structured_content)
