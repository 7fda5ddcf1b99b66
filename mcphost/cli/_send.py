"""The HTTP clients of a running server: `send`, and `cancel --url`.

Owns `send`, which posts one event to a running `mcphost serve` and follows its result stream (SSE), and
the cancel through `POST /v1/runs/{id}/cancel`. Imports no server module (not `mcphost.app`, the API,
Starlette, SQLAlchemy or Alembic): a client starts at the cost of its HTTP client (tests/mcphost/cli
checks). Does not own the server (`_server`, `mcphost.serving`) nor the cancel in the database
(`_grants`, imported only without `--url`).

Invariants: `send` gives every event an id before the first POST, so a retried POST returns the same
run; it reconnects at most `SEND_RECONNECTS` times with `Last-Event-ID`, after a jittered exponential
wait (`mcphost.common.backoff`, `SEND_BACKOFF_INITIAL_S` to `SEND_BACKOFF_MAX_S`), and a replayed result
is never shown twice.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import anyio
import httpx2

from mcphost.cli._common import EXIT_FAILED, EXIT_OK, dump, event_from_args, fail
from mcphost.common.backoff import Backoff
from mcphost.common.served import advertised_url
from mcphost.config import Settings
from mcphost.models import RunStatus, new_id
from mcphost.protocol import JSONObject


def _server_url(args: argparse.Namespace, settings: Settings) -> str:
    return (
        args.url
        or os.environ.get("MCPHOST_URL")
        or advertised_url(settings.host.data_dir, settings.host.public_url, settings.host.listen)
    ).rstrip("/")


def _api_error(response: httpx2.Response, body: bytes) -> str:
    try:
        error = json.loads(body)["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {body[:200].decode(errors='replace')}"


class _ReplyPrinter:
    """Shows a result stream the way `mcphost run` does: deltas live, else the final message."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        self.streamed = False
        self.final_text: str | None = None
        self.last_seq = 0

    def result(self, item: JSONObject) -> None:
        seq = item.get("seq")
        if not isinstance(seq, int) or seq <= self.last_seq:
            return  # a replayed stream repeats what was shown already
        self.last_seq = seq
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
SEND_BACKOFF_INITIAL_S = 0.2
SEND_BACKOFF_MAX_S = 3.0


async def cmd_send(args: argparse.Namespace, settings: Settings) -> int:
    if not args.event_id:
        args.event_id = new_id("evt")  # makes a retried POST idempotent: it returns the same run
    event = event_from_args(args)
    url = _server_url(args, settings)
    key = os.environ.get(args.api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    printer = _ReplyPrinter(as_json=args.json)
    run_id: str | None = None
    end: JSONObject | None = None
    backoff = Backoff(SEND_BACKOFF_INITIAL_S, SEND_BACKOFF_MAX_S)
    async with httpx2.AsyncClient(
        base_url=url, headers=headers, timeout=httpx2.Timeout(30, read=None)
    ) as client:
        for attempt in range(SEND_RECONNECTS + 1):
            if run_id is None:
                request = client.stream(
                    "POST",
                    "/v1/events",
                    params={"stream": "true"},
                    content=event.model_dump_json(),
                    headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
                )
            else:
                request = client.stream(
                    "GET",
                    f"/v1/runs/{run_id}/results",
                    headers={"Accept": "text/event-stream", "Last-Event-ID": str(printer.last_seq)},
                )
            try:
                async with request as response:
                    if response.status_code >= 400:
                        return fail(_api_error(response, await response.aread()))
                    async for sse in httpx2.EventSource(response):
                        payload: JSONObject = json.loads(sse.data) if sse.data else {}
                        if sse.event == "run":
                            run_id = payload["run_id"]
                        elif sse.event == "end":
                            end = payload
                        elif sse.event == "error":
                            return fail(f"{payload['error']['code']}: {payload['error']['message']}")
                        else:
                            printer.result(payload)
                if end is not None:
                    break
            except httpx2.TransportError as exc:
                if attempt == SEND_RECONNECTS or (run_id is None and isinstance(exc, httpx2.ConnectError)):
                    return fail(f"cannot reach mcphost at {url}: {exc}. Is `mcphost serve` running there?")
            await anyio.sleep(backoff.next())
    printer.finish()
    if end is None or run_id is None:
        return fail(
            f"the stream of run {run_id or '?'} ended without its result; see `mcphost show {run_id}`"
        )
    status = end.get("status")
    error: JSONObject = end.get("error") or {}
    line = f"{run_id}  {status}" + (f"  {error.get('code')}: {error.get('message')}" if error else "")
    if args.json:
        dump({"run_id": run_id, "status": status, "error": error or None})
    else:
        print(line, file=sys.stderr)
    return EXIT_OK if status == RunStatus.COMPLETED.value else EXIT_FAILED


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """Cancel a run (an inspection grant is revoked): through `POST /v1/runs/{id}/cancel` with `--url`,
    else in the database, where the host running it sees the request and ends it."""
    if args.url:
        return await _cancel_over_http(args)
    from mcphost.cli._grants import cancel_in_database

    return await cancel_in_database(args, settings)


async def _cancel_over_http(args: argparse.Namespace) -> int:
    key = os.environ.get(args.api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = args.url.rstrip("/")
    async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        try:
            response = await client.post(f"/v1/runs/{args.run_id}/cancel", json={"reason": args.reason})
        except httpx2.TransportError as exc:
            return fail(f"cannot reach mcphost at {url}: {exc}. Is `mcphost serve` running there?")
    body: JSONObject = response.json() if response.content else {}
    if response.status_code >= 400:
        error: JSONObject = body.get("error") or {}
        return fail(f"{error.get('code', response.status_code)}: {error.get('message', response.text[:200])}")
    print(f"{args.run_id}: {body.get('status')}, cancel requested", file=sys.stderr)
    return EXIT_OK
