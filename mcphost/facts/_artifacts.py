"""Artifact tools and the artifact resource: `artifacts_metadata`, `artifacts_read`, `artifacts_create`,
`mcphost://artifacts/{artifact_id}`.

Owns the read rule for artifacts and how bytes are shown to a model. Does not own blobs, integrity or
ids (`stores/artifacts.py`).

Invariants:
- A run reads an artifact only when it owns it, its conversation owns it, or it was handed to the run as
  input (the context's attachments and media contents, and the event's raw payload `raw_ref`); anything else is `unauthorized`. The check runs
  before any byte is read. An id that does not exist (or has expired) gets the same code and message as
  another conversation's artifact, so a run cannot probe which ids exist outside its grant.
- `artifacts_read` returns at most `MAX_READ_BYTES`; `data` is text when the type is textual (`text/*`,
  JSON, XML) and the bytes read are valid UTF-8, otherwise base64. `eof` says whether the read reached
  the end. The resource returns the whole artifact only up to `MAX_READ_BYTES` (`payload_too_large`
  beyond, naming `artifacts_read`).
- A lazy artifact is fetched only after the read rule allowed the read; a fetch that fails answers
  `runtime_error` (retried on the next read), one over its channel's bound `payload_too_large`.
- `artifacts_create` stores at most `MAX_INLINE_ARTIFACT_BYTES`, owned by the run and its conversation.
"""

from __future__ import annotations

import base64
import re

import mcp_types as types

from mcphost.errors import NotFoundError
from mcphost.facts._args import MAX_READ_BYTES, ArtifactArgs, ArtifactsCreateArgs, ArtifactsReadArgs
from mcphost.facts._call import Call
from mcphost.facts._results import ToolCallError
from mcphost.grants import refusal
from mcphost.protocol import MAX_INLINE_ARTIFACT_BYTES
from mcphost.protocol.facts import ArtifactChunk, ArtifactMetadata
from mcphost.stores import ArtifactRecord

ARTIFACT_URI_PREFIX = "mcphost://artifacts/"
_ARTIFACT_ID = re.compile(r"^[!-~]{1,200}$")
_TEXTUAL = ("application/json", "application/xml", "application/javascript", "application/yaml")


def is_textual(mime_type: str) -> bool:
    base = mime_type.split(";", 1)[0].strip().lower()
    return base.startswith("text/") or base in _TEXTUAL or base.endswith(("+json", "+xml"))


def _as_text(mime_type: str, data: bytes) -> str | None:
    if not is_textual(mime_type):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


async def readable(call: Call, artifact_id: str) -> ArtifactRecord:
    """The artifact's record when this run may read it; a missing id is refused like a foreign one. A
    lazy artifact (a chat channel's inbound file) is fetched here, after the check, on its first read."""
    try:
        found = await call.stores.artifacts.describe(artifact_id)
    except NotFoundError:
        found = None
    if found is None or not await call.may_read_artifact(found):
        raise ToolCallError(
            "unauthorized",
            f"Artifact {artifact_id!r} does not exist or is not readable by this run; a run may read its "
            "own artifacts, its conversation's and its input attachments.",
        )
    return found if isinstance(found, ArtifactRecord) else await call.stores.artifacts.get(artifact_id)


def metadata(record: ArtifactRecord) -> ArtifactMetadata:
    return ArtifactMetadata(
        artifact_id=record.artifact_id,
        name=record.name,
        mime_type=record.mime_type,
        size=record.size,
        sha256=record.sha256,
        created_at=record.created_at,
        expires_at=record.expires_at,
    )


async def artifacts_metadata(call: Call, args: ArtifactArgs) -> ArtifactMetadata:
    """An artifact's handle, hash and times."""
    return metadata(await readable(call, args.artifact_id))


async def artifacts_read(call: Call, args: ArtifactsReadArgs) -> ArtifactChunk:
    """A byte range of an artifact, as text when it is text."""
    record = await readable(call, args.artifact_id)
    data = await call.stores.artifacts.read(args.artifact_id, args.offset, args.length)
    text = _as_text(record.mime_type, data)
    return ArtifactChunk(
        artifact_id=record.artifact_id,
        mime_type=record.mime_type,
        data=text if text is not None else base64.b64encode(data).decode(),
        encoding="utf-8" if text is not None else "base64",
        offset=args.offset,
        length=len(data),
        size=record.size,
        eof=args.offset + len(data) >= record.size,
    )


async def artifacts_create(call: Call, args: ArtifactsCreateArgs) -> ArtifactMetadata:
    """Store new content as an artifact owned by the run."""
    if not call.grant.artifact_create:
        message, details = refusal(call.grant, "tool:artifacts_create", "create artifacts")
        raise ToolCallError("unauthorized", message, details=details)
    record = await call.stores.artifacts.put_bytes(
        args.content(),
        name=args.name,
        mime_type=args.mime_type,
        max_bytes=MAX_INLINE_ARTIFACT_BYTES,
        owner_run_id=call.run_id,
        conversation_id=call.grant.conversation_id,
    )
    return metadata(record)


async def read_resource(call: Call, uri: str) -> types.ReadResourceResult:
    """`mcphost://artifacts/{artifact_id}`: the whole artifact, up to `MAX_READ_BYTES`."""
    if "artifacts_read" not in call.grant.tools:
        message, details = refusal(call.grant, "tool:artifacts_read", "read artifacts")
        raise ToolCallError("unauthorized", message, details=details)
    artifact_id = uri.removeprefix(ARTIFACT_URI_PREFIX)
    if not _ARTIFACT_ID.match(artifact_id):
        raise ToolCallError("invalid_argument", f"{uri[:80]!r} does not name an artifact id.")
    record = await readable(call, artifact_id)
    if record.size > MAX_READ_BYTES:
        raise ToolCallError(
            "payload_too_large",
            f"Artifact {artifact_id!r} is {record.size} bytes; read it in parts with artifacts_read.",
            details={"max_bytes": MAX_READ_BYTES, "size": record.size},
        )
    data = await call.stores.artifacts.read(artifact_id)
    text = _as_text(record.mime_type, data)
    if text is not None:
        content: types.TextResourceContents | types.BlobResourceContents = types.TextResourceContents(
            uri=uri, mime_type=record.mime_type, text=text
        )
    else:
        content = types.BlobResourceContents(
            uri=uri, mime_type=record.mime_type, blob=base64.b64encode(data).decode()
        )
    return types.ReadResourceResult(contents=[content])
