"""Serving from the command line: `serve`.

Owns starting the HTTP server from the command line. Does not own the server itself (`mcphost.serving`),
its HTTP clients (`_send`) nor in-process runs (`_runs`).

Invariant: `serve` runs on uvloop exactly when `loop_options` asks for it (the CLI passes it to
`anyio.run`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
from typing import TYPE_CHECKING

from mcphost.cli._common import EXIT_OK

if TYPE_CHECKING:
    from mcphost.config import Settings


def loop_options(settings: Settings) -> dict[str, bool]:
    """anyio's asyncio backend options for `mcphost serve`: uvloop when it is installed (the
    `mcphost[speed]` extra) and `[host] uvloop` (`MCPHOST_UVLOOP`) is not false."""
    if settings.host.uvloop and importlib.util.find_spec("uvloop") is not None:
        return {"use_uvloop": True}
    return {}


async def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    def ready(url: str) -> None:
        loop = type(asyncio.get_running_loop()).__module__.partition(".")[0]  # uvloop or asyncio
        print(
            f"mcphost: serving on {url} (API at {url}/v1, per-run MCP at {url}/runs/<run_id>/mcp; "
            f"on the {loop} event loop)",
            file=sys.stderr,
            flush=True,
        )

    # Imported here: the command line reads `loop_options` before the plugins are spawned, and the server
    # stack is imported only after (`mcphost.app.plugins_first`).
    from mcphost.api import ApiLimits
    from mcphost.serving import serve

    limits = ApiLimits(max_upload_bytes=args.max_upload_bytes)
    await serve(settings, listen=args.listen, grace_s=args.grace, limits=limits, on_ready=ready)
    print("mcphost: stopped", file=sys.stderr)
    return EXIT_OK
