"""Shared base classes and aliases of the protocol models.

Inbound models (anything a runner sends to the host) forbid unknown fields; outbound models (what the
host sends to runners) allow them to be ignored by the receiving side, so runners stay forward
compatible (PROTOCOL §1: "runners must ignore unknown context fields").
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, TypeAlias, TypeGuard, cast

from pydantic import BaseModel, ConfigDict

JSONValue: TypeAlias = Any
"""A JSON value passing through unchanged (STYLE 7: the one allowed use of Any)."""

JSONObject: TypeAlias = dict[str, Any]

PROTOCOL_VERSION = "1"

MAX_JSON_DEPTH = 64
"""How deep arrays and objects may nest in any JSON the host accepts and stores: runner results, event
bodies, MCP tool arguments, state values (the outermost array or object counts as 1; `{"a": [1]}` is 2).
Deeper values are refused with `invalid_argument` before anything is stored, so no stored value can
reach the recursion limits of the JSON libraries that later serve it (pydantic stops near 250 levels)."""


def json_depth(value: object, *, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply arrays and objects nest in `value` (a scalar is 0), counted level by level without
    recursion, so the check itself cannot overflow the stack; counting stops past `limit`, so any value
    deeper than `limit` answers `limit + 1`."""
    depth = 0
    level: list[object] = [value]
    while True:
        containers = [members for item in level if (members := _json_members(item)) is not None]
        if not containers:
            return depth
        depth += 1
        if depth > limit:
            return depth
        level = [member for members in containers for member in members]


def _json_members(value: object) -> Collection[object] | None:
    """The values of an object or the items of an array (list or tuple), None for a scalar."""
    if isinstance(value, dict):
        return cast(
            "dict[object, object]", value
        ).values()  # a dict of anything: isinstance leaves it unknown
    if isinstance(value, list | tuple):
        return cast("list[object] | tuple[object, ...]", value)  # likewise
    return None


def is_json_object(value: object) -> TypeGuard[JSONObject]:
    """`isinstance(value, dict)`, typed as a JSON object, for parsed JSON (whose keys are strings); a bare
    `isinstance` leaves the keys and values unknown."""
    return isinstance(value, dict)


def is_json_array(value: object) -> TypeGuard[list[JSONValue]]:
    """`isinstance(value, list)`, typed as a JSON array (a bare `isinstance` leaves the items unknown)."""
    return isinstance(value, list)


def nesting_message(what: str) -> str:
    """The refusal message for `what` (a field or value name) nested deeper than `MAX_JSON_DEPTH`."""
    return (
        f"{what}: arrays/objects nest more than {MAX_JSON_DEPTH} levels deep, over the limit; "
        "send a flatter value"
    )


class InboundModel(BaseModel):
    """A model for data crossing a trust boundary into the host: unknown fields and NaN/Infinity are refused."""

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, populate_by_name=True, allow_inf_nan=False
    )


class ProtocolModel(BaseModel):
    """A model the host sends out: parsers on the runner side ignore unknown fields."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True, populate_by_name=True)
