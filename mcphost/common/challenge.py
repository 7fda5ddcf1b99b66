"""The `WWW-Authenticate` value of a 401: an RFC 6750 bearer challenge that carries mcphost's reason.

Owns spelling the challenge, nothing about deciding to refuse. Both 401 sources use it: the `/v1` API (the
API key, `api/_errors.py`) and the per-run MCP endpoints (the run token, `facts/server.py`).

Invariants: the value is always `Bearer realm="mcphost", error="invalid_token", error_description="…"`, and
`error_description` holds only the characters RFC 6750 §3 allows there (printable ASCII without `"` and
`\\`), at most `MAX_DESCRIPTION` of them, so any reason is a valid header. The error is `invalid_token` even
when no token was sent (where RFC 6750 says a server SHOULD NOT name an error): mcphost offers no OAuth
flow to start, and OAuth-aware clients such as the MCP Inspector show `error_description` only with an
error, while a bare challenge sends them looking for an authorization server that does not exist.
"""

from __future__ import annotations

import re

MAX_DESCRIPTION = 300
"""Longest `error_description` sent; a longer reason is cut and ends in `...`."""

_OUTSIDE_RFC6750 = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")


def bearer_challenge(reason: str) -> str:
    """`Bearer realm="mcphost", error="invalid_token", error_description="<reason>"`, header-safe."""
    text = _OUTSIDE_RFC6750.sub(lambda m: "'" if m.group() == '"' else " ", reason)
    text = " ".join(text.split())
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 3] + "..."
    return f'Bearer realm="mcphost", error="invalid_token", error_description="{text}"'
