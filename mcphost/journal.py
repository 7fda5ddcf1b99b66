"""The persistent side of one run: inbound facts, the result rules of PROTOCOL §4, and their effects.

`RunJournal` owns, for one run, everything the host writes because of it: the inbound event log row,
the user transcript row, and each runner result — checked, numbered, and persisted with what it causes
(assistant transcript rows, telemetry and note events, state: `ResultEffects`) in one transaction per
batch; inline artifacts are stored just before their batch. It does not own the run's status or
its lifetime (`orchestrator/`), nor how it ends when no terminal result came (`orchestrator/_end.py`),
nor any SQL (`stores/`). It writes the run's end only where the runner's own terminal result settles
it and the orchestrator agrees (`end_with`): with that result's batch, in its transaction.
Size: past 600 lines because every rule a result is checked against and every row it causes are decided
here together, in the order the batch is persisted; split, each half would need the other's state.

Invariants:
- A result is persisted with a host sequence **before** anything is published about it; a batch's
  results and their effects commit together.
- Host sequences are 1..N without gaps; the runner's own `sequence` only decides drops and warnings.
- After a terminal result (the runner's or one the host synthesized) nothing more is accepted; later
  results are recorded in the event log as `result.ignored` and dropped.
- A run adopted from a host that died (`resume`) continues its stream: host sequences after the last
  stored one, the runner's `sequence` checked against the highest stored one (so a result journaled
  before the death is a duplicate, never stored twice), and a stored terminal result still ends it.
- A run's end written with its last batch (`end_with`, `ended_run`) is the outcome the batch's terminal
  result settles, the move `RunStore.finish` would make of the running run: the batch and the end
  commit together or not at all.
- A batch of a remote run's results deletes the queue rows they came from in its transaction
  (`RawResult.source`, `ResultEffects.consumed`).
- A violation found while checking a batch ends the run: the accepted prefix is persisted and applied,
  the rest is not.
- A message (`message.completed`, `run.completed`'s message) names only artifacts this run owns, the rule
  `artifact.created` applies; checked before it is persisted, so a message naming another run's or
  conversation's artifact is never stored, streamed nor written to the transcript. The runner's own id
  of an inline `artifact.created` becomes the host's id in the transcript.
- An `action.requested` is checked before it is persisted: the run's grant must hold the action (the
  manifest's `platform_api` ∩ the agent's `actions.allow`) and its target must lie in the event's scope
  (`grants.action_out_of_scope`; a `message_id` must be a message of the run's conversation). A refused
  one is never stored, so it makes no approval and no outbound delivery; it gets an audit row
  (`action <name>`, `refused`, `unauthorized`) and the run fails with `unauthorized`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcphost.errors import HostError, NotFoundError, StorageFullError, StorageUnavailableError
from mcphost.grants import MESSAGE_KEY, action_out_of_scope, allows_state, refusal
from mcphost.models import AgentEventEnvelope, Run, RunFailure, RunGrant, RunStatus, new_id
from mcphost.plugins.process import RawResult
from mcphost.protocol import (
    MAX_INLINE_ARTIFACT_BYTES,
    MAX_RESULT_BYTES,
    ActionRequested,
    AgentRunResult,
    ArtifactCreated,
    ArtifactRef,
    ContentElement,
    InteractionRequested,
    InvalidResult,
    MediaContent,
    Message,
    MessageCompleted,
    MessageDelta,
    RunCompleted,
    RunFailed,
    StateUpdated,
    ToolCallCompleted,
    ToolCallStarted,
    UnknownResult,
    classify_result,
    is_json_object,
)
from mcphost.stores import AuditEntry, Stores
from mcphost.stores.engine import LONG_WRITE_BYTES
from mcphost.stores.events import EventKind, event_values
from mcphost.stores.results import ResultEffects, StoredResult
from mcphost.stores.runs import RunEnd
from mcphost.stores.state import state_values
from mcphost.stores.transcript import item_values

logger = logging.getLogger(__name__)

RESUME_PAGE = 1000
_ENDS_WITH_BATCH = (RunStatus.COMPLETED, RunStatus.FAILED)
"""The ends a runner's terminal result settles that may be written with its batch (`end_with`): a
cancelled one keeps why the host cancelled it, which its close adds."""


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a run ended, as the journal saw it."""

    status: RunStatus
    error: RunFailure | None = None
    usage: dict[str, Any] = field(default_factory=dict[str, Any])
    by_runner: bool = False
    """True when the runner's own `run.completed`/`run.failed` ended the run."""

    @classmethod
    def failed(cls, code: str, message: str, **details: Any) -> RunOutcome:
        return cls(RunStatus.FAILED, RunFailure(code=code, message=message, details=details))


def user_item(event: AgentEventEnvelope, run_id: str) -> dict[str, Any] | None:
    """The user transcript row of a message event (`transcript.item_values`), appended as the run
    starts (`RunStore.try_start`, or `admit` starting it at once). Non-message events never become
    user rows: None."""
    if not event.is_user_message or event.input.is_empty() or event.conversation is None:
        return None
    return item_values(
        conversation_id=event.conversation.conversation_id,
        thread_id=event.conversation.thread_id,
        role="user",
        content=event.input.text or "",
        contents=[c.model_dump(mode="json") for c in event.input.contents],
        artifacts=[a.model_dump(mode="json") for a in event.input.attachments],
        event_id=event.event_id,
        run_id=run_id,
        actor_id=event.actor.actor_id if event.actor else None,
    )


class _ViolationError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RunJournal:
    """Checks, persists and applies one run's results. Not shared between runs; not thread-safe."""

    def __init__(
        self,
        stores: Stores,
        *,
        run_id: str,
        grant: RunGrant,
        event: AgentEventEnvelope,
        publish: Callable[[Sequence[StoredResult]], None],
    ) -> None:
        self._stores = stores
        self._run_id = run_id
        self._grant = grant
        self._event = event
        self._publish = publish
        self._next_seq = 1
        self._last_runner_seq = 0
        self._saw_message = False
        self._terminal_written = False
        self._inline_refs: dict[str, ArtifactRef] = {}
        self.questions: list[dict[str, Any]] = []
        """The `interaction.requested` data accepted and not yet taken by the orchestrator (which
        turns each into a parked `interaction` approval and parks the run)."""
        """The host's ref of each inline `artifact.created` of this run, by the runner's artifact id."""
        self._terminal: tuple[int, tuple[str, dict[str, Any]]] | None = None
        self.outcome: RunOutcome | None = None
        self.end_with: Callable[[], Awaitable[bool]] | None = None
        """Asked, once a batch's terminal result settles the run's outcome, whether the run's end may be
        written with that batch (the orchestrator's close begins there); None: never."""
        self.ended_run: Run | None = None
        """The run as it ended with its last batch (`end_with`), when it did: its close writes nothing."""

    @property
    def ended(self) -> bool:
        return self.outcome is not None

    @property
    def saw_message(self) -> bool:
        """The runner produced a message (`message.completed`, or `run.completed` carrying one)."""
        return self._saw_message

    # -- inbound ---------------------------------------------------------------------------------------

    def user_item(self) -> dict[str, Any] | None:
        """The user transcript row of the run's event (`user_item`)."""
        return user_item(self._event, self._run_id)

    @property
    def last_runner_seq(self) -> int:
        """The highest runner `sequence` accepted (0: none)."""
        return self._last_runner_seq

    async def resume(self) -> None:
        """Continue the stream the run's stored results began (the run was adopted from a host that
        died while it ran): numbering, the runner's last `sequence`, whether it produced a message, and
        its outcome when its terminal result was stored."""
        after = 0
        while page := await self._stores.results.list(self._run_id, after=after, limit=RESUME_PAGE):
            for stored in page:
                sequence = stored.payload.get("sequence")
                if isinstance(sequence, int) and not isinstance(sequence, bool):
                    self._last_runner_seq = max(self._last_runner_seq, sequence)
                result = classify_result(stored.payload)
                if isinstance(result, MessageCompleted) or (
                    isinstance(result, RunCompleted)
                    and result.data.message is not None
                    and not result.data.message.is_empty()
                ):
                    self._saw_message = True
                if isinstance(result, RunCompleted | RunFailed) and self.outcome is None:
                    self.outcome = self._outcome_of(result)
                    self._terminal_written = True
            after = page[-1].seq
        self._next_seq = after + 1

    # -- results ---------------------------------------------------------------------------------------

    async def accept(self, batch: Sequence[RawResult]) -> RunOutcome | None:
        """Check, persist and apply a batch of raw results in order. Returns the outcome once ended."""
        accepted: list[AgentRunResult] = []
        notes: list[tuple[str, dict[str, Any]]] = []
        violation: _ViolationError | None = None
        terminal: AgentRunResult | None = None
        inline_ids = set(self._inline_refs)
        for raw in batch:
            if terminal is not None or self.ended:
                notes.append(
                    ("result.ignored", {"reason": "after the run ended", "type": raw.obj.get("type")})
                )
                continue
            try:
                result = self._check(raw, notes)
                if result is not None:
                    await self._check_message_artifacts(result, inline_ids)
                    if isinstance(result, ActionRequested):
                        await self._check_action(result, raw.nbytes)
            except _ViolationError as exc:
                violation = exc
                break
            if result is None:
                continue
            if isinstance(result, ArtifactCreated) and result.data.content_base64 is not None:
                inline_ids.add(result.data.artifact.artifact_id)
            accepted.append(result)
            if isinstance(result, RunCompleted | RunFailed):
                terminal = result
        effects = ResultEffects()
        sources = [raw.source for raw in batch if raw.source is not None]
        if sources:
            effects.consumed = (self._run_id, *sources[-1])
        for kind, payload in notes:
            self._system_event(effects, kind, payload)
        try:
            for result in accepted:
                await self._apply(result, effects)
        except _ViolationError as exc:
            violation = violation or exc
        settled = None if terminal is None or violation is not None else self._outcome_of(terminal)
        end = None if settled is None else await self._end_with_batch(settled)
        if accepted or effects:
            await self._persist(
                accepted, effects, long=sum(raw.nbytes for raw in batch) > LONG_WRITE_BYTES, end=end
            )
        if violation is not None and not self.ended:
            return await self.end(RunOutcome.failed(violation.code, violation.message))
        if settled is not None and not self.ended:
            self.outcome = settled
            self._terminal_written = settled.error is None or settled.error.code != "runner.empty_output"
        return self.outcome

    async def _end_with_batch(self, settled: RunOutcome) -> RunEnd | None:
        """The run's end to write with the batch whose terminal result settles `settled`, when it may be:
        the runner's own end (completed, or failed other than `runner.empty_output`, which the host
        follows with a result of its own) and `end_with` agrees."""
        if self.end_with is None or self.ended or settled.status not in _ENDS_WITH_BATCH:
            return None
        if settled.error is not None and settled.error.code == "runner.empty_output":
            return None
        if not await self.end_with():
            return None
        return RunEnd(settled.status, error=settled.error, usage=settled.usage or None)

    def _check(self, raw: RawResult, notes: list[tuple[str, dict[str, Any]]]) -> AgentRunResult | None:
        if raw.nbytes > MAX_RESULT_BYTES:
            raise _ViolationError(
                "payload_too_large",
                f"a {raw.obj.get('type', 'result')!s} result of {raw.nbytes} bytes exceeds the "
                f"{MAX_RESULT_BYTES}-byte limit; send large content as an artifact",
            )
        checked = classify_result(raw.obj)
        if isinstance(checked, InvalidResult):
            if checked.run_id is not None and checked.run_id != self._run_id:
                notes.append(("result.rejected", {"reason": "run_id differs", "run_id": checked.run_id}))
                return None
            raise _ViolationError(
                "invalid_argument", f"invalid {checked.type or 'result'} result: {checked.message}"
            )
        if checked.run_id != self._run_id:
            notes.append(("result.rejected", {"reason": "run_id differs", "run_id": checked.run_id}))
            return None
        if isinstance(checked, UnknownResult):
            notes.append(("result.ignored", {"reason": "unknown result type", "type": checked.type}))
            return None
        seq = checked.sequence
        if seq is not None:
            if seq <= self._last_runner_seq:
                notes.append(("result.duplicate", {"sequence": seq, "type": checked.type}))
                return None
            if seq > self._last_runner_seq + 1:
                notes.append(("result.sequence_gap", {"expected": self._last_runner_seq + 1, "got": seq}))
            self._last_runner_seq = seq
        return checked

    async def _check_message_artifacts(self, result: AgentRunResult, inline_ids: set[str]) -> None:
        """A message may only carry artifacts this run owns: the rule `artifact.created` applies.

        Checked before the result is persisted, so a message naming another run's or conversation's
        artifact is neither stored, streamed nor written to the transcript; the run fails. The runner's
        own id of an inline `artifact.created` of this run (earlier in it, or earlier in the batch) is
        accepted and becomes the host's artifact id in the transcript.
        """
        message = result.data.message if isinstance(result, MessageCompleted | RunCompleted) else None
        if message is None:
            return
        ids = [ref.artifact_id for ref in message.artifacts]
        ids += [c.artifact_id for c in message.contents or [] if isinstance(c, MediaContent)]
        for artifact_id in dict.fromkeys(ids):
            if artifact_id in inline_ids:
                continue
            try:
                record = await self._stores.artifacts.get(artifact_id)
            except NotFoundError:
                raise _ViolationError(
                    "invalid_argument",
                    f"{result.type} names artifact {artifact_id!r}, which does not exist; "
                    "create it with artifacts_create or artifact.created first",
                ) from None
            if record.owner_run_id != self._run_id:
                raise _ViolationError(
                    "unauthorized",
                    f"{result.type}: artifact {artifact_id!r} is not owned by run {self._run_id!r}",
                )

    async def _check_action(self, result: ActionRequested, nbytes: int) -> None:
        """An action the grant does not hold, or whose target lies outside the event's scope, is refused
        before it is stored (no approval, no delivery), audited, and fails the run with `unauthorized`."""
        data = result.data
        why: str | None = None
        if data.action not in self._grant.actions:
            why, _ = refusal(
                self._grant, f"action:{data.action}", f"ask for the action {data.action[:100]!r}"
            )
        else:
            outside = action_out_of_scope(self._grant, data.target)
            if outside is None and is_json_object(data.target) and MESSAGE_KEY in data.target:
                message_id = data.target[MESSAGE_KEY]
                conversation_id = self._grant.conversation_id
                assert isinstance(message_id, str)
                assert conversation_id is not None
                if not await self._stores.transcript.holds_message(conversation_id, message_id):
                    outside = (
                        f"its target's message_id {message_id[:100]!r} is not a message of the run's "
                        f"conversation {conversation_id!r}"
                    )
            if outside is not None:
                why = (
                    f"This run may not ask for the action {data.action[:100]!r} here: {outside} (event "
                    "layer). Actions act only within the event's conversation, actor, bot and workspace."
                )
        if why is None:
            return
        canonical = json.dumps(data.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        entry = AuditEntry(
            run_id=self._run_id,
            tool="".join(c if c.isprintable() else "?" for c in f"action {data.action}")[:200],
            args_digest=hashlib.sha256(canonical.encode()).hexdigest(),
            bytes_in=nbytes,
            bytes_out=0,
            outcome="refused",
            code="unauthorized",
            duration_ms=0.0,
            started_at=time.time(),
        )
        await self._stores.audit.append(entry)
        raise _ViolationError("unauthorized", f"action.requested: {why}")

    async def _persist(
        self,
        results: Sequence[AgentRunResult],
        effects: ResultEffects,
        *,
        long: bool = False,
        end: RunEnd | None = None,
    ) -> None:
        """One transaction: the results and what they cause (and with `end`, the run's end); then publish
        them (persist first). A `long` batch (past `engine.LONG_WRITE_BYTES`; a batch holds up to 512
        results of up to 1 MiB) is written off the event loop (`Database.run_write`)."""
        items = [(r.type, r.model_dump(mode="json", exclude_none=True)) for r in results]
        if end is None:
            stored = await self._stores.results.append_many(
                self._run_id, items, first_seq=self._next_seq, effects=effects, long=long
            )
        else:
            try:
                stored, self.ended_run = await self._stores.results.append_ending(
                    self._run_id, items, first_seq=self._next_seq, end=end, effects=effects, long=long
                )
            except (StorageUnavailableError, StorageFullError) as exc:
                # The batch alone, its end left to the close (which retries it with back-off): a write
                # that fails for the end's sake must not cost the run its results and real outcome.
                logger.warning("run %s: its end could not go with its last results: %s", self._run_id, exc)
                stored = await self._stores.results.append_many(
                    self._run_id, items, first_seq=self._next_seq, effects=effects, long=long
                )
        self._next_seq += len(items)
        if stored:
            self._publish(stored)

    async def _apply(self, result: AgentRunResult, effects: ResultEffects) -> None:
        """Add what `result` causes to `effects` (written with the batch); artifacts are stored here."""
        match result:
            case MessageDelta():
                pass
            case MessageCompleted():
                self._saw_message = True
                self._assistant_row(effects, result.data.message)
            case ToolCallStarted() | ToolCallCompleted() | ActionRequested():
                self._telemetry(effects, result)
            case InteractionRequested():
                self._log_event(effects, result.type, "telemetry", result.data.model_dump(mode="json"))
                self.questions.append(result.data.model_dump(mode="json"))
            case ArtifactCreated():
                await self._register_artifact(effects, result)
            case StateUpdated():
                self._update_state(effects, result)
            case RunCompleted():
                message = result.data.message
                if message is not None and not message.is_empty() and not self._saw_message:
                    self._saw_message = True
                    self._assistant_row(effects, message)
            case RunFailed():
                pass

    def _assistant_row(self, effects: ResultEffects, message: Message) -> None:
        conv = self._event.conversation
        if conv is None or message.is_empty():
            return
        effects.transcript.append(
            item_values(
                conversation_id=conv.conversation_id,
                thread_id=conv.thread_id,
                role=message.role,
                content=message.content or "",
                contents=[self._host_content(c).model_dump(mode="json") for c in message.contents or []],
                artifacts=[
                    self._inline_refs.get(a.artifact_id, a).model_dump(mode="json") for a in message.artifacts
                ],
                event_id=None,
                run_id=self._run_id,
                actor_id=None,
            )
        )

    def _host_content(self, content: ContentElement) -> ContentElement:
        if isinstance(content, MediaContent) and content.artifact_id in self._inline_refs:
            return content.model_copy(
                update={"artifact_id": self._inline_refs[content.artifact_id].artifact_id}
            )
        return content

    def _telemetry(
        self, effects: ResultEffects, result: ToolCallStarted | ToolCallCompleted | ActionRequested
    ) -> None:
        kind: EventKind = "action" if isinstance(result, ActionRequested) else "telemetry"
        self._log_event(effects, result.type, kind, result.data.model_dump(mode="json"))

    async def _register_artifact(self, effects: ResultEffects, result: ArtifactCreated) -> None:
        ref = result.data.artifact
        inline = result.data.content_base64
        if inline is None:
            try:
                record = await self._stores.artifacts.get(ref.artifact_id)
            except NotFoundError:
                raise _ViolationError(
                    "invalid_argument",
                    f"artifact.created names artifact {ref.artifact_id!r}, which does not exist; "
                    "create it with artifacts_create or send content_base64",
                ) from None
            if record.owner_run_id != self._run_id:
                raise _ViolationError(
                    "unauthorized", f"artifact {ref.artifact_id!r} is not owned by run {self._run_id!r}"
                )
            return
        try:
            data = base64.b64decode(inline, validate=True)
        except (binascii.Error, ValueError):
            raise _ViolationError(
                "invalid_argument", "artifact.created: content_base64 is not valid base64"
            ) from None
        if len(data) > MAX_INLINE_ARTIFACT_BYTES:
            raise _ViolationError(
                "payload_too_large",
                f"artifact.created: inline content of {len(data)} bytes exceeds {MAX_INLINE_ARTIFACT_BYTES}",
            )
        digest = hashlib.sha256(data).hexdigest()
        if ref.sha256 is not None and ref.sha256 != digest:
            raise _ViolationError(
                "invalid_argument",
                f"artifact.created: sha256 {ref.sha256} does not match the content ({digest})",
            )
        if ref.size is not None and ref.size != len(data):
            raise _ViolationError(
                "invalid_argument",
                f"artifact.created: size {ref.size} does not match the content ({len(data)})",
            )
        record = await self._stores.artifacts.put_bytes(
            data,
            name=ref.name or ref.artifact_id,
            mime_type=ref.mime_type,
            owner_run_id=self._run_id,
            conversation_id=self._grant.conversation_id,
            max_bytes=MAX_INLINE_ARTIFACT_BYTES,
        )
        self._inline_refs[ref.artifact_id] = record.to_ref()
        self._log_event(
            effects,
            "artifact.created",
            "telemetry",
            {"runner_artifact_id": ref.artifact_id, "artifact": record.to_ref().model_dump(mode="json")},
        )

    def _update_state(self, effects: ResultEffects, result: StateUpdated) -> None:
        data = result.data
        if not allows_state(self._grant, data.scope, write=True):
            message, _ = refusal(self._grant, f"state:{data.scope}:write", f"write {data.scope!r} state")
            raise _ViolationError("unauthorized", f"state.updated: {message}")
        owner = self._grant.state_scope_id(data.scope)
        if owner is None:
            raise _ViolationError(
                "invalid_argument",
                f"state.updated: the event has no {data.scope!r} id, so that scope is unavailable",
            )
        try:
            _, values = state_values(data.scope, owner, data.key, data.value)
        except HostError as exc:
            raise _ViolationError(exc.code, f"state.updated: {exc.message}") from None
        effects.state.append(values)

    # -- ending ----------------------------------------------------------------------------------------

    def _outcome_of(self, terminal: AgentRunResult) -> RunOutcome:
        if isinstance(terminal, RunFailed):
            d = terminal.data
            status = RunStatus.CANCELLED if d.code == "cancelled" else RunStatus.FAILED
            error = RunFailure(
                code=d.code, message=d.message, details=dict(d.details) | {"retryable": d.retryable}
            )
            return RunOutcome(status, error, by_runner=True)
        assert isinstance(terminal, RunCompleted)
        usage = terminal.data.usage.model_dump(exclude_none=True)
        if not self._saw_message:
            return RunOutcome(
                RunStatus.FAILED,
                RunFailure(
                    code="runner.empty_output", message="The runner completed without producing any message."
                ),
                usage=usage,
                by_runner=True,
            )
        return RunOutcome(RunStatus.COMPLETED, usage=usage, by_runner=True)

    async def end(self, outcome: RunOutcome) -> RunOutcome:
        """Settle the run's outcome and make sure the stream ends in a terminal result that says it.

        Safe to repeat after a failure: the terminal result is built once and stored idempotently.
        The first outcome wins: once the runner's own terminal result was accepted, a later host
        decision (deadline, cancel) does not overwrite it. A runner's `run.completed` that became
        `runner.empty_output` is followed by the host's `run.failed`, so stream readers see why.
        """
        if self.outcome is None:
            self.outcome = outcome
        if not self._terminal_written:
            await self._write_terminal(self.outcome)
        return self.outcome

    async def _write_terminal(self, outcome: RunOutcome) -> None:
        if self._terminal is None:
            # Built once: a repeat after a failed write stores the very same result (idempotent).
            self._terminal = (self._next_seq, self._terminal_result(outcome))
        seq, (terminal_type, payload) = self._terminal
        stored = await self._stores.results.append_many(
            self._run_id, [(terminal_type, payload)], first_seq=seq
        )
        self._next_seq = seq + 1
        self._terminal_written = True
        self._publish(stored)

    def _terminal_result(self, outcome: RunOutcome) -> tuple[str, dict[str, Any]]:
        if outcome.status is RunStatus.COMPLETED:
            terminal_type = "run.completed"
            data: dict[str, Any] = {"finish_reason": "stop", "usage": outcome.usage}
        else:
            terminal_type = "run.failed"
            err = outcome.error or RunFailure(code="cancelled", message="The run was cancelled.")
            data = {"code": err.code, "message": err.message, "retryable": False, "details": err.details}
        payload = {
            "type": terminal_type,
            "run_id": self._run_id,
            "timestamp": time.time(),
            "metadata": {"origin": "host"},
            "data": data,
        }
        return terminal_type, payload

    # -- event log -------------------------------------------------------------------------------------

    def _system_event(self, effects: ResultEffects, event_type: str, payload: dict[str, Any]) -> None:
        logger.warning("run %s: %s %s", self._run_id, event_type, payload)
        kind: EventKind = "ignored" if event_type == "result.ignored" else "system"
        self._log_event(effects, event_type, kind, payload)

    def _log_event(
        self, effects: ResultEffects, event_type: str, kind: EventKind, payload: dict[str, Any]
    ) -> None:
        conv = self._event.conversation
        effects.events.append(
            event_values(
                event_id=new_id("evt"),
                event_type=event_type,
                kind=kind,
                conversation_id=conv.conversation_id if conv else None,
                thread_id=conv.thread_id if conv else None,
                run_id=self._run_id,
                actor_id=None,
                source="system",
                payload=payload,
            )
        )
