"""Registered runtimes: names, token hashes, labels, the operator's state and each one's liveness.

Owns the `runtimes` table (migration 0023). Does not own the queue of remote runs or their leases
(`stores/dispatch.py`), nor the runtime protocol (`api/_runtime.py`) or the daemon (`runtimes/daemon.py`).

Invariants:
- A runtime token is printed once by `add` and only its SHA-256 is stored; `authenticate` looks the
  hash up, so the token itself is never compared, logged or kept.
- `state` is what the operator allows (`online`, `draining`: no new claims, `disabled`: its token is
  refused); whether it is alive is `last_heartbeat_at`, written by every register and heartbeat.
- Labels an operator gave (`labels`) win over the ones the runtime reports (`reported_labels`) when
  the two name the same key (`effective_labels`): a runtime cannot move itself into another pool.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, func, or_, select, update

from mcphost.errors import ConflictError, NotFoundError
from mcphost.models import new_id
from mcphost.stores.engine import Database
from mcphost.stores.tables import RuntimeRow, RuntimeRunRow

RuntimeState = Literal["online", "draining", "disabled"]
RUNTIME_STATES: tuple[RuntimeState, ...] = ("online", "draining", "disabled")
TOKEN_PREFIX = "mcprt_"
"""Runtime tokens start with this, so a leaked one is recognisable (and never taken for an API key)."""


class RuntimeRecord(BaseModel):
    """One runtime as the host knows it (never its token or its hash)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    runtime_id: str
    name: str
    labels: dict[str, str]
    reported_labels: dict[str, str]
    state: RuntimeState
    capabilities: dict[str, Any]
    slots: int
    last_heartbeat_at: float | None
    created_at: float
    running: int = 0
    """Runs it holds now (claimed, lease not ended)."""

    @property
    def effective_labels(self) -> dict[str, str]:
        return {**self.reported_labels, **self.labels}

    def alive(self, lease_s: float, now: float | None = None) -> bool:
        """It heartbeated within the last lease."""
        seen = self.last_heartbeat_at
        return seen is not None and seen + lease_s > (now if now is not None else time.time())

    def runners(self) -> list[str]:
        found: object = self.capabilities.get("runners")
        if not isinstance(found, list):
            return []
        return [r for r in cast("list[object]", found) if isinstance(r, str)]


def _record(row: RuntimeRow, running: int = 0) -> RuntimeRecord:
    return RuntimeRecord(
        runtime_id=row.runtime_id,
        name=row.name,
        labels=dict(row.labels),
        reported_labels=dict(row.reported_labels),
        state=row.state,  # pyright: ignore[reportArgumentType]  # written from RuntimeState only
        capabilities=dict(row.capabilities),
        slots=row.slots,
        last_heartbeat_at=row.last_heartbeat_at,
        created_at=row.created_at,
        running=running,
    )


def hash_token(token: str) -> str:
    """The stored form of a runtime token: its SHA-256 hex (as run tokens are kept, `grants.py`)."""
    return hashlib.sha256(token.encode()).hexdigest()


def runtime_not_found(name: str) -> NotFoundError:
    return NotFoundError(
        f"No runtime named {name!r}; list them with `mcphost runtimes` (or GET /v1/runtimes).",
        details={"runtime": name},
    )


class RuntimeStore:
    """Add, list, change and authenticate runtimes."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, name: str, labels: dict[str, str]) -> tuple[RuntimeRecord, str]:
        """A new runtime and its token (shown once).

        Raises:
            ConflictError: a runtime of that name exists.
        """
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = time.time()
        async with self._db.write() as session:
            taken = (
                await session.execute(select(RuntimeRow.runtime_id).where(RuntimeRow.name == name))
            ).first()
            if taken is not None:
                raise ConflictError(
                    f"A runtime named {name!r} exists; remove it first (`mcphost runtimes remove {name}`) "
                    "or choose another name.",
                    details={"runtime": name},
                )
            row = RuntimeRow(
                runtime_id=new_id("rt"),
                name=name,
                token_hash=hash_token(token),
                labels=labels,
                reported_labels={},
                state="online",
                capabilities={},
                slots=0,
                last_heartbeat_at=None,
                created_at=now,
            )
            session.add(row)
            await session.flush()
            return _record(row), token

    async def list(self) -> list[RuntimeRecord]:
        """Every runtime, by name, with how many runs each holds."""
        async with self._db.read() as session:
            rows = (await session.execute(select(RuntimeRow).order_by(RuntimeRow.name))).scalars().all()
            counted = await session.execute(
                select(RuntimeRunRow.runtime_id, func.count())
                .where(RuntimeRunRow.state == "claimed")
                .group_by(RuntimeRunRow.runtime_id)
            )
            counts: dict[str | None, int] = dict(counted.all())
        return [_record(r, counts.get(r.runtime_id, 0)) for r in rows]

    async def get(self, name: str) -> RuntimeRecord:
        """The runtime named `name` (or whose id it is).

        Raises:
            NotFoundError: there is none.
        """
        async with self._db.read() as session:
            row = (
                await session.execute(
                    select(RuntimeRow).where(or_(RuntimeRow.name == name, RuntimeRow.runtime_id == name))
                )
            ).scalar_one_or_none()
            if row is None:
                raise runtime_not_found(name)
            running = (
                await session.execute(
                    select(func.count()).where(
                        RuntimeRunRow.runtime_id == row.runtime_id, RuntimeRunRow.state == "claimed"
                    )
                )
            ).scalar_one()
        return _record(row, running)

    async def set_state(self, name: str, state: RuntimeState) -> RuntimeRecord:
        """Set what the operator allows `name` (by name or id).

        Raises:
            NotFoundError: there is no such runtime.
        """
        assert state in RUNTIME_STATES, state
        async with self._db.write() as session:
            done = await session.execute(
                update(RuntimeRow)
                .where(or_(RuntimeRow.name == name, RuntimeRow.runtime_id == name))
                .values(state=state)
            )
            if getattr(done, "rowcount", 0) == 0:
                raise runtime_not_found(name)
        return await self.get(name)

    async def remove(self, name: str) -> RuntimeRecord:
        """Forget `name`: its token is refused from now on; the leases it holds lapse (the runs go back
        to the queue, or fail, as their agents' `on_lost` says).

        Raises:
            NotFoundError: there is no such runtime.
        """
        record = await self.get(name)
        async with self._db.write() as session:
            await session.execute(delete(RuntimeRow).where(RuntimeRow.runtime_id == record.runtime_id))
        return record

    async def authenticate(self, token: str) -> RuntimeRecord | None:
        """The runtime whose token this is, else None (an unknown, removed or malformed token)."""
        if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
            return None
        async with self._db.read() as session:
            row = (
                await session.execute(select(RuntimeRow).where(RuntimeRow.token_hash == hash_token(token)))
            ).scalar_one_or_none()
        return None if row is None else _record(row)

    async def authenticate_id(self, runtime_id: str) -> RuntimeRecord | None:
        """The runtime `runtime_id` as it is now, else None (removed)."""
        async with self._db.read() as session:
            row = (
                await session.execute(select(RuntimeRow).where(RuntimeRow.runtime_id == runtime_id))
            ).scalar_one_or_none()
        return None if row is None else _record(row)

    async def register(
        self, runtime_id: str, *, capabilities: dict[str, Any], slots: int, labels: dict[str, str]
    ) -> RuntimeRecord:
        """Record what the runtime reports about itself; it is alive as of now."""
        async with self._db.write() as session:
            await session.execute(
                update(RuntimeRow)
                .where(RuntimeRow.runtime_id == runtime_id)
                .values(
                    capabilities=capabilities,
                    slots=slots,
                    reported_labels=labels,
                    last_heartbeat_at=time.time(),
                )
            )
            row = (
                await session.execute(select(RuntimeRow).where(RuntimeRow.runtime_id == runtime_id))
            ).scalar_one_or_none()
            if row is None:
                raise runtime_not_found(runtime_id)
            return _record(row)
