"""The MCP token of one claim of a remote run: the run's MCP endpoint accepts it only while that claim
holds the run.

Owns minting and recognising a fenced token. Does not own the fence (`stores/dispatch.py` bumps it on
each claim and requeue) or the endpoint's checks (`facts/server.py`).

A runtime never sees the run's own token: a claim's context carries `mcpf.<fence>.<mac>`, the
HMAC-SHA256 of `<run_id>:<fence>` keyed by the stored hash of the run's token. Any replica can mint and
check it from the database (the hash never leaves the host), it is worthless for another run or another
fence, and once the run is claimed again (a new fence) or ends, the old runtime's MCP calls are refused.
"""

from __future__ import annotations

import hashlib
import hmac

FENCED_PREFIX = "mcpf."


def fenced_token(token_hash: str, run_id: str, fence: int) -> str:
    """The MCP token of claim `fence` of `run_id`, whose run token hashes to `token_hash`."""
    mac = hmac.new(bytes.fromhex(token_hash), f"{run_id}:{fence}".encode(), hashlib.sha256).hexdigest()
    return f"{FENCED_PREFIX}{fence}.{mac}"


def fence_of(token: str) -> int | None:
    """The fence a token claims to be of, or None when it is not a fenced token."""
    if not token.startswith(FENCED_PREFIX):
        return None
    fence, _, mac = token[len(FENCED_PREFIX) :].partition(".")
    if not (fence.isdigit() and len(fence) <= 10 and len(mac) == 64):
        return None
    return int(fence)


def fenced_matches(token: str, token_hash: str, run_id: str, fence: int) -> bool:
    """Constant-time: `token` is the MCP token of claim `fence` of `run_id`."""
    return hmac.compare_digest(token.encode(), fenced_token(token_hash, run_id, fence).encode())
