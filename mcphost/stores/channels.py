"""Chat channels' status: what each `[channels.<id>]` last received and how its replies are going.

Owns the `channel_status` table (migration 0026) — a row per channel with its admitted and ignored
counts and its newest admitted and ignored event, written by the inbound route — and the read of a
channel's outbox rows (`deliveries` with `url = channel:<id>`) that `GET /v1/channels` reports. Does not
own the inbound route (`api/_channels.py`), the outbox rows (`deliveries.py`) nor sending (`delivery.py`).

Why a row and not a query: the event log cannot say which channel an event came through without a scan
(`events.source` is `platform` for all of them and the channel is inside the event id), so the route
keeps the few figures the console shows in one row per channel. The outbox already says everything
about replies, so those are read from it by the `(url, status, seq)` index, never copied.

Invariants:
- A refused request (no channel, too big, a bad signature, a stale timestamp) writes nothing here: a
  forger cannot make the host write. A platform retry answered with its existing run is not counted again.
- Counts only grow; the counter row is one upsert per admitted or ignored event, in its own short
  transaction after the admission (a crash between the two loses one count, never an event).
- `activity` costs a fixed number of index reads per channel: the status row by primary key, the
  pending and dead counts as `(url, status)` ranges, the newest row of each status by `(url, status,
  seq)`, and the newest pending row that has an error (pending rows are the live outbox, never the history).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from pydantic import ConfigDict
from sqlalchemy import func, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.common.fielddocs import DocumentedModel
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import pg_insert
from mcphost.stores.deliveries import CHANNEL_URL_PREFIX, DeliveryStatus
from mcphost.stores.engine import Database
from mcphost.stores.tables import ChannelStatusRow, DeliveryRow, table_of


class ChannelReply(DocumentedModel):
    """One outbox row of a channel: a reply, a failure notice or a platform action."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    delivery_id: str
    type: str
    """The fact it answers (`message.completed`, `run.failed`, `action.requested`, `action.approved`)."""
    status: DeliveryStatus
    run_id: str | None
    attempts: int
    created_at: float
    delivered_at: float | None
    last_error: str | None


class ChannelActivity(DocumentedModel):
    """What one channel received and sent, from the database."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    accepted: int
    """Verified events admitted as a new run (a platform retry of one is not counted again)."""
    ignored: int
    """Verified events answered 200 without a run: a kind not mapped, a type not selected, no agent."""
    last_inbound_at: float | None
    last_event_type: str | None
    last_source_event_type: str | None
    """The platform's own name of the newest admitted event (`slack.app_mention`, …)."""
    last_run_id: str | None
    last_ignored_at: float | None
    last_ignored_reason: str | None
    """`unsupported_event`, `event_not_selected` or `no_binding`."""
    last_ignored_type: str | None
    pending: int
    """Replies still to be sent (retrying or not yet tried)."""
    dead: int
    """Replies that will not be sent: the channel's dead letters (`GET /v1/deliveries?status=dead`)."""
    last_delivery: ChannelReply | None
    """The newest outbox row of the channel, whatever its status."""
    last_error: ChannelReply | None
    """The newest row that failed: a dead one, or a pending one whose last attempt failed."""


_NO_INBOUND: dict[str, Any] = {
    "accepted": 0,
    "ignored": 0,
    "last_inbound_at": None,
    "last_event_type": None,
    "last_source_event_type": None,
    "last_run_id": None,
    "last_ignored_at": None,
    "last_ignored_reason": None,
    "last_ignored_type": None,
}
"""The inbound figures of a channel without a status row yet."""
_STATUSES: tuple[DeliveryStatus, ...] = ("pending", "delivered", "dead")


class ChannelStatusStore:
    """The `channel_status` rows and the per-channel read of the outbox."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def record_inbound(
        self, channel_id: str, *, event_type: str, source_event_type: str, run_id: str, at: float
    ) -> None:
        """Count an event admitted as a new run, and make it the channel's newest inbound."""
        await self._bump(
            channel_id,
            "accepted",
            last_inbound_at=at,
            last_event_type=event_type[:100],
            last_source_event_type=source_event_type[:100],
            last_run_id=run_id,
        )

    async def record_ignored(
        self, channel_id: str, *, reason: str, source_event_type: str | None, at: float
    ) -> None:
        """Count a verified event answered without a run, and why."""
        await self._bump(
            channel_id,
            "ignored",
            last_ignored_at=at,
            last_ignored_reason=reason[:100],
            last_ignored_type=None if source_event_type is None else source_event_type[:100],
        )

    async def _bump(self, channel_id: str, counter: str, **values: Any) -> None:
        row = {"channel_id": channel_id, "accepted": 0, "ignored": 0, **values, counter: 1}
        table = table_of(ChannelStatusRow)
        column = table.c[counter]
        insert = pg_insert(table) if self._db.dialect == "postgresql" else sqlite.insert(table)
        statement = insert.values(row).on_conflict_do_update(
            index_elements=["channel_id"], set_={**values, counter: column + 1}
        )
        async with self._db.write() as session:
            await session.execute(statement)

    @idempotent
    async def activity(self, channel_ids: Sequence[str]) -> dict[str, ChannelActivity]:
        """Each channel's status row and outbox figures (a channel with neither: all zero)."""
        if not channel_ids:
            return {}
        async with self._db.read() as session:
            rows = (
                await session.scalars(
                    select(ChannelStatusRow).where(ChannelStatusRow.channel_id.in_(list(channel_ids)))
                )
            ).all()
            inbound = {row.channel_id: row for row in rows}
            out: dict[str, ChannelActivity] = {}
            for channel_id in channel_ids:
                figures = _NO_INBOUND | await _outbox(session, f"{CHANNEL_URL_PREFIX}{channel_id}")
                row = inbound.get(channel_id)
                if row is not None:
                    figures.update(
                        {
                            name: getattr(row, name)
                            for name in ChannelActivity.model_fields
                            if name in table_of(ChannelStatusRow).c
                        }
                    )
                out[channel_id] = ChannelActivity.model_validate(figures)
            return out


def _reply(row: DeliveryRow | None) -> ChannelReply | None:
    return None if row is None else ChannelReply.model_validate(row, from_attributes=True)


async def _outbox(session: AsyncSession, url: str) -> dict[str, Any]:
    """The outbox figures of one channel's `url`, each an index range read."""
    counts = dict(
        cast(
            "Sequence[tuple[str, int]]",
            (
                await session.execute(
                    select(DeliveryRow.status, func.count())
                    .where(DeliveryRow.url == url, DeliveryRow.status.in_(("pending", "dead")))
                    .group_by(DeliveryRow.status)
                )
            ).all(),
        )
    )
    newest: list[DeliveryRow] = []
    for status in _STATUSES:
        row = await session.scalar(
            select(DeliveryRow)
            .where(DeliveryRow.url == url, DeliveryRow.status == status)
            .order_by(DeliveryRow.seq.desc())
            .limit(1)
        )
        if row is not None:
            newest.append(row)
    failing = await session.scalar(
        select(DeliveryRow)
        .where(DeliveryRow.url == url, DeliveryRow.status == "pending", DeliveryRow.last_error.is_not(None))
        .order_by(DeliveryRow.seq.desc())
        .limit(1)
    )
    failed = [row for row in newest if row.status == "dead"] + ([failing] if failing is not None else [])
    return {
        "pending": counts.get("pending", 0),
        "dead": counts.get("dead", 0),
        "last_delivery": _reply(max(newest, key=lambda r: r.seq, default=None)),
        "last_error": _reply(max(failed, key=lambda r: r.seq, default=None)),
    }
