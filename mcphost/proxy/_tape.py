"""`ModelTape`: model calls in a run's recording, and a replay's model calls answered from one.

Owns recording a call at the per-run model endpoints of a recorded run (`record_whole`, and `tee`,
which records a stream as it is relayed) and, on a replay, answering calls from the recording
(`replayed`). Does not own the recording format or which recorded call answers (`recording.py`,
`ReplayBook.model_answer`), nor the canonical form (`llm.canonical`), nor relaying calls (`server.py`).

Invariants:
- A recorded call holds what its client received: the HTTP status and the whole JSON answer (the
  upstream's, or the host's own error when every model of the chain failed), or every server-sent
  event of the stream in order (with the error event the host ends a broken stream with), and the
  usage read from them. The host's own refusals of a run's request (`refused`: a body it cannot take,
  a model not granted or not callable there, a spent budget) are recorded the same way, with the
  status and error body the client got; a request whose token is not the run's is not the run's and
  is never recorded. A write that fails is logged; it never changes the answer.
- A refused request is recorded under the canonical form of its body when the body parsed (so the same
  request refused again matches, and a request made differently does not), else under the digest of
  its raw bytes (of the refusal's message when not even those were read: a body past the size bound).
- On a replay nothing is sent upstream: a call — refused or not — is answered from the recording (a
  stream as the same event sequence), or refused with a 400 in the endpoint's error shape that names
  it unrecorded, and the replay reports it as a divergence.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Protocol

import anyio
from starlette.responses import JSONResponse, Response, StreamingResponse

from mcphost.llm.canonical import canonical_request, request_hash
from mcphost.llm.wire import Api, SseReader, StreamUsage, Usage, error_body, usage_of
from mcphost.protocol import JSONObject, JSONValue, is_json_array, is_json_object
from mcphost.recording import MODEL_CALLS, storable_arguments
from mcphost.stores import Stores
from mcphost.stores.recordings import RecordedCallEntry

logger = logging.getLogger(__name__)

RECORD_WRITE_TIMEOUT_S = 10.0
MAX_RECORDED_STREAM_BYTES = 64 * 1024 * 1024
"""The most of one stream's event data a recording keeps (as much as a whole answer may hold); a
longer stream is relayed in full and recorded as `{"truncated": true}`, which a replay cannot give."""


class ModelReplayAnswers(Protocol):
    """A replay's recorded model answers (`recording.ReplayBook`)."""

    def model_answer(self, run_id: str, endpoint: str, arguments: JSONObject) -> JSONObject | None:
        """The recorded `{status, usage, body | events}`, or None for an unrecorded call."""
        ...


@dataclass(frozen=True)
class Refusal:
    """The host's refusal of a run's request, as the client gets it."""

    raw: bytes | None
    """The request's body as read; None when it was refused before it was read (too large)."""
    body: JSONObject | None
    """The body as parsed; None when it did not parse."""
    reply: JSONResponse
    """The refusal: its status and the endpoint's error body."""


def _today() -> list[str]:
    return sorted({date.today().isoformat(), datetime.now(UTC).date().isoformat()})


class ModelTape:
    """Records the model calls of recorded runs; on a replay (`replay`), answers every call instead."""

    def __init__(self, stores: Stores, replay: ModelReplayAnswers | None = None) -> None:
        self._stores = stores
        self._replay = replay

    def arguments(self, api: Api, run_id: str, model_id: str, body: JSONObject) -> JSONObject:
        """A call's recorded arguments: `{sha256, model, stream, request}`."""
        canonical = canonical_request(api, body, model_id=model_id, run_id=run_id, today=_today())
        request = canonical["request"]
        return {
            "sha256": request_hash(canonical),
            "model": model_id,
            "stream": body.get("stream") is True,
            "request": _storable_request(request) if is_json_object(request) else {},
        }

    def refusal_arguments(self, api: Api, run_id: str, refusal: Refusal) -> JSONObject:
        """A refused request's recorded arguments: those of its call when its body parsed, else
        `{sha256, model: null, stream: false, request: {unparsed_bytes}}` over its raw bytes."""
        if refusal.body is not None:
            model_id = str(refusal.body.get("model", "")).removeprefix("host:")[:200]
            return self.arguments(api, run_id, model_id, refusal.body)
        seen = refusal.raw if refusal.raw is not None else bytes(refusal.reply.body)
        return {
            "sha256": hashlib.sha256(b"unparsed\0" + seen).hexdigest(),
            "model": None,
            "stream": False,
            "request": {"unparsed_bytes": None if refusal.raw is None else len(refusal.raw)},
        }

    async def refused(self, api: Api, run_id: str, record: bool, refusal: Refusal) -> Response:
        """The answer to a request the host refused: on a replay, the recorded answer of the same
        request (or the divergence); else the refusal, recorded first when the run is (`record`)."""
        if self._replay is None and not record:
            return refusal.reply
        arguments = self.refusal_arguments(api, run_id, refusal)
        if self._replay is not None:
            return self._answer(api, run_id, arguments)
        await self._append(
            api,
            run_id,
            arguments,
            {
                "status": refusal.reply.status_code,
                "usage": None,
                "body": json.loads(bytes(refusal.reply.body)),
            },
        )
        return refusal.reply

    def replayed(self, api: Api, run_id: str, model_id: str, body: JSONObject) -> Response | None:
        """On a replay, the recorded answer of this call (or its refusal); None when not replaying."""
        if self._replay is None:
            return None
        return self._answer(api, run_id, self.arguments(api, run_id, model_id, body))

    def _answer(self, api: Api, run_id: str, arguments: JSONObject) -> Response:
        assert self._replay is not None
        answer = self._replay.model_answer(run_id, MODEL_CALLS[api], arguments)
        model_id = arguments.get("model")
        named = f"to model {model_id!r}" if isinstance(model_id, str) else "whose body the host refused"
        if answer is None:
            message = (
                f"This replay has no recorded answer for this request {named} (its "
                f"canonical form has sha256 {arguments['sha256']}); it is reported as a divergence and "
                "was not sent upstream."
            )
            return JSONResponse(error_body(api, "invalid_request", message), status_code=400)
        if "unstorable" in answer or answer.get("truncated") is True:
            message = (
                f"The recording could not keep the answer of this call {named} (JSON a "
                f"store cannot keep, or a stream past {MAX_RECORDED_STREAM_BYTES} bytes), so this "
                "replay cannot give it."
            )
            return JSONResponse(error_body(api, "upstream", message), status_code=502)
        status = answer.get("status")
        status = status if isinstance(status, int) and 100 <= status <= 599 else 200
        events = answer.get("events")
        if is_json_array(events):
            return StreamingResponse(
                _replay_events(events), media_type="text/event-stream", headers={"cache-control": "no-cache"}
            )
        return Response(json.dumps(answer.get("body")), status_code=status, media_type="application/json")

    async def record_whole(
        self, api: Api, run_id: str, model_id: str, body: JSONObject, status: int, content: bytes | memoryview
    ) -> None:
        """Record a whole answer the client received: the upstream's, or the host's own error (every
        model of the chain failed, the run's deadline passed), so a replay gives it again."""
        try:
            answer: JSONValue = json.loads(bytes(content))
        except (ValueError, RecursionError):
            answer = {"unreadable": bytes(content[:1000]).decode("utf-8", "replace")}
        usage = usage_of(api, answer) if status == 200 else None
        await self._append(
            api,
            run_id,
            self.arguments(api, run_id, model_id, body),
            {"status": status, "usage": _usage(usage), "body": answer},
        )

    def tee(
        self, api: Api, run_id: str, model_id: str, body: JSONObject, chunks: AsyncGenerator[bytes]
    ) -> AsyncIterator[bytes]:
        """`chunks` as they are, recorded as events once the stream ends (however it ends)."""

        async def relayed() -> AsyncIterator[bytes]:
            reader, usage = SseReader(), StreamUsage(api)
            events: list[JSONValue] = []
            kept = 0
            try:
                async for chunk in chunks:
                    for event, data in reader.feed(chunk):
                        usage.feed(event, data)
                        kept += len(data)
                        if kept <= MAX_RECORDED_STREAM_BYTES:
                            events.append({"event": event, "data": data})
                    yield chunk
            finally:
                with anyio.CancelScope(shield=True):
                    await chunks.aclose()
                    answer: JSONObject = {"status": 200, "usage": _usage(usage.usage), "events": events}
                    if kept > MAX_RECORDED_STREAM_BYTES:
                        answer = {"status": 200, "usage": _usage(usage.usage), "truncated": True}
                    await self._append(api, run_id, self.arguments(api, run_id, model_id, body), answer)

        return relayed()

    async def _append(self, api: Api, run_id: str, arguments: JSONObject, answer: JSONObject) -> None:
        entry = RecordedCallEntry(
            run_id=run_id,
            tool=MODEL_CALLS[api],
            arguments=arguments,
            outcome="ok" if answer["status"] == 200 else "error",
            answer=storable_arguments(answer),
        )
        with anyio.move_on_after(RECORD_WRITE_TIMEOUT_S) as bound:
            try:
                await self._stores.recordings.append(entry)
            except Exception:
                logger.exception("could not record a model call of run %s", run_id)
        if bound.cancelled_caught:
            logger.warning("recording a model call of run %s timed out", run_id)


def _storable_request(request: JSONObject) -> JSONObject:
    """The canonical request as recorded, for reports only (the hash is of the exact one): integers a
    store cannot keep (a tool schema's `maximum` of 2**64, say) as floats, and else, when it still
    holds unstorable JSON, its digest marker (`storable_arguments`)."""

    def number(text: str) -> int | float:
        value = int(text)
        return value if -(2**63) <= value < 2**63 else float(value)

    try:
        loose = json.loads(json.dumps(request), parse_int=number)
    except (ValueError, RecursionError):
        return storable_arguments(request)
    return storable_arguments(loose if is_json_object(loose) else request)


def _usage(usage: Usage | None) -> JSONValue:
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_tokens": usage.cached_tokens,
        "model": usage.model,
    }


async def _replay_events(events: Iterable[JSONValue]) -> AsyncIterator[bytes]:
    for item in events:
        if not is_json_object(item):
            continue
        event, data = item.get("event"), item.get("data")
        head = f"event: {event}\n" if isinstance(event, str) and event else ""
        lines = "".join(f"data: {line}\n" for line in (data if isinstance(data, str) else "").split("\n"))
        yield f"{head}{lines}\n".encode()
