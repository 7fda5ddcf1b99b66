"""Cursors are opaque, tagged with their kind, signed with this installation's secret, and refused loudly
when edited, borrowed, forged or carrying a position no column holds."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from mcphost.errors import InvalidArgumentError
from mcphost.facts._args import _Window  # pyright: ignore[reportPrivateUsage]
from mcphost.protocol import INT64_MAX
from mcphost.stores import CursorCodec, Stores, open_stores
from mcphost.stores._cursor import check_after, check_limit
from mcphost.stores.secrets import CURSOR_SECRET, stored_secret

CODEC = CursorCodec.of("a test secret of some length")


def test_a_cursor_round_trips_its_position() -> None:
    assert CODEC.decode_seq(CODEC.encode("events", 42), "events") == 42
    assert CODEC.decode_seq(CODEC.encode("events", INT64_MAX), "events") == INT64_MAX
    assert CODEC.decode_key(CODEC.encode("state", "a:b.c"), "state") == "a:b.c"


def test_a_cursor_of_another_kind_is_refused_with_a_clear_message() -> None:
    cursor = CODEC.encode("transcript", 7)
    with pytest.raises(InvalidArgumentError, match=r"belongs to 'transcript' paging, not 'events'"):
        CODEC.decode_seq(cursor, "events")


@pytest.mark.parametrize("index", [0, 5, 10, -1])
def test_a_cursor_with_any_character_changed_is_refused(index: int) -> None:
    cursor = CODEC.encode("events", 12345)
    changed = "A" if cursor[index] != "A" else "B"
    tampered = cursor[:index] + changed + cursor[index + 1 :] if index != -1 else cursor[:-1] + changed
    with pytest.raises(InvalidArgumentError, match="Malformed events cursor"):
        CODEC.decode_seq(tampered, "events")


@pytest.mark.parametrize("garbage", ["", "x", "!!!", "not-a-cursor-at-all", "eyJrIjoiZXZlbnRzIiwidiI6MX0"])
def test_garbage_is_refused(garbage: str) -> None:
    with pytest.raises(InvalidArgumentError, match="Malformed"):
        CODEC.decode_seq(garbage, "events")


def test_a_truncated_cursor_is_refused() -> None:
    cursor = CODEC.encode("events", 99)
    with pytest.raises(InvalidArgumentError):
        CODEC.decode_seq(cursor[:-3], "events")


def test_a_key_cursor_is_not_a_sequence_cursor() -> None:
    with pytest.raises(InvalidArgumentError, match="no position"):
        CODEC.decode_seq(CODEC.encode("events", "abc"), "events")


@pytest.mark.parametrize("value", [-1, INT64_MAX + 1, 2**64, 10**100, 1.5, True, None])
def test_a_position_outside_the_64_bit_range_is_malformed(value: object) -> None:
    cursor = CODEC.encode("events", value)  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidArgumentError, match=r"Malformed events cursor .*: it carries no position"):
        CODEC.decode_seq(cursor, "events")


@pytest.mark.parametrize("key", ["a\x00b", "\ud800", 5])
def test_a_key_no_store_can_compare_is_malformed(key: object) -> None:
    with pytest.raises(InvalidArgumentError, match="it carries no key"):
        CODEC.decode_key(CODEC.encode("state", key), "state")  # pyright: ignore[reportArgumentType]


def signed_with_the_old_source_key(kind: str, value: object) -> str:
    """A cursor made the way every installation made them before: with the key in the source code."""
    raw = json.dumps({"k": kind, "v": value}, separators=(",", ":")).encode()
    check = hashlib.blake2b(raw, key=b"mcphost.cursor.v1", digest_size=6).digest()
    return base64.urlsafe_b64encode(check + raw).decode().rstrip("=")


def test_a_cursor_of_another_installation_is_refused() -> None:
    other = CursorCodec.of("another installation's secret")
    with pytest.raises(InvalidArgumentError, match="Malformed"):
        CODEC.decode_seq(other.encode("events", 1), "events")


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        CursorCodec.of("short")


@pytest.mark.parametrize("limit", [0, -1, 101])
def test_limits_outside_1_to_100_are_refused(limit: int) -> None:
    with pytest.raises(InvalidArgumentError, match="between 1 and 100"):
        check_limit(limit)


@pytest.mark.parametrize("after", [-1, 2**31, 2**63])
def test_after_outside_its_column_is_refused(after: int) -> None:
    with pytest.raises(InvalidArgumentError, match="after must be between 0 and 2147483647"):
        check_after(after, 2**31 - 1)


def test_before_and_after_together_are_refused() -> None:
    c = CODEC.encode("events", 1)
    with pytest.raises(InvalidArgumentError, match="not both"):
        CODEC.window("events", c, c, 10)


async def test_every_host_on_one_database_shares_one_generated_secret(
    database_url: str, tmp_path: Path
) -> None:
    async with open_stores(database_url, tmp_path / "a") as first:
        cursor = first.cursors.encode("events", 7)
        secret = await stored_secret(first.db, CURSOR_SECRET)
        assert len(secret) == 64
    # Another replica (another data_dir, same database) verifies it; the secret was made once.
    async with open_stores(database_url, tmp_path / "b") as second:
        assert second.cursors.decode_seq(cursor, "events") == 7
        assert await stored_secret(second.db, CURSOR_SECRET) == secret


async def test_a_configured_secret_wins_and_changing_it_refuses_old_cursors(
    database_url: str, tmp_path: Path
) -> None:
    async with open_stores(database_url, tmp_path, cursor_secret="configured secret number one") as one:
        cursor = one.cursors.encode("transcript", 3)
        assert CursorCodec.of("configured secret number one").decode_seq(cursor, "transcript") == 3
    async with open_stores(database_url, tmp_path) as generated:
        with pytest.raises(InvalidArgumentError, match="Malformed"):
            generated.cursors.decode_seq(cursor, "transcript")


async def test_a_forged_cursor_is_refused_by_the_stores(stores: Stores) -> None:
    await stores.transcript.append(conversation_id="c", role="user", content="hello")
    forged = signed_with_the_old_source_key("transcript", 0)
    with pytest.raises(InvalidArgumentError, match="Malformed"):
        await stores.transcript.page("c", None, after=forged, limit=10)
    with pytest.raises(InvalidArgumentError, match="Malformed"):
        await stores.runs.list(cursor=signed_with_the_old_source_key("runs", 10), limit=10)


def test_no_cursor_begins_with_a_dash_which_a_command_line_takes_for_an_option() -> None:
    codec = CODEC
    cursors = {seq: codec.encode("runs", seq) for seq in range(3000)}
    assert not [c for c in cursors.values() if c.startswith("-")]
    dotted = [seq for seq, c in cursors.items() if c.startswith(".")]
    assert len(dotted) > 10  # one in 64 would have begun with "-"
    assert all(codec.decode_seq(c, "runs") == seq for seq, c in cursors.items())


def test_the_facts_tools_take_a_cursor_that_begins_with_a_dot() -> None:
    dotted = next(c for c in (CODEC.encode("transcript", seq) for seq in range(3000)) if c.startswith("."))
    assert _Window.model_validate({"before_cursor": dotted}).before_cursor == dotted
    with pytest.raises(ValidationError):
        _Window.model_validate({"before_cursor": dotted[1:5] + "." + dotted[5:]})  # only the first
