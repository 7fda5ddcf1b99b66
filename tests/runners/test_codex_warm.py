"""A warm Codex turn (`mcphost_runners/_codex_stream.py::AppServerTurn`): the JSON-RPC requests it writes to
`codex app-server`, the server's requests it answers, and the notifications it maps onto the same
results as a cold `codex exec --json` turn. Lines are shaped as the pinned CLI's app-server writes them
(`codex app-server generate-ts`, and the real CLI in `tests/e2e/harness/test_warm_e2e.py`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from mcphost.common.lines import TooLong
from mcphost_runners._codex_stream import AppServerTurn, ThreadSettings, exec_item
from mcphost_runners._harness_stream import Diagnostics, pump_native_stream
from mcphost_runners.sdk import RunOutput
from tests.fakes.harness_support import Collected, harness_context

THREAD = "01a24098-dc68-70b2-8c18-20d2f1516da1"
OTHER_THREAD = "01a24090-0000-7000-8000-000000000000"
TURN = "01a24098-dd00-7000-9000-000000000001"


class Channel:
    """The warm process as the turn sees it: records every line written to its stdin."""

    def __init__(self, session_id: str | None = None, *, broken: bool = False) -> None:
        self.session_id = session_id
        self.sent: list[dict[str, Any]] = []
        self.broken = broken

    async def send(self, line: bytes) -> None:
        if self.broken:
            raise anyio.BrokenResourceError
        assert line.endswith(b"\n")
        assert line.count(b"\n") == 1
        self.sent.append(json.loads(line))

    def methods(self) -> list[str]:
        return [m.get("method", f"answer:{m.get('id')}") for m in self.sent]


class Turn:
    """One `AppServerTurn` with its channel, results and saved sessions."""

    def __init__(
        self, channel: Channel, *, fresh: bool, resume: str | None = None, streaming: bool = True
    ) -> None:
        self.channel = channel
        self.ctx = harness_context("What do I like?", streaming=streaming)
        self.collected = Collected()
        self.diagnostics = Diagnostics()
        self.sessions: list[str] = []
        self.mapper = AppServerTurn(
            self.ctx,
            RunOutput(self.ctx.run_id, self.collected.send),
            self.diagnostics,
            self._saved,
            process=channel,
            settings=ThreadSettings(cwd="/work/run", sandbox="read-only"),
            prompt="What do I like?",
            resume=resume,
            fresh=fresh,
        )
        self.opening = json.loads(self.mapper.opening())

    async def _saved(self, session_id: str) -> None:
        self.sessions.append(session_id)

    def id_of(self, key: str) -> str:
        return f"{self.ctx.run_id}/{key}"

    async def feed(self, *messages: dict[str, Any]) -> None:
        async def lines() -> AsyncIterator[bytes | TooLong]:
            for message in messages:
                yield json.dumps(message).encode()

        await pump_native_stream(lines(), self.mapper, self.diagnostics)

    @property
    def kinds(self) -> list[str]:
        return [str(d["kind"]) for d in self.diagnostics.items]


def answer(request_id: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"id": request_id, "result": result}


def note(method: str, **params: Any) -> dict[str, Any]:
    return {"method": method, "params": params}


def connected(server: str = "mcphost", status: str = "connected") -> dict[str, Any]:
    return {"data": [{"name": server, "runtimeStatus": status, "tools": {}}], "nextCursor": None}


def usage(total_in: int, total_out: int, last_in: int, last_out: int) -> dict[str, Any]:
    def breakdown(i: int, o: int) -> dict[str, int]:
        return {
            "totalTokens": i + o,
            "inputTokens": i,
            "cachedInputTokens": 0,
            "cacheWriteInputTokens": 0,
            "outputTokens": o,
            "reasoningOutputTokens": 0,
        }

    return note(
        "thread/tokenUsage/updated",
        threadId=THREAD,
        turnId=TURN,
        tokenUsage={"total": breakdown(total_in, total_out), "last": breakdown(last_in, last_out)},
    )


def item(phase: str, **fields: Any) -> dict[str, Any]:
    return note(f"item/{phase}", threadId=THREAD, turnId=TURN, item=fields)


def completed(status: str = "completed", error: dict[str, Any] | None = None) -> dict[str, Any]:
    turn: dict[str, Any] = {"id": TURN, "items": [], "status": status, "error": error}
    return note("turn/completed", threadId=THREAD, turn=turn)


TURN_STARTED = answer("", {"turn": {"id": TURN, "items": [], "status": "inProgress", "error": None}})


async def started(turn: Turn) -> None:
    """Bring a turn on a process that holds THREAD to its `turn/start`."""
    await turn.feed(answer(turn.id_of("mcp"), connected()), {**TURN_STARTED, "id": turn.id_of("turn")})


async def test_a_new_process_is_initialized_opens_a_thread_checks_the_server_and_starts_the_turn() -> None:
    channel = Channel()
    turn = Turn(channel, fresh=True)
    assert turn.opening["method"] == "initialize"
    assert turn.opening["params"]["clientInfo"]["name"] == "mcphost"
    assert "item/agentMessage/delta" in turn.opening["params"]["capabilities"]["optOutNotificationMethods"]

    await turn.feed(answer(turn.id_of("initialize"), {"userAgent": "codex", "codexHome": "/h"}))
    assert channel.methods() == ["initialized", "thread/start"]
    assert channel.sent[1]["params"] == {
        "cwd": "/work/run",
        "sandbox": "read-only",
        "approvalPolicy": "never",
    }

    await turn.feed(answer(turn.id_of("thread"), {"thread": {"id": THREAD}}))
    assert channel.session_id == THREAD
    check = channel.sent[2]
    assert (check["method"], check["params"]["threadId"], check["params"]["serverName"]) == (
        "mcpServerStatus/list",
        THREAD,
        "mcphost",
    )
    assert turn.mapper.state.mcp_connected is None  # nothing starts before the server is checked

    await turn.feed(answer(turn.id_of("mcp"), connected()))
    assert turn.mapper.state.mcp_connected is True
    assert turn.sessions == [THREAD]
    start = channel.sent[3]
    assert start["method"] == "turn/start"
    assert start["params"]["threadId"] == THREAD
    assert start["params"]["input"] == [{"type": "text", "text": "What do I like?", "text_elements": []}]


async def test_a_reused_process_checks_the_server_first_and_a_switched_thread_is_resumed() -> None:
    same = Turn(Channel(THREAD), fresh=False, resume=THREAD)
    assert same.opening["method"] == "mcpServerStatus/list"

    channel = Channel(THREAD)
    switched = Turn(channel, fresh=False, resume=OTHER_THREAD)
    assert switched.opening["method"] == "thread/resume"
    assert switched.opening["params"]["threadId"] == OTHER_THREAD
    await switched.feed(answer(switched.id_of("thread"), {"thread": {"id": OTHER_THREAD}}))
    assert channel.session_id == OTHER_THREAD
    assert channel.methods() == ["mcpServerStatus/list"]


async def test_a_thread_the_cli_does_not_know_is_replaced_by_a_new_one() -> None:
    channel = Channel()
    turn = Turn(channel, fresh=True, resume=OTHER_THREAD)
    await turn.feed(answer(turn.id_of("initialize"), {}))
    assert channel.sent[1]["method"] == "thread/resume"
    missing = {"code": -32600, "message": f"no rollout found for thread id {OTHER_THREAD}"}
    await turn.feed({"id": turn.id_of("thread"), "error": missing})
    assert channel.sent[2]["method"] == "thread/start"
    assert "session_not_resumed" in turn.kinds
    assert turn.mapper.state.failure is None


async def test_a_required_server_that_cannot_start_fails_closed() -> None:
    channel = Channel()
    turn = Turn(channel, fresh=True)
    await turn.feed(answer(turn.id_of("initialize"), {}))
    error = {
        "code": -32603,
        "message": "error creating thread: Fatal error: Failed to initialize session: required MCP servers "
        "failed to initialize: mcphost: handshaking with MCP server failed",
    }
    await turn.feed({"id": turn.id_of("thread"), "error": error})
    failure = turn.mapper.state.failure
    assert failure is not None
    assert (failure.code, failure.retryable, turn.mapper.state.stop) == ("runner.mcp_unavailable", True, True)
    assert channel.methods() == ["initialized", "thread/start"]  # no turn was started


@pytest.mark.parametrize("status", ["failed", "starting", None])
async def test_a_server_not_connected_on_the_thread_fails_the_turn_before_it_starts(
    status: str | None,
) -> None:
    channel = Channel(THREAD)
    turn = Turn(channel, fresh=False)
    result = connected(status=status) if status else connected(server="other")
    await turn.feed(answer(turn.id_of("mcp"), result))
    assert turn.mapper.state.mcp_connected is False
    failure = turn.mapper.state.failure
    assert failure is not None
    assert failure.code == "runner.mcp_unavailable"
    assert turn.mapper.state.stop
    assert channel.sent == []


async def test_a_turn_maps_items_usage_and_the_answer_like_a_cold_run() -> None:
    channel = Channel(THREAD)
    turn = Turn(channel, fresh=False)
    await started(turn)
    arguments = {"scope": "conversation", "key": "color"}
    call = {"type": "mcpToolCall", "id": "call_1", "server": "mcphost", "tool": "state_get"}
    await turn.feed(
        note("turn/started", threadId=THREAD, turn={"id": TURN, "items": [], "status": "inProgress"}),
        item("started", type="userMessage", id="u1", content=[{"type": "text", "text": "What do I like?"}]),
        item("started", **call, status="inProgress", arguments=arguments, result=None, error=None),
        usage(146, 17, 50, 7),  # the thread had 96 in / 10 out before this turn
        item(
            "completed",
            **call,
            status="completed",
            arguments=arguments,
            result={"content": [{"type": "text", "text": "green"}], "structuredContent": {"value": "green"}},
            error=None,
        ),
        item("started", type="agentMessage", id="m1", text=""),
        item("completed", type="agentMessage", id="m1", text="You like green."),
        usage(206, 27, 60, 10),
        completed(),
    )
    state = turn.mapper.state
    assert (state.finished, state.failure, state.final_text) == (True, None, "You like green.")
    assert state.usage is not None
    assert (state.usage.input_tokens, state.usage.output_tokens) == (110, 17)
    assert turn.collected.types == ["tool.call.started", "tool.call.completed", "message.delta"]
    started_call, done = (
        turn.collected.data("tool.call.started")[0],
        turn.collected.data("tool.call.completed")[0],
    )
    assert (started_call["tool_name"], started_call["parameters"]) == ("mcp__mcphost__state_get", arguments)
    assert done["result_preview"] == '{"value": "green"}'
    assert turn.diagnostics.items == []


async def test_notifications_of_another_turn_or_thread_are_not_this_turns() -> None:
    turn = Turn(Channel(THREAD), fresh=False)
    await started(turn)
    stale = note(
        "item/completed",
        threadId=THREAD,
        turnId="01a24098-0000-7000-9000-000000000000",
        item={"type": "agentMessage", "id": "old", "text": "an earlier answer"},
    )
    elsewhere = note(
        "item/completed",
        threadId=OTHER_THREAD,
        turnId=TURN,
        item={"type": "agentMessage", "id": "x", "text": "another thread's answer"},
    )
    await turn.feed(
        stale, elsewhere, item("completed", type="agentMessage", id="m1", text="mine"), completed()
    )
    assert turn.mapper.state.final_text == "mine"
    assert [d["chunk"]["content"] for d in turn.collected.data("message.delta")] == ["mine"]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ({"message": "unexpected status 429 Too Many Requests", "additionalDetails": None}, "rate_limited"),
        ({"message": "unexpected status 401 Unauthorized", "additionalDetails": None}, "unauthorized"),
        ({"message": "stream disconnected", "additionalDetails": "retried 5 times"}, "runner.error"),
    ],
)
async def test_a_failed_turn_fails_with_a_precise_code(error: dict[str, Any], code: str) -> None:
    turn = Turn(Channel(THREAD), fresh=False)
    await started(turn)
    await turn.feed(completed("failed", error))
    failure = turn.mapper.state.failure
    assert turn.mapper.state.finished
    assert failure is not None
    assert failure.code == code
    if error["additionalDetails"]:
        assert "retried 5 times" in failure.message


async def test_a_failed_turn_without_an_error_reports_the_last_error_notification() -> None:
    turn = Turn(Channel(THREAD), fresh=False)
    await started(turn)
    error = {"message": "unexpected status 429", "codexErrorInfo": None, "additionalDetails": None}
    await turn.feed(
        note("error", threadId=THREAD, turnId=TURN, willRetry=False, error=error), completed("failed")
    )
    failure = turn.mapper.state.failure
    assert failure is not None
    assert failure.code == "rate_limited"
    assert "cli_error" in turn.kinds


async def test_an_interrupted_turn_fails() -> None:
    turn = Turn(Channel(THREAD), fresh=False)
    await started(turn)
    await turn.feed(completed("interrupted"))
    failure = turn.mapper.state.failure
    assert failure is not None
    assert (failure.code, failure.retryable) == ("runner.error", True)


async def test_the_servers_requests_are_declined_and_unknown_ones_refused() -> None:
    channel = Channel(THREAD)
    turn = Turn(channel, fresh=False)
    await started(turn)
    channel.sent.clear()
    approval = {"threadId": THREAD, "turnId": TURN, "itemId": "c1", "command": "rm -rf /"}
    await turn.feed(
        {"id": 7, "method": "item/commandExecution/requestApproval", "params": approval},
        {"id": 8, "method": "mcpServer/elicitation/request", "params": {"threadId": THREAD}},
        {"id": "x9", "method": "item/tool/call", "params": {"threadId": THREAD}},
    )
    assert channel.sent == [
        {"id": 7, "result": {"decision": "decline"}},
        {"id": 8, "result": {"action": "decline", "content": None, "_meta": None}},
        {"id": "x9", "error": {"code": -32601, "message": "mcphost does not answer 'item/tool/call'"}},
    ]
    assert turn.kinds == ["cli_request"] * 3
    assert turn.mapper.state.failure is None


async def test_warnings_become_diagnostics_and_unanswerable_lines_do_not_break_the_turn() -> None:
    turn = Turn(Channel(THREAD), fresh=False)
    await started(turn)
    await turn.feed(
        note("warning", threadId=THREAD, message="Model metadata for `x` not found."),
        note("configWarning", summary="no bubblewrap", details="using the bundled one"),
        note("thread/status/changed", threadId=THREAD, status={"type": "idle"}),
        {"id": "someone-else/turn", "result": {}},
        completed(),
    )
    assert turn.kinds == ["cli_warning", "cli_warning", "unknown_event"]
    assert turn.diagnostics.items[1]["detail"] == "no bubblewrap (using the bundled one)"
    assert turn.mapper.state.finished


async def test_a_process_that_stopped_reading_fails_the_turn_as_crashed() -> None:
    turn = Turn(Channel(broken=True), fresh=True)
    await turn.feed(answer(turn.id_of("initialize"), {}))
    failure = turn.mapper.state.failure
    assert failure is not None
    assert (failure.code, turn.mapper.state.stop) == ("runner.crashed", True)


async def test_an_overlong_line_is_a_diagnostic() -> None:
    turn = Turn(Channel(THREAD), fresh=False)

    async def lines() -> AsyncIterator[bytes | TooLong]:
        yield TooLong(size=20_000_000, prefix=b"{")
        yield json.dumps(answer(turn.id_of("mcp"), connected())).encode()

    await pump_native_stream(lines(), turn.mapper, turn.diagnostics)
    assert turn.kinds == ["overlong_line"]
    assert turn.mapper.state.mcp_connected is True


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (
            {
                "type": "commandExecution",
                "id": "c1",
                "command": "ls",
                "aggregatedOutput": None,
                "exitCode": None,
                "status": "declined",
            },
            {
                "type": "command_execution",
                "id": "c1",
                "command": "ls",
                "aggregated_output": "",
                "exit_code": None,
                "status": "declined",
            },
        ),
        (
            {
                "type": "fileChange",
                "id": "f1",
                "changes": [{"path": "a.txt", "kind": {"type": "add"}, "diff": "+x"}],
                "status": "declined",
            },
            {
                "type": "file_change",
                "id": "f1",
                "changes": [{"path": "a.txt", "kind": "add", "diff": "+x"}],
                "status": "failed",
            },
        ),
        (
            {"type": "webSearch", "id": "w1", "query": "mcp", "action": None},
            {"type": "web_search", "id": "w1", "query": "mcp"},
        ),
        (
            {
                "type": "mcpToolCall",
                "id": "t1",
                "server": "mcphost",
                "tool": "state_set",
                "arguments": {},
                "status": "inProgress",
                "result": None,
                "error": None,
            },
            {
                "type": "mcp_tool_call",
                "id": "t1",
                "server": "mcphost",
                "tool": "state_set",
                "arguments": {},
                "status": "in_progress",
                "error": None,
                "result": None,
            },
        ),
        ({"type": "userMessage", "id": "u1", "content": []}, None),
        ({"type": "plan", "id": "p1", "text": "1. do it"}, None),
    ],
)
def test_app_server_items_become_the_items_codex_exec_prints(
    item: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    assert exec_item(item) == expected


async def test_a_refused_tool_call_and_a_declined_command_carry_their_codes() -> None:
    turn = Turn(Channel(THREAD), fresh=False, streaming=False)
    await started(turn)
    refused = {
        "type": "mcpToolCall",
        "id": "t1",
        "server": "mcphost",
        "tool": "state_set",
        "arguments": {"scope": "actor"},
        "status": "failed",
        "result": {
            "content": [{"type": "text", "text": "unauthorized: This run may not write the actor scope"}],
            "structuredContent": None,
        },
        "error": None,
    }
    declined = {
        "type": "commandExecution",
        "id": "c1",
        "command": "rm -rf /",
        "aggregatedOutput": None,
        "exitCode": None,
        "status": "declined",
    }
    await turn.feed(item("completed", **refused), item("completed", **declined), completed())
    codes = [(d["tool_name"], d["error_code"]) for d in turn.collected.data("tool.call.completed")]
    assert codes == [("mcp__mcphost__state_set", "unauthorized"), ("shell", "unauthorized")]
    assert "message.delta" not in turn.collected.types
