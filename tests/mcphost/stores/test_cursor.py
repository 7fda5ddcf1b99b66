"""Cursors are opaque, tagged with their kind, and refused loudly when edited or borrowed."""

from __future__ import annotations

import pytest

from mcphost.errors import InvalidArgumentError
from mcphost.stores._cursor import Window, check_limit, decode_key, decode_seq, encode_cursor


def test_a_cursor_round_trips_its_position() -> None:
    assert decode_seq(encode_cursor("events", 42), "events") == 42
    assert decode_key(encode_cursor("state", "a:b.c"), "state") == "a:b.c"


def test_a_cursor_of_another_kind_is_refused_with_a_clear_message() -> None:
    cursor = encode_cursor("transcript", 7)
    with pytest.raises(InvalidArgumentError, match=r"belongs to 'transcript' paging, not 'events'"):
        decode_seq(cursor, "events")


@pytest.mark.parametrize("index", [0, 5, 10, -1])
def test_a_cursor_with_any_character_changed_is_refused(index: int) -> None:
    cursor = encode_cursor("events", 12345)
    changed = "A" if cursor[index] != "A" else "B"
    tampered = cursor[:index] + changed + cursor[index + 1 :] if index != -1 else cursor[:-1] + changed
    with pytest.raises(InvalidArgumentError, match="Malformed events cursor"):
        decode_seq(tampered, "events")


@pytest.mark.parametrize("garbage", ["", "x", "!!!", "not-a-cursor-at-all", "eyJrIjoiZXZlbnRzIiwidiI6MX0"])
def test_garbage_is_refused(garbage: str) -> None:
    with pytest.raises(InvalidArgumentError, match="Malformed"):
        decode_seq(garbage, "events")


def test_a_truncated_cursor_is_refused() -> None:
    cursor = encode_cursor("events", 99)
    with pytest.raises(InvalidArgumentError):
        decode_seq(cursor[:-3], "events")


def test_a_key_cursor_is_not_a_sequence_cursor() -> None:
    with pytest.raises(InvalidArgumentError, match="no position"):
        decode_seq(encode_cursor("events", "abc"), "events")


@pytest.mark.parametrize("limit", [0, -1, 101])
def test_limits_outside_1_to_100_are_refused(limit: int) -> None:
    with pytest.raises(InvalidArgumentError, match="between 1 and 100"):
        check_limit(limit)


def test_before_and_after_together_are_refused() -> None:
    c = encode_cursor("events", 1)
    with pytest.raises(InvalidArgumentError, match="not both"):
        Window.of("events", c, c, 10)
