"""A run's result stream as the client reads it: the items it yields and the resume state machine.

Owns what one SSE event of `POST /v1/events?stream=true` or `GET /v1/runs/{run_id}/results` means
(`event: run` is the admission, `event: end` the run's end, `event: error` a stream that could not go
on; every other event is one stored result, whatever its event name), and which request comes next:
the POST until the admission names the run, then the results endpoint with `Last-Event-ID` set to the
last result seen. Does not own the HTTP exchange (`_async`, `_sync` drive the same state) or the
protocol models (`ResultEvent.result` imports `mcphost.protocol` on first use, so a client that only
prints results never pays for pydantic).

Invariants:
- Each result is handed out once, in order: a result at or before the last sequence seen is dropped, so a
  replay after a reconnect never repeats one.
- The event posted carries an `event_id` before the first POST, so a retried POST returns the same run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mcphost.client._errors import APIError
from mcphost.client._json import JSONObject, JSONValue, as_object

if TYPE_CHECKING:
    from mcphost.protocol.results import AgentRunResult, InvalidResult, UnknownResult

STREAM_HEADERS = {"Accept": "text/event-stream"}
WAIT_AFTER = 2**31 - 1
"""The highest result sequence a results stream takes (`after`'s maximum in the OpenAPI document): a
stream resumed there sends no result, only `event: end` once the run has ended."""


@dataclass(frozen=True, slots=True)
class ResultEvent:
    """One stored result of a run: its host sequence, its type and the result as the API sent it."""

    seq: int
    type: str
    raw: JSONObject
    """The result with its `seq`, as sent: `{seq, type, run_id, data, ...}`."""

    @property
    def result(self) -> AgentRunResult | UnknownResult | InvalidResult:
        """The result as the protocol's typed model (`mcphost.protocol.classify_result`): a known result,
        an `UnknownResult` (a type this protocol version does not define) or an `InvalidResult`."""
        from mcphost.protocol.results import classify_result

        return classify_result({k: v for k, v in self.raw.items() if k != "seq"})


@dataclass(frozen=True, slots=True)
class RunFailure:
    """Why a streamed run did not complete (`RunEnd.error`): a record, not an exception."""

    code: str
    message: str
    details: JSONObject = field(default_factory=dict[str, JSONValue])


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How the run ended (`event: end`): its final status and, unless it completed, its error."""

    run_id: str
    status: str
    error: RunFailure | None


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    params: dict[str, str]
    content: bytes | None
    headers: dict[str, str]


def with_event_id(event: Mapping[str, JSONValue], new_event_id: str) -> JSONObject:
    """The event as a JSON object with an `event_id` (`new_event_id` when it has none)."""
    body = dict(event)
    if not body.get("event_id"):
        body["event_id"] = new_event_id
    return body


class StreamState:
    """Where a run's result stream stands: the next request to make and what each event means."""

    def __init__(self, *, event: JSONObject | None = None, run_id: str | None = None, after: int = 0) -> None:
        assert (event is None) != (run_id is None), "a stream starts from an event or from a run"
        self._body = json.dumps(event).encode() if event is not None else None
        self.run_id = run_id
        self.last_seq = after
        self.admission: JSONObject | None = None
        self.end: RunEnd | None = None
        self.error: APIError | None = None
        """The last `event: error` (the stream stopped; resuming may get past it)."""

    def request(self) -> Request:
        if self.run_id is None:
            assert self._body is not None
            headers = {**STREAM_HEADERS, "Content-Type": "application/json"}
            return Request("POST", "/v1/events", {"stream": "true"}, self._body, headers)
        headers = {**STREAM_HEADERS, "Last-Event-ID": str(self.last_seq)}
        return Request("GET", f"/v1/runs/{self.run_id}/results", {}, None, headers)

    def feed(self, event: str, data: str) -> ResultEvent | None:
        """Take one SSE event; the result to hand out, if it is a new one."""
        payload = as_object(json.loads(data)) if data else {}
        if event == "run":
            self.admission = payload
            self.run_id = str(payload["run_id"])
            return None
        if event == "end":
            error = payload.get("error")
            found = as_object(error)
            self.end = RunEnd(
                run_id=str(payload.get("run_id") or self.run_id),
                status=str(payload.get("status")),
                error=RunFailure(
                    str(found.get("code")), str(found.get("message")), as_object(found.get("details"))
                )
                if error
                else None,
            )
            return None
        if event == "error":
            self.error = APIError.of(200, payload.get("error"))
            return None
        seq = payload.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq <= self.last_seq:
            return None  # a replayed stream repeats what was handed out already
        self.last_seq = seq
        return ResultEvent(seq=seq, type=str(payload.get("type")), raw=payload)
