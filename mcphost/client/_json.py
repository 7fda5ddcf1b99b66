"""JSON as the client passes it through: the aliases and one narrowing helper. Standard library only."""

from __future__ import annotations

from typing import Any, TypeAlias, cast

JSONValue: TypeAlias = Any
"""A JSON value passing through unchanged (STYLE 7: the one allowed use of Any)."""
JSONObject: TypeAlias = dict[str, JSONValue]


def as_object(value: object) -> JSONObject:
    """`value` when it is a JSON object, else an empty one."""
    return cast("JSONObject", value) if isinstance(value, dict) else {}
