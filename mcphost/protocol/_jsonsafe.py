"""Storable JSON: the values both stores keep exactly, so one check refuses the rest at every boundary.

Owns the rules, the walk that finds the first value breaking one (`unstorable`), and the pydantic types
that apply it (`StorableText`, `StorableJSON`, `StorableObject`). Does not own where the check runs (the
HTTP parsers, the facts dispatcher and the result classifier call it) nor any limit on size or nesting
depth (each boundary caps those itself).

The rules, and why:
- Numbers are finite. NaN and ±Infinity are not JSON (RFC 8259); PostgreSQL's JSON and float columns
  refuse them or keep them where no JSON reader gets them back, and Python's `json` reads them anyway.
- Integers fit a signed 64-bit integer (`INT64_MIN..INT64_MAX`): every integer column is a BIGINT and
  SQLite's INTEGER is 64-bit, so a larger number fails in the driver (`OverflowError`) instead of as a 400.
- Strings and object keys hold no NUL (U+0000): PostgreSQL text and JSONB refuse it, SQLite keeps it,
  so the stores would disagree. They hold no lone surrogate (U+D800..U+DFFF unpaired) either: it has no
  UTF-8 encoding, so no store can write it.

Invariants:
- The walk is iterative (a deep value cannot exhaust the stack) and stops at the first problem, which it
  names by its path (`data.items.3.name`), so an error message can point at the field.
- Only plain JSON types pass through (dict with str keys, list, str, int, float, bool, None); anything else
  is refused as not JSON.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Annotated, NamedTuple, cast

from pydantic import AfterValidator

from mcphost.protocol._base import JSONObject, JSONValue

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
"""The integer range every store and every integer column holds."""

_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")


class Unstorable(NamedTuple):
    """Where a value breaks a rule (`path`, dotted; "" for the value itself) and which rule (`reason`)."""

    path: str
    reason: str

    def message(self, where: str = "") -> str:
        """`<where>.<path>: <reason>`, the form an error message names a field with."""
        loc = ".".join(p for p in (where, self.path) if p)
        return f"{loc or 'value'}: {self.reason}"


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored, or None when it can."""
    match = _BAD_CHAR.search(text)
    if match is None:
        return None
    if match.group() == "\x00":
        return f"contains a NUL character (U+0000) at index {match.start()}; NUL cannot be stored"
    return (
        f"contains a lone surrogate (U+{ord(match.group()):04X}) at index {match.start()}; "
        "it has no UTF-8 encoding and cannot be stored"
    )


def _scalar_problem(value: object) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return None
        return f"the integer is outside the signed 64-bit range ({INT64_MIN} to {INT64_MAX})"
    if isinstance(value, float):
        return (
            None if math.isfinite(value) else f"{value!r} is not a finite number; JSON numbers must be finite"
        )
    return f"a {type(value).__name__} is not a JSON value"


def unstorable(value: object) -> Unstorable | None:
    """The first place in JSON `value` that a store cannot keep exactly, or None when all of it can."""
    if _plainly_storable(value):
        return None
    return _first_problem(value)


def _plainly_storable(value: object) -> bool:
    """True when every part of `value` is a plain JSON type (exactly dict, list, tuple, str, int, float,
    bool or None) that breaks no rule: the usual answer, found without building a path per member.
    False when something breaks a rule or is another type (a subclass), for `_first_problem` to name."""
    return plainly_storable_within(value, sys.maxsize)


def plainly_storable_within(value: object, max_depth: int) -> bool:
    """True when arrays and objects nest at most `max_depth` levels deep in `value` (as `json_depth`
    counts them) and every part of it is plainly storable (`_plainly_storable`): a boundary's two usual
    answers in one walk, level by level, which stops past `max_depth`. False otherwise, for the caller
    to ask `json_depth` and `unstorable` which it is (a subclass of a JSON type may be neither)."""
    level: list[object] = [value]
    depth = 0
    bad_char = _BAD_CHAR.search
    while level:
        nested: list[object] = []
        push_all = nested.extend
        containers = False
        for item in level:
            kind = type(item)
            if kind is str:
                if bad_char(cast(str, item)) is not None:
                    return False
            elif kind is dict:
                containers = True
                members = cast("dict[object, object]", item)
                for key in members:
                    if type(key) is not str or bad_char(key) is not None:
                        return False
                push_all(members.values())
            elif kind is list or kind is tuple:
                containers = True
                push_all(cast("list[object]", item))
            elif kind is int:
                if not INT64_MIN <= cast(int, item) <= INT64_MAX:
                    return False
            elif kind is float:
                if not math.isfinite(cast(float, item)):
                    return False
            elif item is not None and kind is not bool:
                return False
        if containers:
            depth += 1
            if depth > max_depth:
                return False
        level = nested
    return True


def _first_problem(value: object) -> Unstorable | None:
    stack: list[tuple[str, object]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            entries: list[tuple[str, object]] = []
            # A dict of anything (isinstance leaves it unknown); its keys are checked here.
            for key, child in cast("dict[object, object]", item).items():
                if not isinstance(key, str):
                    return Unstorable(path, f"an object key must be a string, got {type(key).__name__}")
                child_path = f"{path}.{key}" if path else key
                problem = text_problem(key)
                if problem is not None:
                    return Unstorable(path, f"the key {_shown(key)} {problem}")
                entries.append((child_path, child))
            stack.extend(reversed(entries))
        elif isinstance(item, list | tuple):
            items = cast("list[object] | tuple[object, ...]", item)  # of anything, like the dict above
            stack.extend(reversed([(f"{path}.{i}" if path else str(i), c) for i, c in enumerate(items)]))
        else:
            problem = _scalar_problem(item)
            if problem is not None:
                return Unstorable(path, problem)
    return None


def _shown(key: str) -> str:
    """A key for a message: repr'd, with its bad characters escaped and its length capped."""
    return repr(key[:40]).encode("ascii", "backslashreplace").decode()


def _check_text(text: str) -> str:
    problem = text_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


def _check_json(value: JSONValue) -> JSONValue:
    problem = unstorable(value)
    if problem is not None:
        raise ValueError(problem.message())
    return value


StorableText = Annotated[str, AfterValidator(_check_text)]
"""A string with no NUL and no lone surrogate."""
StorableJSON = Annotated[JSONValue, AfterValidator(_check_json)]
"""A JSON value every part of which a store keeps exactly (see the module docstring)."""
StorableObject = Annotated[JSONObject, AfterValidator(_check_json)]
"""A JSON object every part of which a store keeps exactly."""
