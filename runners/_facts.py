"""Typed results of the per-run MCP tools (PROTOCOL §7), as a runner reads them through `RunAPI`.

Owns one pydantic model per tool answer, mirroring the structured content the host's facts server
returns field for field. Does not call anything (`_runapi.py` does) and imports nothing of the host but
`mcphost.protocol`.

Invariants:
- These models parse what the host sends, so they ignore unknown fields (PROTOCOL §1: a newer host may
  add fields) and are frozen once parsed.
- Cursors stay opaque strings; nothing here parses or compares them.
- Bytes travel as base64 in the structured content; the models keep the wire form and offer a decoding
  accessor (`ArtifactChunk.content()`, `StorageValue.value()`), so a bad payload fails where it is read.
"""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import ConfigDict, Field

from mcphost.protocol import ArtifactRef, JSONObject, JSONValue, ProtocolModel, StateScope

TranscriptRole = Literal["user", "assistant", "system", "event"]
StorageArea = Literal["plugin", "workspace", "binding"]


class FactsModel(ProtocolModel):
    """Base of every tool answer: unknown fields ignored, frozen."""

    model_config = ConfigDict(extra="ignore", frozen=True, use_attribute_docstrings=True)


# -- history and events -----------------------------------------------------------------------------------


class TranscriptItem(FactsModel):
    """One item of the conversation transcript."""

    cursor: str
    item_id: str
    role: TranscriptRole
    content: str
    """At most 4000 characters; `truncated` says when it was cut."""
    truncated: bool = False
    contents: list[JSONObject] = Field(default_factory=list[JSONObject])
    contents_error: str | None = None
    """Set (and `contents` empty) when the stored contents nest too deep to be served."""
    artifacts: list[ArtifactRef] = Field(default_factory=list[ArtifactRef])
    """Only filled when the page was asked for with `include_artifacts=True`."""
    artifact_count: int = 0
    event_id: str | None = None
    run_id: str | None = None
    actor_id: str | None = None
    created_at: float = 0.0


class HistoryPage(FactsModel):
    """A page of the transcript: newest first going back (`before_cursor`), oldest first going forward."""

    items: list[TranscriptItem]
    next_cursor: str | None = None
    """Pass it as the same direction's cursor to continue."""
    prev_cursor: str | None = None
    has_more: bool = False


class SearchHit(FactsModel):
    item: TranscriptItem
    score: float
    snippet: str


class HistorySearch(FactsModel):
    """`history_search` hits, best first."""

    hits: list[SearchHit]


class EventRecord(FactsModel):
    """A stored event envelope; `data` is None (and `data_truncated` set) when it was too large."""

    cursor: str
    event_id: str
    event_type: str
    kind: str
    source: str | None = None
    conversation_id: str | None = None
    thread_id: str | None = None
    run_id: str | None = None
    actor_id: str | None = None
    created_at: float = 0.0
    data: JSONValue = None
    data_truncated: bool = False
    data_size: int = 0
    data_error: JSONObject | None = None
    """`{code, message}` when the stored data nests too deep to be served (`data` is None)."""


class EventPage(FactsModel):
    items: list[EventRecord]
    next_cursor: str | None = None
    prev_cursor: str | None = None
    has_more: bool = False


# -- artifacts --------------------------------------------------------------------------------------------


class ArtifactMetadata(FactsModel):
    """An artifact's handle with its hash and times."""

    artifact_id: str
    name: str | None = None
    mime_type: str = "application/octet-stream"
    size: int | None = None
    sha256: str | None = None
    created_at: float | None = None
    expires_at: float | None = None

    @property
    def ref(self) -> ArtifactRef:
        """The handle to attach to a message or an `artifact.created` result."""
        return ArtifactRef(
            artifact_id=self.artifact_id,
            name=self.name,
            mime_type=self.mime_type,
            size=self.size,
            sha256=self.sha256,
        )


class ArtifactChunk(FactsModel):
    """A byte range of an artifact: `data` is text when `encoding` is utf-8, else base64."""

    artifact_id: str
    mime_type: str
    data: str
    encoding: Literal["utf-8", "base64"]
    offset: int
    length: int
    size: int | None = None
    eof: bool

    def content(self) -> bytes:
        """The bytes of this range."""
        return self.data.encode() if self.encoding == "utf-8" else base64.b64decode(self.data)


# -- state and storage ------------------------------------------------------------------------------------


class StateValue(FactsModel):
    """`state_get`: `found=False` (and `value` None) when nothing is stored under the key."""

    scope: StateScope
    key: str
    found: bool
    value: JSONValue = None
    size: int | None = None
    updated_at: float | None = None


class StateWritten(FactsModel):
    scope: StateScope
    key: str
    size: int
    updated_at: float


class Deleted(FactsModel):
    """`state_delete` / `storage_delete`: `deleted=False` when there was nothing to delete."""

    key: str
    deleted: bool
    scope: StateScope | None = None
    area: StorageArea | None = None


class StateListItem(FactsModel):
    key: str
    size: int
    updated_at: float
    value: JSONValue = None
    value_omitted: bool = False
    """True when the page had no room left for the value: read it with `state_get`."""
    error: JSONObject | None = None
    """`{code, message}` when the stored value nests too deep to be served (`value` is None)."""


class StateList(FactsModel):
    scope: StateScope
    items: list[StateListItem]
    next_cursor: str | None = None
    has_more: bool = False


class StorageValue(FactsModel):
    """`storage_get`: `found=False` when nothing is stored under the key."""

    area: StorageArea
    key: str
    found: bool
    value_base64: str | None = None
    size: int | None = None
    updated_at: float | None = None

    def value(self) -> bytes | None:
        """The stored bytes, or None when not found."""
        return None if self.value_base64 is None else base64.b64decode(self.value_base64)


class StorageWritten(FactsModel):
    area: StorageArea
    key: str
    size: int
    updated_at: float


class StorageListItem(FactsModel):
    key: str
    size: int
    updated_at: float


class StorageList(FactsModel):
    area: StorageArea
    items: list[StorageListItem]
    next_cursor: str | None = None
    has_more: bool = False


# -- knowledge and tools ----------------------------------------------------------------------------------


class KnowledgeBase(FactsModel):
    kb_id: str
    name: str
    description: str = ""


class KnowledgeBases(FactsModel):
    knowledge_bases: list[KnowledgeBase]


class KnowledgeChunk(FactsModel):
    chunk_id: str
    document: str
    """The document the passage comes from (its path or title)."""
    text: str
    score: float
    metadata: JSONObject = Field(default_factory=dict)


class KnowledgeHits(FactsModel):
    chunks: list[KnowledgeChunk]


class RunTool(FactsModel):
    """A tool the run may call: a facts tool or a granted host tool (`<server>__<tool>`)."""

    name: str
    description: str = ""
    input_schema: JSONObject = Field(default_factory=dict)


class ToolResult(FactsModel):
    """A successful tool call: its text blocks joined, and its structured content when it has one."""

    text: str
    structured_content: JSONObject | None = None
