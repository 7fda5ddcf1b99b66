"""Recordings of runs as one portable document, and the answers a replay gives from one.

Owns the export format (`RecordingDocument`, `"format": "mcphost.recording/1"`), building it from the
stores (`export_recording`), reading it back from a file (`read_document`), the normal form in which
call arguments are stored and matched (`storable_arguments`), and `ReplayBook`: the recorded answers a
replay's per-run MCP endpoint gives, with the calls the replayed runner made. Does not own what is
recorded or when (the facts pipeline and the orchestrator write `stores/recordings.py`), nor running
a replay or comparing its results (`replay.py`).

Invariants:
- A document is self-contained: the envelope, the context, the agent entry, every recorded call with its
  answer and the recorded result stream, so a replay needs no database but a scratch one.
- A document is untrusted input (a file in a repository, run by `mcphost replay --suite` in CI) and
  names nothing a replay could start, open or call: it holds no runner config (`context.config` and
  `agent.config` are empty: that is where `cli_path`, `environment`, `pass_env`, `working_directory`,
  `extra_mcp_servers`, `base_url`, `api_key_env` … live) and no MCP access (`context.context.mcp`: URL,
  headers, bridge command and environment). `export_recording` leaves them out; `read_document`
  refuses a document that has them, and anything else that is not exactly the format: unknown fields
  at any level, a file that is not a regular file, larger than `MAX_DOCUMENT_BYTES` or nested deeper
  than `MAX_DOCUMENT_DEPTH`, JSON a store could not keep (NaN, NUL, lone surrogates, integers past 64
  bits). The replay takes its runner, the runner's config and its MCP access from the local config
  and its own scratch host only (`ReplayBook.context`), and drops the harness session keys of the
  recorded state (`SESSION_STATE_KEYS`: a session id and a folder).
- A replay answers a call from the recording when the tool name and the (normal-form) arguments match
  a recorded call not answered yet; identical repeated calls are answered in recorded order. Any other
  call is answered with a `not_found` tool error and noted as unrecorded. `tools/list` is answered
  with the first recorded listing and never consumed.
- Model calls (the per-run model endpoints) are recorded beside the MCP calls, under `MODEL_CALLS`
  names: arguments `{sha256, model, stream, request}` (the canonical request, `llm.canonical`), answer
  `{status, usage, body | events}` (the whole answer, or every server-sent event in order). A replay
  answers one when a recorded call of the same endpoint has the same `sha256` and was not answered
  yet (`ReplayBook.model_answer`); any other is noted as unrecorded and never sent upstream.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcphost.common.validation import describe
from mcphost.errors import ConflictError, InvalidArgumentError, NotFoundError
from mcphost.llm.wire import Api
from mcphost.models import AgentConfig, AgentEventEnvelope
from mcphost.protocol import (
    MAX_JSON_DEPTH,
    STRICT_CONTEXT,
    AgentRunContext,
    JSONObject,
    json_depth,
    unstorable,
)
from mcphost.stores import Stores
from mcphost.stores.retention import SESSION_STATE_KEYS

RECORDING_FORMAT = "mcphost.recording/1"
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024
"""The largest file `read_document` reads (checked before reading, and the read stops past it)."""
MAX_DOCUMENT_DEPTH = MAX_JSON_DEPTH + 8
"""How deep arrays and objects may nest in a document: a recorded value nests at most `MAX_JSON_DEPTH`
(the stores keep nothing deeper) and sits at most four levels down (`context.state.conversation.<key>`
under the document itself); the rest is slack."""
TOOLS_LIST = "tools/list"
"""The name a `tools/list` request is recorded under (never a tool's name: tool names have no `/`)."""
MODEL_CALLS: Mapping[Api, str] = {
    "anthropic": "models/anthropic/v1/messages",
    "chat": "models/openai/v1/chat/completions",
    "responses": "models/openai/v1/responses",
    "embeddings": "models/openai/v1/embeddings",
}
"""The names a call at a per-run model endpoint is recorded under, by API (never a tool's name)."""


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
    agent_id: str = Field(min_length=1, max_length=64)
    runner_id: str = Field(min_length=1, max_length=200)
    status: str = Field(pattern=r"^(completed|failed|cancelled|parked)$")
    """The run's final status."""
    exported_at: float = Field(default_factory=time.time)
    envelope: JSONObject
    context: JSONObject
    agent: JSONObject
    calls: list[DocumentCall]
    results: list[DocumentResult]

    def event(self) -> AgentEventEnvelope:
        return AgentEventEnvelope.model_validate(self.envelope)

    def run_context(self) -> AgentRunContext:
        """The recorded context; unknown fields are refused at every level (`STRICT_CONTEXT`)."""
        return AgentRunContext.model_validate(self.context, context=STRICT_CONTEXT)

    def agent_config(self) -> AgentConfig:
        return AgentConfig.model_validate(self.agent)

    def check(self, source: str) -> RecordingDocument:
        """The document, once its envelope, context and agent parse and it names nothing a replay could
        run or reach (else `InvalidArgumentError`)."""
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
        context, agent = self.run_context(), self.agent_config()
        for where, config in (("context.config", context.config), ("agent.config", agent.config)):
            if config:
                raise InvalidArgumentError(
                    f"{source}: {where} holds a runner config ({_keys(config)}); a recording carries none: "
                    "a replay runs its runner with the config of the agent in the local config only. "
                    f"Export the run again with `mcphost record export`, or delete {where}."
                )
        if context.context.mcp is not None:
            raise InvalidArgumentError(
                f"{source}: context.context.mcp holds MCP access (a URL, headers, a bridge command); a "
                "recording carries none: a replay gets its own. Export the run again with `mcphost "
                "record export`, or set context.context.mcp to null."
            )
        return self


def _keys(config: JSONObject) -> str:
    names = sorted(config)
    shown = ", ".join(repr(recorded_tool_name(n)[:40]) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _portable(context: JSONObject, agent: JSONObject) -> tuple[JSONObject, JSONObject]:
    """A recorded run's context and agent entry as a document holds them: without the runner config
    and the MCP access (what a replay takes from the local config and its own host instead)."""
    recorded = AgentRunContext.model_validate(context)
    stripped = recorded.model_copy(
        update={"config": {}, "context": recorded.context.model_copy(update={"mcp": None})}
    )
    return stripped.model_dump(mode="json"), {**agent, "config": {}}


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
    context, agent = _portable(header.context, header.agent)
    return RecordingDocument(
        run_id=run_id,
        agent_id=header.agent_id,
        runner_id=header.runner_id,
        status=run.status.value,
        envelope=header.envelope,
        context=context,
        agent=agent,
        calls=[
            DocumentCall(seq=c.seq, tool=c.tool, arguments=c.arguments, outcome=c.outcome, answer=c.answer)
            for c in calls
        ],
        results=[DocumentResult(seq=r.seq, type=r.type, payload=r.payload) for r in results],
    )


def read_document(path: Path) -> RecordingDocument:
    """A recording exported to `path`, checked (see the module's invariants).

    Raises:
        InvalidArgumentError: the file cannot be read, is not a regular file, is too large, is not
            JSON, nests too deep, holds values a store could not keep, is not a `mcphost.recording/1`
            document, or holds an envelope, context or agent that does not parse, a runner config or
            MCP access.
    """
    data = _parse(path, _read_bounded(path))
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


def _read_bounded(path: Path) -> bytes:
    """The bytes of `path`, a regular file of at most `MAX_DOCUMENT_BYTES`: opened without blocking (a
    FIFO would wait for a writer), checked on the open descriptor, read no further than the bound (a
    device such as /dev/zero never ends; a file may grow after the check)."""
    limit = f"a recording holds at most {MAX_DOCUMENT_BYTES} bytes ({MAX_DOCUMENT_BYTES >> 20} MiB)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidArgumentError(f"{path}: cannot read it ({exc.strerror or exc}).") from None
    with os.fdopen(fd, "rb") as file:
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidArgumentError(
                    f"{path}: not a regular file (a folder, FIFO, socket or device); a recording is a "
                    "file written by `mcphost record export RUN_ID -o FILE`."
                )
            if info.st_size > MAX_DOCUMENT_BYTES:
                raise InvalidArgumentError(f"{path}: {info.st_size} bytes; {limit}.")
            data = file.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise InvalidArgumentError(f"{path}: cannot read it ({exc.strerror or exc}).") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InvalidArgumentError(f"{path}: more than {MAX_DOCUMENT_BYTES} bytes; {limit}.")
    return data


def _parse(path: Path, data: bytes) -> object:
    """`data`, UTF-8 JSON a store could keep, nested at most `MAX_DOCUMENT_DEPTH` deep.

    The C decoder stops a deeper document with `RecursionError` near the interpreter's recursion limit
    (it cannot overflow the stack); anything it did parse is measured without recursion before pydantic,
    which recurses, sees it."""
    too_deep = (
        f"{path}: arrays and objects nest more than {MAX_DOCUMENT_DEPTH} deep; a recording nests at most "
        f"{MAX_DOCUMENT_DEPTH} (a recorded value at most {MAX_JSON_DEPTH})."
    )
    try:  # UTF-8 as exported: no byte order mark, no UTF-16 or UTF-32 (which `json.loads(bytes)` takes)
        value: object = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise InvalidArgumentError(too_deep) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, NaN, an int past 4300 digits
        raise InvalidArgumentError(f"{path}: not a JSON document ({str(exc)[:200]}).") from None
    if json_depth(value, limit=MAX_DOCUMENT_DEPTH) > MAX_DOCUMENT_DEPTH:
        raise InvalidArgumentError(too_deep)
    problem = unstorable(value)
    if problem is not None:
        raise InvalidArgumentError(f"{path}: {problem.message('(recording)')[:300]}.")
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def is_model_call(tool: str) -> bool:
    """Whether a recorded call's name is a model call's (`MODEL_CALLS`), not an MCP request's."""
    return tool.startswith("models/")


@dataclass(frozen=True)
class ReplayedModelCall:
    """One model call the replayed runner made, and the recorded call that answered it (None:
    unrecorded, answered with an error)."""

    endpoint: str
    """Its `MODEL_CALLS` name."""
    arguments: JSONObject
    """`{sha256, model, stream, request}`, as recorded."""
    recorded_seq: int | None


@dataclass(frozen=True)
class ReplayedCall:
    """One call the replayed runner made, and the recorded call that answered it (None: unrecorded)."""

    tool: str
    arguments: JSONObject
    recorded_seq: int | None


class ReplayBook:
    """The recorded answers of one recording, handed out to a replay of it (one replay at a time)."""

    def __init__(self, document: RecordingDocument) -> None:
        self.document = document
        self.calls: list[ReplayedCall] = []
        """Every call the replay made, in the order it was answered (`tools/list` left out)."""
        self.model_calls: list[ReplayedModelCall] = []
        """Every model call the replay made, in the order it was answered."""
        self._queues: dict[str, deque[DocumentCall]] = {}
        self._models: dict[tuple[str, str], deque[DocumentCall]] = {}
        self._tool_list: JSONObject | None = None
        for call in document.calls:
            if call.tool == TOOLS_LIST:
                self._tool_list = self._tool_list or call.answer
                continue
            if is_model_call(call.tool):
                digest = call.arguments.get("sha256")
                if isinstance(digest, str):
                    self._models.setdefault((call.tool, digest), deque()).append(call)
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

    def model_answer(self, run_id: str, endpoint: str, arguments: JSONObject) -> JSONObject | None:
        """The recorded answer (`{status, usage, body | events}`) of the next model call at `endpoint`
        (a `MODEL_CALLS` name) with the `sha256` of `arguments`; None for an unrecorded call (noted).
        `run_id` is the replay's run (one replay at a time: unused)."""
        del run_id
        queue = self._models.get((endpoint, str(arguments.get("sha256"))))
        if queue:
            call = queue.popleft()
            self.model_calls.append(ReplayedModelCall(endpoint, arguments, call.seq))
            return call.answer
        self.model_calls.append(ReplayedModelCall(endpoint, arguments, None))
        return None

    def tool_list(self) -> JSONObject | None:
        """The recorded `tools/list` answer, or None when the run never listed its tools."""
        return self._tool_list

    def context(self, fresh: AgentRunContext) -> AgentRunContext:
        """The recorded context for the replay run: the recording's data (event, input, state, resources,
        …) with the replay's run id, runner config, MCP access, model endpoints, deadline and trace
        context, and without
        the harness session keys of the recorded state (a CLI session id and a folder of the machine
        that recorded the run, which the replay must neither resume nor write into)."""
        recorded = self.document.run_context()
        state = recorded.state.model_copy(
            update={
                "conversation": {
                    k: v for k, v in recorded.state.conversation.items() if k not in SESSION_STATE_KEYS
                }
            }
        )
        runtime = recorded.runtime.model_copy(
            update={
                "deadline_at": fresh.runtime.deadline_at,
                "trace_id": fresh.runtime.trace_id,
                "traceparent": fresh.runtime.traceparent,
                "tracestate": fresh.runtime.tracestate,
            }
        )
        return recorded.model_copy(
            update={
                "run_id": fresh.run_id,
                "context": recorded.context.model_copy(
                    update={"mcp": fresh.context.mcp, "models": fresh.context.models}
                ),
                "runtime": runtime,
                "state": state,
                "config": fresh.config,
            }
        )
