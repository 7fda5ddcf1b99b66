"""Storable JSON: what is refused (NaN/Infinity, integers past 64 bits, NUL, lone surrogates), where the
first problem is named, and that everything else passes unchanged."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from mcphost.protocol import (
    INT64_MAX,
    INT64_MIN,
    StorableJSON,
    StorableText,
    json_depth,
    plainly_storable_within,
    unstorable,
)

PLAIN_JSON: list[object] = [
    None,
    True,
    0,
    INT64_MAX,
    INT64_MIN,
    1.5e308,
    -0.0,
    "",
    "emoji 😀 and é",
    {"a": [1, {"b": "c"}], "": None},
    [[[]]],
]


@pytest.mark.parametrize("value", PLAIN_JSON)
def test_plain_json_within_bounds_is_storable(value: object) -> None:
    assert unstorable(value) is None


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        (math.nan, "", "nan is not a finite number"),
        ({"x": [1, math.inf]}, "x.1", "inf is not a finite number"),
        ({"x": -math.inf}, "x", "-inf is not a finite number"),
        (INT64_MAX + 1, "", "outside the signed 64-bit range"),
        ({"n": INT64_MIN - 1}, "n", "outside the signed 64-bit range"),
        ({"n": 10**100}, "n", "outside the signed 64-bit range"),
        ({"t": "a\x00b"}, "t", "NUL character (U+0000) at index 1"),
        ({"t": ["ok", "\ud800"]}, "t.1", "lone surrogate (U+D800) at index 0"),
        ({"a": {"k\x00": 1}}, "a", "the key 'k\\x00' contains a NUL"),
        ({"\udfff": 1}, "", "the key '\\udfff' contains a lone surrogate"),
        ({"b": b"bytes"}, "b", "a bytes is not a JSON value"),
        ({1: "x"}, "", "an object key must be a string"),
    ],
)
def test_the_first_unstorable_value_is_named_by_its_path(value: object, path: str, reason: str) -> None:
    problem = unstorable(value)
    assert problem is not None
    assert problem.path == path
    assert reason in problem.reason


def test_the_walk_reports_the_first_problem_in_document_order() -> None:
    problem = unstorable({"a": [0, "x\x00"], "b": math.nan})
    assert problem is not None
    assert problem.path == "a.1"
    assert problem.message("body") == f"body.a.1: {problem.reason}"


def test_a_deep_value_does_not_exhaust_the_stack() -> None:
    deep: object = "\x00"
    for _ in range(100_000):
        deep = [deep]
    problem = unstorable(deep)
    assert problem is not None
    assert problem.path.count(".") == 99_999


class _Model(BaseModel):
    text: StorableText
    data: StorableJSON = None


def test_the_pydantic_types_refuse_with_the_field_named() -> None:
    assert _Model(text="fine", data={"n": 1}).data == {"n": 1}
    with pytest.raises(ValidationError) as text_error:
        _Model(text="a\x00")
    assert text_error.value.errors()[0]["loc"] == ("text",)
    with pytest.raises(ValidationError) as data_error:
        _Model(text="ok", data={"x": [math.nan]})
    assert data_error.value.errors()[0]["loc"] == ("data",)
    assert "x.0: nan is not a finite number" in data_error.value.errors()[0]["msg"]


def test_the_quick_pass_and_the_walk_agree() -> None:
    # `unstorable` answers None from a quick pass without paths when every part is a plain JSON type;
    # anything else (a problem, a subclass) goes to the walk, whose answer is the one given.
    from collections import OrderedDict
    from enum import IntEnum

    from mcphost.protocol import _jsonsafe

    class Level(IntEnum):
        HIGH = 3

    class Tag(str):
        pass

    values: list[object] = [
        *PLAIN_JSON,
        (1, "a"),
        OrderedDict(a=1),
        Level.HIGH,
        Tag("t"),
        {"k": Tag("a\x00")},
        {"big": 2**64},
        [math.nan],
        {"ok": [{"deep": ["é", 1.0, None, False]}]},
        {"k": object()},
    ]
    for value in values:
        walked = _jsonsafe._first_problem(value)  # pyright: ignore[reportPrivateUsage]
        assert unstorable(value) == walked, value
        if _jsonsafe._plainly_storable(value):  # pyright: ignore[reportPrivateUsage]
            assert walked is None, value


_TEXT = st.text(st.characters(exclude_categories=()), max_size=8)  # NUL and lone surrogates too
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | _TEXT
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(_VALUES)
def test_the_quick_pass_never_passes_what_the_walk_refuses(value: object) -> None:
    from mcphost.protocol import _jsonsafe

    assert unstorable(value) == _jsonsafe._first_problem(value)  # pyright: ignore[reportPrivateUsage]


@given(_VALUES, st.integers(min_value=0, max_value=4))
def test_the_one_walk_passes_exactly_what_both_checks_pass_for_plain_json(value: object, limit: int) -> None:
    """`plainly_storable_within` is `json_depth(value) <= limit and unstorable(value) is None` for values
    of JSON's own types (a boundary's two checks in one walk)."""
    expected = json_depth(value) <= limit and unstorable(value) is None
    assert plainly_storable_within(value, limit) is expected


_DEPTH_CASES: list[tuple[object, int, bool]] = [
    ([[[]]], 3, True),
    ([[[]]], 2, False),  # an empty array counts as a level, as `json_depth` counts it
    ({"a": {}}, 1, False),
    ({"a": {}}, 2, True),
    ({}, 0, False),
    ("scalar", 0, True),
    ([1, [2, [3]]], 2, False),
    ((1, "a"), 1, True),  # a tuple is an array
    ({"k": [0, 2**63]}, 8, False),
    ({"k\x00": 1}, 8, False),
]


@pytest.mark.parametrize(("value", "limit", "passes"), _DEPTH_CASES)
def test_the_one_walk_counts_levels_as_json_depth_does(value: object, limit: int, passes: bool) -> None:
    assert plainly_storable_within(value, limit) is passes
    assert (json_depth(value, limit=limit) <= limit and unstorable(value) is None) is passes


def test_the_one_walk_stops_past_its_limit_on_a_deep_value() -> None:
    deep: list[object] = []
    inner = deep
    for _ in range(100_000):
        inner.append(inner := [])
    assert plainly_storable_within(deep, 64) is False


def test_the_one_walk_leaves_subclasses_to_the_two_checks() -> None:
    """A subclass of a JSON type is not plainly storable; the caller then asks the two checks, which
    may pass it."""
    from enum import IntEnum

    class Level(IntEnum):
        HIGH = 3

    assert plainly_storable_within({"level": Level.HIGH}, 8) is False
    assert unstorable({"level": Level.HIGH}) is None
