"""Park and resume with the real Claude Code and Codex CLIs against the fake model APIs: a harness run's
call marked `ask` answers `approval_pending` and the run ends `parked` (its token refused); approving,
denying or letting the approval expire starts exactly one continuation run that resumes the same CLI
session with the decision as its input, and an approved call runs exactly once there."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mcphost.app import Host
from mcphost.ingress import continuation_event_id
from mcphost.stores.approvals import ApprovalRecord
from tests.e2e.harness.hostkit import (
    Finished,
    claude_agent,
    codex_agent,
    finished,
    harness_host,
    message,
    unique,
)
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.openai import fake_openai
from tests.fakes.script import ModelRequest, Reply, Text, ToolCall

pytestmark = pytest.mark.slow

SAVE = ToolCall("mcp__mcphost__state_set", {"scope": "conversation", "key": "color", "value": "green"})
FIRST_TEXT = "Remember that I like green."


def parking_script(request: ModelRequest) -> Reply:
    """Save the color; once a turn says the call was approved, save it again and report; once a turn
    says it did nothing (denied, expired), give up."""
    if not request.is_agent_turn:
        return Text("mcphost fake title")
    approved = "A person approved" in request.user_text
    if "did nothing" in request.user_text and not approved:
        return Text("Understood: nothing saved.")
    if not request.tool_results:
        return SAVE
    if approved:
        return Text(f"Saved after approval: {request.tool_results[-1]}")
    return Text("Waiting for a person's decision.")


@dataclass(frozen=True)
class Harness:
    name: str
    fake: Callable[..., AbstractAsyncContextManager[Any]]
    agent: Callable[..., dict[str, Any]]


HARNESSES = [
    Harness("claude", fake_anthropic, claude_agent),
    Harness("codex", fake_openai, codex_agent),
]


@dataclass
class Parked:
    host: Host
    client: httpx2.AsyncClient
    fake: Any
    run: Finished
    approval: ApprovalRecord
    conversation: str


@asynccontextmanager
async def parked_run(tmp_path: Path, harness: Harness, **host: Any) -> AsyncGenerator[Parked]:
    """A host whose agent marks `state_set` `ask`, and a run of it that parked on that call."""
    async with harness.fake(parking_script) as fake:
        agent = harness.agent(harness.name, fake.base_url, tmp_path / "harness", timeout_s=120)
        agent["approvals"] = {"state_set": "ask"}
        async with (
            harness_host(tmp_path, [agent], host=host) as opened,
            httpx2.AsyncClient(base_url=opened.orchestrator.public_url, timeout=60) as client,
        ):
            conversation = unique("conv")
            admission = await opened.orchestrator.submit(message(harness.name, conversation, FIRST_TEXT))
            run_id = admission.run.run_id
            ctx = await opened.orchestrator.context(run_id)  # started in its admission: token at hand
            assert ctx is not None
            assert ctx.context.mcp is not None
            mcp = ctx.context.mcp
            run = await finished(opened, run_id, timeout=120)
            assert run.run.status.value == "parked", run.results
            assert run.terminal["type"] == "run.failed"
            assert run.terminal["data"]["code"] == "parked"
            assert run.session_id is not None

            # The call was answered approval_pending and did nothing; its approval waits, parked.
            assert [(a.tool, a.code) for a in run.audit] == [("state_set", "approval_pending")]
            (approval,) = (await opened.stores.approvals.list(run_id=run_id)).items
            assert (approval.kind, approval.parked) == ("tool", True)
            assert approval.request == {"tool": "state_set", "arguments": SAVE.arguments}
            assert run.terminal["data"]["details"] == {"approval_id": approval.approval_id}
            assert await color_of(opened, run_id) is None

            # The parked run's token is refused like an ended run's.
            refused = await client.post(
                mcp.url,
                headers={**mcp.headers, "Accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            )
            assert refused.status_code == 401, refused.text
            yield Parked(opened, client, fake, run, approval, conversation)


async def color_of(host: Host, run_id: str) -> Any:
    """The conversation state's `color` as the run sees it (None when unset)."""
    owner = (await host.stores.runs.grant(run_id)).grant.state_scope_id("conversation")
    assert owner is not None
    entry = await host.stores.state.get("conversation", owner, "color")
    return None if entry is None else entry.value


async def continuation_of(parked: Parked, approval_id: str) -> Finished:
    """The one continuation run of `approval_id`, once it ended."""
    with anyio.fail_after(120):
        while (record := await parked.host.stores.approvals.get(approval_id)).continuation_run_id is None:  # noqa: ASYNC110  (another task records it; bounded poll)
            await anyio.sleep(0.2)
    assert record.continuation_run_id is not None
    return await finished(parked.host, record.continuation_run_id, timeout=120)


def assert_resumed(parked: Parked, continuation: Finished, requests_before: int) -> None:
    """The continuation is the same conversation's next run and resumed the parked run's CLI session."""
    assert continuation.run.event_id == continuation_event_id(parked.approval.approval_id)
    assert continuation.run.conversation_id == parked.conversation
    assert continuation.session_id == parked.run.session_id
    resumed = parked.fake.requests[requests_before]
    assert FIRST_TEXT in json.dumps(resumed.body)  # the model sees the parked run's turn


@pytest.mark.parametrize("harness", HARNESSES, ids=lambda h: h.name)
async def test_an_approved_parked_call_continues_the_session_and_runs_exactly_once(
    tmp_path: Path, harness: Harness
) -> None:
    async with parked_run(tmp_path, harness) as parked:
        host, approval_id = parked.host, parked.approval.approval_id
        before = len(parked.fake.requests)
        decided = await parked.client.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        continuation_run_id = decided.json()["continuation_run_id"]
        assert continuation_run_id is not None
        continuation = await continuation_of(parked, approval_id)
        assert continuation.run.run_id == continuation_run_id
        assert continuation.run.status.value == "completed", json.dumps(continuation.results)
        assert_resumed(parked, continuation, before)
        assert "A person approved" in parked.fake.requests[before].user_text
        assert continuation.answer.startswith("Saved after approval:")

        # The approved call ran once, in the continuation, without asking again.
        assert [(a.tool, a.outcome) for a in continuation.audit] == [("state_set", "ok")]
        used = await host.stores.approvals.get(approval_id)
        assert used.used_by_run_id == continuation_run_id
        assert len((await host.stores.approvals.list(run_id=continuation_run_id)).items) == 0
        assert await color_of(host, continuation_run_id) == "green"

        # Exactly one continuation: deciding again and the sweep start nothing new.
        again = await parked.client.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert again.json()["continuation_run_id"] == continuation_run_id
        assert await host.continuations.sweep() == []
        runs = await host.stores.runs.list(conversation_id=parked.conversation, limit=10)
        assert sorted(r.run_id for r in runs.items) == sorted([parked.run.run.run_id, continuation_run_id])


@pytest.mark.parametrize("harness", HARNESSES, ids=lambda h: h.name)
async def test_a_denied_parked_call_continues_the_session_without_running(
    tmp_path: Path, harness: Harness
) -> None:
    async with parked_run(tmp_path, harness) as parked:
        approval_id = parked.approval.approval_id
        before = len(parked.fake.requests)
        note = {"decision": "deny", "note": "not today"}
        decided = await parked.client.post(f"/v1/approvals/{approval_id}", json=note)
        assert decided.status_code == 200, decided.text
        continuation = await continuation_of(parked, approval_id)
        assert continuation.run.status.value == "completed", json.dumps(continuation.results)
        assert_resumed(parked, continuation, before)
        told = parked.fake.requests[before].user_text
        assert "was denied" in told
        assert "not today" in told
        assert continuation.answer == "Understood: nothing saved."
        assert continuation.audit == []
        assert await color_of(parked.host, continuation.run.run_id) is None
        assert (await parked.host.stores.approvals.get(approval_id)).used_by_run_id is None
        continued = continuation.run
        assert (await parked.host.stores.events.get(continued.event_id)).payload["data"]["continuation"][
            "status"
        ] == "denied"


async def test_an_expired_parked_approval_continues_as_denied(tmp_path: Path) -> None:
    async with parked_run(tmp_path, HARNESSES[0], approval_expiry_s=3) as parked:
        approval_id = parked.approval.approval_id
        before = len(parked.fake.requests)
        continuation = await continuation_of(parked, approval_id)  # nobody decides: the loop continues it
        assert continuation.run.status.value == "completed", json.dumps(continuation.results)
        assert_resumed(parked, continuation, before)
        assert "expired without a decision" in parked.fake.requests[before].user_text
        assert continuation.answer == "Understood: nothing saved."
        assert (await parked.host.stores.approvals.get(approval_id)).status == "expired"
        late = await parked.client.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert late.status_code == 409


QUESTION = {
    "question": "Which color do you like?",
    "header": "Color",
    "options": [
        {"label": "green", "description": "The color of grass"},
        {"label": "blue", "description": "The color of the sky"},
    ],
    "multiSelect": False,
}


def asking_script(request: ModelRequest) -> Reply:
    """Ask the user with Claude Code's AskUserQuestion; once a turn carries the answer, repeat it."""
    if not request.is_agent_turn:
        return Text("mcphost fake title")
    if "The person answered your question" in request.user_text:
        return Text(f"You said: {request.user_text.rsplit(': ', 1)[-1]}")
    if not request.tool_results:
        return ToolCall("AskUserQuestion", {"questions": [QUESTION]})
    return Text("Waiting for your answer.")


async def test_claude_codes_question_to_the_user_parks_the_run_and_the_answer_resumes_it(
    tmp_path: Path,
) -> None:
    async with fake_anthropic(asking_script) as fake:
        agent = claude_agent("claude", fake.base_url, tmp_path / "harness", timeout_s=120)
        async with (
            harness_host(tmp_path, [agent]) as host,
            httpx2.AsyncClient(base_url=host.orchestrator.public_url, timeout=60) as client,
        ):
            conversation = unique("conv")
            admission = await host.orchestrator.submit(message("claude", conversation, FIRST_TEXT))
            parked = await finished(host, admission.run.run_id, timeout=120)
            assert parked.run.status.value == "parked", json.dumps(parked.results)
            (asked,) = parked.data("interaction.requested")
            assert asked["questions"] == [QUESTION]
            (approval,) = (await host.stores.approvals.list(run_id=parked.run.run_id)).items
            assert (approval.kind, approval.parked, approval.status) == ("interaction", True, "pending")
            assert approval.request["questions"] == [QUESTION]

            # An interaction is answered, not approved; the body is validated.
            url = f"/v1/approvals/{approval.approval_id}"
            assert (await client.post(url, json={"decision": "approve"})).status_code == 400
            assert (await client.post(url, json={"decision": "answer"})).status_code == 400
            before = len(fake.requests)
            answered = await client.post(url, json={"decision": "answer", "answer": "blue"})
            assert answered.status_code == 200, answered.text
            assert answered.json()["status"] == "approved"
            continuation = await finished(host, answered.json()["continuation_run_id"], timeout=120)
            assert continuation.run.status.value == "completed", json.dumps(continuation.results)
            assert continuation.session_id == parked.session_id
            resumed = fake.requests[before]
            assert FIRST_TEXT in json.dumps(resumed.body)
            assert continuation.answer == "You said: blue"
