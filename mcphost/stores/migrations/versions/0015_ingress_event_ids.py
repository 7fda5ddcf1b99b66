"""Hook events move into their source's `event_id` namespace (`hook:<source>:<delivery id>`).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04

Before this revision a webhook's delivery id was its event's `event_id` as sent, in the one namespace
API clients and schedules use too, so a delivery could read back or pre-empt another ingress's run
(`mcphost.ingress`). The host now gives a delivery of `[hooks.<source>]` the id
`ingress.hook_event_id(source, delivery_id)`; this revision renames the events stored before it the same
way, so a sender's redelivery of an older delivery is still the same run and an API client's `event_id`
no longer finds a webhook's run. A hook's event is the inbound event-log row with `source = 'platform'`
whose payload has `data = {"hook": <source>}` and a `raw_ref`, the only envelope `POST /v1/hooks/{source}`
makes. Its `events`, `runs` (every attempt) and `transcript` rows and the payload's `event_id` are
renamed. A row whose new id is taken already (an API client used that id before the prefix was
reserved) keeps its old id. No column changes; a downgrade leaves the ids as they are (the older code
reads them as opaque ids).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from mcphost.ingress import HOOK_PREFIX, hook_event_id
from mcphost.protocol import is_json_object

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SOURCE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
"""A hook source name as config accepts it (`config.SKILL_NAME_PATTERN`)."""
_events = sa.table(
    "events",
    sa.column("seq", sa.BigInteger),
    sa.column("event_id", sa.String),
    sa.column("kind", sa.String),
    sa.column("source", sa.String),
    sa.column("payload", sa.JSON),
)
_runs = sa.table("runs", sa.column("run_id", sa.String), sa.column("event_id", sa.String))
_transcript = sa.table("transcript", sa.column("event_id", sa.String))


def _hook_source(event_id: str, payload: object) -> str | None:
    """The hook source whose delivery this stored envelope is, or None for any other event."""
    if not is_json_object(payload) or event_id.startswith(HOOK_PREFIX) or payload.get("raw_ref") is None:
        return None
    data = payload.get("data")
    source = data.get("hook") if is_json_object(data) and len(data) == 1 else None
    return source if isinstance(source, str) and _SOURCE.fullmatch(source) else None


def upgrade() -> None:
    bind = op.get_bind()
    stored = bind.execute(
        sa.select(_events.c.seq, _events.c.event_id, _events.c.payload).where(
            _events.c.kind == "inbound", _events.c.source == "platform"
        )
    ).all()
    for seq, event_id, payload in stored:
        source = _hook_source(event_id, payload)
        if source is None:
            continue
        new = hook_event_id(source, event_id)
        taken = (
            bind.execute(sa.select(_events.c.seq).where(_events.c.event_id == new)).first()
            or bind.execute(sa.select(_runs.c.run_id).where(_runs.c.event_id == new)).first()
        )
        if taken is not None:
            continue
        bind.execute(
            sa.update(_events)
            .where(_events.c.seq == seq)
            .values(event_id=new, payload={**payload, "event_id": new})
        )
        bind.execute(sa.update(_runs).where(_runs.c.event_id == event_id).values(event_id=new))
        bind.execute(sa.update(_transcript).where(_transcript.c.event_id == event_id).values(event_id=new))


def downgrade() -> None:
    """The renamed ids stay: the older code treats an `event_id` as opaque."""
