"""Chat replies while a run works: the typing indicator, and a placeholder message edited at a bounded
rate as `message.delta` results arrive; then the hand-off of each placeholder to the outbox row that
posts the message's final text. Also what a reply's files are (`reply_files`, `artifact_of`).

Owns `ReplyStreams`: one task per run of a `[channels.<id>]` event streamed from this host (started by
the channel route once it admitted the run, `start`), following the run's persisted results (`follow`:
the orchestrator's reader). Does not own the final text, its split, retries or dead letters
(`delivery.py` sends the `message.completed` row and takes the placeholder from here, `placeholder`),
nor the platform calls (`channels/`).

Invariants:
- One writer per platform message at a time: the stream edits a placeholder only until the run's
  `message.completed` for it; it then waits for its request in flight, hands the placeholder's id
  over (keyed by that result's host sequence) and never touches it again. The sender edits it only
  after taking it: `placeholder` answers once the stream has passed that sequence.
- Edits are coalesced and bounded: at most one request per `stream_interval_s` per message, always
  with the newest text (cut to the platform's first part, with a `…` cursor); a 429 waits the
  platform's `Retry-After` first, and so does the placeholder's next request by anyone: the hand-over
  to the sender and the stream's own last edit (`quiet_until`). A failed edit loses nothing: the final text is the outbox's, which
  posts it anew when no placeholder was handed over or the placeholder can no longer be edited.
- The typing indicator is repeated every `typing_every_s` until the run's first message is posted
  (a placeholder, or its first `message.completed`) or the run ends; a permanent refusal stops it.
- A run that ends with a placeholder but no `message.completed` for it (it failed, or its last
  message came only in `run.completed`) leaves the placeholder showing its text without the cursor;
  a failure's notice is the outbox's `run.failed` row, posted after it as a message of its own
  (`kept`).
- Streaming is a courtesy of the host that admitted the run: a run whose `message.completed` row
  another replica claims, or a restart mid-run, loses the placeholder's last edit (the final text is
  then posted as new messages), never the answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import anyio
import httpx2
from anyio.abc import TaskGroup

from mcphost.channels import ChannelAdapter, ChannelSendError, Target
from mcphost.common.tickets import Signal
from mcphost.errors import NotFoundError
from mcphost.protocol import JSONObject, is_json_array, is_json_object
from mcphost.stores import ArtifactRecord, ArtifactStore, EventStore, StoredResult

logger = logging.getLogger(__name__)

CURSOR = " …"
"""Ends a placeholder's text while the run is still writing it."""
KEEP_S = 600.0
"""How long a finished stream's untaken placeholders are kept for the sender."""
Follow = Callable[[str], AsyncIterator[StoredResult]]
"""A run's persisted results, live, until it ends (`Orchestrator.results`)."""


def content_text(holder: JSONObject, *, sep: str) -> str:
    """The text of a message or a delta's chunk: its `content`, else its text `contents` joined."""
    content = holder.get("content")
    if isinstance(content, str):
        return content
    contents = holder.get("contents")
    texts = [c.get("text") for c in (contents if is_json_array(contents) else []) if is_json_object(c)]
    return sep.join(t for t in texts if isinstance(t, str))


def chunk_text(payload: JSONObject) -> str:
    """The text a `message.delta` adds."""
    data = payload.get("data")
    chunk = data.get("chunk") if is_json_object(data) else None
    return content_text(chunk, sep="") if is_json_object(chunk) else ""


def reply_files(data: JSONObject) -> list[str]:
    """The artifact ids a message names (`message.artifacts`, and its image/audio/file contents), each
    once, in order: the files its reply uploads."""
    message = data.get("message")
    if not is_json_object(message):
        return []
    ids: list[str] = []
    for key, kinds in (("artifacts", None), ("contents", ("image", "audio", "file"))):
        items = message.get(key)
        for item in items if is_json_array(items) else []:
            if is_json_object(item) and (kinds is None or item.get("type") in kinds):
                artifact_id = item.get("artifact_id")
                if isinstance(artifact_id, str) and artifact_id:
                    ids.append(artifact_id)
    return list(dict.fromkeys(ids))


async def artifact_of(
    artifacts: ArtifactStore, events: EventStore, run_id: str, artifact_id: str
) -> ArtifactRecord | None:
    """The run's artifact a message names: by the host's id, or by the runner's own id of an inline
    `artifact.created` (the run's event log maps it); None when the run owns no such artifact."""
    try:
        record = await artifacts.get(artifact_id)
        if record.owner_run_id == run_id:
            return record
    except NotFoundError:
        pass
    for event in await events.for_run(run_id):
        if event.event_type == "artifact.created" and event.payload.get("runner_artifact_id") == artifact_id:
            ref = event.payload.get("artifact")
            host_id = ref.get("artifact_id") if is_json_object(ref) else None
            if isinstance(host_id, str):
                try:
                    record = await artifacts.get(host_id)
                except NotFoundError:
                    return None
                return record if record.owner_run_id == run_id else None
    return None


@dataclass
class _Message:
    """One message being streamed: what the run wrote so far and what the placeholder shows."""

    text: str = ""
    shown: str = ""
    """The text when the placeholder was last brought up to date."""
    sent: str = ""
    """The placeholder's own text as last sent (a preview: `_preview`)."""
    message_id: str | None = None
    broken: bool = False
    """The platform refused the placeholder or an edit of it for good: it is not handed over."""


@dataclass
class _RunStream:
    current: _Message = field(default_factory=_Message)
    position: int = 0
    """The host sequence of the last result handled."""
    ended_at: float | None = None
    closed: bool = False
    kept: bool = False
    """The run ended with a placeholder of no `message.completed`, left showing its text."""
    handed: dict[int, str] = field(default_factory=dict[int, str])
    """Placeholder ids by the host sequence of their message's `message.completed`."""
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    """Held for every platform request on `current`, and to close it."""
    quiet_until: float = 0.0
    """`anyio.current_time()` before which the platform asked for no request on the placeholder (the
    `Retry-After` of its last 429): the hand-over and the stream's last edit wait for it too."""
    moved: Signal = field(default_factory=Signal)
    changed: Signal = field(default_factory=Signal)
    posted: anyio.Event = field(default_factory=anyio.Event)


def _preview(source: ChannelAdapter, text: str) -> str | None:
    """What a placeholder shows of `text`: its first part, always ending in the cursor, so it never
    equals the final text (Telegram refuses an edit to the same text) and shows the run is writing."""
    parts = source.split(text + CURSOR)
    if not parts:
        return None
    first = parts[0]
    return first if first.endswith(CURSOR) else first[: -len(CURSOR)] + CURSOR


class ReplyStreams:
    """The streamed replies of the runs this host admitted from chat channels."""

    def __init__(self, follow: Follow, *, keep_s: float = KEEP_S) -> None:
        self._follow = follow
        self._keep_s = keep_s
        self._runs: dict[str, _RunStream] = {}
        self._http: httpx2.AsyncClient | None = None
        self._tg: TaskGroup | None = None

    def bind(self, http: httpx2.AsyncClient | None, tg: TaskGroup | None) -> None:
        """The client and task group streams use (the sender's, while it runs); None stops new ones."""
        self._http, self._tg = http, tg

    def start(self, source: ChannelAdapter, target: Target, run_id: str) -> None:
        """Stream the run's reply to `target`: typing, then placeholders (once per run)."""
        now = time.time()
        for old in [
            r for r, s in self._runs.items() if s.ended_at is not None and now - s.ended_at > self._keep_s
        ]:
            del self._runs[old]
        if self._tg is None or run_id in self._runs:
            return
        self._runs[run_id] = stream = _RunStream()
        self._tg.start_soon(self._stream, source, target, run_id, stream)

    async def placeholder(self, run_id: str, seq: int, *, timeout: float) -> tuple[bool, str | None]:
        """(ready, id) of the placeholder of the message whose `message.completed` is host sequence
        `seq`: ready once this host's stream of the run passed `seq` or ended (or streams no such run),
        and the id then is the placeholder's, taken (None: post the text anew). Not ready after
        `timeout`: the stream still holds the placeholder."""
        stream = self._runs.get(run_id)
        if stream is None:
            return True, None
        if not await self._until(
            stream, lambda: stream.position >= seq or stream.ended_at is not None, timeout
        ):
            return False, None
        if seq in stream.handed:  # the platform's Retry-After holds for the placeholder's next edit too
            quiet = stream.quiet_until - anyio.current_time()
            if quiet > timeout:
                return False, None
            await anyio.sleep(max(0.0, quiet))
        return True, stream.handed.pop(seq, None)

    async def kept(self, run_id: str, *, timeout: float) -> tuple[bool, bool]:
        """(ready, kept): ready once this host's stream of the run ended (or it streams no such run);
        kept when it left a placeholder showing a message the run never completed, which a failure's
        notice must not overwrite (a Discord interaction's first part edits its answer)."""
        stream = self._runs.get(run_id)
        if stream is None:
            return True, False
        if not await self._until(stream, lambda: stream.ended_at is not None, timeout):
            return False, False
        return True, stream.kept

    @staticmethod
    async def _until(stream: _RunStream, done: Callable[[], bool], timeout: float) -> bool:
        """Whether `done()` held within `timeout`, looked at each time the stream moved."""
        with anyio.move_on_after(timeout):
            while True:
                ticket = stream.moved.ticket()
                if done():
                    return True
                await ticket.wait()
        return False

    async def _stream(self, source: ChannelAdapter, target: Target, run_id: str, stream: _RunStream) -> None:
        interval = source.config.stream_interval_s
        last: _Message | None = None
        try:
            async with anyio.create_task_group() as tg:
                if source.typing_every_s is not None:
                    tg.start_soon(self._typing, source, target, stream, source.typing_every_s)
                if interval > 0:
                    tg.start_soon(self._edit, source, target, stream, interval)
                async for item in self._follow(run_id):
                    if item.type == "message.delta" and interval > 0:
                        stream.current.text += chunk_text(item.payload)
                        stream.changed.notify()
                    elif item.type == "message.completed":
                        stream.posted.set()  # the outbox posts it: the typing indicator has done its job
                        async with stream.lock:  # waits for an edit in flight; none starts after
                            done, stream.current = stream.current, _Message()
                        if done.message_id is not None and not done.broken:
                            stream.handed[item.seq] = done.message_id
                    stream.position = item.seq
                    stream.moved.notify()
                async with stream.lock:
                    stream.closed = True
                    last = stream.current
                tg.cancel_scope.cancel()
            if (
                last is not None
                and last.message_id is not None
                and not last.broken  # shown with its cursor: drop it
            ):
                parts = source.split(last.text)
                stream.kept = True
                if parts and self._http is not None:
                    await anyio.sleep(max(0.0, stream.quiet_until - anyio.current_time()))
                    with anyio.fail_after(source.config.timeout_s):
                        await source.edit(self._http, target, last.message_id, parts[0])
        except (ChannelSendError, TimeoutError) as exc:
            logger.warning(
                "run %s: the last edit of its placeholder on %s failed (%s)", run_id, source.channel_id, exc
            )
        except Exception:
            logger.exception("run %s: streaming its reply on %s failed; its answer still goes out", run_id,
                             source.channel_id)  # fmt: skip
        finally:
            stream.ended_at = time.time()
            stream.moved.notify()

    async def _edit(
        self, source: ChannelAdapter, target: Target, stream: _RunStream, interval: float
    ) -> None:
        """Post the current message's placeholder, then edit it with its newest text, at most once per
        `interval` (longer when the platform asks)."""
        next_at = 0.0
        while True:
            ticket = stream.changed.ticket()
            message = stream.current
            if message.text == message.shown or message.broken or not message.text.strip():
                await ticket.wait()
                continue
            await anyio.sleep(max(0.0, next_at - anyio.current_time()))
            async with stream.lock:
                message = stream.current
                preview = _preview(source, message.text)
                if stream.closed or message.broken or message.text == message.shown or preview is None:
                    continue
                text = message.text
                if preview == message.sent:  # grown past the first part: the placeholder shows it all
                    message.shown = text
                    continue
                wait = interval
                try:
                    with anyio.fail_after(source.config.timeout_s):
                        await self._show(source, target, stream, message, preview)
                    message.shown, message.sent = text, preview
                except ChannelSendError as exc:
                    if exc.permanent:
                        message.broken = True
                        logger.warning("placeholder on %s refused (%s); the final text is posted anew",
                                       source.channel_id, exc)  # fmt: skip
                    wait = max(interval, exc.retry_after or 0.0)
                    if exc.retry_after:
                        stream.quiet_until = anyio.current_time() + exc.retry_after
                except TimeoutError:
                    pass
                next_at = anyio.current_time() + wait

    async def _show(
        self, source: ChannelAdapter, target: Target, stream: _RunStream, message: _Message, text: str
    ) -> None:
        assert self._http is not None  # bound while streams run
        if message.message_id is None:
            message.message_id = await source.send(self._http, target, text, part=0)
            stream.posted.set()
            if message.message_id is None:
                raise ChannelSendError("the platform answered the placeholder without its id", permanent=True)
        else:
            await source.edit(self._http, target, message.message_id, text)

    async def _typing(self, source: ChannelAdapter, target: Target, stream: _RunStream, every: float) -> None:
        assert self._http is not None  # bound while streams run
        while not stream.posted.is_set():
            wait = every
            try:
                with anyio.fail_after(source.config.timeout_s):
                    await source.typing(self._http, target)
            except ChannelSendError as exc:
                if exc.permanent:
                    logger.warning("typing indicator on %s refused (%s); not shown", source.channel_id, exc)
                    return
                wait = max(every, exc.retry_after or 0.0)
            except TimeoutError:
                pass
            with anyio.move_on_after(wait):
                await stream.posted.wait()
