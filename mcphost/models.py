"""Host-internal models: events, agents and their policies, runs and their grants.

Owns the shapes the host passes between its layers. Does not own persistence (`stores/`) or the
runner-visible wire shapes (`protocol/`); `context.py` is the one place that converts these into the
protocol. Inbound shapes (`AgentEventEnvelope`, `AgentConfig`) forbid unknown fields; internal values
are frozen.
"""

from __future__ import annotations

import re
import time
from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field, field_validator
from ulid import ULID

from mcphost.common.fielddocs import DocumentedModel
from mcphost.protocol import (
    STATE_SCOPES,
    ArtifactRef,
    ContentElement,
    Delivery,
    InboundModel,
    JSONObject,
    Permissions,
    StateScope,
    TriggerSource,
    parse_runner_id,
)

STABLE_EVENT_TYPES: frozenset[str] = frozenset(
    {
        "message.received",
        "message.recalled",
        "group.member_joined",
        "friend.request_received",
        "schedule.triggered",
        "api.invoked",
    }
)
"""Event types with a defined meaning. Other well-formed types are accepted and stored as-is."""

USER_MESSAGE_EVENT_TYPES: frozenset[str] = frozenset({"message.received"})
"""Only these become user transcript rows; every other event stays in the event log only."""

EVENT_TYPE_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$"
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,199}$"


def new_id(prefix: str) -> str:
    """A time-ordered id such as `run_01J...`."""
    return f"{prefix}_{ULID()}"


class _Frozen(DocumentedModel):
    model_config = ConfigDict(frozen=True, defer_build=True)


# -- events ------------------------------------------------------------------------------------------


class EventConversation(InboundModel):
    conversation_id: str = Field(pattern=ID_PATTERN)
    thread_id: str | None = Field(default=None, pattern=ID_PATTERN)
    bot_id: str | None = Field(default=None, pattern=ID_PATTERN)
    workspace_id: str | None = Field(default=None, pattern=ID_PATTERN)


class EventActor(InboundModel):
    actor_type: str = Field(default="user", max_length=50)
    actor_id: str = Field(pattern=ID_PATTERN)
    actor_name: str | None = Field(default=None, max_length=200)
    metadata: JSONObject = Field(default_factory=dict)


class EventSubject(InboundModel):
    subject_type: str = Field(max_length=50)
    subject_id: str = Field(pattern=ID_PATTERN)
    data: JSONObject = Field(default_factory=dict)


class EventInput(InboundModel):
    text: str | None = Field(default=None, max_length=256 * 1024)
    contents: list[ContentElement] = Field(default_factory=list[ContentElement], max_length=100)
    attachments: list[ArtifactRef] = Field(default_factory=list[ArtifactRef], max_length=100)

    def is_empty(self) -> bool:
        return not (self.text or self.contents or self.attachments)


class EventOptions(InboundModel):
    """How the host treats this one event (not passed to the runner)."""

    record: bool = False
    """Record the run (its envelope, context and every per-run MCP call with its answer) for
    `mcphost record export` and `mcphost replay`, as `record = true` on its agent does."""


class AgentEventEnvelope(InboundModel):
    """One inbound event. `event_id` makes ingest idempotent: a replayed id returns the existing run."""

    event_id: str = Field(default_factory=lambda: new_id("evt"), pattern=ID_PATTERN)
    event_type: str = Field(pattern=EVENT_TYPE_PATTERN, max_length=100)
    event_time: float = Field(default_factory=time.time)
    source: TriggerSource = "api"
    source_event_type: str | None = Field(default=None, max_length=200)
    """The platform's own name for the event (such as GitHub's `X-GitHub-Event`)."""
    raw_ref: str | None = Field(default=None, pattern=ID_PATTERN)
    """An artifact holding the raw platform payload (set by `POST /v1/hooks/{source}`); the run may read it."""
    conversation: EventConversation | None = None
    actor: EventActor | None = None
    subject: EventSubject | None = None
    input: EventInput = Field(default_factory=EventInput)
    delivery: Delivery = Field(default_factory=Delivery)
    data: JSONObject = Field(default_factory=dict)
    """Small event payload passed to the runner as `ctx.event.data`."""
    agent_id: str | None = Field(default=None, pattern=ID_PATTERN)
    """Optional explicit agent; it must still be bound to this event type."""
    options: EventOptions = Field(default_factory=EventOptions)

    @property
    def conversation_id(self) -> str | None:
        return self.conversation.conversation_id if self.conversation else None

    @property
    def thread_id(self) -> str | None:
        return self.conversation.thread_id if self.conversation else None

    @property
    def is_user_message(self) -> bool:
        return self.event_type in USER_MESSAGE_EVENT_TYPES

    def scope_ids(self) -> dict[str, str | None]:
        """The event's scope ids by the name a run's grant gives them (None where the event has none)."""
        conv, actor, subject = self.conversation, self.actor, self.subject
        return {
            "conversation_id": conv.conversation_id if conv else None,
            "thread_id": conv.thread_id if conv else None,
            "bot_id": conv.bot_id if conv else None,
            "workspace_id": conv.workspace_id if conv else None,
            "actor_id": actor.actor_id if actor else None,
            "subject_type": subject.subject_type if subject else None,
            "subject_id": subject.subject_id if subject else None,
        }

    def scope_value(self, field: str) -> str | None:
        """The event's value for a binding `match` key, or None when the event has none."""
        if field == "actor_type":
            return self.actor.actor_type if self.actor else None
        if field == "source":
            return self.source
        return self.scope_ids().get(field)


MATCH_KEYS: frozenset[str] = frozenset(
    {
        "conversation_id",
        "thread_id",
        "bot_id",
        "workspace_id",
        "actor_id",
        "actor_type",
        "subject_type",
        "subject_id",
        "source",
    }
)


# -- agents ------------------------------------------------------------------------------------------

ConcurrencyPolicy = Literal["enqueue", "reject", "interrupt"]


class ResourcePolicy(InboundModel):
    tools: list[str] = Field(default_factory=list[str])
    """Globs of host tool names (`<server>__<tool>`) the agent may call."""
    knowledge_bases: list[str] = Field(default_factory=list[str])
    skills: list[str] = Field(default_factory=list[str])
    models: list[str] = Field(default_factory=list[str], max_length=100)
    """Ids of `[models.<id>]` the agent's runs may call through the host (with the runner's
    `permissions.models`)."""


class StatePolicy(InboundModel):
    scopes: list[StateScope] = Field(default_factory=lambda: ["conversation"])
    write: bool = True


StorageArea = Literal["plugin", "workspace", "binding"]


class StoragePolicy(InboundModel):
    areas: list[StorageArea] = Field(default_factory=list[StorageArea])


class DeliveryPolicy(InboundModel):
    streaming: bool = True


ACTION_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}$"
"""A platform action's name as an agent allows it (`message.edit`, `friend.request.accept`)."""


class ActionPolicy(InboundModel):
    """`[agents.actions]`: which platform actions (`action.requested`) the agent's runs may ask for."""

    allow: list[str] = Field(default_factory=list[str], max_length=100)
    """Exact action names; the runner's manifest must also list each in `permissions.platform_api`.
    Empty: none (an `action.requested` fails the run with `unauthorized`)."""

    @field_validator("allow")
    @classmethod
    def _action_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(ACTION_NAME_PATTERN, name):
                raise ValueError(
                    f"action {name[:50]!r} must be an action name such as 'message.edit' (1-200 letters, "
                    "digits and ._:/-, starting with a letter or digit; no globs)"
                )
        return value


class RunBudget(InboundModel):
    """Caps on what one run may do through its MCP endpoint, besides the rate limit (unset: no cap)."""

    calls: int | None = Field(default=None, ge=1, le=1_000_000)
    """Facts and host-tool calls a run may make; later calls answer `rate_limited`."""
    bytes: int | None = Field(default=None, ge=1, le=2**40)
    """Bytes a run may read back (answers' sizes); later calls answer `rate_limited`."""
    model_tokens_per_run: int | None = Field(default=None, ge=1, le=10**12)
    """Host model tokens (input, output, cached) one run may spend; a call past it is refused (429)."""
    model_usd_per_run: float | None = Field(default=None, gt=0, le=10**9)
    """USD of host model calls one run may spend."""
    model_usd_per_day_per_actor: float | None = Field(default=None, gt=0, le=10**9)
    """USD of host model calls the agent's runs may spend per actor per UTC day."""
    model_usd_per_day: float | None = Field(default=None, gt=0, le=10**9)
    """USD of host model calls the agent's runs may spend per UTC day."""


LABEL_KEY_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
"""A runtime label's key (`region`, `gpu`, `repo.a`)."""
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$"
"""A runtime label's value."""


def check_labels(value: dict[str, str]) -> dict[str, str]:
    """`value`, when every key and value is a label's; else ValueError naming the first that is not."""
    for key, label in value.items():
        if not re.fullmatch(LABEL_KEY_PATTERN, key):
            raise ValueError(f"label key {key[:70]!r} must be 1-63 of a-z 0-9 _ . - (starting a-z or 0-9)")
        if not re.fullmatch(LABEL_VALUE_PATTERN, label):
            raise ValueError(
                f"label {key}={label[:140]!r}: a value is 1-128 of letters, digits and _.:/- "
                "(starting with a letter or digit)"
            )
    return value


class RuntimePlacement(InboundModel):
    """`[agents.runtime]`: the agent's runs execute on a registered runtime whose labels match."""

    labels: dict[str, str] = Field(min_length=1, max_length=32)
    """The selector: a runtime is eligible when it has every one of these labels with the same value."""
    on_lost: Literal["requeue", "fail"] = "requeue"
    """A runtime that misses its heartbeats loses the run: queue it again for another eligible runtime
    (`requeue`, the default) or fail it (`fail`, code `runtime.lost`)."""

    @field_validator("labels")
    @classmethod
    def _label_form(cls, value: dict[str, str]) -> dict[str, str]:
        return check_labels(value)

    def selector(self) -> str:
        """The selector as an operator writes it: `k=v,k2=v2` (sorted)."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))


class AgentConfig(InboundModel):
    """One `[[agents]]` entry: which events it takes, its runner, and what its runs may touch."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    runner: str
    event_types: list[str] = Field(default_factory=lambda: ["message.received"], min_length=1)
    match: dict[str, str | list[str]] = Field(default_factory=dict[str, str | list[str]])
    prompt: str | None = None
    config: JSONObject = Field(default_factory=dict)
    resources: ResourcePolicy = Field(default_factory=ResourcePolicy)
    state: StatePolicy = Field(default_factory=StatePolicy)
    storage: StoragePolicy = Field(default_factory=StoragePolicy)
    delivery: DeliveryPolicy = Field(default_factory=DeliveryPolicy)
    concurrency: ConcurrencyPolicy = "enqueue"
    timeout_s: float | None = Field(default=None, gt=0, le=24 * 3600)
    """Run deadline in seconds; the host's `run_timeout_s` (300 s) when unset."""
    budget: RunBudget = Field(default_factory=RunBudget)
    actions: ActionPolicy = Field(default_factory=ActionPolicy)
    approvals: dict[str, Literal["ask"]] = Field(default_factory=dict[str, Literal["ask"]], max_length=100)
    """`[agents.approvals]`: tool names or globs (facts tools such as `state_set`, host tools such as
    `github__*`) whose calls wait for a person's decision (`"ask"`)."""
    record: bool = False
    """Record every run of this agent for `mcphost record export` and `mcphost replay` (an event can
    ask for it alone with `options.record`)."""
    secrets: list[str] = Field(default_factory=list[str], max_length=100)
    """Names of `[secrets.<name>]` projected into this agent's runs as environment variables (each by
    its `variable`); runs of other agents never see them."""
    workspace: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    """A workspace name: its runs work in the folder `[workspaces]` (local runs) or the claiming
    runtime's `[runtimes.<name>] workspaces` map it to (a harness's working folder)."""
    runtime: Literal["local"] | RuntimePlacement = "local"
    """Where its runs execute: `local` (a plugin process of this host, the default) or `[agents.runtime]`
    with `labels` (a registered runtime whose labels match claims each run, docs/protocol.md §12)."""

    @field_validator("approvals")
    @classmethod
    def _approval_patterns(cls, value: dict[str, Literal["ask"]]) -> dict[str, Literal["ask"]]:
        for pattern in value:
            if not 1 <= len(pattern) <= 200 or not pattern.isprintable():
                raise ValueError(
                    f"approval key {pattern[:50]!r} must be a tool name or glob of 1-200 printable characters"
                )
        return value

    @field_validator("runner")
    @classmethod
    def _runner_id_form(cls, value: str) -> str:
        parse_runner_id(value)
        return value

    @field_validator("event_types")
    @classmethod
    def _event_types_form(cls, value: list[str]) -> list[str]:
        for t in value:
            if t != "*" and not re.match(EVENT_TYPE_PATTERN, t):
                raise ValueError(f"event type {t!r} must look like 'message.received' (or be '*')")
        return value

    @field_validator("match")
    @classmethod
    def _match_keys_known(cls, value: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
        unknown = sorted(set(value) - MATCH_KEYS)
        if unknown:
            raise ValueError(
                f"unknown match key(s) {', '.join(unknown)}; known: {', '.join(sorted(MATCH_KEYS))}"
            )
        return value


class AgentBinding(_Frozen):
    """The one agent an event resolved to. `binding_id` namespaces binding-scoped state."""

    binding_id: str
    agent: AgentConfig


# -- runs --------------------------------------------------------------------------------------------


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PARKED = "parked"
    """Stopped on a decision a person has not taken yet (a harness runner's call marked `ask`, or its
    question to the user); it never runs again: the decision starts a continuation run."""

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES: frozenset[RunStatus] = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.PARKED}
)

ALLOWED_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.RUNNING: frozenset(
        {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.PARKED}
    ),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
    RunStatus.PARKED: frozenset(),
}
"""The run state machine. The runs store is the only writer of `status` and checks this table."""


def can_transition(current: RunStatus, new: RunStatus) -> bool:
    return new in ALLOWED_TRANSITIONS[current]


class RunFailure(_Frozen):
    """Why a run did not complete (`Run.error`): a code, a message and details. A record, not an exception."""

    code: str
    message: str
    details: JSONObject = Field(default_factory=dict)


class Run(_Frozen):
    run_id: str
    event_id: str
    event_type: str
    agent_id: str | None
    runner_id: str | None
    """None for inspection grants (a run with no runner)."""
    conversation_id: str | None
    thread_id: str | None
    status: RunStatus
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    deadline_at: float
    error: RunFailure | None = None
    usage: JSONObject = Field(default_factory=dict)
    host_id: str | None = None
    """Which host process owns the run (for restart recovery)."""
    attempt: int = 1
    """1 for the first run of its event; n + 1 for a run created when the event was submitted again
    after attempt n failed `host.restarted` (the one case in which an `event_id` gets a second run)."""
    previous_run_id: str | None = None
    """The attempt before this one (None for attempt 1)."""
    created_by: str | None = None
    """The name of the API key whose event created the run (`[[api_keys]]`, `api_key` for `[host]
    api_key`); None without keys, and for runs from hooks, schedules and continuations. A `sender` key
    sees only its own runs. Later attempts keep the first one's."""


class GrantLayers(_Frozen):
    """What the manifest and agent layers of a run's cut offered (PROTOCOL §6), kept with its grant.

    Not consulted to decide anything (the grant's own sets do); read only to say which layer removed a
    refused tool, scope or area and which key would add it. The event layer is the grant's scope ids.
    """

    runner_id: str
    agent_id: str
    manifest: Permissions
    """The runner manifest's `permissions`."""
    tools: tuple[str, ...] = ()
    """The agent's `resources.tools` globs."""
    knowledge_bases: tuple[str, ...] = ()
    state_scopes: tuple[str, ...] = ()
    state_write: bool = True
    storage_areas: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    """The agent's `actions.allow`."""
    models: tuple[str, ...] = ()
    """The agent's `resources.models`."""


class RunGrant(_Frozen):
    """The frozen authorization snapshot of one run (PROTOCOL §6). Checked on every MCP call."""

    run_id: str
    runner_id: str | None
    plugin: str | None
    binding_id: str | None
    conversation_id: str | None
    thread_id: str | None
    actor_id: str | None
    subject_type: str | None
    subject_id: str | None
    bot_id: str | None
    workspace_id: str | None
    tools: frozenset[str]
    """Allowed MCP tool names: facts tools and host tools."""
    host_tool_globs: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    """Tool names or globs whose calls wait for a person's approval (the agent's `[agents.approvals]`)."""
    parks: bool = False
    """The runner parks instead of waiting (its manifest's `capabilities.parks`): a call marked `ask`
    is answered `approval_pending` at once and the run ends `parked`; the decision continues it."""
    knowledge_bases: frozenset[str] = frozenset()
    state_read: frozenset[str] = frozenset()
    state_write: frozenset[str] = frozenset()
    storage_areas: frozenset[str] = frozenset()
    artifact_create: bool = False
    actions: frozenset[str] = frozenset()
    """Platform actions the run may ask for (`action.requested`): the manifest's `platform_api` ∩ the
    agent's `actions.allow`; the target must also lie in the event's scope (`grants.action_out_of_scope`)."""
    models: frozenset[str] = frozenset()
    """Host models (`[models.<id>]`) the run may call: the agent's `resources.models`, when the manifest
    declares any `permissions.models`."""
    model_calls: frozenset[str] = frozenset()
    """How it may call them: the manifest's `permissions.models` (`invoke`, `stream`, `rerank`)."""
    deadline_at: float
    rate_per_s: float = 50.0
    rate_burst: int = 100
    call_budget: int | None = None
    byte_budget: int | None = None
    token_hash: str
    layers: GrantLayers | None = None
    """What each layer offered, to word refusals; None for inspection grants (they have no layers)."""
    record: bool = False
    """Every per-run MCP call of the run is recorded with its answer (`stores/recordings.py`)."""
    traceparent: str | None = None
    """Not a permission: the W3C trace context of the event's ingest span when tracing is on (token-free),
    kept with the run so that whichever host starts it parents the run's spans to it."""
    tracestate: str | None = None

    def state_scope_id(self, scope: str) -> tuple[str, ...] | None:
        """The owner key of a state scope for this run, or None when the event lacks its id."""
        rid, bid = self.runner_id or "", self.binding_id or ""
        match scope:
            case "conversation":
                if self.conversation_id is None:
                    return None
                return (rid, bid, self.conversation_id, self.thread_id or "")
            case "actor":
                return None if self.actor_id is None else (rid, bid, self.actor_id)
            case "subject":
                if self.subject_type is None or self.subject_id is None:
                    return None
                return (rid, bid, self.subject_type, self.subject_id)
            case "runner":
                return (rid,)
            case "binding":
                return (bid,)
            case "workspace":
                return None if self.workspace_id is None else (self.workspace_id, rid)
            case _:
                raise ValueError(f"unknown state scope {scope!r}; known: {', '.join(STATE_SCOPES)}")
