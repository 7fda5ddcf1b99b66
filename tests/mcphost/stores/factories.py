"""Builders for the runs and grants store tests need (real models, sensible defaults)."""

from __future__ import annotations

import hashlib
import time
from typing import Any, cast

import sqlalchemy as sa

from mcphost.models import Run, RunGrant, RunStatus, new_id
from mcphost.stores import Stores


def new_run(
    conversation_id: str | None = "conv-1",
    *,
    event_id: str | None = None,
    thread_id: str | None = None,
    host_id: str | None = None,
    agent_id: str | None = "default",
) -> tuple[Run, RunGrant]:
    """A queued run and its grant, ready for `runs.admit`."""
    run_id = new_id("run")
    now = time.time()
    run = Run(
        run_id=run_id,
        event_id=event_id or new_id("evt"),
        event_type="message.received",
        agent_id=agent_id,
        runner_id="plugin:mcphost/echo/default",
        conversation_id=conversation_id,
        thread_id=thread_id,
        status=RunStatus.QUEUED,
        created_at=now,
        deadline_at=now + 300,
        host_id=host_id,
    )
    grant = RunGrant(
        run_id=run_id,
        runner_id=run.runner_id,
        plugin="mcphost/echo",
        binding_id="default",
        conversation_id=conversation_id,
        thread_id=thread_id,
        actor_id="user-1",
        subject_type=None,
        subject_id=None,
        bot_id=None,
        workspace_id=None,
        tools=frozenset({"history_page", "state_get"}),
        state_read=frozenset({"conversation"}),
        state_write=frozenset({"conversation"}),
        deadline_at=run.deadline_at,
        token_hash=hashlib.sha256(run_id.encode()).hexdigest(),
    )
    return run, grant


async def admitted(stores: Stores, conversation_id: str | None = "conv-1", **kwargs: str | None) -> Run:
    """A run admitted with the `enqueue` policy."""
    run, grant = new_run(conversation_id, **kwargs)
    stored, created = await stores.runs.admit(run, grant=grant, concurrency="enqueue")
    assert created
    return stored


def nested_json(depth: int) -> str:
    """The JSON text of `depth` arrays nested in one another."""
    return "[" * depth + "]" * depth


async def overwrite_json(stores: Stores, table: str, column: str, text: str, **where: str | int) -> None:
    """Write `text` into a JSON column straight through SQL, past every check of the stores: what an
    older version or a hand edit may have left behind."""
    value = "CAST(:value AS json)" if stores.db.dialect == "postgresql" else ":value"
    condition = " AND ".join(f"{name} = :{name}" for name in where)
    statement = sa.text(f"UPDATE {table} SET {column} = {value} WHERE {condition}")  # test-only names
    async with stores.db.write() as session:
        updated = cast("sa.CursorResult[Any]", await session.execute(statement, {"value": text, **where}))
    assert updated.rowcount == 1, (table, where)
