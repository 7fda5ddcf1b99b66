"""A generated PostgreSQL database at a chosen scale: conversations, transcript, event log, runs, audit.

Owns writing rows the app reads, in the real schema (`mcphost.stores.tables`, migrated first by the
caller), through asyncpg's binary `COPY` (`copy_records_to_table`), table by table, each in one
transaction followed by `VACUUM (ANALYZE)` (what autovacuum would have done on a live database: the
statistics, the visibility map, and the GIN index's pending list merged into the index). Scale 1 is 1M conversations, 50M transcript rows, 50M event-log rows,
5M runs and 5M audit rows (`FULL`); scale 1/5000 is the 10k-row database the big one is compared with.

Shape (deterministic: row i of a table is a function of i and the scale):
- conversation j is `conv-<j>` of actor `actor-<j mod actors>` (ten conversations per actor);
- one conversation, `conv-long`, holds every `LONG_EVERY`-th transcript and event-log row (1/20 of each:
  2.5M at scale 1); the other rows go round-robin over the conversations (50 each at scale 1), so a
  conversation's rows are spread over the whole table as they would be in time;
- transcript text draws two words of a 5,000-word vocabulary (`w<k>`) per item, so a word matches about
  1 item in 2,500 (`SEARCH_WORD` is one of them);
- runs: created in order over `SPAN_S` (the last `HELD_RUNS` are queued or running, 1 in 50 failed, 1 in
  97 cancelled, the rest completed), 20 agents, 5 API keys creating a third of them; one audit row each;
- `created_at` grows with the row number over `SPAN_S` ending an hour ago, on every table.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import make_url

from bench._bulk import EVENT_COLUMNS, TRANSCRIPT_COLUMNS, batches
from bench._pgconn import connect_pg
from mcphost.models import RunGrant

FULL = {"conversations": 1_000_000, "transcript": 50_000_000, "events": 50_000_000, "runs": 5_000_000}
"""Rows at scale 1 (audit rows: one per run)."""
SMALL_SCALE = 10_000 / FULL["transcript"]
"""The 10k-row database: 10k transcript and event-log rows, 1k runs, 200 conversations."""
LONG = "conv-long"
LONG_EVERY = 20
VOCABULARY = 5_000
SEARCH_WORD = "w1234"
SPAN_S = 400 * 86_400.0
HELD_RUNS = 5
AGENTS = 20
KEYS = 5
RUNNER = "plugin:mcphost/echo/default"

RUN_COLUMNS = (
    "run_id",
    "event_id",
    "attempt",
    "event_type",
    "agent_id",
    "runner_id",
    "conversation_id",
    "thread_id",
    "status",
    "created_at",
    "started_at",
    "ended_at",
    "deadline_at",
    "error",
    "usage",
    "host_id",
    "grant",
    "token_hash",
    "revoked_at",
    "created_by",
)
AUDIT_COLUMNS = (
    "run_id",
    "seq",
    "tool",
    "args_digest",
    "bytes_in",
    "bytes_out",
    "outcome",
    "code",
    "duration_ms",
    "created_at",
)
EVENT_TYPES = ("message.received", "tool.call.started", "tool.call.completed", "message.completed")


@dataclass(frozen=True)
class Plan:
    """Row counts of one generated database."""

    scale: float
    conversations: int
    transcript: int
    events: int
    runs: int
    start: float
    """`created_at` of row 0 of every table."""

    @classmethod
    def at(cls, scale: float, *, now: float | None = None) -> Plan:
        counts = {name: max(10, round(n * scale)) for name, n in FULL.items()}
        end = (time.time() if now is None else now) - 3600
        return cls(
            scale,
            counts["conversations"],
            counts["transcript"],
            counts["events"],
            counts["runs"],
            end - SPAN_S,
        )

    @property
    def audit(self) -> int:
        return self.runs

    def created_at(self, table_rows: int, i: int) -> float:
        """`created_at` of row `i` of a table of `table_rows` rows."""
        return self.start + SPAN_S * i / table_rows

    def conversation(self, i: int) -> str:
        """The conversation of transcript / event-log row `i`."""
        return LONG if i % LONG_EVERY == 0 else conversation_id(i % self.conversations)

    def run_id(self, i: int) -> str:
        return f"run_g{i:09d}"

    def run_conversation(self, i: int) -> str:
        return LONG if i % LONG_EVERY == 0 else conversation_id(i % self.conversations)

    def status(self, i: int) -> str:
        if i >= self.runs - HELD_RUNS:
            return "queued" if i >= self.runs - 3 else "running"
        if i % 50 == 0:
            return "failed"
        return "cancelled" if i % 97 == 1 else "completed"


def conversation_id(j: int) -> str:
    return f"conv-{j:07d}"


def actor_of(conversation: str) -> str:
    """The actor of a generated conversation (`conv-long`'s is `actor-long`)."""
    return "actor-long" if conversation == LONG else f"actor-{int(conversation[5:]) // 10}"


def _word(i: int, salt: int) -> str:
    return f"w{(i * 7919 + salt * 104_729) % VOCABULARY}"


def transcript_rows(plan: Plan) -> Iterator[tuple[Any, ...]]:
    n = plan.transcript
    for i in range(n):
        conversation = plan.conversation(i)
        user = i % 2 == 0
        text = f"turn {i // 2} about {_word(i, 1)} and {_word(i, 2)}: the quick brown fox jumps over the lazy dog"
        yield (
            f"itm_g{i:09d}",
            conversation,
            "",
            "user" if user else "assistant",
            text,
            json.dumps([{"type": "text", "text": text}]),
            "[]",
            f"evt_g{i:09d}" if user else None,
            plan.run_id(i * plan.runs // n),
            actor_of(conversation) if user else None,
            plan.created_at(n, i),
        )


def event_rows(plan: Plan) -> Iterator[tuple[Any, ...]]:
    n = plan.events
    for i in range(n):
        conversation = plan.conversation(i)
        event_type = EVENT_TYPES[i % len(EVENT_TYPES)]
        yield (
            f"evt_g{i:09d}",
            event_type,
            "inbound" if event_type == "message.received" else "telemetry",
            conversation,
            "",
            plan.run_id(i * plan.runs // n),
            actor_of(conversation),
            "api",
            json.dumps({"i": i, "tool_name": "search", "parameters": {"q": _word(i, 3)}}),
            plan.created_at(n, i),
        )


def _grant_template() -> str:
    grant = RunGrant(
        run_id="@RUN@",
        runner_id=RUNNER,
        plugin="mcphost/echo",
        binding_id="default",
        conversation_id="@CONV@",
        thread_id=None,
        actor_id="@ACTOR@",
        subject_type=None,
        subject_id=None,
        bot_id=None,
        workspace_id=None,
        tools=frozenset({"history_page", "history_search", "state_get"}),
        state_read=frozenset({"conversation"}),
        state_write=frozenset({"conversation"}),
        deadline_at=0.0,
        token_hash="@HASH@",
    )
    return json.dumps(grant.model_dump(mode="json"))


def run_rows(plan: Plan) -> Iterator[tuple[Any, ...]]:
    template = _grant_template()
    failed = json.dumps({"code": "runner.error", "message": "generated failure", "details": {}})
    usage = json.dumps({"input_tokens": 120, "output_tokens": 40})
    for i in range(plan.runs):
        run_id, conversation, status = plan.run_id(i), plan.run_conversation(i), plan.status(i)
        created = plan.created_at(plan.runs, i)
        finished = status not in ("queued", "running")
        token_hash = hashlib.sha256(run_id.encode()).hexdigest()
        grant = (
            template.replace("@RUN@", run_id)
            .replace("@CONV@", conversation)
            .replace("@ACTOR@", actor_of(conversation))
            .replace("@HASH@", token_hash)
        )
        yield (
            run_id,
            f"evt_r{i:09d}",
            1,
            "message.received",
            f"agent-{i % AGENTS}",
            RUNNER,
            conversation,
            "",
            status,
            created,
            None if status == "queued" else created + 0.05,
            created + 2.0 if finished else None,
            created + 300.0,
            failed if status == "failed" else None,
            usage,
            "host-generated",
            grant,
            token_hash,
            created + 2.0 if finished else None,
            f"key-{i % KEYS}" if i % 3 == 0 else None,
        )


def audit_rows(plan: Plan) -> Iterator[tuple[Any, ...]]:
    for i in range(plan.runs):
        yield (
            plan.run_id(i),
            1,
            "history_page",
            hashlib.sha256(str(i).encode()).hexdigest(),
            64,
            2048,
            "ok",
            None,
            3.5,
            plan.created_at(plan.runs, i) + 1.0,
        )


TABLES: tuple[tuple[str, Sequence[str]], ...] = (
    ("runs", RUN_COLUMNS),
    ("audit", AUDIT_COLUMNS),
    ("transcript", TRANSCRIPT_COLUMNS),
    ("events", EVENT_COLUMNS),
)


def rows_of(plan: Plan, table: str) -> Iterator[tuple[Any, ...]]:
    if table == "runs":
        return run_rows(plan)
    if table == "audit":
        return audit_rows(plan)
    if table == "transcript":
        return transcript_rows(plan)
    assert table == "events", table
    return event_rows(plan)


def driver_dsn(database_url: str) -> str:
    """The plain `postgresql://` DSN asyncpg takes for a SQLAlchemy URL."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


async def generate(database_url: str, plan: Plan) -> dict[str, float]:
    """COPY every table of `plan` into the migrated PostgreSQL database; seconds per table."""
    seconds: dict[str, float] = {}
    conn = await connect_pg(driver_dsn(database_url))
    try:
        for table, columns in TABLES:
            started = time.perf_counter()
            async with conn.transaction():
                for batch in batches(rows_of(plan, table)):
                    await conn.copy_records_to_table(table, records=batch, columns=list(columns))
            await conn.execute(f"VACUUM (ANALYZE) {table}")
            seconds[table] = time.perf_counter() - started
    finally:
        await conn.close()
    return seconds


async def table_sizes(database_url: str) -> dict[str, tuple[int, int, int]]:
    """Per generated table: (rows, heap bytes with TOAST, index bytes)."""
    conn = await connect_pg(driver_dsn(database_url))
    try:
        out: dict[str, tuple[int, int, int]] = {}
        for table, _ in TABLES:
            rows = await conn.fetchval(f"SELECT count(*) FROM {table}")
            table_bytes = await conn.fetchval(f"SELECT pg_table_size('{table}')")
            index_bytes = await conn.fetchval(f"SELECT pg_indexes_size('{table}')")
            out[table] = (int(rows), int(table_bytes), int(index_bytes))
        return out
    finally:
        await conn.close()
