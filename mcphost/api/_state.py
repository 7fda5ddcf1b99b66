"""What the routes read of the host: `ApiState` (built by `app.py`, kept in `app.state.api`) and the body
size limits, `ApiLimits`.

Owns the shape of that state and the default limits. Does not own the host's composition (`app.py` builds
the state and sets `draining` on shutdown) or how limits are enforced (`_http.read_body`, `_artifacts`).

Invariants:
- `api_state(request)` is the one way a route gets the state; it asserts `app.py` set it before serving.
- Limits are bytes; the defaults here are `ApiLimits()`'s (the CLI's `--max-upload-bytes` defaults to
  `DEFAULT_MAX_UPLOAD_BYTES`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from starlette.requests import Request

from mcphost.bindings import Bindings
from mcphost.channels import ChannelAdapter, Target
from mcphost.config import HookConfig, WebhookConfig
from mcphost.continuations import Continuations
from mcphost.gateway.host_tools import Gateway
from mcphost.guard import HttpGuard
from mcphost.knowledge.bases import KnowledgeBases
from mcphost.metrics import HostMetrics
from mcphost.orchestrator import Orchestrator
from mcphost.plugins.process import PluginProcess
from mcphost.plugins.registry import RunnerRegistry
from mcphost.schedules import Scheduler
from mcphost.stores import Stores

MAX_EVENT_BODY_BYTES = 4 * 1024 * 1024
"""An event's `input.text` may be 256 KiB of characters, up to six JSON bytes each when escaped."""
DEFAULT_MAX_UPLOAD_BYTES = 100 * 1024 * 1024


# -- state the routes read ---------------------------------------------------------------------------


@dataclass
class ApiLimits:
    """Body size limits (bytes)."""

    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    max_event_bytes: int = MAX_EVENT_BODY_BYTES


@dataclass
class ApiState:
    """What the routes need of the host; `app.py` builds it and puts it in `app.state.api`."""

    stores: Stores
    orchestrator: Orchestrator
    registry: RunnerRegistry[PluginProcess]
    bindings: Bindings
    """The configured agents (`POST /v1/explain` resolves through them, as the orchestrator does)."""
    metrics: HostMetrics
    guard: HttpGuard
    """The host's one Host/Origin/API-key policy (the facts server holds the same instance)."""
    limits: ApiLimits = field(default_factory=ApiLimits)
    hooks: Mapping[str, HookConfig] = field(default_factory=dict[str, HookConfig])
    """The `[hooks.<source>]` webhook senders `POST /v1/hooks/{source}` accepts."""
    channels: Mapping[str, ChannelAdapter] = field(default_factory=dict[str, ChannelAdapter])
    """The `[channels.<id>]` chat platforms `POST /v1/channels/{channel_id}` accepts, by id."""
    scheduler: Scheduler | None = None
    """The host's scheduler (the schedule routes answer through it, and wake it after a change)."""
    continuations: Continuations | None = None
    """Starts a parked run's continuation as soon as its approval is decided here (else the host's
    continuation loop does, within seconds)."""
    webhooks: Sequence[WebhookConfig] = ()
    """The `[[webhooks]]` receivers (a redelivery is retried for its receiver's `max_age_s`)."""
    wake_deliveries: Callable[[], None] | None = None
    """Wakes this host's webhook sender, so a manual redelivery is claimed now rather than at the next poll."""
    stream_reply: Callable[[str, Target, str], None] | None = None
    """Streams the reply of a channel run admitted here (channel id, reply target, run id): typing and
    placeholder edits (`DeliverySender.stream`)."""
    knowledge: KnowledgeBases | None = None
    """The configured knowledge bases (`GET /v1/knowledge`, an operator's search)."""
    gateway: Gateway | None = None
    """The upstream tool servers (`GET /v1/tools`)."""
    draining: bool = False
    """Set when the server stops taking new events (graceful shutdown)."""


def api_state(request: Request) -> ApiState:
    state = request.app.state.api
    assert isinstance(state, ApiState), "app.state.api is set by app.py before requests are served"
    return state
