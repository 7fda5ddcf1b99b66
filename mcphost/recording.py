"""Recordings of runs as one portable document, and the answers a replay gives from one.

Owns the export format (`RecordingDocument`, `"format": "mcphost.recording/1"`), building it from the
stores (`export_recording`), reading it back from a file (`read_document`), the normal form in which
call arguments are stored and matched (`storable_arguments`), and `ReplayBook`: the recorded answers a
replay's per-run MCP endpoint gives, with the calls the replayed runner made. Does not own what is
recorded or when (the facts pipeline and the orchestrator write `stores/recordings.py`), nor running
a replay or comparing its results (`replay.py`).

Invariants:
- A document is self-contained: the envelope, the token-free context, the agent entry, every recorded
  call with its answer and the recorded result stream, so a replay needs no database but a scratch one.
- A replay answers a call from the recording when the tool name and the (normal-form) arguments match
  a recorded call not answered yet; identical repeated calls are answered in recorded order. Any other
  call is answered with a `not_found` tool error and noted as unrecorded. `tools/list` is answered
  with the first recorded listing and never consumed.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcphost.common.validation import describe
from mcphost.errors import ConflictError, InvalidArgumentError, NotFoundError
from mcphost.models import AgentConfig, AgentEventEnvelope
from mcphost.protocol import MAX_JSON_DEPTH, AgentRunContext, JSONObject, json_depth, unstorable
from mcphost.stores import Stores

RECORDING_FORMAT = "mcphost.recording/1"
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024
TOOLS_LIST = "tools/list"
"""The name a `tools/list` request is recorded under (never a tool's name: tool names have no `/`)."""


class _DocumentModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DocumentCall(_DocumentModel):
    seq: int = Field(ge=1)
    tool: str = Field(min_length=1, max_length=200)
    arguments: JSONObject
    outcome: Literal["ok", "error"]
    answer: JSONObject


class DocumentResult(_DocumentModel):
    seq: int = Field(ge=1)
    type: str = Field(min_length=1, max_length=100)
    payload: JSONObject


class RecordingDocument(_DocumentModel):
    """One recorded run, as `mcphost record export` writes it and `mcphost replay --suite` reads it."""

    format: Literal["mcphost.recording/1"] = RECORDING_FORMAT
    run_id: str = Field(min_length=1, max_length=100)
    agent_id: str
    runner_id: str
    status: str
    """The run's final status (completed, failed, cancelled)."""
    exported_at: float = Field(default_factory=time.time)
    envelope: JSONObject
    context: JSONObject
    agent: JSONObject
    calls: list[DocumentCall]
    results: list[DocumentResult]

    def event(self) -> AgentEventEnvelope:
        return AgentEventEnvelope.model_validate(self.envelope)

    def run_context(self) -> AgentRunContext:
        return AgentRunContext.model_validate(self.context)

    def agent_config(self) -> AgentConfig:
        return AgentConfig.model_validate(self.agent)

    def check(self, source: str) -> RecordingDocument:
        """The document, once its envelope, context and agent parse (else `InvalidArgumentError`)."""
        for where, parse in (
            ("envelope", self.event),
            ("context", self.run_context),
            ("agent", self.agent_config),
        ):
            try:
                parse()
            except ValidationError as exc:
                raise InvalidArgumentError(
                    f"{source}: {where} is not valid: {describe(exc, root=where)}"
                ) from None
        return self


def storable_arguments(arguments: JSONObject) -> JSONObject:
    """`arguments` as recorded and matched: themselves when a store keeps them exactly, else a marker
    with their SHA-256 (NaN, NUL, lone surrogates, nesting past `MAX_JSON_DEPTH`)."""
    if json_depth(arguments) <= MAX_JSON_DEPTH and unstorable(arguments) is None:
        return arguments
    try:
        text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = "<unserializable>"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return {"unstorable": {"sha256": digest}}


def recorded_tool_name(tool: str) -> str:
    """`tool` as recorded: printable, at most 200 characters."""
    return "".join(c if c.isprintable() else "?" for c in tool)[:200]


def call_key(tool: str, arguments: JSONObject) -> str:
    """The canonical text a call is matched and compared by."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{tool} {canonical}"


async def export_recording(stores: Stores, run_id: str) -> RecordingDocument:
    """The recording of a finished run.

    Raises:
        RunNotFoundError: no such run.
        NotFoundError: the run was not recorded (or its recording was collected).
        ConflictError: the run has not finished yet.
    """
    run = await stores.runs.get(run_id)
    header = await stores.recordings.header(run_id)
    if header is None:
        raise NotFoundError(
            f"Run {run_id!r} was not recorded. Set record = true on its agent ([[agents]]) or "
            '"options": {"record": true} on its event, and run it again.'
        )
    if not run.status.is_terminal:
        raise ConflictError(f"Run {run_id!r} is {run.status.value}; export it once it has ended.")
    calls = await stores.recordings.calls(run_id)
    results = await stores.results.list(run_id, after=0, limit=10_000)
    return RecordingDocument(
        run_id=run_id,
        agent_id=header.agent_id,
        runner_id=header.runner_id,
        status=run.status.value,
        envelope=header.envelope,
        context=header.context,
        agent=header.agent,
        calls=[
            DocumentCall(seq=c.seq, tool=c.tool, arguments=c.arguments, outcome=c.outcome, answer=c.answer)
            for c in calls
        ],
        results=[DocumentResult(seq=r.seq, type=r.type, payload=r.payload) for r in results],
    )


def read_document(path: Path) -> RecordingDocument:
    """A recording exported to `path`, checked.

    Raises:
        InvalidArgumentError: the file cannot be read, is not JSON, not a `mcphost.recording/1`
            document, or holds an envelope, context or agent that does not parse.
    """
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise InvalidArgumentError(f"{path}: {size} bytes is more than a recording may hold.")
        data: object = json.loads(path.read_bytes())
    except OSError as exc:
        raise InvalidArgumentError(f"{path}: cannot read it ({exc.strerror or exc}).") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidArgumentError(f"{path}: not a JSON document ({exc}).") from None
    if not isinstance(data, dict) or data.get("format") != RECORDING_FORMAT:  # pyright: ignore[reportUnknownMemberType]  # json.loads: dict[Any, Any]
        raise InvalidArgumentError(
            f'{path}: not an mcphost recording (expected "format": {RECORDING_FORMAT!r}; '
            "write one with `mcphost record export RUN_ID -o FILE`)."
        )
    try:
        document = RecordingDocument.model_validate(data)
    except ValidationError as exc:
        raise InvalidArgumentError(
            f"{path}: not a valid recording: {describe(exc, root='(recording)')}"
        ) from None
    return document.check(str(path))


@dataclass(frozen=True)
class ReplayedCall:
    """One call the replayed runner made, and the recorded call that answered it (None: unrecorded)."""

    tool: str
    arguments: JSONObject
    recorded_seq: int | None


class ReplayBook:
    """The recorded answers of one recording, handed out to a replay of it (one replay at a time)."""

    def __init__(self, document: RecordingDocument, *, runner_id: str | None = None) -> None:
        self.document = document
        self.runner_id = runner_id or document.runner_id
        """The runner the replay runs (the recorded one unless another is named)."""
        self.calls: list[ReplayedCall] = []
        """Every call the replay made, in the order it was answered (`tools/list` left out)."""
        self._queues: dict[str, deque[DocumentCall]] = {}
        self._tool_list: JSONObject | None = None
        for call in document.calls:
            if call.tool == TOOLS_LIST:
                self._tool_list = self._tool_list or call.answer
                continue
            self._queues.setdefault(call_key(call.tool, call.arguments), deque()).append(call)

    def answer(
        self, run_id: str, tool: str, arguments: JSONObject
    ) -> tuple[Literal["ok", "error"], JSONObject]:
        """The recorded answer of the next matching call: ("ok", MCP result JSON) or ("error", PROTOCOL
        §5 error); an unrecorded call answers ("error", not_found) and is noted."""
        normal = storable_arguments(arguments)
        tool = recorded_tool_name(tool)
        queue = self._queues.get(call_key(tool, normal))
        if queue:
            call = queue.popleft()
            self.calls.append(ReplayedCall(tool, normal, call.seq))
            return call.outcome, call.answer
        self.calls.append(ReplayedCall(tool, normal, None))
        return "error", {
            "code": "not_found",
            "message": (
                f"This replay of run {self.document.run_id!r} has no recorded answer for {tool[:100]!r} with "
                "these arguments (any more); the call is reported as a divergence."
            ),
            "retryable": False,
            "details": {"replay_of": self.document.run_id, "unrecorded": True},
        }

    def tool_list(self) -> JSONObject | None:
        """The recorded `tools/list` answer, or None when the run never listed its tools."""
        return self._tool_list

    def context(self, fresh: AgentRunContext) -> AgentRunContext:
        """The recorded context for the replay run: the recording's, with the replay's run id, MCP
        access and deadline (and its runner config when the replay runs another runner)."""
        recorded = self.document.run_context()
        update: dict[str, object] = {
            "run_id": fresh.run_id,
            "context": recorded.context.model_copy(update={"mcp": fresh.context.mcp}),
            "runtime": recorded.runtime.model_copy(
                update={"deadline_at": fresh.runtime.deadline_at, "trace_id": fresh.runtime.trace_id}
            ),
        }
        if self.runner_id != self.document.runner_id:
            update["config"] = fresh.config
        return recorded.model_copy(update=update)
