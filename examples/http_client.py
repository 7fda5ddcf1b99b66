"""Post an event to a running `mcphost serve` and stream the reply, with the Python standard library only.

    uv run mcphost serve &                       # the server (add [host] api_key to expose it)
    python examples/http_client.py "hello"       # → the agent's reply, streamed as it is produced

Options: --url (default $MCPHOST_URL or http://127.0.0.1:8787), --conversation, --actor. The API key,
when the server has one, is read from $MCPHOST_API_KEY.

`POST /v1/events?stream=true` answers with Server-Sent Events: first `event: run` ({run_id, status,
created}), then one event per result, named by its type (`event: message.delta`), with
`id: <sequence>` and the result as `data`, and finally `event: end` ({run_id, status, error?}). If the connection drops, this script reconnects to
`GET /v1/runs/{run_id}/results` with `Last-Event-ID: <last sequence seen>` and receives the rest exactly
once. The event carries its own `event_id`, so even a retried POST cannot start a second run.
Exit status: 0 when the run completed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any


def sse_events(response: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event name, JSON data) for each event of an SSE response (comments skipped)."""
    event, data = "message", ""
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield event, json.loads(data)
            event, data = "message", ""
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()


def main() -> int:
    parser = argparse.ArgumentParser(description="Send a message to mcphost and stream the reply.")
    parser.add_argument("text")
    parser.add_argument("--url", default=os.environ.get("MCPHOST_URL", "http://127.0.0.1:8787"))
    parser.add_argument("--conversation", default="http-example")
    parser.add_argument("--actor", default="example-user")
    args = parser.parse_args()

    base = args.url.rstrip("/")
    headers = {"Accept": "text/event-stream"}
    if os.environ.get("MCPHOST_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['MCPHOST_API_KEY']}"
    event = {
        "event_id": f"evt_{uuid.uuid4().hex}",
        "event_type": "message.received",
        "conversation": {"conversation_id": args.conversation},
        "actor": {"actor_id": args.actor},
        "input": {"text": args.text},
    }

    run_id, last_seq, streamed, end = None, 0, False, None
    for attempt in range(6):
        if run_id is None:
            request = urllib.request.Request(
                f"{base}/v1/events?stream=true",
                data=json.dumps(event).encode(),
                headers={**headers, "Content-Type": "application/json"},
                method="POST",
            )
        else:
            request = urllib.request.Request(
                f"{base}/v1/runs/{run_id}/results", headers={**headers, "Last-Event-ID": str(last_seq)}
            )
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                for name, data in sse_events(response):
                    if name == "run":
                        run_id = data["run_id"]
                    elif name == "end":
                        end = data
                    elif name == "error":
                        error = data["error"]
                        print(f"error: {error['code']}: {error['message']}", file=sys.stderr)
                        return 1
                    elif data["seq"] > last_seq:  # a result, its event named by its type
                        last_seq = data["seq"]
                        if data["type"] == "message.delta":
                            print(data["data"]["chunk"].get("content") or "", end="", flush=True)
                            streamed = True
                        elif data["data"].get("message") and not streamed:  # message.completed, run.completed
                            print(data["data"]["message"].get("content") or "", end="", flush=True)
                            streamed = True
            if end is not None:
                break
        except urllib.error.HTTPError as exc:
            error = json.loads(exc.read() or b"{}").get("error", {})
            print(f"error: {exc.code} {error.get('code')}: {error.get('message')}", file=sys.stderr)
            return 1
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            if run_id is None and attempt == 0:
                print(f"error: cannot reach {base}: {exc}", file=sys.stderr)
                return 1
            time.sleep(0.5 * (attempt + 1))  # then resume from the last sequence seen
    print()
    if end is None:
        print(f"error: the stream of run {run_id} did not finish", file=sys.stderr)
        return 1
    print(f"run {end['run_id']}: {end['status']}", file=sys.stderr)
    return 0 if end["status"] == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
