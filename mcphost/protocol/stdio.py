"""The stdio plugin protocol (PROTOCOL §8): JSON-RPC 2.0, one JSON object per line.

Methods: `initialize`, `runner/run`, `runner/result` (notification), `runner/cancel` (notification),
`shutdown`. Lines over `MAX_LINE_BYTES` are protocol errors.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mcphost.protocol._base import PROTOCOL_VERSION, InboundModel, JSONObject, ProtocolModel
from mcphost.protocol.context import AgentRunContext
from mcphost.protocol.manifest import RUNNER_ID_PART, AgentRunnerManifest
from mcphost.protocol.projection import RunProjection

MAX_LINE_BYTES = 4 * 1024 * 1024

METHOD_INITIALIZE = "initialize"
METHOD_RUN = "runner/run"
METHOD_RESULT = "runner/result"
METHOD_CANCEL = "runner/cancel"
METHOD_SHUTDOWN = "shutdown"


class HostInfo(ProtocolModel):
    name: str = "mcphost"
    version: str


class InitializeParams(ProtocolModel):
    protocol_version: str = PROTOCOL_VERSION
    host: HostInfo


class PluginInfo(InboundModel):
    author: str = Field(pattern=RUNNER_ID_PART.pattern)
    name: str = Field(pattern=RUNNER_ID_PART.pattern)
    version: str = Field(min_length=1, max_length=100)


class InitializeResult(InboundModel):
    """A plugin's answer to `initialize`. Manifests are validated one by one by the registry, so one bad
    manifest is rejected with its reason without losing the others: they arrive here as raw objects."""

    plugin: PluginInfo
    runners: list[JSONObject] = Field(default_factory=list[JSONObject])


class RunParams(ProtocolModel):
    runner: str
    """The runner's name: the last part of its id."""
    context: AgentRunContext
    projection: RunProjection | None = None
    """The agent's secrets (as environment variables), workspace and skill files, when it has any
    (`projection.py`): beside the context, never inside it."""


RunAnswerStatus = Literal["completed", "failed"]
"""How a plugin answers `runner/run`: the run's own end, not the host's `RunStatus`."""


class RunResponse(InboundModel):
    status: RunAnswerStatus


class ResultParams(InboundModel):
    run_id: str
    result: JSONObject


class CancelParams(ProtocolModel):
    run_id: str
    reason: str = "cancelled"


__all__ = [
    "MAX_LINE_BYTES",
    "METHOD_CANCEL",
    "METHOD_INITIALIZE",
    "METHOD_RESULT",
    "METHOD_RUN",
    "METHOD_SHUTDOWN",
    "AgentRunnerManifest",
    "CancelParams",
    "HostInfo",
    "InitializeParams",
    "InitializeResult",
    "PluginInfo",
    "ResultParams",
    "RunParams",
    "RunResponse",
]
