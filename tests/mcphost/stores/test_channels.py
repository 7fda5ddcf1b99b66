"""The channel status store: counters and newest events written by the inbound route, and a channel's
outbox figures read by index from `deliveries` — on SQLite files and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import insert, text

from mcphost.models import new_id
from mcphost.stores import Stores
from mcphost.stores.tables import DeliveryRow

NOW = 1_790_000_000.0


def delivery(url: str, status: str, seq_hint: int, *, error: str | None = None) -> dict[str, Any]:
    return {
        "delivery_id": new_id("msg"),
        "url": url,
        "type": "message.completed",
        "run_id": f"run_{seq_hint:04d}",
        "agent_id": "chat",
        "conversation_id": "slack:C1",
        "body": {"text": "hi"},
        "status": status,
        "attempts": 1 if status != "dead" else 5,
        "created_at": NOW + seq_hint,
        "expires_at": NOW + 3600,
        "next_attempt_at": NOW + seq_hint,
        "claimed_until": 0.0,
        "claimed_by": None,
        "last_error": error,
        "delivered_at": NOW + seq_hint + 0.5 if status == "delivered" else None,
    }


async def add(stores: Stores, rows: list[dict[str, Any]]) -> None:
    async with stores.db.write() as session:
        await session.execute(insert(DeliveryRow), rows)


async def test_a_channel_without_traffic_reads_all_zero(stores: Stores) -> None:
    (quiet,) = (await stores.channels.activity(["quiet"])).values()
    assert (quiet.accepted, quiet.ignored, quiet.pending, quiet.dead) == (0, 0, 0, 0)
    assert (quiet.last_inbound_at, quiet.last_delivery, quiet.last_error) == (None, None, None)
    assert await stores.channels.activity([]) == {}


async def test_admitted_and_ignored_events_count_and_the_newest_wins(stores: Stores) -> None:
    await stores.channels.record_inbound(
        "slack", event_type="message.received", source_event_type="message", run_id="run_a", at=NOW
    )
    await stores.channels.record_ignored(
        "slack", reason="unsupported_event", source_event_type=None, at=NOW + 1
    )
    await stores.channels.record_inbound(
        "slack", event_type="command.invoked", source_event_type="slash_command", run_id="run_b", at=NOW + 2
    )
    await stores.channels.record_ignored(
        "tg", reason="event_not_selected", source_event_type="message_reaction", at=NOW + 3
    )
    found = await stores.channels.activity(["slack", "tg"])
    slack, tg = found["slack"], found["tg"]
    assert (slack.accepted, slack.ignored) == (2, 1)
    assert (
        slack.last_inbound_at,
        slack.last_event_type,
        slack.last_source_event_type,
        slack.last_run_id,
    ) == (
        NOW + 2,
        "command.invoked",
        "slash_command",
        "run_b",
    )
    assert (slack.last_ignored_at, slack.last_ignored_reason, slack.last_ignored_type) == (
        NOW + 1,
        "unsupported_event",
        None,
    )
    assert (tg.accepted, tg.ignored, tg.last_inbound_at, tg.last_run_id) == (0, 1, None, None)
    assert (tg.last_ignored_reason, tg.last_ignored_type) == ("event_not_selected", "message_reaction")


async def test_overlong_platform_names_are_cut_to_their_columns(stores: Stores) -> None:
    await stores.channels.record_inbound(
        "slack", event_type="message.received", source_event_type="x" * 5000, run_id="run_a", at=NOW
    )
    (slack,) = (await stores.channels.activity(["slack"])).values()
    assert slack.last_source_event_type == "x" * 100


async def test_the_outbox_figures_are_the_channels_own_rows(stores: Stores) -> None:
    await add(
        stores,
        [
            delivery("channel:slack", "delivered", 1),
            delivery("channel:slack", "dead", 2, error="HTTP 503 from chat.postMessage"),
            delivery("channel:slack", "delivered", 3),
            delivery("channel:slack", "pending", 4),
            delivery("channel:slack", "pending", 5, error="HTTP 429: retry after 30 s"),
            delivery("channel:slack", "pending", 6),
            delivery("channel:tg", "dead", 7, error="chat not found"),
            delivery("https://example.test/hook", "dead", 8, error="HTTP 500"),
        ],
    )
    found = await stores.channels.activity(["slack", "tg", "dc"])
    slack, tg, dc = found["slack"], found["tg"], found["dc"]
    assert (slack.pending, slack.dead) == (3, 1)
    assert slack.last_delivery is not None
    assert slack.last_delivery.run_id == "run_0006"
    assert slack.last_delivery.status == "pending"
    assert slack.last_error is not None
    assert (slack.last_error.run_id, slack.last_error.status, slack.last_error.last_error) == (
        "run_0005",
        "pending",
        "HTTP 429: retry after 30 s",
    )
    assert (tg.pending, tg.dead) == (0, 1)
    assert tg.last_error is not None
    assert tg.last_error.last_error == "chat not found"
    assert (dc.pending, dc.dead, dc.last_delivery, dc.last_error) == (0, 0, None, None)


async def test_a_delivered_reply_after_a_dead_one_keeps_the_dead_ones_error(stores: Stores) -> None:
    await add(
        stores,
        [
            delivery("channel:slack", "dead", 1, error="HTTP 403: not_in_channel"),
            delivery("channel:slack", "delivered", 2),
        ],
    )
    (slack,) = (await stores.channels.activity(["slack"])).values()
    assert slack.last_delivery is not None
    assert (slack.last_delivery.status, slack.last_delivery.delivered_at) == ("delivered", NOW + 2.5)
    assert slack.last_error is not None
    assert slack.last_error.last_error == "HTTP 403: not_in_channel"


async def test_every_activity_query_reads_deliveries_by_index(stores: Stores) -> None:
    """No statement of `activity` scans `deliveries`: thousands of other receivers' rows are loaded, the
    planner's statistics refreshed, and each captured statement planned."""
    await add(
        stores,
        [
            delivery(f"https://hooks.example.test/{i % 50}", ("delivered", "dead", "pending")[i % 3], i)
            for i in range(3000)
        ]
        + [delivery("channel:slack", "dead", 9000, error="boom"), delivery("channel:slack", "pending", 9001)],
    )
    seen: list[tuple[str, Any]] = []

    def capture(_c: object, _cur: object, statement: str, parameters: Any, *_: object) -> None:
        seen.append((statement, parameters))

    async with stores.db.write() as session:
        await session.execute(text("ANALYZE"))
    with stores.db.hooks.added("before_cursor_execute", capture):
        (slack,) = (await stores.channels.activity(["slack"])).values()
    assert (slack.pending, slack.dead) == (1, 1)
    selects = [(s, p) for s, p in seen if s.lstrip().upper().startswith("SELECT") and "deliveries" in s]
    assert len(selects) == 5  # the counts, the newest of each status, the newest failing pending row
    async with stores.db.read() as session:
        conn = await session.connection()
        for statement, parameters in selects:
            if stores.db.dialect == "sqlite":
                rows = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)).all()
                details = [str(list(row)[-1]) for row in rows]
                assert not any(d.startswith("SCAN deliveries") for d in details), (statement, details)
                assert any("ix_deliveries_url_status_seq" in d for d in details), (statement, details)
            else:
                plan = (
                    await conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters)
                ).scalar_one()
                plan_text = json.dumps(plan)
                assert '"Seq Scan"' not in plan_text, (statement, plan_text)
                assert "ix_deliveries_url_status_seq" in plan_text, (statement, plan_text)
