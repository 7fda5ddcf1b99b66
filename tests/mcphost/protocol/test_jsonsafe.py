"""Storable JSON: what is refused (NaN/Infinity, integers past 64 bits, NUL, lone surrogates), where the
first problem is named, and that everything else passes unchanged."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from mcphost.protocol import INT64_MAX, INT64_MIN, StorableJSON, StorableText, unstorable

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
