"""A generated PostgreSQL database at a chosen scale: conversations, transcript, event log, runs, audit.

Owns writing rows the app reads, in the real schema (`mcphost.stores.tables`, migrated first by the
caller). The rows are made where they are stored: one `INSERT … SELECT … FROM generate_series(…)` per
`CHUNK` rows (`FILL_SQL`), two tables at a time on two connections, with each table's secondary indexes
and foreign keys dropped before the fill and built after it (sorted builds, not one index insertion per
row and index), then `VACUUM (ANALYZE)` of each table (what autovacuum would have done on a live
database: statistics, visibility map, hint bits). Nothing crosses the network but the statements, so
the fill runs at PostgreSQL's speed, not at a client's. The `conversations` rows are those admission
would have left after the generated runs. Scale 1 is 1M conversations, 50M transcript rows, 50M
event-log rows, 5M runs and 5M audit rows (`FULL`); scale 1/5000 is the 10k-row database the big one is
compared with.

Shape (deterministic: row i of a table is a function of i and the scale):
- conversation j is `conv-<j>` of actor `actor-<j div 10>` (ten conversations per actor);
- one conversation, `conv-long`, holds every `LONG_EVERY`-th transcript and event-log row (1/20 of each:
  2.5M at scale 1); the other rows go round-robin over the conversations (50 each at scale 1), so a
  conversation's rows are spread over the whole table as they would be in time;
- transcript text draws two words of a 5,000-word vocabulary (`w<k>`) per item, so a word matches about
  1 item in 2,500, in every conversation;
- runs: created in order over `SPAN_S` (the last `HELD_RUNS` are queued or running, 1 in 50 failed, 1 in
  97 cancelled, the rest completed), 20 agents, 5 API keys creating a third of them; one audit row each;
- `created_at` grows with the row number over `SPAN_S` ending an hour ago, on every table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio
from sqlalchemy.engine import make_url

from bench._bulk import EVENT_COLUMNS, TRANSCRIPT_COLUMNS
from bench._pgconn import PgConnection, connect_pg
from mcphost.models import RunGrant

FULL = {"conversations": 1_000_000, "transcript": 50_000_000, "events": 50_000_000, "runs": 5_000_000}
"""Rows at scale 1 (audit rows: one per run)."""
SMALL_SCALE = 10_000 / FULL["transcript"]
"""The 10k-row database: 10k transcript and event-log rows, 1k runs, 200 conversations."""
LONG = "conv-long"
LONG_EVERY = 20
VOCABULARY = 5_000
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


TABLES: tuple[tuple[str, Sequence[str]], ...] = (
    ("runs", RUN_COLUMNS),
    ("audit", AUDIT_COLUMNS),
    ("transcript", TRANSCRIPT_COLUMNS),
    ("events", EVENT_COLUMNS),
)


def _conversation_sql(i: str) -> str:
    """SQL of `Plan.conversation` for the row number expression `i`."""
    return f"CASE WHEN {i} % {LONG_EVERY} = 0 THEN '{LONG}' ELSE 'conv-' || lpad(({i} % plan_conversations)::text, 7, '0') END"


def _actor_sql(i: str) -> str:
    """SQL of `actor_of(Plan.conversation(i))`."""
    return f"CASE WHEN {i} % {LONG_EVERY} = 0 THEN 'actor-long' ELSE 'actor-' || (({i} % plan_conversations) / 10) END"


def _word_sql(salt: int) -> str:
    """Word `salt` of row `i`: the high bits of a multiplicative (Fibonacci) hash of the two, so that
    the rows of any one conversation (an arithmetic progression of `i`) draw from the whole vocabulary.
    (`i * 7919 mod 5000` gave `conv-long`, every 20th row, 250 words, each matching 1 item in 250;
    the hash's low bits, 1,250 words.)"""
    return f"'w' || (((i + {salt * 1_000_003}) * 2654435761) % 4294967296 / 65536 % {VOCABULARY})"


def _columns(names: Sequence[str]) -> str:
    return ", ".join(f'"{name}"' for name in names)  # `grant` is a reserved word


def _padded(prefix: str, number: str) -> str:
    return f"'{prefix}' || lpad(({number})::text, 9, '0')"


_ROWS = (
    "generate_series($1::int8, $2::int8 - 1) AS i CROSS JOIN (SELECT $3::int8 AS plan_conversations, "
    "$4::int8 AS plan_rows, $5::int8 AS plan_runs, $6::float8 AS plan_start, $7::float8 AS plan_span) AS p"
)
"""Row numbers [$1, $2) with the plan's figures as the one row `p` (`plan_rows` is the table's); every fill
statement takes these seven parameters (the run fill an eighth: the grant template)."""
_CREATED = "plan_start + plan_span * i / plan_rows"
_RUN_OF_ROW = _padded("run_g", "i * plan_runs / plan_rows")

FILL_SQL: dict[str, str] = {
    "transcript": f"""
INSERT INTO transcript ({_columns(TRANSCRIPT_COLUMNS)})
SELECT {_padded("itm_g", "i")}, conversation, '', CASE WHEN i % 2 = 0 THEN 'user' ELSE 'assistant' END,
       body, json_build_array(json_build_object('type', 'text', 'text', body)), '[]'::json,
       CASE WHEN i % 2 = 0 THEN {_padded("evt_g", "i")} END, {_RUN_OF_ROW},
       CASE WHEN i % 2 = 0 THEN actor END, {_CREATED}
FROM (SELECT i, p.*, {_conversation_sql("i")} AS conversation, {_actor_sql("i")} AS actor,
             'turn ' || (i / 2) || ' about ' || {_word_sql(1)} || ' and ' || {_word_sql(2)}
             || ': the quick brown fox jumps over the lazy dog' AS body
      FROM {_ROWS}) AS g""",
    "events": f"""
INSERT INTO events ({_columns(EVENT_COLUMNS)})
SELECT {_padded("evt_g", "i")}, event_type,
       CASE WHEN event_type = 'message.received' THEN 'inbound' ELSE 'telemetry' END,
       {_conversation_sql("i")}, '', {_RUN_OF_ROW}, {_actor_sql("i")}, 'api',
       json_build_object('i', i, 'tool_name', 'search', 'parameters', json_build_object('q', {_word_sql(3)})),
       {_CREATED}
FROM (SELECT i, p.*, (ARRAY[{", ".join(f"'{t}'" for t in EVENT_TYPES)}])[i % {len(EVENT_TYPES)} + 1] AS event_type
      FROM {_ROWS}) AS g""",
    "runs": f"""
INSERT INTO runs ({_columns(RUN_COLUMNS)})
SELECT run_id, {_padded("evt_r", "i")}, 1, 'message.received', 'agent-' || (i % {AGENTS}), '{RUNNER}',
       conversation, '', status, created,
       CASE WHEN status = 'queued' THEN NULL ELSE created + 0.05 END,
       CASE WHEN status IN ('queued', 'running') THEN NULL ELSE created + 2.0 END,
       created + 300.0,
       CASE WHEN status = 'failed'
            THEN '{{"code": "runner.error", "message": "generated failure", "details": {{}}}}'::json END,
       '{{"input_tokens": 120, "output_tokens": 40}}'::json, 'host-generated',
       replace(replace(replace(replace($8::text, '@RUN@', run_id), '@CONV@', conversation),
               '@ACTOR@', actor), '@HASH@', token_hash)::json,
       token_hash,
       CASE WHEN status IN ('queued', 'running') THEN NULL ELSE created + 2.0 END,
       CASE WHEN i % 3 = 0 THEN 'key-' || (i % {KEYS}) END
FROM (SELECT i, run_id, conversation, actor, created, status,
             encode(sha256(convert_to(run_id, 'UTF8')), 'hex') AS token_hash
      FROM (SELECT i, {_padded("run_g", "i")} AS run_id, {_conversation_sql("i")} AS conversation,
                   {_actor_sql("i")} AS actor, {_CREATED} AS created,
                   CASE WHEN i >= plan_runs - 3 THEN 'queued' WHEN i >= plan_runs - {HELD_RUNS} THEN 'running'
                        WHEN i % 50 = 0 THEN 'failed' WHEN i % 97 = 1 THEN 'cancelled'
                        ELSE 'completed' END AS status
            FROM {_ROWS}) AS numbered) AS g""",
    "audit": f"""
INSERT INTO audit ({_columns(AUDIT_COLUMNS)})
SELECT {_padded("run_g", "i")}, 1, 'history_page', encode(sha256(convert_to(i::text, 'UTF8')), 'hex'),
       64, 2048, 'ok', NULL, 3.5, {_CREATED} + 1.0
FROM {_ROWS}""",
}
"""One statement per table filling the rows [$1, $2) (the shape in the module's docstring)."""

CONVERSATIONS_SQL = f"""
INSERT INTO conversations (conversation_id, created_at, last_activity_at, last_run_seq, last_run_id,
                           agent_id, actor_id, runs)
SELECT conversation_id, min(created_at), max(created_at), max(created_seq),
       (array_agg(run_id ORDER BY created_seq DESC))[1], (array_agg(agent_id ORDER BY created_seq DESC))[1],
       CASE WHEN conversation_id = '{LONG}' THEN 'actor-long'
            ELSE 'actor-' || (substr(conversation_id, 6)::int / 10) END,
       count(*)
FROM runs GROUP BY conversation_id"""
"""The conversations' rows, as admission would have left them after the generated runs."""


def driver_dsn(database_url: str) -> str:
    """The plain `postgresql://` DSN asyncpg takes for a SQLAlchemy URL."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


CHUNK = 1_000_000
"""Rows per fill statement (one transaction each), so a long fill reports progress."""
MAINTENANCE_WORK_MEM = "1GB"
"""Per connection, for the index builds (two run at a time)."""

Progress = Callable[[str], None]


@dataclass
class _Deferred:
    """The indexes and foreign keys of the generated tables, dropped for the fill and built after it."""

    indexes: list[tuple[str, str, str]]
    """(table, name, CREATE INDEX statement), largest table first."""
    foreign_keys: list[tuple[str, str, str]]
    """(table, name, constraint definition)."""


async def _defer(conn: PgConnection) -> _Deferred:
    tables = [table for table, _ in TABLES]
    index_rows = await conn.fetch(
        "SELECT i.tablename, i.indexname, i.indexdef FROM pg_indexes AS i "
        "WHERE i.schemaname = current_schema() AND i.tablename = ANY($1::text[]) AND NOT EXISTS "
        "(SELECT 1 FROM pg_constraint AS c WHERE c.conindid = to_regclass(quote_ident(i.indexname)))",
        [*tables, "conversations"],
    )
    fk_rows = await conn.fetch(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE contype = 'f' AND conrelid::regclass::text = ANY($1::text[])",
        tables,
    )
    order = {table: k for k, table in enumerate(("transcript", "events", "runs", "audit", "conversations"))}
    deferred = _Deferred(
        sorted(((r[0], r[1], r[2]) for r in index_rows), key=lambda r: order[r[0]]),
        [(r[0], r[1], r[2]) for r in fk_rows],
    )
    for table, name, _ in deferred.foreign_keys:
        await conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
    for _, name, _ in deferred.indexes:
        await conn.execute(f'DROP INDEX "{name}"')
    return deferred


async def _fill(conn: PgConnection, plan: Plan, table: str, progress: Progress | None) -> None:
    total = {"transcript": plan.transcript, "events": plan.events}.get(table, plan.runs)
    args = (plan.conversations, total, plan.runs, plan.start, SPAN_S)
    extra = (_grant_template(),) if table == "runs" else ()
    started = time.perf_counter()
    for lo in range(0, total, CHUNK):
        hi = min(total, lo + CHUNK)
        await conn.execute(FILL_SQL[table], lo, hi, *args, *extra)
        if progress is not None and total > CHUNK:
            elapsed = time.perf_counter() - started
            progress(f"{table}: {hi:,} of {total:,} rows, {elapsed:,.0f} s")
    if table == "runs":
        await conn.execute(CONVERSATIONS_SQL)


async def _on_two_connections(
    dsn: str, jobs: Sequence[tuple[str, Callable[[PgConnection], Awaitable[None]]]]
) -> dict[str, float]:
    """Run `jobs` in order on two connections, each taking the next when it is free; seconds per job."""
    seconds: dict[str, float] = {}
    queue = list(reversed(jobs))

    async def worker() -> None:
        conn = await connect_pg(dsn)
        try:
            await conn.execute(f"SET maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
            await conn.execute("SET synchronous_commit = off")
            while queue:
                name, job = queue.pop()
                started = time.perf_counter()
                await job(conn)
                seconds[name] = time.perf_counter() - started
        finally:
            await conn.close()

    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(worker)
    return seconds


async def generate(database_url: str, plan: Plan, *, progress: Progress | None = None) -> dict[str, float]:
    """Fill the migrated PostgreSQL database with `plan`'s rows; seconds per step.

    Server-side `INSERT … SELECT generate_series(…)` in chunks of `CHUNK` rows (no row crosses the
    network), two tables at a time, with the tables' secondary indexes and foreign keys dropped first
    and built after the fill (a sorted build instead of 100M index insertions), then `VACUUM (ANALYZE)`
    of each table: the statistics, the visibility map and the hint bits a live database would have.
    """
    dsn = driver_dsn(database_url)
    conn = await connect_pg(dsn)
    try:
        deferred = await _defer(conn)
    finally:
        await conn.close()

    def filling(table: str) -> Callable[[PgConnection], Awaitable[None]]:
        return lambda c: _fill(c, plan, table, progress)

    def running(statement: str, label: str) -> Callable[[PgConnection], Awaitable[None]]:
        async def job(c: PgConnection) -> None:
            await c.execute(statement)
            if progress is not None and plan.transcript > CHUNK:
                progress(f"{label}: done")

        return job

    seconds: dict[str, float] = {}
    fills = [(table, filling(table)) for table in ("transcript", "events", "runs", "audit")]
    seconds.update(await _on_two_connections(dsn, fills))
    builds = [(f"index {name}", running(sql, f"index {name}")) for _, name, sql in deferred.indexes]
    seconds.update(await _on_two_connections(dsn, builds))
    conn = await connect_pg(dsn)
    try:
        for table, name, definition in deferred.foreign_keys:
            started = time.perf_counter()
            await conn.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
            seconds[f"constraint {name}"] = time.perf_counter() - started
    finally:
        await conn.close()
    vacuums = [
        (f"vacuum {table}", running(f"VACUUM (ANALYZE) {table}", f"vacuum {table}"))
        for table in ("transcript", "events", "runs", "audit", "conversations")
    ]
    seconds.update(await _on_two_connections(dsn, vacuums))
    return seconds


async def table_sizes(database_url: str) -> dict[str, tuple[int, int, int]]:
    """Per generated table: (rows, heap bytes with TOAST, index bytes)."""
    conn = await connect_pg(driver_dsn(database_url))
    try:
        out: dict[str, tuple[int, int, int]] = {}
        for table in [*(table for table, _ in TABLES), "conversations"]:
            rows = await conn.fetchval(f"SELECT count(*) FROM {table}")
            table_bytes = await conn.fetchval(f"SELECT pg_table_size('{table}')")
            index_bytes = await conn.fetchval(f"SELECT pg_indexes_size('{table}')")
            out[table] = (int(rows), int(table_bytes), int(index_bytes))
        return out
    finally:
        await conn.close()
