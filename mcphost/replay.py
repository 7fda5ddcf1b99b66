"""Replaying a recorded run against a runner and comparing what it did with what was recorded.

Owns the scratch host a replay runs in (`replay_document`), the comparison of the two runs
(`compare`), and the report (`ReplayReport`). Does not own the recording format or the recorded answers
(`recording.py`), nor how the facts server serves them (`facts/`, `ReplayAnswers`).

Invariants:
- Writes go nowhere real: the replay runs in a host of its own on a scratch SQLite database in a
  temporary folder (removed afterwards), with no upstream tool servers, knowledge bases, schedules,
  hooks, webhooks or retention; its MCP endpoint answers every call from the recording (unrecorded ones
  with a tool error), so nothing reaches the recorded run's database, conversation, state or transcript.
- What runs comes from the local config only (a recording is untrusted input, `recording.py`): the
  agent of `--config` with the recorded id when there is one, else the recorded entry as data (no
  runner config, and the local `run_timeout_s`, not a recorded `timeout_s`) on its recorded runner, which must be one the config's plugins serve (else
  `RunnerNotFoundError` naming the configured runners); `--runner` replaces the runner. The runner
  gets the recorded context with the replay's run id, runner config, MCP access, model endpoints,
  deadline and trace context (`ReplayBook.context`).
- Model calls are answered from the recording too (`ReplayBook.model_answer`, by the hash of their
  canonical request): no model upstream is called; an unrecorded one is refused and reported with the
  request fields that changed.
- The comparison covers the tool-call sequence (`tools/list` left out), the model-call sequence (by
  endpoint and request hash), the final messages, the state
  writes (but the harness runners' `external.session_id` / `external.working_directory`, new each
  run), the artifacts and the final status; each is aligned as a sequence (difflib), so one changed
  call is one difference, not a shift of everything after it. No differences and no unrecorded call
  means the replay did not diverge.
"""

from __future__ import annotations

import difflib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from mcphost.app import open_host, preload_for
from mcphost.common.validation import describe
from mcphost.config import RetentionSettings, Settings
from mcphost.errors import InvalidArgumentError, RunnerNotFoundError
from mcphost.models import AgentConfig, AgentEventEnvelope, EventOptions
from mcphost.protocol import JSONObject, JSONValue, is_json_object
from mcphost.recording import TOOLS_LIST, RecordingDocument, ReplayBook, call_key, is_model_call
from mcphost.serving import serve_locally
from mcphost.stores.retention import SESSION_STATE_KEYS

Change = Literal["changed", "added", "missing"]
Aspect = Literal["tool_call", "model_call", "message", "state_write", "artifact", "status"]


class ReplayReport(BaseModel):
    """What `mcphost replay` prints (`--json`: exactly this document)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    replay_run_id: str
    runner_id: str
    recorded_status: str
    status: str
    diverged: bool
    differences: list[JSONObject]
    """Each `{aspect, change, index, recorded, replayed}`; `index` counts within the aspect, in the
    recorded run for `changed` and `missing`, in the replay for `added`."""
    unrecorded_calls: list[JSONObject]
    """Calls the replay answered with an error because the recording had no answer for them: MCP calls
    `{tool, arguments}`, model calls `{model_call, model, sha256, changed}` (`changed`: the request
    fields that differ from the recorded model call at the same place, e.g. `system`, `tools`)."""


@dataclass(frozen=True)
class _Item:
    key: str
    shown: JSONValue


async def replay_document(
    document: RecordingDocument, base: Settings, *, runner_id: str | None = None
) -> ReplayReport:
    """Run the recorded event again on a scratch host and compare the result with the recording.

    Raises:
        HostError: the runner is not registered (`RunnerNotFoundError`), the agent's config does not
            fit it, or the scratch host cannot start.
    """
    agent, runner, named_by = _replay_agent(document, base, runner_id)
    book = ReplayBook(document)
    event = _replayable(document.event(), agent)
    with tempfile.TemporaryDirectory(prefix="mcphost-replay-") as scratch:
        settings = _scratch_settings(base, agent, Path(scratch))
        async with open_host(settings, replay=book) as host, serve_locally(host):
            try:
                host.registry.get(runner)
            except RunnerNotFoundError:
                known = sorted(r.runner_id for r in host.registry.runners())
                raise RunnerNotFoundError(
                    f"Cannot replay run {document.run_id!r}: runner {runner!r} ({named_by}) is not one "
                    f"this config runs; configured runners: {', '.join(known) or 'none'}. Name one with "
                    f"--runner RUNNER_ID, or configure agent {document.agent_id!r} in {base.source} "
                    "([[agents]], [[plugins]]).",
                    details={"runner_id": runner, "known_runners": known},
                ) from None
            admission = await host.orchestrator.submit(event)
            await preload_for(host, admission.run)
            replay_run_id = admission.run.run_id
            results: list[JSONObject] = []
            async for item in host.orchestrator.results(replay_run_id):
                results.append({"type": item.type, **item.payload})
            run = await host.orchestrator.wait(replay_run_id)
    recorded = [{"type": r.type, **r.payload} for r in document.results]
    recorded_calls = [
        _Item(call_key(c.tool, c.arguments), {"tool": c.tool, "arguments": c.arguments})
        for c in document.calls
        if c.tool != TOOLS_LIST and not is_model_call(c.tool)
    ]
    replayed_calls = [
        _Item(call_key(c.tool, c.arguments), {"tool": c.tool, "arguments": c.arguments}) for c in book.calls
    ]
    recorded_models = [(c.tool, c.arguments) for c in document.calls if is_model_call(c.tool)]
    replayed_models = [(c.endpoint, c.arguments) for c in book.model_calls]
    differences = compare(recorded_calls, replayed_calls, recorded, results)
    differences += _diff("model_call", _model_items(recorded_models), _model_items(replayed_models))
    if document.status != run.status.value:
        differences.append(
            {
                "aspect": "status",
                "change": "changed",
                "index": 0,
                "recorded": document.status,
                "replayed": run.status.value,
            }
        )
    unrecorded: list[JSONObject] = [
        {"tool": c.tool, "arguments": c.arguments} for c in book.calls if c.recorded_seq is None
    ]
    for i, c in enumerate(book.model_calls):
        if c.recorded_seq is None:
            was = recorded_models[i][1] if i < len(recorded_models) else None
            unrecorded.append(
                {
                    "model_call": c.endpoint,
                    "model": c.arguments.get("model"),
                    "sha256": c.arguments.get("sha256"),
                    "changed": changed_fields(was, c.arguments),
                }
            )
    return ReplayReport(
        run_id=document.run_id,
        replay_run_id=replay_run_id,
        runner_id=runner,
        recorded_status=document.status,
        status=run.status.value,
        diverged=bool(differences or unrecorded),
        differences=differences,
        unrecorded_calls=unrecorded,
    )


def _replay_agent(
    document: RecordingDocument, base: Settings, runner_id: str | None
) -> tuple[AgentConfig, str, str]:
    """The agent entry a replay runs, its runner, and what named that runner (for messages).

    The entry of the local config with the recorded id, whole; else the recorded entry, which is data
    only (its runner config is empty, `RecordingDocument.check`) and whose runner must be one the local
    config runs. `--runner` replaces the runner either way."""
    configured = next((a for a in base.agents if a.id == document.agent_id), None)
    if configured is not None:
        agent, runner, named_by = configured, configured.runner, f"agent {configured.id!r} of {base.source}"
    else:
        agent, runner, named_by = document.agent_config(), document.runner_id, "named by the recording"
    if runner_id is not None:
        runner, named_by = runner_id, "--runner"
    update: dict[str, object] = {"runner": runner, "record": False}
    if configured is None:  # data only: no runner config, and the local config's run deadline
        update |= {"config": {}, "timeout_s": None}
    try:  # validated again: a malformed runner id is refused here, worded
        agent = AgentConfig.model_validate({**agent.model_dump(), **update})
    except ValidationError as exc:
        raise InvalidArgumentError(
            f"Cannot replay with runner {runner!r} ({named_by}): {describe(exc, root='runner')}"
        ) from None
    return agent, runner, named_by


def _replayable(event: AgentEventEnvelope, agent: AgentConfig) -> AgentEventEnvelope:
    """The recorded event as the scratch host admits it: for the replay's agent, not recorded, and
    without artifact references (the scratch database holds no artifacts; the runner sees them in the
    recorded context and reads them through the recording)."""
    contents = [c for c in event.input.contents if c.type == "text"]
    return event.model_copy(
        update={
            "agent_id": agent.id,
            "options": EventOptions(record=False),
            "raw_ref": None,
            "input": event.input.model_copy(update={"attachments": [], "contents": contents}),
        }
    )


def _scratch_settings(base: Settings, agent: AgentConfig, folder: Path) -> Settings:
    host = base.host.model_copy(
        update={
            "database_url": f"sqlite+aiosqlite:///{(folder / 'replay.db').as_posix()}",
            "data_dir": folder,
            "blob_backend": "disk",
            "public_url": None,
            "api_key": None,
        }
    )
    return base.model_copy(
        update={
            "host": host,
            "agents": [agent],
            "tools": {},
            "knowledge": {},
            "schedules": [],
            "hooks": {},
            "webhooks": [],
            "api_keys": [],  # a scratch host on loopback: like api_key, no key (nor its variable) needed
            "retention": RetentionSettings(),
        }
    )


def compare(
    recorded_calls: list[_Item],
    replayed_calls: list[_Item],
    recorded: list[JSONObject],
    replayed: list[JSONObject],
) -> list[JSONObject]:
    """Every difference between the recorded run and its replay, aspect by aspect."""
    differences: list[JSONObject] = []
    differences += _diff("tool_call", recorded_calls, replayed_calls)
    differences += _diff("message", _messages(recorded), _messages(replayed))
    differences += _diff("state_write", _state_writes(recorded), _state_writes(replayed))
    differences += _diff("artifact", _artifacts(recorded), _artifacts(replayed))
    return differences


def _model_items(calls: list[tuple[str, JSONObject]]) -> list[_Item]:
    """Model calls by endpoint and canonical-request hash, shown without their (long) request."""
    return [
        _Item(
            f"{endpoint} {arguments.get('sha256')}",
            {"model_call": endpoint, "model": arguments.get("model"), "sha256": arguments.get("sha256")},
        )
        for endpoint, arguments in calls
    ]


def changed_fields(recorded: JSONObject | None, replayed: JSONObject) -> list[JSONValue]:
    """The top-level request fields in which a replayed model call differs from a recorded one (all of
    the replayed request's fields when there is none to compare with)."""
    now = replayed.get("request")
    now = now if is_json_object(now) else {}
    was = recorded.get("request") if recorded is not None else None
    if not is_json_object(was):
        return sorted(now)
    return sorted(k for k in set(was) | set(now) if _item(was.get(k)).key != _item(now.get(k)).key)


def _diff(aspect: Aspect, recorded: list[_Item], replayed: list[_Item]) -> list[JSONObject]:
    matcher = difflib.SequenceMatcher(
        a=[i.key for i in recorded], b=[i.key for i in replayed], autojunk=False
    )
    out: list[JSONObject] = []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pairs = min(a1 - a0, b1 - b0)
        for k in range(pairs):
            out.append(_difference(aspect, "changed", a0 + k, recorded[a0 + k].shown, replayed[b0 + k].shown))
        for k in range(a0 + pairs, a1):
            out.append(_difference(aspect, "missing", k, recorded[k].shown, None))
        for k in range(b0 + pairs, b1):
            out.append(_difference(aspect, "added", k, None, replayed[k].shown))
    return out


def _difference(
    aspect: Aspect, change: Change, index: int, recorded: JSONValue, replayed: JSONValue
) -> JSONObject:
    return {"aspect": aspect, "change": change, "index": index, "recorded": recorded, "replayed": replayed}


def _item(value: JSONValue) -> _Item:
    return _Item(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False), value)


def _data(result: JSONObject) -> JSONObject:
    data = result.get("data")
    return data if is_json_object(data) else {}


def _messages(results: list[JSONObject]) -> list[_Item]:
    """The final messages: each `message.completed`, and a `run.completed` that carries one."""
    found: list[_Item] = []
    for result in results:
        if result.get("type") in ("message.completed", "run.completed"):
            message = _data(result).get("message")
            if is_json_object(message):
                shown: JSONObject = {
                    "role": message.get("role", "assistant"),
                    "content": message.get("content"),
                }
                if message.get("contents"):
                    shown["contents"] = message.get("contents")
                found.append(_item(shown))
    return found


def _state_writes(results: list[JSONObject]) -> list[_Item]:
    """State writes, but the harness runners' session bookkeeping (a new CLI session and run folder
    each run, by design)."""
    found: list[_Item] = []
    for result in results:
        if result.get("type") == "state.updated":
            data = _data(result)
            if data.get("key") in SESSION_STATE_KEYS:
                continue
            found.append(
                _item({"scope": data.get("scope"), "key": data.get("key"), "value": data.get("value")})
            )
    return found


def _artifacts(results: list[JSONObject]) -> list[_Item]:
    """Artifacts by name, type and size (their ids differ from run to run)."""
    found: list[_Item] = []
    for result in results:
        if result.get("type") == "artifact.created":
            artifact = _data(result).get("artifact")
            if is_json_object(artifact):
                found.append(
                    _item(
                        {
                            "name": artifact.get("name"),
                            "mime_type": artifact.get("mime_type"),
                            "size": artifact.get("size"),
                        }
                    )
                )
    return found


def render(report: ReplayReport) -> str:
    """The report for a person: one line per difference."""
    lines = [
        f"replay of {report.run_id} as {report.replay_run_id} on {report.runner_id}: "
        + ("DIVERGED" if report.diverged else "no divergence")
        + f" (status {report.recorded_status} -> {report.status})"
    ]
    for d in report.differences:
        where = f"{d['aspect']} #{d['index']}"
        if d["change"] == "changed":
            lines.append(
                f"  ~ {where}\n      recorded: {_shown(d['recorded'])}\n      replayed: {_shown(d['replayed'])}"
            )
        elif d["change"] == "missing":
            lines.append(f"  - {where} (not in the replay): {_shown(d['recorded'])}")
        else:
            lines.append(f"  + {where} (not recorded): {_shown(d['replayed'])}")
    for call in report.unrecorded_calls:
        lines.append(f"  ! unrecorded call answered with an error: {_shown(call)}")
    return "\n".join(lines)


def _shown(value: JSONValue, width: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= width else text[: width - 1] + "…"
