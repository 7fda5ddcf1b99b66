"""Argument models of the facts tools: what a model may send, with the descriptions it reads.

Owns one pydantic model per tool (PROTOCOL §7). Each forbids unknown fields and documents every field
with a docstring, which becomes the field's `description` in the tool's input schema. Limits that a
schema can state (lengths, ranges, patterns) live here; limits that need the decoded value (bytes of
text or base64) are checked by validators here too, so a handler only ever sees arguments within
bounds. Does not check scope or grants (the handlers do).

Identifier and name fields refuse control characters: they reach SQL text columns, and PostgreSQL
refuses NUL in text.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from mcphost.common.fielddocs import DocumentedModel
from mcphost.errors import InvalidArgumentError, PayloadTooLargeError
from mcphost.models import EVENT_TYPE_PATTERN
from mcphost.protocol import (
    INT64_MAX,
    MAX_INLINE_ARTIFACT_BYTES,
    STATE_KEY_PATTERN,
    JSONObject,
    JSONValue,
    StateScope,
)
from mcphost.protocol.facts import StorageArea, TranscriptRole
from mcphost.stores.storage import MAX_VALUE_BYTES as MAX_STORAGE_BYTES

MAX_READ_BYTES = 1024 * 1024
"""The most `artifacts_read` returns at once."""

_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
_NO_NUL = r"^[^\x00]*$"
Cursor = Annotated[str, Field(min_length=1, max_length=512, pattern=r"^\.?[A-Za-z0-9_-]+$")]
Identifier = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[!-~]+$")]
StateKey = Annotated[str, Field(pattern=STATE_KEY_PATTERN)]
KeyPrefix = Annotated[str, Field(max_length=200, pattern=r"^[A-Za-z0-9._:-]*$")]


class ToolArgs(DocumentedModel):
    """Base of every tool's arguments: unknown fields are refused, field docs become descriptions, and
    types are strict (JSON's own: `"12"`, `true` and `1.0` are not integers), as the input schema says."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True, defer_build=True)


class NoArgs(ToolArgs):
    """This tool takes no arguments."""


class _Window(ToolArgs):
    before_cursor: Cursor | None = None
    """Return items strictly older than this cursor, newest first. Omit both cursors for the newest items."""
    after_cursor: Cursor | None = None
    """Return items strictly newer than this cursor, oldest first."""
    limit: int = Field(default=50, ge=1, le=100)
    """How many items to return (1-100)."""

    @model_validator(mode="after")
    def _one_direction(self) -> _Window:
        if self.before_cursor is not None and self.after_cursor is not None:
            raise ValueError("pass before_cursor or after_cursor, not both")
        return self


class HistoryPageArgs(_Window):
    """A page of this run's conversation transcript."""

    include_artifacts: bool = False
    """Include each item's artifact handles and media contents (otherwise only their count)."""


class HistorySearchArgs(ToolArgs):
    """Search this run's conversation transcript."""

    query: str = Field(min_length=1, max_length=500, pattern=_NO_NUL)
    """Words to look for; items matching more (and rarer) words rank higher."""
    top_k: int = Field(default=10, ge=1, le=50)
    """How many hits to return (1-50)."""
    roles: list[TranscriptRole] | None = Field(default=None, min_length=1, max_length=4)
    """Only items with these roles, e.g. ["user"]."""


class EventsGetArgs(ToolArgs):
    event_id: Identifier
    """The id of an event of this run's conversation (or of this run)."""


class EventsPageArgs(_Window):
    """A page of this run's conversation event log."""

    event_types: list[Annotated[str, Field(max_length=100, pattern=EVENT_TYPE_PATTERN)]] | None = Field(
        default=None, min_length=1, max_length=20
    )
    """Only events of these types, e.g. ["message.received"] (1-20 types)."""


class ArtifactArgs(ToolArgs):
    artifact_id: Identifier
    """The artifact's id, e.g. from an ArtifactRef in the context or the history."""


class ArtifactsReadArgs(ArtifactArgs):
    offset: int = Field(default=0, ge=0, le=INT64_MAX)
    """The first byte to read."""
    length: int = Field(default=65536, ge=1, le=MAX_READ_BYTES)
    """How many bytes to read at most (1 to 1048576)."""


class ArtifactsCreateArgs(ToolArgs):
    """Create an artifact owned by this run from text or base64 bytes (at most 1 MiB)."""

    name: str = Field(min_length=1, max_length=1000, pattern=_PRINTABLE)
    """A file name for the artifact, e.g. "report.md"."""
    mime_type: str = Field(max_length=200, pattern=r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+(;[ -~]*)?$")
    """The media type, e.g. "text/markdown" or "image/png"."""
    text: str | None = None
    """The content as text (stored as UTF-8). Give either text or base64."""
    base64: str | None = None
    """The content as base64. Give either text or base64."""

    @model_validator(mode="after")
    def _one_content(self) -> ArtifactsCreateArgs:
        if (self.text is None) == (self.base64 is None):
            raise ValueError("give exactly one of text or base64")
        return self

    def content(self) -> bytes:
        """The decoded bytes.

        Raises:
            InvalidArgumentError: `base64` is not valid base64.
            PayloadTooLargeError: the content is over 1 MiB.
        """
        if self.text is not None:
            data = self.text.encode("utf-8", "surrogatepass")
        else:
            assert self.base64 is not None
            if len(self.base64) > (MAX_INLINE_ARTIFACT_BYTES // 3 + 1) * 4 + 64:
                data = b"\0" * (MAX_INLINE_ARTIFACT_BYTES + 1)
            else:
                try:
                    data = base64.b64decode(self.base64, validate=True)
                except (binascii.Error, ValueError):
                    raise InvalidArgumentError(
                        "base64 is not valid base64.", details={"field": "base64"}
                    ) from None
        if len(data) > MAX_INLINE_ARTIFACT_BYTES:
            raise PayloadTooLargeError(
                f"The artifact content is over {MAX_INLINE_ARTIFACT_BYTES} bytes; create smaller artifacts.",
                details={"max_bytes": MAX_INLINE_ARTIFACT_BYTES},
            )
        return data


class StateKeyArgs(ToolArgs):
    scope: StateScope
    """Whose state: conversation, actor, subject, runner, binding or workspace (the grant decides which)."""
    key: StateKey
    """1-200 characters from A-Z a-z 0-9 . _ : -"""


class StateSetArgs(StateKeyArgs):
    value: JSONValue
    """Any JSON value, at most 256 KiB serialized."""


class StateListArgs(ToolArgs):
    scope: StateScope
    """Whose state: conversation, actor, subject, runner, binding or workspace (the grant decides which)."""
    prefix: KeyPrefix | None = None
    """Only keys starting with this."""
    limit: int = Field(default=50, ge=1, le=100)
    """How many entries to return (1-100)."""
    cursor: Cursor | None = None
    """Continue after the page that returned this next_cursor."""


class StorageKeyArgs(ToolArgs):
    area: StorageArea
    """Which storage: plugin (this plugin's own), workspace (this plugin in this workspace) or binding."""
    key: StateKey
    """1-200 characters from A-Z a-z 0-9 . _ : -"""


class StorageSetArgs(StorageKeyArgs):
    value_base64: str
    """The value as base64, at most 10 MiB decoded."""

    def value(self) -> bytes:
        """The decoded bytes.

        Raises:
            InvalidArgumentError: `value_base64` is not base64.
            PayloadTooLargeError: the value is over 10 MiB.
        """
        if len(self.value_base64) > (MAX_STORAGE_BYTES // 3 + 1) * 4 + 64:
            raise PayloadTooLargeError(
                f"The value is over {MAX_STORAGE_BYTES} bytes; store larger data as an artifact.",
                details={"field": "value_base64", "max_bytes": MAX_STORAGE_BYTES},
            )
        try:
            return base64.b64decode(self.value_base64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgumentError(
                "value_base64 is not valid base64.", details={"field": "value_base64"}
            ) from None


class StorageListArgs(ToolArgs):
    area: StorageArea
    """Which storage: plugin, workspace or binding."""
    prefix: KeyPrefix | None = None
    """Only keys starting with this."""
    limit: int = Field(default=50, ge=1, le=100)
    """How many keys to return (1-100)."""
    cursor: Cursor | None = None
    """Continue after the page that returned this next_cursor."""


class KnowledgeRetrieveArgs(ToolArgs):
    kb_id: Identifier
    """A knowledge base id from knowledge_list."""
    query: str = Field(min_length=1, max_length=2000, pattern=_NO_NUL)
    """What to look for."""
    top_k: int = Field(default=5, ge=1, le=50)
    """How many chunks to return (1-50)."""
    filters: JSONObject | None = None
    """Retriever-specific metadata filters."""
