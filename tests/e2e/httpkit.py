"""Test helpers for the HTTP host: a configured host, the real app in process or under uvicorn, SSE parsing.

`api_settings` is the hostkit host (echo + misbehave plugins) plus the probe plugin (`probe_plugin.py`, a
runner that reads host facts over the per-run MCP endpoint). `asgi_client` drives the real app through
`httpx2.ASGITransport` (no sockets; the response body arrives whole); `served` runs it under uvicorn on a
free loopback port in the test's event loop, so streams, disconnects and the MCP endpoint are real HTTP.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
from sqlalchemy import func, select

from mcphost.api import ApiLimits, ApiState
from mcphost.app import Host, build_app
from mcphost.config import PluginConfig, Settings
from mcphost.models import RunStatus
from mcphost.serving import bind_socket, serve_http
from mcphost.stores import Stores
from mcphost.stores.tables import Base
from tests.mcphost.hostkit import REPO, agent, host_settings

PROBE = [sys.executable, str(REPO / "tests" / "e2e" / "probe_plugin.py")]
PROBE_RUNNER = "plugin:test/probe/default"
PROBE_PROMPT = "You are the probe."


def api_settings(database_url: str, data_dir: Path, **host: Any) -> Settings:
    """hostkit's agents (selected by bot_id: echo, bad, short, rej, int, wide) plus `probe`."""
    base = host_settings(database_url, data_dir, **host)
    return base.model_copy(
        update={
            "plugins": [*base.plugins, PluginConfig(command=PROBE, name="probe")],
            "agents": [*base.agents, agent("probe", PROBE_RUNNER, prompt=PROBE_PROMPT, timeout_s=60)],
        }
    )


def event_body(text: str, *, bot: str = "echo", conversation: str = "c1", **extra: Any) -> dict[str, Any]:
    return {
        "event_type": "message.received",
        "conversation": {"conversation_id": conversation, "bot_id": bot},
        "actor": {"actor_id": "u1"},
        "input": {"text": text},
        **extra,
    }


@asynccontextmanager
async def asgi_client(
    host: Host, *, limits: ApiLimits | None = None, headers: dict[str, str] | None = None
) -> AsyncGenerator[httpx2.AsyncClient]:
    app = build_app(host, limits=limits)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://127.0.0.1:8787", headers=headers, timeout=30
    ) as client:
        yield client


def state_of(client: httpx2.AsyncClient) -> ApiState:
    transport = client._transport  # pyright: ignore[reportPrivateUsage]
    assert isinstance(transport, httpx2.ASGITransport)
    state = transport.app.state.api  # pyright: ignore[reportFunctionMemberAccess,reportAttributeAccessIssue]
    assert isinstance(state, ApiState)
    return state


@dataclass(frozen=True)
class Served:
    url: str
    state: ApiState
    """The served app's state (flip `draining` through it)."""


@asynccontextmanager
async def serve_app(host: Host, *, limits: ApiLimits | None = None) -> AsyncGenerator[Served]:
    """The real app under uvicorn on a free loopback port; runners reach their MCP endpoint through it."""
    app = build_app(host, limits=limits)
    state = app.state.api
    assert isinstance(state, ApiState)
    sock = bind_socket("127.0.0.1", 0)
    with sock:
        async with serve_http(app, sock) as url:
            previous = host.orchestrator.public_url
            host.orchestrator.public_url = url
            try:
                yield Served(url, state)
            finally:
                host.orchestrator.public_url = previous


@asynccontextmanager
async def served(host: Host, *, limits: ApiLimits | None = None) -> AsyncGenerator[str]:
    """`serve_app`, yielding only the base URL."""
    async with serve_app(host, limits=limits) as found:
        yield found.url


@dataclass(frozen=True)
class Sse:
    event: str
    data: Any
    id: str | None


def parse_sse(text: str) -> list[Sse]:
    """Every event of an SSE body (comments and `retry:` skipped)."""
    events: list[Sse] = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        if "data" in fields:
            events.append(Sse(fields.get("event", "message"), json.loads(fields["data"]), fields.get("id")))
    return events


STREAM_EVENTS = frozenset({"run", "end", "error"})
"""The stream's own SSE events; every other event is a result, named by its type."""


def results_of(events: list[Sse]) -> list[dict[str, Any]]:
    """The results among `events`: each one's SSE event name is its type."""
    results = [e.data for e in events if e.event not in STREAM_EVENTS]
    assert all(e.event == e.data["type"] for e in events if e.event not in STREAM_EVENTS), events
    return results


async def row_counts(stores: Stores) -> dict[str, int]:
    """Rows per table: equal counts before and after mean a request stored nothing. `channel_status` is
    left out: it is a counter row a channel's first ignored event creates (`stores/channels.py`), no
    stored request."""
    counts: dict[str, int] = {}
    async with stores.db.read() as session:
        for table in Base.metadata.sorted_tables:
            if table.name == "channel_status":
                continue
            counts[table.name] = (await session.execute(select(func.count()).select_from(table))).scalar_one()
    return counts


async def wait_status(stores: Stores, run_id: str, status: RunStatus, timeout: float = 30) -> None:
    """Poll until the run has `status` (a test-side wait: runs move on their own tasks)."""
    for _ in range(int(timeout / 0.02)):
        if (await stores.runs.get(run_id)).status is status:
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"run {run_id} never reached {status}")


def blob_files(data_dir: Path) -> list[Path]:
    """Blob and staging files on disk."""
    root = data_dir / "blobs"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
