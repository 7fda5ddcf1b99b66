"""Shared base classes and aliases of the protocol models.

Inbound models (anything a runner sends to the host) forbid unknown fields; outbound models (what the
host sends to runners) allow them to be ignored by the receiving side, so runners stay forward
compatible (PROTOCOL §1: "runners must ignore unknown context fields"). Validating an outbound model with
`context=STRICT_CONTEXT` refuses unknown fields at every level instead: tests use it to catch a field the
host sends that the models do not know.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any, TypeAlias, TypeGuard, cast

from pydantic import ConfigDict, ValidationInfo, model_validator

from mcphost.common.fielddocs import DocumentedModel

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


class InboundModel(DocumentedModel):
    """A model for data crossing a trust boundary into the host: unknown fields and NaN/Infinity are refused."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        allow_inf_nan=False,
        defer_build=True,  # validators are built on first use, not when a command imports the module
    )


_STRICT_KEY = "mcphost.protocol.strict"

STRICT_CONTEXT: Mapping[str, bool] = MappingProxyType({_STRICT_KEY: True})
"""Validation context (`Model.model_validate(data, context=STRICT_CONTEXT)`) under which a `ProtocolModel`,
and every `ProtocolModel` nested in it, refuses fields it does not know instead of ignoring them."""


def _is_strict(context: object) -> bool:
    # pydantic hands the context over untyped; STRICT_CONTEXT is a mapping of str to bool. Usually
    # there is none: that test comes first (it runs for every nested model; `Mapping`'s is an ABC's).
    return (
        context is not None
        and isinstance(context, Mapping)
        and cast("Mapping[str, object]", context).get(_STRICT_KEY) is True
    )


class ProtocolModel(DocumentedModel):
    """A model the host sends out: parsers on the runner side ignore unknown fields (refused under
    `STRICT_CONTEXT`)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_when_strict(cls, data: JSONValue, info: ValidationInfo) -> JSONValue:
        if not _is_strict(info.context) or not is_json_object(data):
            return data
        fields = cls.model_fields
        known = set(fields) | {field.alias for field in fields.values() if field.alias is not None}
        unknown = sorted(key for key in data if key not in known)
        if unknown:
            raise ValueError(f"{cls.__name__} does not know the field(s) {', '.join(unknown)}")
        return data
