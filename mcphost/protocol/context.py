"""The run context a runner receives once at run start (PROTOCOL §3).

Everything here is sent by the host, so unknown fields are ignored on parse (runners must stay forward
compatible). `ArtifactRef` and `ContentElement` are also used inside results, which are inbound; they
forbid unknown fields there through `InboundModel`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from mcphost.protocol._base import PROTOCOL_VERSION, InboundModel, JSONObject, ProtocolModel

TriggerSource = Literal["platform", "webui", "api", "scheduler", "system", "cli"]


class ArtifactRef(InboundModel):
    """A handle on an artifact stored by the host. Bytes never travel inside it."""

    artifact_id: str = Field(min_length=1, max_length=200)
    name: str | None = Field(default=None, max_length=1000)
    mime_type: str = Field(default="application/octet-stream", max_length=200)
    size: int | None = Field(default=None, ge=0)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


class TextContent(InboundModel):
    type: Literal["text"] = "text"
    text: str


class MediaContent(InboundModel):
    type: Literal["image", "audio", "file"]
    artifact_id: str = Field(min_length=1, max_length=200)
    mime_type: str = Field(max_length=200)
    name: str | None = None


ContentElement = Annotated[TextContent | MediaContent, Field(discriminator="type")]


class Trigger(ProtocolModel):
    type: str
    source: TriggerSource
    timestamp: float


class EventInfo(ProtocolModel):
    event_id: str
    event_type: str
    event_time: float
    source: TriggerSource
    source_event_type: str | None = None
    raw_ref: str | None = None
    data: JSONObject = Field(default_factory=dict)


class ConversationInfo(ProtocolModel):
    conversation_id: str
    thread_id: str | None = None
    bot_id: str | None = None
    workspace_id: str | None = None


class ActorInfo(ProtocolModel):
    actor_type: str = "user"
    actor_id: str
    actor_name: str | None = None
    metadata: JSONObject = Field(default_factory=dict)


class SubjectInfo(ProtocolModel):
    subject_type: str
    subject_id: str
    data: JSONObject = Field(default_factory=dict)


class RunInput(ProtocolModel):
    text: str | None = None
    contents: list[ContentElement] = Field(default_factory=list[ContentElement])
    attachments: list[ArtifactRef] = Field(default_factory=list[ArtifactRef])


class Delivery(ProtocolModel):
    surface: str = "api"
    reply_target: str | None = None
    supports_streaming: bool = True
    supports_edit: bool = False
    max_message_size: int | None = None


class ToolInfo(ProtocolModel):
    name: str
    description: str = ""


class KnowledgeBaseInfo(ProtocolModel):
    kb_id: str
    name: str
    description: str = ""


class SkillInfo(ProtocolModel):
    skill_name: str
    display_name: str
    description: str = ""


class StorageInfo(ProtocolModel):
    areas: list[str] = Field(default_factory=list[str])


class HostModelInfo(ProtocolModel):
    """A host model the run may call (`[models.<id>]` in the host's config), without its provider or key."""

    model_id: str
    """The id to name in a request's `model` (the endpoints in `context.models` map it upstream)."""
    kind: Literal["chat", "rerank", "embedding"] = "chat"
    context_window: int | None = None
    """Input tokens the model takes, when the host knows it."""
    tools: bool = True
    """The model supports tool calls."""
    images: bool = False
    """The model takes images."""
    calls: list[Literal["invoke", "stream", "rerank", "embed"]] = Field(
        default_factory=list[Literal["invoke", "stream", "rerank", "embed"]]
    )
    """How the run may call it (its grant)."""


class Resources(ProtocolModel):
    tools: list[ToolInfo] = Field(default_factory=list[ToolInfo])
    knowledge_bases: list[KnowledgeBaseInfo] = Field(default_factory=list[KnowledgeBaseInfo])
    skills: list[SkillInfo] = Field(default_factory=list[SkillInfo])
    storage: StorageInfo = Field(default_factory=StorageInfo)
    models: list[HostModelInfo] = Field(default_factory=list[HostModelInfo])
    """Host models the run may call through its model endpoints (`context.models`)."""


class InlinePolicy(ProtocolModel):
    mode: Literal["current_event"] = "current_event"


class AvailableApis(ProtocolModel):
    history_page: bool = False
    history_search: bool = False
    event_get: bool = False
    event_page: bool = False
    artifact_metadata: bool = False
    artifact_read: bool = False
    artifact_create: bool = False
    state: bool = False
    storage: bool = False
    knowledge: bool = False
    tools: bool = False


class BridgeCommand(ProtocolModel):
    command: list[str] = Field(default_factory=list[str])
    env: dict[str, str] = Field(default_factory=dict[str, str])


class ModelEndpoints(ProtocolModel):
    """The run's model endpoints (PROTOCOL §7a), authenticated by the run token (`mcp.headers`) sent as
    `x-api-key` or `Authorization: Bearer`. Unmodified provider clients take these as their base URL."""

    anthropic: str
    """Anthropic Messages (`POST {anthropic}/v1/messages`): an Anthropic SDK's or Claude Code's
    `ANTHROPIC_BASE_URL`."""
    openai: str
    """OpenAI (`POST {openai}/chat/completions`, `POST {openai}/responses`, `GET {openai}/models`): an
    OpenAI SDK's `base_url`, a Codex model provider's `base_url`."""


class WarmSessionAccess(ProtocolModel):
    """The stable MCP endpoint of a warm harness session (PROTOCOL §9): offered when the agent's config
    says `warm = true` and the run belongs to a conversation. `headers` carries the session token: a
    secret. The endpoint serves the grant of whichever run of the session is current and refuses every
    call between runs; the pool limits are the host's `[host] warm_*` settings."""

    session_id: str
    url: str
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    max_sessions: int = 8
    """At most this many warm processes per plugin process (least recently used stopped first)."""
    idle_timeout_s: float = 600.0
    """A warm process with no turn for this long is stopped."""
    max_rss_mb: int = 2048
    """The warm processes of a plugin together stay under this resident memory (LRU eviction)."""
    models: ModelEndpoints | None = None
    """The session's model endpoints (`/sessions/{session_id}/models/...`), when the run is granted host
    models: the model endpoints of whichever run of the session is current, authenticated by the session
    token (`headers`), refusing every call between runs. A warm process on a host model keeps these."""


class MCPAccess(ProtocolModel):
    """How to reach the run's MCP server. `headers` carries the run token: a secret."""

    url: str
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    bridge: BridgeCommand = Field(default_factory=BridgeCommand)
    protocol_versions: list[str] = Field(default_factory=list[str])
    session: WarmSessionAccess | None = None
    """The warm session endpoint, when the agent asked for one (`warm = true`); else absent."""


class ContextAccess(ProtocolModel):
    conversation_id: str | None = None
    thread_id: str | None = None
    latest_cursor: str | None = None
    """The newest transcript item, including the current input message."""
    has_history_before: bool = False
    inline_policy: InlinePolicy = Field(default_factory=InlinePolicy)
    available_apis: AvailableApis = Field(default_factory=AvailableApis)
    mcp: MCPAccess | None = None
    models: ModelEndpoints | None = None
    """The run's model endpoints, when it is granted any host model (`resources.models`)."""


class StateErrorEntry(ProtocolModel):
    """A state key the snapshot leaves out because its stored value cannot be served."""

    scope: str
    key: str
    code: str = "runtime_error"
    message: str


class StateSnapshot(ProtocolModel):
    conversation: JSONObject = Field(default_factory=dict)
    actor: JSONObject = Field(default_factory=dict)
    subject: JSONObject = Field(default_factory=dict)
    runner: JSONObject = Field(default_factory=dict)
    errors: list[StateErrorEntry] = Field(default_factory=list[StateErrorEntry])
    """Keys whose stored value cannot be served (nested deeper than `MAX_JSON_DEPTH`, stored by an older
    host or straight into the database): absent from their scope's map, listed here, and the run goes
    on. Overwriting or deleting the key clears the entry."""


class StaticRef(ProtocolModel):
    ref: str
    version: str
    sha256: str


class Runtime(ProtocolModel):
    host: str = "mcphost"
    protocol_version: str = PROTOCOL_VERSION
    host_version: str
    trace_id: str
    deadline_at: float
    """Epoch seconds after which the run is cancelled."""
    locale: str | None = None
    timezone: str | None = None
    static_refs: dict[str, StaticRef] = Field(default_factory=dict[str, StaticRef])
    traceparent: str | None = None
    """W3C trace context of the host's span around this runner's run, when the host traces (else
    absent): parent your own spans to it, send it as `_meta.traceparent` on MCP requests."""
    tracestate: str | None = None


class AgentRunContext(ProtocolModel):
    """The event-first context of one run. Small and stable: no history window, only handles."""

    run_id: str
    trigger: Trigger
    event: EventInfo
    conversation: ConversationInfo | None = None
    actor: ActorInfo | None = None
    subject: SubjectInfo | None = None
    input: RunInput = Field(default_factory=RunInput)
    delivery: Delivery = Field(default_factory=Delivery)
    resources: Resources = Field(default_factory=Resources)
    context: ContextAccess = Field(default_factory=ContextAccess)
    state: StateSnapshot = Field(default_factory=StateSnapshot)
    runtime: Runtime
    config: JSONObject = Field(default_factory=dict)
    metadata: JSONObject = Field(default_factory=dict)
