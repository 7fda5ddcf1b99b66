"""The HTTP clients of a running server: `send`, and `cancel --url`, on `mcphost.client`.

Owns `send`, which posts one event to a running `mcphost serve` and prints its result stream as `mcphost
run` does, and the cancel through `POST /v1/runs/{id}/cancel`. The HTTP exchange, the stream's resume
with `Last-Event-ID` and the error answers are the client's (`mcphost.client.AsyncClient`). Imports no
server module (not `mcphost.app`, the API, Starlette, SQLAlchemy or Alembic): a client starts at the cost
of its HTTP client (tests/mcphost/cli checks). Given the server's URL (`send --url`, `MCPHOST_URL`,
`cancel --url`) it reads no config and imports neither pydantic nor the protocol's models (`cmd_client`):
the event goes as the JSON the arguments make, and the server, which validates every event, answers a
bad one with the field at fault. Does not own the server (`_server`, `mcphost.serving`) nor
the cancel in the database (`_grants`, imported only without `--url`).

Invariants: the event has an id before the first POST (the envelope's default), so a POST retried after
a dropped connection returns the same run; the stream is resumed at most `SEND_RECONNECTS` times in a
row, and a replayed result is never shown twice (the client hands each out once).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from mcphost.cli._common import EXIT_FAILED, EXIT_OK, dump, event_payload, fail
from mcphost.client import APIConnectionError, APIError, AsyncClient

if TYPE_CHECKING:
    from mcphost.config import Settings

JSONObject = dict[str, Any]


def _client(args: argparse.Namespace, url: str) -> AsyncClient:
    # "" (not None) when the variable is unset: no Authorization header, and no fallback to another one.
    return AsyncClient(url, api_key=os.environ.get(args.api_key_env) or "", reconnects=SEND_RECONNECTS)


class _ReplyPrinter:
    """Shows a result stream the way `mcphost run` does: deltas live, else the final message."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        self.streamed = False
        self.final_text: str | None = None

    def result(self, item: JSONObject) -> None:
        if self.as_json:
            dump(item)
            return
        data: JSONObject = item.get("data") or {}
        if item.get("type") == "message.delta":
            delta: JSONObject = data.get("chunk") or {}
            chunk = delta.get("content")
            if chunk:
                sys.stdout.write(chunk)
                sys.stdout.flush()
                self.streamed = True
        elif item.get("type") == "message.completed" or (
            item.get("type") == "run.completed" and data.get("message")
        ):
            message: JSONObject = data.get("message") or {}
            self.final_text = message.get("content")

    def finish(self) -> None:
        if self.as_json:
            return
        if not self.streamed and self.final_text:
            sys.stdout.write(self.final_text)
        if self.streamed or self.final_text:
            sys.stdout.write("\n")
        sys.stdout.flush()


SEND_RECONNECTS = 5


async def cmd_client(args: argparse.Namespace) -> int:
    """`send` with the server's URL given (`--url`, `MCPHOST_URL`) and `cancel --url`: no config read."""
    if args.command == "cancel":
        return await _cancel_over_http(args)
    return await _send(args, (args.url or os.environ["MCPHOST_URL"]).rstrip("/"))


async def cmd_send(args: argparse.Namespace, settings: Settings) -> int:
    """`send` to the server this config advertises (its `[host] public_url`, or the address it serves on)."""
    from mcphost.common.served import advertised_url

    url = advertised_url(settings.host.data_dir, settings.host.public_url, settings.host.listen)
    return await _send(args, url.rstrip("/"))


async def _send(args: argparse.Namespace, url: str) -> int:
    event = event_payload(args)
    printer = _ReplyPrinter(as_json=args.json)
    async with _client(args, url) as client:
        try:
            async with client.events.stream(event) as stream:
                async for item in stream:
                    printer.result(item.raw)
        except APIError as exc:
            return fail(f"{exc.code}: {exc.message}")
        except APIConnectionError as exc:
            return fail(str(exc))
    printer.finish()
    end = stream.end
    assert end is not None  # the stream returns only after its end
    error = end.error
    line = f"{end.run_id}  {end.status}" + (f"  {error.code}: {error.message}" if error else "")
    if args.json:
        error_json = (
            None
            if error is None
            else {"code": error.code, "message": error.message, "details": error.details}
        )
        dump({"run_id": end.run_id, "status": end.status, "error": error_json})
    else:
        print(line, file=sys.stderr)
    return EXIT_OK if end.status == "completed" else EXIT_FAILED


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """Cancel a run (an inspection grant is revoked) in the database, where the host running it sees the
    request and ends it; with `--url` it is `cmd_client`'s, through `POST /v1/runs/{id}/cancel`."""
    from mcphost.cli._grants import cancel_in_database

    return await cancel_in_database(args, settings)


async def _cancel_over_http(args: argparse.Namespace) -> int:
    async with _client(args, args.url.rstrip("/")) as client:
        try:
            answer = await client.runs.cancel(args.run_id, reason=args.reason)
        except APIError as exc:
            return fail(f"{exc.code}: {exc.message}")
        except APIConnectionError as exc:
            return fail(str(exc))
    print(f"{args.run_id}: {answer.status}, cancel requested", file=sys.stderr)
    return EXIT_OK
