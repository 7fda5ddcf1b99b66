"""Issue 10, item 5: cursors were checked with a key that sat in the source (mcphost.cursor.v1), so anyone
could forge one."""

from __future__ import annotations

import pytest

from mcphost.errors import InvalidArgumentError
from tests.mcphost.stores.test_cursor import CODEC, signed_with_the_old_source_key


def test_a_cursor_forged_with_the_key_from_the_source_code_is_refused() -> None:
    """Issue 10, item 5: cursors were checked with a key that sat in the source (mcphost.cursor.v1), so
    anyone could forge one."""
    with pytest.raises(InvalidArgumentError, match="Malformed"):
        CODEC.decode_seq(signed_with_the_old_source_key("events", 1), "events")
    with pytest.raises(InvalidArgumentError, match="Malformed"):
        CODEC.decode_seq(signed_with_the_old_source_key("runs", 2**40), "runs")
    with pytest.raises(InvalidArgumentError, match="Malformed"):
        CODEC.decode_key(signed_with_the_old_source_key("state", "secret-key"), "state")
