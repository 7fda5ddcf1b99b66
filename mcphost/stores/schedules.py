"""Schedules created through the API, and the claims that make each fire happen once.

Owns the `schedules` and `schedule_fires` tables. Does not own what a schedule means or when it fires
(`timetable.py`), nor the loop that claims fires and emits their events (`schedules.py`).

Invariants:
- `claim(schedule_id, fire_at)` inserts the row (schedule_id, fire_at) unless it, or a newer claim of
  the schedule, exists; the primary key makes concurrent claims of one fire on any number of replicas
  store exactly one row, and only the caller whose insert stored it gets True. A claim of a stored
  schedule succeeds only while the schedule exists and is not paused.
- Only a schedule's newest claim is kept (a successful claim deletes the older ones in its transaction),
  so the table holds about one row per schedule; the newest claim is where the next fire is looked for.
- At most `MAX_STORED_SCHEDULES` schedules are stored.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, func, select, update

from mcphost.errors import ConflictError, InvalidArgumentError, NotFoundError
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import insert_ignoring
from mcphost.stores.engine import Database
from mcphost.stores.tables import ScheduleFireRow, ScheduleRow
from mcphost.timetable import ScheduleSpec

MAX_STORED_SCHEDULES = 1000


class StoredSchedule(BaseModel):
    """A schedule created through the API."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    spec: ScheduleSpec
    paused: bool
    created_at: float
    updated_at: float


def _stored(row: ScheduleRow) -> StoredSchedule:
    return StoredSchedule(
        spec=ScheduleSpec.model_validate(row.spec),
        paused=row.paused,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _not_found(schedule_id: str) -> NotFoundError:
    return NotFoundError(
        f"Schedule {schedule_id!r} does not exist; GET /v1/schedules lists them.",
        details={"schedule_id": schedule_id},
    )


class ScheduleStore:
    """Create, list, pause and delete stored schedules; claim fires."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, spec: ScheduleSpec) -> StoredSchedule:
        """Store a new schedule (unpaused).

        Raises:
            ConflictError: a schedule with this id is stored already.
            InvalidArgumentError: `MAX_STORED_SCHEDULES` are stored already.
        """
        now = time.time()
        values = {
            "schedule_id": spec.id,
            "spec": spec.model_dump(mode="json"),
            "paused": False,
            "created_at": now,
            "updated_at": now,
        }
        async with self._db.write() as session:
            count = await session.scalar(select(func.count()).select_from(ScheduleRow))
            if (count or 0) >= MAX_STORED_SCHEDULES:
                raise InvalidArgumentError(
                    f"{MAX_STORED_SCHEDULES} schedules are stored already; delete one first.",
                    details={"max": MAX_STORED_SCHEDULES},
                )
            stmt = insert_ignoring(self._db.dialect, ScheduleRow, values, ["schedule_id"])
            created = (await session.execute(stmt.returning(ScheduleRow.schedule_id))).scalar_one_or_none()
            if created is None:
                raise ConflictError(
                    f"Schedule {spec.id!r} exists already; delete it first or choose another id.",
                    details={"schedule_id": spec.id},
                )
            # A schedule created again under an old id starts afresh, not from the old one's last fire.
            await session.execute(delete(ScheduleFireRow).where(ScheduleFireRow.schedule_id == spec.id))
        return StoredSchedule(spec=spec, paused=False, created_at=now, updated_at=now)

    @idempotent
    async def get(self, schedule_id: str) -> StoredSchedule:
        """The stored schedule `schedule_id`.

        Raises:
            NotFoundError: there is none.
        """
        async with self._db.read() as session:
            row = await session.get(ScheduleRow, schedule_id)
            if row is None:
                raise _not_found(schedule_id)
            return _stored(row)

    @idempotent
    async def list(self) -> list[StoredSchedule]:
        """Every stored schedule, by id (at most `MAX_STORED_SCHEDULES`)."""
        async with self._db.read() as session:
            rows = (
                await session.execute(
                    select(ScheduleRow).order_by(ScheduleRow.schedule_id).limit(MAX_STORED_SCHEDULES)
                )
            ).scalars()
            return [_stored(row) for row in rows]

    @idempotent
    async def page(self, *, after: str | None, limit: int) -> list[StoredSchedule]:
        """Up to `limit` stored schedules by id, those after the id `after` (None: from the first)."""
        stmt = select(ScheduleRow)
        if after is not None:
            stmt = stmt.where(ScheduleRow.schedule_id > after)
        async with self._db.read() as session:
            rows = (await session.execute(stmt.order_by(ScheduleRow.schedule_id).limit(limit))).scalars()
            return [_stored(row) for row in rows]

    async def set_paused(self, schedule_id: str, paused: bool) -> StoredSchedule:
        """Pause or resume `schedule_id` (a no-op when it already is).

        Raises:
            NotFoundError: there is none.
        """
        async with self._db.write() as session:
            result = await session.execute(
                update(ScheduleRow)
                .where(ScheduleRow.schedule_id == schedule_id)
                .values(paused=paused, updated_at=time.time())
                .returning(ScheduleRow)
            )
            row = result.scalar_one_or_none()
            if row is None:
                raise _not_found(schedule_id)
            return _stored(row)

    async def delete(self, schedule_id: str) -> None:
        """Delete `schedule_id` and its claims.

        Raises:
            NotFoundError: there is none.
        """
        async with self._db.write() as session:
            gone = (
                await session.execute(
                    delete(ScheduleRow)
                    .where(ScheduleRow.schedule_id == schedule_id)
                    .returning(ScheduleRow.schedule_id)
                )
            ).scalar_one_or_none()
            if gone is None:
                raise _not_found(schedule_id)
            await session.execute(delete(ScheduleFireRow).where(ScheduleFireRow.schedule_id == schedule_id))

    @idempotent
    async def last_fires(self, schedule_ids: Collection[str] | None = None) -> dict[str, int]:
        """The newest claimed fire time of every schedule that has one (of `schedule_ids` only, if given)."""
        query = select(ScheduleFireRow.schedule_id, func.max(ScheduleFireRow.fire_at)).group_by(
            ScheduleFireRow.schedule_id
        )
        if schedule_ids is not None:
            query = query.where(ScheduleFireRow.schedule_id.in_(list(schedule_ids)))
        async with self._db.read() as session:
            return {row[0]: int(row[1]) for row in (await session.execute(query)).all()}

    async def claim(
        self, schedule_id: str, fire_at: int, *, outcome: str, host_id: str | None, stored: bool
    ) -> bool:
        """Claim the fire of `schedule_id` at `fire_at`; True only for the one caller that stored it.

        `stored`: the schedule lives in this store, so it must still exist and not be paused.
        """
        async with self._db.write() as session:
            if stored:
                paused = await session.scalar(
                    select(ScheduleRow.paused).where(ScheduleRow.schedule_id == schedule_id)
                )
                if paused is None or paused:
                    return False
            newer = await session.scalar(
                select(func.count())
                .select_from(ScheduleFireRow)
                .where(ScheduleFireRow.schedule_id == schedule_id, ScheduleFireRow.fire_at >= fire_at)
            )
            if newer:
                return False
            values = {
                "schedule_id": schedule_id,
                "fire_at": fire_at,
                "outcome": outcome,
                "host_id": host_id,
                "claimed_at": time.time(),
            }
            stmt = insert_ignoring(self._db.dialect, ScheduleFireRow, values, ["schedule_id", "fire_at"])
            if (await session.execute(stmt.returning(ScheduleFireRow.fire_at))).scalar_one_or_none() is None:
                return False
            await session.execute(
                delete(ScheduleFireRow).where(
                    ScheduleFireRow.schedule_id == schedule_id, ScheduleFireRow.fire_at < fire_at
                )
            )
            return True


__all__ = ["MAX_STORED_SCHEDULES", "ScheduleStore", "StoredSchedule"]
