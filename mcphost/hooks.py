"""Signed inbound webhooks: check that a request comes from a `[hooks.<source>]` sender, and map its
payload to an event envelope.

Owns the three verification schemes (`standard-webhooks` through the `standardwebhooks` package, GitHub's
`X-Hub-Signature-256`, a shared bearer), the sender's delivery id and platform event name, and the
mapping of a JSON payload to an `AgentEventEnvelope` (literals and `$.field` paths). Does not own reading
the body under its cap, storing the raw payload or admitting the event (`api/_hooks.py`, the
orchestrator), nor the configuration's shape (`config.HookConfig`).

Invariants:
- Nothing here stores anything: `verify` and `envelope` either return or raise a `HostError` whose
  status says why (401 bad or missing signature, or a timestamp outside `tolerance_s`; 400 a payload
  that is not a JSON object, lacks a delivery id or cannot be mapped), so a refused request is refused
  before the caller stores a byte.
- Signatures and secrets are compared in constant time (`hmac.compare_digest`), and never logged or
  echoed in a message.
- The sender's delivery id (`webhook-id`, `X-GitHub-Delivery`; for `bearer`, `webhook-id` or
  `Idempotency-Key` when sent) becomes the envelope's `event_id` in the source's own namespace,
  `hook:<source>:<delivery id>` (`ingress.hook_event_id`), so a redelivery is a replay of the same event
  while no delivery can name an API client's, a schedule's, a continuation's or another source's event.
  GitHub signs neither a timestamp nor `X-GitHub-Delivery` (only the body): a captured delivery
  sent again under a new id verifies, and is a new event — unless the source sets `replay_window_s`,
  whose lease (`replay_lease`) refuses the same body under another id within the window. Standard
  Webhooks signs the id and the time.
- A verified delivery that is a GitHub `ping`, or an event outside the source's `events`, is not an
  event at all (`ignored` names why): the caller answers it 200 and admits nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import ValidationError
from standardwebhooks import Webhook

from mcphost.common.validation import problems
from mcphost.config import DEFAULT_HOOK_EVENT_TYPE, HookConfig
from mcphost.errors import InvalidArgumentError, UnauthorizedError
from mcphost.ingress import hook_event_id
from mcphost.models import ID_PATTERN, AgentEventEnvelope, new_id
from mcphost.protocol import JSONObject, JSONValue, is_json_array, is_json_object

_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[([0-9]+)\]")
MAX_SIGNATURES = 10
"""At most this many `v1,<signature>` entries of a `webhook-signature` header are tried."""


@dataclass(frozen=True)
class Verified:
    """What a verified request says about itself besides its payload."""

    delivery_id: str | None
    """The sender's id of this delivery: the event's `event_id` is `hook:<source>:<delivery_id>`."""
    source_event_type: str | None
    """The platform's name for the event (`X-GitHub-Event`, a Standard Webhooks payload's `type`)."""
    payload: JSONObject


def _unauthorized(source: str, why: str, reason: str) -> UnauthorizedError:
    return UnauthorizedError(f"Webhook for hook source {source!r} refused: {why}", details={"reason": reason})


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")


def _payload(source: str, body: bytes) -> JSONObject:
    try:
        # NaN and Infinity are not JSON (RFC 8259); the /v1 bodies refuse them too.
        data = json.loads(body, parse_constant=_not_json)
    except (ValueError, RecursionError):
        data = None
    if not is_json_object(data):
        raise InvalidArgumentError(
            f"Webhook for hook source {source!r}: the payload is not a JSON object (RFC 8259 JSON: no NaN "
            "or Infinity).",
            details={"reason": "not_json_object"},
        )
    return data


def _standard_webhooks(
    source: str, hook: HookConfig, headers: Mapping[str, str], body: bytes, now: float
) -> str:
    msg_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    signatures = headers.get("webhook-signature", "")
    missing = [name for name, value in (("webhook-id", msg_id), ("webhook-timestamp", stamp),
                                        ("webhook-signature", signatures)) if not value]  # fmt: skip
    if missing:
        raise _unauthorized(
            source, f"missing header(s) {', '.join(missing)} (Standard Webhooks).", "missing_signature"
        )
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12):
        raise _unauthorized(source, "webhook-timestamp is not a Unix time in whole seconds.", "bad_timestamp")
    if abs(now - int(stamp)) > hook.tolerance_s:
        raise _unauthorized(
            source,
            f"webhook-timestamp is more than {hook.tolerance_s:g} s from the host's clock (tolerance_s); "
            "resend it signed now.",
            "stale_timestamp",
        )
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise _unauthorized(
            source, "the payload is not UTF-8, so its signature cannot match.", "bad_signature"
        ) from None
    expected = Webhook(hook.secret).sign(msg_id, datetime.fromtimestamp(int(stamp), UTC), text)
    want = base64.b64decode(expected.partition(",")[2])
    for entry in signatures.split(" ")[:MAX_SIGNATURES]:
        version, _, value = entry.partition(",")
        if version != "v1":
            continue
        try:
            given = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(given, want):
            return msg_id
    raise _unauthorized(
        source, "no webhook-signature matches the payload and the configured secret.", "bad_signature"
    )


def _github(source: str, hook: HookConfig, headers: Mapping[str, str], body: bytes) -> None:
    given = headers.get("x-hub-signature-256", "")
    if not given:
        raise _unauthorized(source, "missing header X-Hub-Signature-256 (GitHub).", "missing_signature")
    want = "sha256=" + hmac.new(hook.secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(given.strip().lower().encode(), want.encode()):
        raise _unauthorized(
            source,
            "X-Hub-Signature-256 does not match the payload and the configured secret.",
            "bad_signature",
        )


def _bearer(source: str, hook: HookConfig, headers: Mapping[str, str]) -> None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    presented = hashlib.sha256(token.strip().encode()).digest()
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        presented, hashlib.sha256(hook.secret.encode()).digest()
    ):
        raise _unauthorized(source, "missing or wrong 'Authorization: Bearer <secret>'.", "bad_signature")


def _delivery_id(source: str, value: str | None, header: str) -> str | None:
    if value is None or not value.strip():
        return None
    value = value.strip()
    if not re.fullmatch(ID_PATTERN, value):
        raise InvalidArgumentError(
            f"Webhook for hook source {source!r}: header {header} is not a usable delivery id (1-200 letters, "
            "digits and ._:@/+=-, starting with a letter or digit).",
            details={"reason": "bad_delivery_id", "header": header},
        )
    return value


def verify(source: str, hook: HookConfig, headers: Mapping[str, str], body: bytes, *, now: float) -> Verified:
    """Check `body` and `headers` (lower-case names) against `hook`; the delivery it proves.

    Raises:
        UnauthorizedError: a missing or wrong signature or bearer, or a stale timestamp.
        InvalidArgumentError: a verified payload that is not a JSON object, or a missing or bad delivery id.
    """
    match hook.verify:
        case "standard-webhooks":
            msg_id = _standard_webhooks(source, hook, headers, body, now)
            payload = _payload(source, body)
            kind = payload.get("type")
            return Verified(
                _delivery_id(source, msg_id, "webhook-id"), kind if isinstance(kind, str) else None, payload
            )
        case "github":
            _github(source, hook, headers, body)
            payload = _payload(source, body)
            delivery = _delivery_id(source, headers.get("x-github-delivery"), "X-GitHub-Delivery")
            if delivery is None:
                raise InvalidArgumentError(
                    f"Webhook for hook source {source!r}: missing header X-GitHub-Delivery (the delivery id).",
                    details={"reason": "missing_delivery_id"},
                )
            return Verified(delivery, headers.get("x-github-event") or None, payload)
        case "bearer":
            _bearer(source, hook, headers)
            payload = _payload(source, body)
            header = "webhook-id" if headers.get("webhook-id") else "Idempotency-Key"
            delivery = _delivery_id(source, headers.get(header.lower()), header)
            kind = payload.get("type")
            return Verified(delivery, kind if isinstance(kind, str) else None, payload)


IgnoreReason = Literal["ping", "event_not_selected"]


def ignored(hook: HookConfig, verified: Verified) -> IgnoreReason | None:
    """Why a verified delivery makes no run: `ping` (GitHub's hello when a webhook is created or
    tested), `event_not_selected` (its event is not in the source's `events`); None when it is an event."""
    if hook.verify == "github" and verified.source_event_type == "ping":
        return "ping"
    if hook.events is not None and verified.source_event_type not in hook.events:
        return "event_not_selected"
    return None


REPLAY_LEASE_PREFIX = "hook:"


def replay_lease(source: str, body: bytes, delivery_id: str | None) -> tuple[str, str]:
    """The lease (name, holder) that holds a body for a source's `replay_window_s`: the name is a hash
    of the source and the body (fits the 64-character lease name), the holder a hash of the delivery id
    (a redelivery of the same id holds it again; without an id, each request is a holder of its own)."""
    digest = hashlib.sha256(source.encode() + b"\0" + body).hexdigest()
    name = REPLAY_LEASE_PREFIX + digest[: 64 - len(REPLAY_LEASE_PREFIX)]
    holder = hashlib.sha256(delivery_id.encode()).hexdigest() if delivery_id else secrets.token_hex(32)
    return name, holder


def event_type(hook: HookConfig, verified: Verified) -> str:
    """The configured `event_type`; unset, `github.<X-GitHub-Event>` for GitHub (when the name fits an
    event type, as every GitHub event name does), else `webhook.received`."""
    if hook.event_type is not None:
        return hook.event_type
    name = verified.source_event_type
    if hook.verify == "github" and name is not None and re.fullmatch(r"[a-z0-9_]{1,90}", name):
        return f"github.{name}"
    return DEFAULT_HOOK_EVENT_TYPE


def field_value(payload: JSONValue, path: str) -> JSONValue:
    """The value at a field path (`$.a.b[0]`), or raise `KeyError` with the step that has none."""
    value = payload
    for name, index in _STEP.findall(path[1:]):
        if name and is_json_object(value) and name in value:
            value = value[name]
        elif index and is_json_array(value) and int(index) < len(value):
            value = value[int(index)]
        else:
            raise KeyError(name or f"[{index}]")
    return value


def _mapped(source: str, key: str, spec: str | None, payload: JSONObject) -> str | None:
    if spec is None or not spec.startswith("$"):
        return spec
    try:
        value = field_value(payload, spec)
    except KeyError:
        value = None
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    found = "nothing" if value is None else f"a JSON {type(value).__name__}"
    raise InvalidArgumentError(
        f"Webhook for hook source {source!r}: hooks.{source}.{key} reads {spec!r}, and the payload has "
        f"{found} there (a non-empty string or a number is needed).",
        details={"reason": "unmappable", "field": key, "path": spec},
    )


def envelope(source: str, hook: HookConfig, verified: Verified) -> AgentEventEnvelope:
    """The event a verified delivery becomes (without `raw_ref`: the caller stores the raw payload).

    Raises:
        InvalidArgumentError: a field path with no usable value, or mapped values the envelope refuses.
    """
    payload = verified.payload
    conversation_id = _mapped(source, "conversation_id", hook.conversation_id, payload)
    actor_id = _mapped(source, "actor_id", hook.actor_id, payload)
    text = _mapped(source, "text", hook.text, payload)
    data: JSONObject = {"hook": source}
    action = payload.get("action")
    if hook.verify == "github" and isinstance(action, str) and 0 < len(action) <= 100:
        data["action"] = action  # what happened to a pull request, an issue, …: `opened`, `closed`
    fields: JSONObject = {
        "event_type": event_type(hook, verified),
        "source": "platform",
        "source_event_type": verified.source_event_type,
        "input": {"text": text},
        "data": data,
        "agent_id": hook.agent,
    }
    fields["event_id"] = hook_event_id(source, verified.delivery_id or new_id("evt"))
    if conversation_id is not None:
        fields["conversation"] = {"conversation_id": conversation_id}
    if actor_id is not None:
        fields["actor"] = {"actor_id": actor_id}
    try:
        return AgentEventEnvelope.model_validate(fields)
    except ValidationError as exc:
        first = problems(exc, root="(event)")[0]
        raise InvalidArgumentError(
            f"Webhook for hook source {source!r}: the mapped event is not valid: {first}. "
            f"Check [hooks.{source}].",
            details={"reason": "unmappable", "field": first.where},
        ) from None
