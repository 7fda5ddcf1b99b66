"""`AsyncClient`: the API from async code (anyio: asyncio or trio), on `httpx2.AsyncClient`.

Owns the async resources (`events`, `runs`, `approvals`, `schedules`, `conversations`, `channels`,
`runtimes`),
sending a `Call` and reading its answer or error, and `AsyncRunStream`, which follows a run's results
over SSE and resumes a dropped connection with `Last-Event-ID`. Does not own the calls' HTTP shapes
(`_calls`) or what a stream event means (`_stream`); `_sync` is the same over `httpx2.Client`.

Invariants: every error answer raises `APIError` (status and the API's error body); a server that cannot
be reached raises `APIConnectionError`; a stream hands out each result once, in order, across reconnects.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar

import anyio
import httpx2

from mcphost.client import _calls
from mcphost.client._errors import APIConnectionError, APIError
from mcphost.client._json import JSONValue
from mcphost.client._options import RECONNECTS, Options, Waits, new_event_id
from mcphost.client._stream import WAIT_AFTER, ResultEvent, RunEnd, StreamState, with_event_id

if TYPE_CHECKING:
    from mcphost.client.models import (
        Admitted,
        ApprovalRecord,
        ApprovalsPage,
        ApprovalStatus,
        CancelAnswer,
        ChannelsView,
        Decision,
        EventsPage,
        RunRuntimeView,
        RunsPage,
        RunStatus,
        RuntimesView,
        RuntimeView,
        RunView,
        ScheduleDeleted,
        SchedulesPage,
        ScheduleStatus,
        TranscriptPage,
    )

T = TypeVar("T")


class AsyncClient:
    """A client of one mcphost server. Use it as `async with AsyncClient(url) as client:`.

    Args:
        base_url: the server (default `$MCPHOST_URL`, else http://127.0.0.1:8787).
        api_key: the bearer key (default `$MCPHOST_API_KEY`; none: no Authorization header).
        timeout_s: connect, write and read limit of each request (a result stream waits without one).
        reconnects: how many times in a row a dropped result stream is resumed.
        transport: an httpx2 transport (`httpx2.ASGITransport(app)` serves an app in process).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        reconnects: int = RECONNECTS,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.options = Options.of(base_url, api_key, timeout_s, reconnects)
        self.http = httpx2.AsyncClient(
            base_url=self.options.base_url,
            headers=self.options.headers,
            timeout=httpx2.Timeout(timeout_s),
            transport=transport,
        )
        self.events = AsyncEvents(self)
        self.runs = AsyncRuns(self)
        self.approvals = AsyncApprovals(self)
        self.schedules = AsyncSchedules(self)
        self.conversations = AsyncConversations(self)
        self.channels = AsyncChannels(self)
        self.runtimes = AsyncRuntimes(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def call(self, call: _calls.Call[T]) -> T:
        """Send `call`; its answer read into its model, or `APIError` / `APIConnectionError`."""
        try:
            response = await self.http.request(call.method, call.path, params=call.params, json=call.body)
        except httpx2.TransportError as exc:
            raise unreachable(self.options.base_url, exc) from exc
        if response.status_code >= 400:
            raise APIError.from_answer(response.status_code, response.content)
        return call.parse(response.content)


def unreachable(url: str, exc: Exception) -> APIConnectionError:
    return APIConnectionError(f"cannot reach mcphost at {url}: {exc}. Is `mcphost serve` running there?")


class AsyncRunStream:
    """A run's results as they are stored, over SSE: `async for result in stream` yields `ResultEvent`s.

    A dropped connection is resumed from the last result (`Last-Event-ID`), after a jittered back-off,
    up to `reconnects` times in a row. After the loop, `end` says how the run ended. Use it as an async
    context manager so an early exit closes the connection.
    """

    def __init__(self, client: AsyncClient, state: StreamState) -> None:
        self._client = client
        self._state = state
        self._results: AsyncGenerator[ResultEvent, None] | None = None

    @property
    def run_id(self) -> str | None:
        """The run, once known (at once for `runs.stream`, after the admission for `events.stream`)."""
        return self._state.run_id

    @property
    def end(self) -> RunEnd | None:
        """How the run ended; None until the stream has read its `event: end`."""
        return self._state.end

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncGenerator[ResultEvent, None]:
        if self._results is None:
            self._results = self._follow()
        return self._results

    async def aclose(self) -> None:
        if self._results is not None:
            await self._results.aclose()

    async def until_end(self) -> RunEnd:
        """Read the rest of the stream (its results are dropped); how the run ended."""
        async for _ in self:
            pass
        assert self._state.end is not None
        return self._state.end

    async def _follow(self) -> AsyncGenerator[ResultEvent, None]:
        state, http, options = self._state, self._client.http, self._client.options
        waits, failures = Waits(), 0
        while True:
            request = state.request()
            failure: Exception | None = None
            try:
                async with http.stream(
                    request.method,
                    request.path,
                    params=request.params,
                    content=request.content,
                    headers=request.headers,
                    timeout=httpx2.Timeout(options.timeout_s, read=None),
                ) as response:
                    if response.status_code >= 400:
                        raise APIError.from_answer(response.status_code, await response.aread())
                    async for sse in httpx2.EventSource(response):
                        item = state.feed(sse.event, sse.data)
                        if item is not None:
                            failures = 0
                            waits.reset()
                            yield item
            except httpx2.TransportError as exc:
                if state.run_id is None and isinstance(exc, httpx2.ConnectError):
                    raise unreachable(options.base_url, exc) from exc  # nothing was admitted
                failure = exc
            if state.end is not None:
                return
            failures += 1
            if failures > options.reconnects:
                if state.error is not None and failure is None:
                    raise state.error
                raise APIConnectionError(
                    f"the result stream of run {state.run_id or '?'} dropped {failures} times in a row"
                    + (f" (last: {failure})" if failure else "")
                ) from failure
            await anyio.sleep(waits.next())


class AsyncEvents:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def send(self, event: Mapping[str, JSONValue]) -> Admitted:
        """`POST /v1/events`: admit `event` (an `AgentEventEnvelope` as JSON); the run it made."""
        return await self._client.call(_calls.send_event(event))

    def stream(self, event: Mapping[str, JSONValue]) -> AsyncRunStream:
        """`POST /v1/events?stream=true`: admit `event` and follow its run's results. The event gets an
        `event_id` when it has none, so a POST retried after a dropped connection returns the same run."""
        return AsyncRunStream(self._client, StreamState(event=with_event_id(event, new_event_id())))


class AsyncRuns:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(
        self,
        *,
        conversation_id: str | None = None,
        status: RunStatus | None = None,
        agent: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RunsPage:
        """`GET /v1/runs`: a page of runs, newest first (`next_cursor` continues)."""
        return await self._client.call(
            _calls.list_runs(
                conversation_id=conversation_id,
                status=status,
                agent=agent,
                since=since,
                until=until,
                limit=limit,
                cursor=cursor,
            )
        )

    async def get(self, run_id: str) -> RunView:
        """`GET /v1/runs/{run_id}`: the run, its grant (without its token) and its event's attempts."""
        return await self._client.call(_calls.get_run(run_id))

    async def runtime(self, run_id: str) -> RunRuntimeView:
        """`GET /v1/runs/{run_id}/runtime`: where the run ran (`runtime` None: on the host itself), its
        claims' fences, timings, lease renewals and events, and the artifact of its runner's output."""
        return await self._client.call(_calls.run_runtime(run_id))

    async def cancel(self, run_id: str, *, reason: str | None = None) -> CancelAnswer:
        """`POST /v1/runs/{run_id}/cancel`; the run ends `cancelled` with `reason` on whichever host runs it."""
        return await self._client.call(_calls.cancel_run(run_id, reason))

    def stream(self, run_id: str, *, after: int = 0) -> AsyncRunStream:
        """`GET /v1/runs/{run_id}/results` as SSE: the results after sequence `after`, then the end."""
        return AsyncRunStream(self._client, StreamState(run_id=run_id, after=after))

    async def wait(self, run_id: str, *, timeout_s: float | None = None) -> RunView:
        """Wait until the run has ended (`TimeoutError` after `timeout_s`); the run as it ended."""
        with anyio.fail_after(timeout_s):
            async with self.stream(run_id, after=WAIT_AFTER) as stream:
                await stream.until_end()
        return await self.get(run_id)


class AsyncApprovals:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(
        self,
        *,
        status: ApprovalStatus | None = None,
        run_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ApprovalsPage:
        """`GET /v1/approvals`: newest first (`status="pending"`: what waits for a decision)."""
        return await self._client.call(
            _calls.list_approvals(status=status, run_id=run_id, limit=limit, cursor=cursor)
        )

    async def get(self, approval_id: str) -> ApprovalRecord:
        return await self._client.call(_calls.get_approval(approval_id))

    async def decide(
        self, approval_id: str, decision: Decision, *, note: str | None = None, answer: str | None = None
    ) -> ApprovalRecord:
        """`POST /v1/approvals/{approval_id}`: approve, deny, or answer a harness's question."""
        return await self._client.call(
            _calls.decide_approval(approval_id, decision, note=note, answer=answer)
        )


class AsyncSchedules:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self, *, limit: int | None = None, cursor: str | None = None) -> SchedulesPage:
        return await self._client.call(_calls.list_schedules(limit=limit, cursor=cursor))

    async def get(self, schedule_id: str) -> ScheduleStatus:
        return await self._client.call(_calls.get_schedule(schedule_id))

    async def create(self, spec: Mapping[str, JSONValue]) -> ScheduleStatus:
        """`POST /v1/schedules`: `spec` is a `ScheduleSpec` as JSON (`id`, `cron` or `every`, ...)."""
        return await self._client.call(_calls.create_schedule(spec))

    async def delete(self, schedule_id: str) -> ScheduleDeleted:
        return await self._client.call(_calls.delete_schedule(schedule_id))

    async def pause(self, schedule_id: str) -> ScheduleStatus:
        return await self._client.call(_calls.pause_schedule(schedule_id, resume=False))

    async def resume(self, schedule_id: str) -> ScheduleStatus:
        return await self._client.call(_calls.pause_schedule(schedule_id, resume=True))


class AsyncRuntimes:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self) -> RuntimesView:
        """`GET /v1/runtimes`: each runtime's state, liveness, slots, the runs it holds, labels and
        capabilities."""
        return await self._client.call(_calls.list_runtimes())

    async def drain(self, runtime: str) -> RuntimeView:
        """`POST /v1/runtimes/{runtime}/drain`: it finishes its runs and claims no new ones."""
        return await self._client.call(_calls.set_runtime_state(runtime, "drain"))

    async def disable(self, runtime: str) -> RuntimeView:
        """`POST /v1/runtimes/{runtime}/disable`: its token is refused; its runs are requeued when their
        leases lapse."""
        return await self._client.call(_calls.set_runtime_state(runtime, "disable"))

    async def enable(self, runtime: str) -> RuntimeView:
        """`POST /v1/runtimes/{runtime}/enable`: it claims runs again."""
        return await self._client.call(_calls.set_runtime_state(runtime, "enable"))


class AsyncChannels:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self) -> ChannelsView:
        """`GET /v1/channels`: each chat channel's platform, agents, newest inbound event and outbox
        figures."""
        return await self._client.call(_calls.list_channels())


class AsyncConversations:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def transcript(
        self,
        conversation_id: str,
        *,
        before: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        thread_id: str | None = None,
    ) -> TranscriptPage:
        """`GET /v1/conversations/{conversation_id}/transcript`: a page of its history."""
        return await self._client.call(
            _calls.transcript(conversation_id, before=before, after=after, limit=limit, thread_id=thread_id)
        )

    async def events(
        self,
        conversation_id: str,
        *,
        before: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        thread_id: str | None = None,
        event_type: Sequence[str] | None = None,
    ) -> EventsPage:
        """`GET /v1/conversations/{conversation_id}/events`: a page of its event log."""
        return await self._client.call(
            _calls.conversation_events(
                conversation_id,
                before=before,
                after=after,
                limit=limit,
                thread_id=thread_id,
                event_type=event_type,
            )
        )
