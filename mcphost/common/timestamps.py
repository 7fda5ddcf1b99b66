"""ISO 8601 twins of epoch fields: one rule for every answer of the HTTP API and the CLI's `--json`.

Owns which fields are epoch seconds (`is_epoch_field`: a name ending in `_at`, plus `event_time` and
`claimed_until`), their ISO 8601 text (`iso8601`: UTC, milliseconds, `Z`), adding `<name>_iso` beside
each of them in a model's JSON (`json_with_iso`) and in the JSON Schemas that describe those models
(`schemas_with_iso`). Does not own the models (stores, `models`, the API's `_models`) or how answers
are sent.

Invariants:
- Only fields of pydantic models get a twin, found by walking the model instance beside its JSON:
  JSON passed through a model (an event's payload, a state value, a result's `data`) is never touched,
  whatever its keys are called.
- The twin of a null epoch is null; an epoch no calendar date holds (past year 9999: `event_time` is
  the sender's) is null too, so every twin is typed string-or-null.
- `schemas_with_iso` applies the same rule to the component schemas: a property named like an epoch
  field whose type is a number (or a number or null) gets its twin, `format: date-time`, so the
  document describes exactly the keys `json_with_iso` adds.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, cast

from pydantic import BaseModel

ISO_SUFFIX = "_iso"
EPOCH_NAMES = frozenset({"event_time", "claimed_until"})
"""Epoch fields whose name does not end in `_at`."""


def is_epoch_field(name: str) -> bool:
    """Whether a field of this name holds epoch seconds."""
    return name.endswith("_at") or name in EPOCH_NAMES


def iso8601(epoch: float | None) -> str | None:
    """`epoch` seconds as ISO 8601 in UTC with milliseconds (`2026-01-02T03:04:05.678Z`), else None."""
    if epoch is None:
        return None
    try:
        moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_with_iso(model: BaseModel) -> dict[str, Any]:
    """`model.model_dump(mode="json")` with `<name>_iso` beside every epoch field of every model in it."""
    data = model.model_dump(mode="json")
    _twin(model, data)
    return data


def _twin(value: object, data: object) -> None:
    if isinstance(value, BaseModel) and isinstance(data, dict):
        dumped = cast("dict[str, Any]", data)
        for name, info in type(value).model_fields.items():
            key = info.serialization_alias or info.alias or name
            if key not in dumped:
                continue
            field = getattr(value, name, None)
            epoch = dumped[key]
            if is_epoch_field(key) and (epoch is None or _is_number(epoch)):
                dumped[key + ISO_SUFFIX] = iso8601(epoch)
            else:
                _twin(field, dumped[key])
    elif isinstance(value, (list, tuple)) and isinstance(data, list):
        for item, item_data in zip(cast("list[object]", value), cast("list[object]", data), strict=False):
            _twin(item, item_data)
    elif isinstance(value, Mapping) and isinstance(data, dict):
        items = cast("Mapping[object, object]", value)
        dumped = cast("dict[object, object]", data)
        for key, item in items.items():
            if key in dumped:
                _twin(item, dumped[key])


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numeric(schema: Mapping[str, Any]) -> bool:
    """Whether a property schema is a number, or a number or null."""
    if schema.get("type") in ("number", "integer"):
        return True
    options = cast("list[Mapping[str, Any]]", schema.get("anyOf") or [])
    kinds = {option.get("type") for option in options}
    return bool(options) and kinds <= {"number", "integer", "null"} and bool(kinds & {"number", "integer"})


def schemas_with_iso(schemas: dict[str, Any]) -> dict[str, Any]:
    """The component schemas with an ISO twin (`format: date-time`) beside every epoch property."""
    for schema in schemas.values():
        properties = cast("dict[str, Any] | None", schema.get("properties"))
        if not properties:
            continue
        for name in list(properties):
            if not (is_epoch_field(name) and _numeric(properties[name])):
                continue
            properties[name + ISO_SUFFIX] = {
                "anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}],
                "description": f"`{name}` as ISO 8601 in UTC; null when `{name}` is null or past year 9999.",
            }
            required = cast("list[str] | None", schema.get("required"))
            if required is not None and name in required:
                required.append(name + ISO_SUFFIX)
    return schemas
