"""Issue 10, item 5: a cursor carrying a position at or past 2^63 gave an HTTP 500 on both stores."""

from __future__ import annotations

import httpx2

from mcphost.app import Host
from tests.mcphost.test_api import error_of
from tests.mcphost.test_api_bounds import HUGE, a_finished_run, cursor


async def test_cursors_carrying_positions_past_64_bits_are_400_not_500(
    host: Host, client: httpx2.AsyncClient
) -> None:
    """Issue 10, item 5: a cursor carrying a position at or past 2^63 gave an HTTP 500 on both stores."""
    await a_finished_run(host, client)
    for value in [-1, *HUGE, "text", 1.5, None]:
        for path, kind, names in [
            ("/v1/runs", "runs", ["cursor"]),
            ("/v1/conversations/talk/transcript", "transcript", ["before", "after"]),
            ("/v1/conversations/talk/events", "events", ["before", "after"]),
        ]:
            for name in names:
                response = await client.get(path, params={name: cursor(host, kind, value)})  # pyright: ignore[reportArgumentType]
                error = error_of(response, 400, "invalid_argument")
                assert "Malformed" in error["message"], error
