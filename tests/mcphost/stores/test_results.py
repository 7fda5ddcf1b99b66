"""Run results: batched appends with host sequences, resumable reads, atomic refusal of repeats."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from mcphost.errors import ConflictError, InvalidArgumentError
from mcphost.models import RunFailure, RunStatus
from mcphost.protocol import JSONObject, JSONValue
from mcphost.stores import Stores
from mcphost.stores.results import ResultEffects, ResultStore
from mcphost.stores.runs import RunEnd
from mcphost.stores.state import state_values
from mcphost.stores.transcript import item_values
from tests.mcphost.stores.factories import admitted


async def test_a_batch_is_stored_at_consecutive_sequences_and_read_back_after_n(stores: Stores) -> None:
    run = await admitted(stores)
    assert await stores.results.last_seq(run.run_id) == 0
    stored = await stores.results.append_many(
        run.run_id, [("message.delta", {"i": 1}), ("message.delta", {"i": 2})], first_seq=1
    )
    assert [(r.seq, r.payload) for r in stored] == [(1, {"i": 1}), (2, {"i": 2})]
    await stores.results.append_many(run.run_id, [("run.completed", {"done": True})], first_seq=3)
    assert await stores.results.last_seq(run.run_id) == 3
    assert [r.seq for r in await stores.results.list(run.run_id)] == [1, 2, 3]
    assert [r.type for r in await stores.results.list(run.run_id, after=2)] == ["run.completed"]
    assert [r.seq for r in await stores.results.list(run.run_id, after=0, limit=2)] == [1, 2]
    assert await stores.results.list(run.run_id, after=3) == []
    assert await stores.results.append_many(run.run_id, [], first_seq=4) == []


async def test_a_flood_of_ten_thousand_deltas_is_one_cheap_batch(stores: Stores) -> None:
    run = await admitted(stores)
    items = [("message.delta", {"data": {"chunk": {"content": f"token {i} "}}}) for i in range(10_000)]
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    with stores.db.hooks.added("before_cursor_execute", count):
        await stores.results.append_many(run.run_id, items, first_seq=1)
    # Batched: a few multi-row statements (plus BEGIN / COMMIT), never a statement per result.
    assert len(statements) <= 25, f"{len(statements)} statements for 10,000 results"
    assert await stores.results.last_seq(run.run_id) == 10_000
    page = await stores.results.list(run.run_id, after=9_000, limit=1000)
    assert page[0].seq == 9_001
    assert page[-1].seq == 10_000


async def test_a_batch_that_repeats_a_sequence_writes_nothing(stores: Stores) -> None:
    run = await admitted(stores)
    await stores.results.append_many(run.run_id, [("a.b", {})], first_seq=1)
    with pytest.raises(ConflictError, match="already has results"):
        await stores.results.append_many(run.run_id, [("a.b", {"new": 1}), ("a.b", {"new": 2})], first_seq=1)
    assert [r.payload for r in await stores.results.list(run.run_id)] == [{}]


async def test_results_for_an_unknown_run_are_refused(stores: Stores) -> None:
    with pytest.raises(ConflictError, match="does not exist"):
        await stores.results.append_many("run_nope", [("a.b", {})], first_seq=1)


async def test_list_limits_are_validated(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError, match="between 1 and 10000"):
        await stores.results.list("run_x", limit=10_001)
    with pytest.raises(InvalidArgumentError, match="between 1 and 10000"):
        await stores.results.list("run_x", limit=0)


async def test_the_same_batch_stored_again_is_a_no_op(stores: Stores) -> None:
    # What a retry after a commit whose acknowledgement was lost does.
    run = await admitted(stores)
    items: list[tuple[str, JSONObject]] = [("a.b", {"n": 1, "t": 1796282518.5033848}), ("c.d", {"n": 2})]
    first = await stores.results.append_many(run.run_id, items, first_seq=1)
    again = await stores.results.append_many(run.run_id, items, first_seq=1)
    assert [(r.seq, r.type, r.payload) for r in again] == [(r.seq, r.type, r.payload) for r in first]
    assert len(await stores.results.list(run.run_id)) == 2


def _effects(run_id: str, text: str, state: dict[str, JSONValue]) -> ResultEffects:
    item = item_values(
        conversation_id="conv-1",
        role="assistant",
        content=text,
        run_id=run_id,
        contents=[{"type": "text", "text": text}],
    )
    rows = [state_values("conversation", ("conv-1",), key, value)[1] for key, value in state.items()]
    return ResultEffects(transcript=[item], state=rows)


async def _statements(stores: Stores, call: Any) -> tuple[list[str], int]:
    """The statements `call` runs and the transactions it begins."""
    statements: list[str] = []
    begun: list[object] = []
    with (
        stores.db.hooks.added("before_cursor_execute", lambda *a: statements.append(a[2])),
        stores.db.hooks.added("begin", begun.append),
    ):
        await call()
    return statements, len(begun)


async def test_a_batch_with_its_transcript_and_state_rows_is_one_statement_on_postgres(
    stores: Stores,
) -> None:
    run = await admitted(stores)
    effects = _effects(run.run_id, "the answer", {"mood": {"calm": True}, "count": 3})

    async def append() -> None:
        await stores.results.append_many(
            run.run_id,
            [("message.completed", {"data": {"text": "the answer"}})],
            first_seq=1,
            effects=effects,
        )

    statements, begun = await _statements(stores, append)
    if stores.db.dialect == "postgresql":  # one round trip: no BEGIN, no COMMIT
        assert (len(statements), begun) == (1, 0), statements
    (item,) = await stores.transcript.for_run(run.run_id)
    assert (item.role, item.content, item.contents) == (
        "assistant",
        "the answer",
        [{"type": "text", "text": "the answer"}],
    )
    mood = await stores.state.get("conversation", ("conv-1",), "mood")
    count = await stores.state.get("conversation", ("conv-1",), "count")
    assert mood is not None
    assert count is not None
    assert (mood.value, mood.size, count.value, count.size) == ({"calm": True}, 13, 3, 1)
    assert [r.type for r in await stores.results.list(run.run_id)] == ["message.completed"]


async def test_a_refused_batch_leaves_its_transcript_and_state_rows_unwritten(stores: Stores) -> None:
    run = await admitted(stores)
    await stores.results.append_many(run.run_id, [("a.b", {})], first_seq=1)
    with pytest.raises(ConflictError, match="already has results"):
        await stores.results.append_many(
            run.run_id, [("a.b", {"new": 1})], first_seq=1, effects=_effects(run.run_id, "lost", {"k": 1})
        )
    assert await stores.transcript.for_run(run.run_id) == []
    assert await stores.state.get("conversation", ("conv-1",), "k") is None


async def test_the_same_batch_with_effects_stored_again_writes_them_once(stores: Stores) -> None:
    run = await admitted(stores)
    effects = _effects(run.run_id, "once", {"k": 1})
    items: list[tuple[str, JSONObject]] = [("message.completed", {"data": {"text": "once"}})]
    first = await stores.results.append_many(run.run_id, items, first_seq=1, effects=effects)
    again = await stores.results.append_many(run.run_id, items, first_seq=1, effects=effects)
    assert [(r.seq, r.payload) for r in again] == [(r.seq, r.payload) for r in first]
    assert len(await stores.transcript.for_run(run.run_id)) == 1


async def test_a_batch_that_writes_one_key_twice_keeps_the_last_value(stores: Stores) -> None:
    run = await admitted(stores)
    effects = ResultEffects(
        state=[state_values("conversation", ("conv-1",), "k", v)[1] for v in ("first", "last")]
    )
    await stores.results.append_many(run.run_id, [("state.updated", {})], first_seq=1, effects=effects)
    entry = await stores.state.get("conversation", ("conv-1",), "k")
    assert entry is not None
    assert entry.value == "last"


async def test_the_one_statement_batch_writes_the_rows_the_transaction_writes(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both ways of writing a batch, side by side: the same stored columns (ids and sequences aside).
    run = await admitted(stores)
    await stores.results.append_many(
        run.run_id, [("x.y", {"n": 1})], first_seq=1, effects=_effects(run.run_id, "same", {"one": [1, "a"]})
    )
    monkeypatch.setattr(ResultStore, "_in_one_statement", lambda *_: False)  # pyright: ignore[reportUnknownLambdaType, reportUnknownArgumentType]
    await stores.results.append_many(
        run.run_id, [("x.y", {"n": 1})], first_seq=2, effects=_effects(run.run_id, "same", {"two": [1, "a"]})
    )
    first, second = await stores.transcript.for_run(run.run_id)
    skip = {"seq", "cursor", "item_id", "created_at"}
    assert first.model_dump(exclude=skip) == second.model_dump(exclude=skip)
    one = await stores.state.get("conversation", ("conv-1",), "one")
    two = await stores.state.get("conversation", ("conv-1",), "two")
    assert one is not None
    assert two is not None
    assert (one.value, one.size) == (two.value, two.size)
    first_result, second_result = await stores.results.list(run.run_id)
    assert (first_result.type, first_result.payload) == (second_result.type, second_result.payload)


async def _drop_connections(stores: Stores) -> None:
    """The server drops every session of the database but one made for that, outside the host's pool."""
    admin = create_async_engine(stores.db.url, poolclass=NullPool)
    try:
        async with admin.connect() as conn:
            await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
    finally:
        await admin.dispose()


@pytest.mark.postgres
async def test_a_one_statement_batch_on_a_connection_the_server_dropped_is_retried_on_a_new_one(
    stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    if stores.db.dialect != "postgresql":
        pytest.skip("a dropped connection is PostgreSQL's")
    run = await admitted(stores)
    await stores.results.append_many(run.run_id, [("a.b", {"n": 1})], first_seq=1)  # a pooled connection
    await _drop_connections(stores)
    # The checkout is not pinged (the statement is the first round trip): it fails on the dropped
    # connection, the pool is invalidated, and `@idempotent` stores the batch on a new connection.
    stored = await stores.results.append_many(
        run.run_id, [("a.b", {"n": 2})], first_seq=2, effects=_effects(run.run_id, "kept", {"k": 2})
    )
    assert [r.seq for r in stored] == [2]
    assert [r.payload for r in await stores.results.list(run.run_id)] == [{"n": 1}, {"n": 2}]
    assert [i.content for i in await stores.transcript.for_run(run.run_id)] == ["kept"]
    assert "ResultStore.append_many lost its database connection (attempt 1 of 4)" in caplog.text


@pytest.mark.postgres
async def test_a_last_batch_on_a_dropped_connection_ends_its_run_on_a_new_one(stores: Stores) -> None:
    if stores.db.dialect != "postgresql":
        pytest.skip("a dropped connection is PostgreSQL's")
    run = await admitted(stores)
    await stores.runs.transition(run.run_id, RunStatus.RUNNING)
    await stores.results.append_many(run.run_id, [("a.b", {"n": 1})], first_seq=1)  # a pooled connection
    await _drop_connections(stores)
    stored, ended = await stores.results.append_ending(
        run.run_id, [("run.completed", {"n": 2})], first_seq=2, end=RunEnd(RunStatus.COMPLETED)
    )
    assert [r.seq for r in stored] == [2]
    assert ended is not None
    assert ended == await stores.runs.get(run.run_id)
    assert ended.status is RunStatus.COMPLETED


async def test_a_payload_is_stored_as_compact_text_and_read_back_as_the_same_value(stores: Stores) -> None:
    payload: JSONObject = {
        "text": 'héllo \u2028 \u65e5\u672c \U0001f600 "quoted" \\ \n\t\x01',
        "ints": [0, -1, 2**63 - 1, -(2**63)],
        "floats": [0.1, -0.0, 1e-7, 2.5e-5, 1e16, 1.7976931348623157e308, 5e-324],
        "nested": {"a": [{"b": None, "c": True, "d": False}], "": {}},
    }
    run = await admitted(stores)
    await stores.results.append_many(run.run_id, [("custom.kind", payload)], first_seq=1)
    (stored,) = await stores.results.list(run.run_id)
    assert stored.payload == payload
    async with stores.db.read() as session:
        raw = (
            await session.execute(
                text("SELECT CAST(payload AS TEXT) FROM run_results WHERE run_id = :r"), {"r": run.run_id}
            )
        ).scalar_one()
    assert json.loads(raw) == payload
    # Compact and UTF-8 as is: no spaces after separators, no \u escapes for printable non-ASCII.
    assert '", "' not in raw
    assert '": ' not in raw
    assert "héllo" in raw
    assert "\U0001f600" in raw


# -- a run's last batch with its end (`append_ending`) -------------------------------------------------


async def test_a_last_batch_ends_its_running_run_as_finish_would_in_one_write(stores: Stores) -> None:
    run = await admitted(stores)
    await stores.runs.transition(run.run_id, RunStatus.RUNNING)
    effects = _effects(run.run_id, "bye", {"turns": 2})
    statements: list[str] = []
    with stores.db.hooks.added("before_cursor_execute", lambda *args: statements.append(args[2])):
        stored, ended = await stores.results.append_ending(
            run.run_id,
            [("message.completed", {"m": "bye"}), ("run.completed", {"usage": {"input_tokens": 3}})],
            first_seq=1,
            end=RunEnd(RunStatus.COMPLETED, usage={"input_tokens": 3}),
            effects=effects,
        )
    assert [r.seq for r in stored] == [1, 2]
    assert ended is not None
    assert ended == await stores.runs.get(run.run_id)  # what it returns is what is stored
    assert (ended.status, ended.usage, ended.error) == (RunStatus.COMPLETED, {"input_tokens": 3}, None)
    assert ended.ended_at is not None
    assert (await stores.runs.grant(run.run_id)).revoked  # the token stops with it
    assert [r.type for r in await stores.results.list(run.run_id)] == ["message.completed", "run.completed"]
    assert [i.content for i in await stores.transcript.for_run(run.run_id)] == ["bye"]
    turns = await stores.state.get("conversation", ("conv-1",), "turns")
    assert turns is not None
    assert turns.value == 2
    if stores.db.dialect == "postgresql":  # the usual last batch is still one statement
        (one,) = statements
        assert "UPDATE runs SET status" in one
    # A second end changes nothing: the first terminal status wins, as with `finish`.
    again = await stores.runs.finish(run.run_id, RunStatus.FAILED, error=RunFailure(code="x", message="late"))
    assert again == ended


async def test_a_failed_end_keeps_its_error_and_a_run_not_running_is_left_to_finish(stores: Stores) -> None:
    run = await admitted(stores)
    await stores.runs.transition(run.run_id, RunStatus.RUNNING)
    error = RunFailure(code="runner.error", message="it broke", details={"retryable": False})
    _, ended = await stores.results.append_ending(
        run.run_id,
        [("run.failed", {"code": "runner.error"})],
        first_seq=1,
        end=RunEnd(RunStatus.FAILED, error=error),
    )
    assert ended is not None
    assert (ended.status, ended.error) == (RunStatus.FAILED, error)
    # Ended meanwhile (a sweeper, another host): the results are stored, the end is not touched.
    other = await admitted(stores, conversation_id="conv-2")
    await stores.runs.transition(other.run_id, RunStatus.RUNNING)
    swept = await stores.runs.finish(
        other.run_id, RunStatus.FAILED, error=RunFailure(code="host.run_lost", message="lost")
    )
    stored, none = await stores.results.append_ending(
        other.run_id, [("run.completed", {})], first_seq=1, end=RunEnd(RunStatus.COMPLETED)
    )
    assert none is None
    assert [r.seq for r in stored] == [1]
    assert await stores.runs.get(other.run_id) == swept
    # A queued run (never started) is not ended by its results either.
    queued = await admitted(stores, conversation_id="conv-3")
    _, none = await stores.results.append_ending(
        queued.run_id, [("run.completed", {})], first_seq=1, end=RunEnd(RunStatus.COMPLETED)
    )
    assert none is None
    assert (await stores.runs.get(queued.run_id)).status is RunStatus.QUEUED


async def test_a_repeated_last_batch_returns_what_is_stored_and_leaves_the_end_to_finish(
    stores: Stores,
) -> None:
    run = await admitted(stores)
    await stores.runs.transition(run.run_id, RunStatus.RUNNING)
    items: list[tuple[str, JSONObject]] = [("run.completed", {"usage": {}})]
    end = RunEnd(RunStatus.COMPLETED)
    first, ended = await stores.results.append_ending(run.run_id, items, first_seq=1, end=end)
    again, unknown = await stores.results.append_ending(run.run_id, items, first_seq=1, end=end)
    assert ended is not None
    assert unknown is None
    assert [(r.seq, r.payload) for r in again] == [(r.seq, r.payload) for r in first]
    with pytest.raises(ConflictError, match="already has results"):
        await stores.results.append_ending(
            run.run_id, [("run.completed", {"other": 1})], first_seq=1, end=end
        )
    assert await stores.runs.finish(run.run_id, RunStatus.COMPLETED) == ended
    with pytest.raises(ValueError, match="with results"):
        await stores.results.append_ending(run.run_id, [], first_seq=2, end=end)
    with pytest.raises(ValueError, match="terminal status"):
        RunEnd(RunStatus.RUNNING)
