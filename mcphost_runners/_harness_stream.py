"""The frame every native-stream parser sits in: lines → JSON events → an adapter's mapper, never a crash.

Owns line decoding, the diagnostics a run collects about its CLI's output, and the state a mapper
leaves for the harness runner to turn into the terminal result. Does not own what any one event means:
`claude_code.py` and `codex.py` subclass `StreamMapper`.

Invariants:
- Nothing a CLI prints can raise out of `pump_native_stream`: a line that is not JSON, not an object,
  over-long, of an event type the mapper does not know, or that breaks the mapper while being mapped,
  becomes one diagnostic (capped, the rest counted) and the stream goes on. CLI formats drift; a new
  event type must never fail a run that would otherwise succeed.
- A mapper asks the frame to stop the CLI by setting `StreamState.stop` (fail closed); the frame stops
  reading at once, and leaving the process context kills the group.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import ClassVar

from mcphost.common.lines import TooLong
from mcphost.protocol import AgentRunContext, JSONObject, Usage, is_json_array, is_json_object
from mcphost.protocol.results import FinishReason
from mcphost_runners.sdk import RunOutput

MAX_DIAGNOSTICS = 50
_EXCERPT = 200


@dataclass
class Diagnostics:
    """What a run noticed about its CLI's output that it could not use; reported in result metadata."""

    items: list[JSONObject] = field(default_factory=list[JSONObject])
    dropped: int = 0
    limit: int = MAX_DIAGNOSTICS

    def add(self, kind: str, detail: str, *, line: int | None = None, excerpt: str | None = None) -> None:
        if len(self.items) >= self.limit:
            self.dropped += 1
            return
        item: JSONObject = {"kind": kind, "detail": detail}
        if line is not None:
            item["line"] = line
        if excerpt is not None:
            item["excerpt"] = excerpt[:_EXCERPT]
        self.items.append(item)

    def metadata(self) -> JSONObject:
        if not self.items:
            return {}
        out: JSONObject = {"diagnostics": list(self.items)}
        if self.dropped:
            out["diagnostics_dropped"] = self.dropped
        return out


@dataclass(frozen=True)
class Failure:
    """A `run.failed` the mapper decided on."""

    code: str
    message: str
    retryable: bool = False
    details: JSONObject = field(default_factory=dict[str, object])
    deliver_answer: bool = False
    """Deliver the CLI's answer before failing (permission denials: the answer exists, and so do they)."""


@dataclass
class StreamState:
    """What a mapper learned from the stream, read by the harness runner when the CLI is done."""

    session_id: str | None = None
    mcp_connected: bool | None = None
    """None until the CLI said whether the `mcphost` server is connected."""
    final_text: str | None = None
    usage: Usage | None = None
    finish_reason: FinishReason = "stop"
    finished: bool = False
    """The CLI's own terminal event arrived (a result, a completed or failed turn)."""
    failure: Failure | None = None
    stop: bool = False
    """Stop the CLI now (fail closed); set together with `failure`."""
    resume_missing: bool = False
    """The CLI could not find the session it was asked to resume."""
    extra: JSONObject = field(default_factory=dict[str, object])
    """Facts about the external session for result metadata (CLI version, model, ...)."""


SessionCallback = Callable[[str], Awaitable[None]]


class StreamMapper(ABC):
    """Maps one CLI's native events onto results. Subclasses list the event types they know."""

    known_events: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self, ctx: AgentRunContext, out: RunOutput, diagnostics: Diagnostics, on_session: SessionCallback
    ) -> None:
        self.ctx = ctx
        self.out = out
        self.diagnostics = diagnostics
        self.state = StreamState()
        self._on_session = on_session
        self.line = 0

    @abstractmethod
    async def feed(self, event: JSONObject) -> None:
        """Map one native event (a decoded JSON object). Unknown types go to `unknown()`."""

    def unknown(self, event: JSONObject, what: str = "event") -> None:
        kind = event.get("type")
        self.diagnostics.add(
            "unknown_event",
            f"{what} of type {kind!r} is not known to this runner; ignored",
            line=self.line,
            excerpt=_dump(event),
        )

    async def session_started(self, session_id: str) -> None:
        """Record the external session id (once) and let the runner persist it."""
        if self.state.session_id == session_id:
            return
        self.state.session_id = session_id
        await self._on_session(session_id)

    def fail(self, failure: Failure, *, stop: bool = False) -> None:
        if self.state.failure is None:
            self.state.failure = failure
        self.state.stop = self.state.stop or stop


async def pump_native_stream(
    lines: AsyncIterator[bytes | TooLong], mapper: StreamMapper, diagnostics: Diagnostics
) -> int:
    """Feed every line to `mapper` until EOF or until it asks to stop; returns the number of lines."""
    number = 0
    async for raw in lines:
        number += 1
        mapper.line = number
        if isinstance(raw, TooLong):
            diagnostics.add("overlong_line", f"a line of {raw.size} bytes was skipped", line=number)
            continue
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            continue
        try:
            event: object = json.loads(text)
        except ValueError:
            diagnostics.add("unparseable_line", "not JSON; ignored", line=number, excerpt=text)
            continue
        if not is_json_object(event):
            diagnostics.add("unparseable_line", "JSON but not an object; ignored", line=number, excerpt=text)
            continue
        obj: JSONObject = event
        try:
            await mapper.feed(obj)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            # A known event in an unexpected shape: the format drifted. Keep going.
            diagnostics.add(
                "unmappable_event",
                f"{type(exc).__name__}: {exc}"[:_EXCERPT],
                line=number,
                excerpt=text,
            )
        if mapper.state.stop:
            break
    return number


def _dump(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)[:_EXCERPT]
    except (TypeError, ValueError):
        return repr(value)[:_EXCERPT]


def as_dict(value: object) -> JSONObject:
    """`value` if it is a JSON object, else an empty one (native fields are never trusted to exist)."""
    return value if is_json_object(value) else {}


def as_list(value: object) -> list[object]:
    return list(value) if is_json_array(value) else []


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def preview(value: object, limit: int = 2000) -> str:
    """A short text of a tool result for `tool.call.completed.result_preview`."""
    if isinstance(value, str):
        text = value
    elif is_json_array(value):
        parts: list[str] = []
        for block in value:
            block_obj = as_dict(block)
            part = as_str(block_obj.get("text"))
            parts.append(part if part is not None else _dump(block))
        text = "\n".join(parts)
    elif value is None:
        text = ""
    else:
        text = _dump(value) if not isinstance(value, dict) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"
