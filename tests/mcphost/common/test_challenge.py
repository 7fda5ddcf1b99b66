"""`bearer_challenge`: every reason becomes a valid RFC 6750 challenge that still says why."""

from __future__ import annotations

import re

from mcphost.common.challenge import MAX_DESCRIPTION, bearer_challenge

# RFC 6750 §3: error_description = *( %x20-21 / %x23-5B / %x5D-7E ), inside a quoted-string.
_CHALLENGE = re.compile(
    r'^Bearer realm="mcphost", error="invalid_token", error_description="([\x20\x21\x23-\x5b\x5d-\x7e]*)"$'
)


def description(reason: str) -> str:
    match = _CHALLENGE.fullmatch(bearer_challenge(reason))
    assert match is not None, bearer_challenge(reason)
    return match.group(1)


def test_a_plain_reason_is_carried_unchanged() -> None:
    reason = "run 'run_01' has ended (completed); its token no longer works"
    assert description(reason) == reason


def test_quotes_backslashes_controls_and_non_ascii_cannot_break_the_header() -> None:
    assert description('say "hi"') == "say 'hi'"
    assert description("a\\b\r\nSet-Cookie: x=1\x00\tend") == "a b Set-Cookie: x=1 end"
    assert description("café ☕ run") == "caf run"
    assert description("") == ""


def test_a_long_reason_is_cut_to_the_limit() -> None:
    cut = description("x" * 10_000)
    assert len(cut) == MAX_DESCRIPTION
    assert cut.endswith("...")
