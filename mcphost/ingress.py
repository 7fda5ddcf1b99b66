"""Event-id namespaces: the `event_id` of every event the host admits says which ingress it came in by,
so no ingress can name, pre-empt or read back another's run.

Owns the ids the host gives the events it makes itself — a `[hooks.<source>]` delivery
(`hook:<source>:<delivery id>`), a `[channels.<id>]` platform event (`channel:<id>:<platform key>`,
the key built by the channel's adapter from what the platform repeats on a retry), a schedule's fire (`schedule:<id>:<fire_at>`, built by
`timetable.fire_event_id`) and the continuation of a parked approval (`continuation:<approval_id>`) —
and the check that refuses those prefixes to a client's own `event_id` (`POST /v1/events`,
`mcphost run --event-id`). Does not own admission, which is idempotent on `event_id` (the orchestrator
and `stores/runs.py`), nor where an ingress gets its ids (the sender's delivery id: `hooks.py`).

Invariants:
- The namespaces are disjoint: a client `event_id` never starts with a `RESERVED_PREFIXES` entry
  (`check_client_event_id` refuses it with a 400 before anything is stored); a hook source name has no
  `:` (config's source-name pattern), so `hook:a:…` and `hook:b:…` never meet.
- Within one ingress an id is a function of what the sender repeats (the delivery id, the fire, the
  approval, the client's `event_id`), so a redelivery, a second replica's fire or a client's retry is the
  same idempotent admission.
- Only the host makes a `continuation:` id, so a run whose `event_id` is `continuation_event_id(a)` was
  submitted by the host to continue approval `a` (`ApprovalStore.use` relies on it).
- Ids fit the envelope's `ID_PATTERN` (at most 200 characters): a delivery id too long to fit behind
  its source's prefix is replaced by its SHA-256 (`hook:<source>:sha256-<hex>`), still one id per delivery.
"""

from __future__ import annotations

import hashlib

from mcphost.errors import InvalidArgumentError

HOOK_PREFIX = "hook:"
CHANNEL_PREFIX = "channel:"
SCHEDULE_PREFIX = "schedule:"
CONTINUATION_PREFIX = "continuation:"
RESERVED_PREFIXES = (HOOK_PREFIX, CHANNEL_PREFIX, SCHEDULE_PREFIX, CONTINUATION_PREFIX)
"""Prefixes of the ids the host makes; a client's `event_id` may start with none of them."""
MAX_EVENT_ID_CHARS = 200


def _namespaced(prefix: str, key: str) -> str:
    if len(prefix) + len(key) <= MAX_EVENT_ID_CHARS:
        return prefix + key
    return f"{prefix}sha256-{hashlib.sha256(key.encode()).hexdigest()}"


def hook_event_id(source: str, delivery_id: str) -> str:
    """The `event_id` of a delivery of hook source `source`."""
    return _namespaced(f"{HOOK_PREFIX}{source}:", delivery_id)


def channel_event_id(channel_id: str, key: str) -> str:
    """The `event_id` of the platform event `key` (its adapter's dedupe key) on channel `channel_id`."""
    return _namespaced(f"{CHANNEL_PREFIX}{channel_id}:", key)


def event_channel(event_id: str) -> str | None:
    """The channel whose platform event `event_id` is; None for any other ingress."""
    if not event_id.startswith(CHANNEL_PREFIX):
        return None
    return event_id.removeprefix(CHANNEL_PREFIX).partition(":")[0] or None


def continuation_event_id(approval_id: str) -> str:
    """The `event_id` of the one run that continues the run parked on `approval_id`."""
    return f"{CONTINUATION_PREFIX}{approval_id}"


def continued_approval(event_id: str) -> str | None:
    """The approval a continuation's `event_id` continues; None for any other event."""
    if not event_id.startswith(CONTINUATION_PREFIX):
        return None
    return event_id.removeprefix(CONTINUATION_PREFIX) or None


def check_client_event_id(event_id: str) -> None:
    """Refuse a client's `event_id` in a namespace the host keeps for itself.

    Raises:
        InvalidArgumentError: `event_id` starts with one of `RESERVED_PREFIXES`.
    """
    prefix = next((p for p in RESERVED_PREFIXES if event_id.startswith(p)), None)
    if prefix is not None:
        reserved = ", ".join(repr(p) for p in RESERVED_PREFIXES)
        raise InvalidArgumentError(
            f"event_id {event_id[:80]!r} starts with {prefix!r}: the prefixes {reserved} are reserved for "
            "the events the host makes (webhook deliveries, chat channel events, schedule fires, "
            "continuations of approvals). Choose an event_id without them.",
            details={"field": "event_id", "reason": "reserved_event_id", "prefix": prefix},
        )
