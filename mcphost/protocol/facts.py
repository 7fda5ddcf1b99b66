"""The answers of the per-run MCP tools (PROTOCOL §7): one pydantic model per answer, and which tool gives which.

Owns `FactsToolName` (every facts tool), the answer models, `FACTS_ANSWERS` (tool → model) and
`answer_schema()` (the `outputSchema` each tool publishes, and what `mcphost schema` writes). The host's
handlers (`mcphost/facts/`) build these models and the call pipeline serializes them once
(`model_dump(mode="json")`) into `structuredContent`; the runner SDK (`mcphost_runners.sdk`) parses the same
models. Does not call or serve anything. Pure, like the rest of the package.

Invariants:
- A field the host always sends is required (no default): a host that stops sending it fails the SDK's
  parse instead of reading as a default. Fields with a default are the ones the host sends only
  sometimes, and their dump leaves them out exactly when the host does (`exclude_if`, and
  `StateListItem`'s serializer), so `Model.model_validate(answer).model_dump(mode="json") == answer`
  for every answer the host gives.
- Parsing ignores unknown fields (a newer host may add some, PROTOCOL §1); validating with
  `context=STRICT_CONTEXT` refuses them instead, which is how the tests catch a host field the models lack.
- Frozen once built. Cursors stay opaque strings. Bytes travel as base64 and are decoded on access
  (`ArtifactChunk.content()`, `StorageValue.value()`), so a bad payload fails where it is read.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from functools import cache
from typing import Any, Literal, get_args

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from mcphost.protocol._base import JSONObject, JSONValue, ProtocolModel
from mcphost.protocol.context import AgentRunContext, ArtifactRef
from mcphost.protocol.inference import EmbeddingAnswer, ModelInvocation, ModelsList, RerankAnswer
from mcphost.protocol.results import StateScope

FactsToolName = Literal[
    "run_context",
    "history_page",
    "history_search",
    "events_get",
    "events_page",
    "artifacts_metadata",
    "artifacts_read",
    "artifacts_create",
    "state_get",
    "state_set",
    "state_delete",
    "state_list",
    "storage_get",
    "storage_set",
    "storage_delete",
    "storage_list",
    "knowledge_list",
    "knowledge_retrieve",
    "models_list",
    "models_invoke",
    "models_rerank",
    "models_embed",
]
"""Every tool of the per-run MCP server, in the order `tools/list` shows them."""

FACTS_TOOL_NAMES: tuple[FactsToolName, ...] = get_args(FactsToolName)

TranscriptRole = Literal["user", "assistant", "system", "event"]
StorageArea = Literal["plugin", "workspace", "binding"]


def _none(value: object) -> bool:
    return value is None


class FactsAnswer(ProtocolModel):
    """Base of every tool answer: unknown fields ignored (refused under `STRICT_CONTEXT`), frozen."""

    model_config = ConfigDict(frozen=True)


# -- history and events -----------------------------------------------------------------------------------


class TranscriptItem(FactsAnswer):
    """One item of the conversation transcript."""

    cursor: str
    item_id: str
    role: TranscriptRole
    content: str
    """At most 4000 characters; `truncated` says when it was cut."""
    truncated: bool
    """True when `content` (or a text element of `contents`) was cut at 4000 characters."""
    contents: list[JSONObject]
    """Content elements; without `include_artifacts` only the text ones."""
    contents_error: str | None
    """Set (and `contents` empty) when the stored contents nest too deep to be served."""
    artifacts: list[ArtifactRef]
    """Only filled when the page was asked for with `include_artifacts=True`."""
    artifact_count: int
    """How many artifacts the item has (also when `include_artifacts` left them out)."""
    event_id: str | None
    run_id: str | None
    actor_id: str | None
    created_at: float


class HistoryPage(FactsAnswer):
    """`history_page`: newest first going back (`before_cursor`), oldest first going forward."""

    items: list[TranscriptItem]
    next_cursor: str | None
    """Pass it as the same direction's cursor to continue (set only when `has_more`)."""
    prev_cursor: str | None
    """Goes the other way (set only for a page anchored on a cursor)."""
    has_more: bool


class SearchHit(FactsAnswer):
    """One `history_search` hit; page around it with `item.cursor`."""

    item: TranscriptItem
    score: float
    snippet: str
    """The matching text with the matches marked `**like this**`."""


class HistorySearch(FactsAnswer):
    """`history_search`: hits, best first."""

    hits: list[SearchHit]


class EventRecord(FactsAnswer):
    """`events_get` (and each item of `events_page`): a stored event envelope."""

    cursor: str
    event_id: str
    event_type: str
    kind: str
    """`inbound`, `telemetry`, `action`, `system` or `ignored`."""
    source: str | None
    conversation_id: str | None
    thread_id: str | None
    run_id: str | None
    actor_id: str | None
    created_at: float
    data: JSONValue
    """The stored payload; None when it was too large (`data_truncated`) or cannot be served (`data_error`)."""
    data_truncated: bool
    data_size: int
    """Size of the stored payload's JSON in bytes."""
    data_error: JSONObject | None = Field(default=None, exclude_if=_none)
    """`{code, message}` when the stored data nests too deep to be served (`data` is None); absent otherwise."""


class EventPage(FactsAnswer):
    """`events_page`: a page of the conversation's event log."""

    items: list[EventRecord]
    next_cursor: str | None
    prev_cursor: str | None
    has_more: bool


# -- artifacts --------------------------------------------------------------------------------------------


class ArtifactMetadata(FactsAnswer):
    """`artifacts_metadata`, `artifacts_create`: an artifact's handle with its hash and times."""

    artifact_id: str
    name: str | None
    mime_type: str
    size: int
    sha256: str
    created_at: float
    expires_at: float | None

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


class ArtifactChunk(FactsAnswer):
    """`artifacts_read`: a byte range of an artifact; `data` is text when `encoding` is utf-8, else base64."""

    artifact_id: str
    mime_type: str
    data: str
    encoding: Literal["utf-8", "base64"]
    offset: int
    length: int
    """The number of bytes read."""
    size: int
    """The artifact's whole size."""
    eof: bool
    """True when the read reached the end."""

    def content(self) -> bytes:
        """The bytes of this range."""
        return self.data.encode() if self.encoding == "utf-8" else base64.b64decode(self.data)


# -- state and storage ------------------------------------------------------------------------------------


class StateValue(FactsAnswer):
    """`state_get`: `found=False` (`value` None, no `size`/`updated_at`) when nothing is stored under the key."""

    scope: StateScope
    key: str
    found: bool
    value: JSONValue
    size: int | None = Field(default=None, exclude_if=_none)
    updated_at: float | None = Field(default=None, exclude_if=_none)


class StateWritten(FactsAnswer):
    """`state_set`."""

    scope: StateScope
    key: str
    size: int
    updated_at: float


class Deleted(FactsAnswer):
    """`state_delete` (with `scope`) / `storage_delete` (with `area`): `deleted=False` when there was none."""

    key: str
    deleted: bool
    scope: StateScope | None = Field(default=None, exclude_if=_none)
    area: StorageArea | None = Field(default=None, exclude_if=_none)


class StateListItem(FactsAnswer):
    """One `state_list` entry: exactly one of `value`, `value_omitted: true` or `error` is sent."""

    key: str
    size: int
    updated_at: float
    value: JSONValue = None
    """The stored value (which may itself be null), sent while the page has room."""
    value_omitted: bool = False
    """True when the page had no room left for the value: read it with `state_get`."""
    error: JSONObject | None = None
    """`{code, message}` when the stored value nests too deep to be served."""

    @model_serializer(mode="wrap")
    def _sent_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.value_omitted or self.error is not None:
            data.pop("value", None)
        if not self.value_omitted:
            data.pop("value_omitted", None)
        if self.error is None:
            data.pop("error", None)
        return data


class StateList(FactsAnswer):
    """`state_list`: entries in key order."""

    scope: StateScope
    items: list[StateListItem]
    next_cursor: str | None
    has_more: bool


class StorageValue(FactsAnswer):
    """`storage_get`: `found=False` (no `size`/`updated_at`) when nothing is stored under the key."""

    area: StorageArea
    key: str
    found: bool
    value_base64: str | None
    size: int | None = Field(default=None, exclude_if=_none)
    updated_at: float | None = Field(default=None, exclude_if=_none)

    def value(self) -> bytes | None:
        """The stored bytes, or None when not found."""
        return None if self.value_base64 is None else base64.b64decode(self.value_base64)


class StorageWritten(FactsAnswer):
    """`storage_set`."""

    area: StorageArea
    key: str
    size: int
    updated_at: float


class StorageListItem(FactsAnswer):
    key: str
    size: int
    updated_at: float


class StorageList(FactsAnswer):
    """`storage_list`: keys in key order with their sizes."""

    area: StorageArea
    items: list[StorageListItem]
    next_cursor: str | None
    has_more: bool


# -- knowledge --------------------------------------------------------------------------------------------


class KnowledgeBase(FactsAnswer):
    kb_id: str
    name: str
    description: str


class KnowledgeBases(FactsAnswer):
    """`knowledge_list`: the knowledge bases this run may search."""

    knowledge_bases: list[KnowledgeBase]


class KnowledgeChunk(FactsAnswer):
    """One retrieved passage of a knowledge base."""

    chunk_id: str
    document: str
    """The document the passage comes from (its path or title)."""
    text: str
    score: float
    metadata: JSONObject
    """The document's metadata plus `title`, `heading`, `start_line`, `end_line` and `chunk_index`."""


class KnowledgeHits(FactsAnswer):
    """`knowledge_retrieve`: chunks, best first."""

    chunks: list[KnowledgeChunk]


FACTS_ANSWERS: Mapping[FactsToolName, type[ProtocolModel]] = {
    "run_context": AgentRunContext,
    "history_page": HistoryPage,
    "history_search": HistorySearch,
    "events_get": EventRecord,
    "events_page": EventPage,
    "artifacts_metadata": ArtifactMetadata,
    "artifacts_read": ArtifactChunk,
    "artifacts_create": ArtifactMetadata,
    "state_get": StateValue,
    "state_set": StateWritten,
    "state_delete": Deleted,
    "state_list": StateList,
    "storage_get": StorageValue,
    "storage_set": StorageWritten,
    "storage_delete": Deleted,
    "storage_list": StorageList,
    "knowledge_list": KnowledgeBases,
    "knowledge_retrieve": KnowledgeHits,
    "models_list": ModelsList,
    "models_invoke": ModelInvocation,
    "models_rerank": RerankAnswer,
    "models_embed": EmbeddingAnswer,
}
"""The model of each tool's answer (its `structuredContent`)."""

if tuple(FACTS_ANSWERS) != FACTS_TOOL_NAMES:  # pragma: no cover - a programming error caught at import
    raise AssertionError("FACTS_ANSWERS must name every FactsToolName once, in order")


@cache
def answer_schema(tool: FactsToolName) -> dict[str, Any]:
    """The JSON Schema of `tool`'s answer: its MCP `outputSchema` (do not mutate the result)."""
    return FACTS_ANSWERS[tool].model_json_schema()
