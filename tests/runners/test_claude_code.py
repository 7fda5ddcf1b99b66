"""Claude Code's stream-json → results, replayed from recordings of the real CLI through the real runner
(`mcphost_runners/claude_code.py`), with a stand-in CLI (`tests/fakes/replay_cli.py`) so every case is exact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcphost.common.procgroup import group_alive
from mcphost.protocol import AgentRunContext, AgentRunResult, JSONObject
from mcphost_runners.claude_code import ClaudeCodeRunner
from mcphost_runners.harness import SESSION_KEY, WORKDIR_KEY
from mcphost_runners.sdk import RunOutput
from tests.fakes.harness_support import TOKEN, Collected, harness_context, run_directly
from tests.fakes.replay_cli import write_wrapper

RECORDED = Path(__file__).resolve().parents[1] / "fakes" / "recorded"
TOOL_CALL = RECORDED / "claude_code_tool_call.jsonl"
SESSION = "e6c3b4f2-0000-4000-8000-000000000000"


def recorded_lines(name: str) -> list[str]:
    return (RECORDED / name).read_text().splitlines()


def init_line(status: str = "connected") -> str:
    init = json.loads(recorded_lines("claude_code_tool_call.jsonl")[0])
    init["session_id"] = SESSION
    init["mcp_servers"] = [{"name": "mcphost", "status": status}]
    return json.dumps(init)


def result_line(**fields: Any) -> str:
    result: JSONObject = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "done",
        "session_id": SESSION,
        "num_turns": 1,
        "total_cost_usd": 0.01,
        "usage": {"input_tokens": 10, "output_tokens": 3},
        "permission_denials": [],
    }
    result.update(fields)
    return json.dumps(result)


async def replay(
    tmp_path: Path,
    *,
    file: Path | None = TOOL_CALL,
    before: list[str] | None = None,
    insert_after: int = -1,
    insert: list[str] | None = None,
    exit_code: int = 0,
    stderr: str = "",
    hang: bool = False,
    streaming: bool = True,
    deadline_s: float = 60.0,
    state: JSONObject | None = None,
    resume_file: Path | None = None,
    **config: Any,
) -> tuple[Collected, dict[str, Any]]:
    """Run the Claude Code runner against the replaying stand-in CLI; returns the results and what the
    CLI was started with (argv, environment, working folder)."""
    captured = tmp_path / "argv.json"
    environment = {
        "REPLAY_ARGV": str(captured),
        "REPLAY_BEFORE": json.dumps(before or []),
        "REPLAY_AFTER_LINE": str(insert_after),
        "REPLAY_INSERT": json.dumps(insert or []),
        "REPLAY_EXIT": str(exit_code),
        "REPLAY_STDERR": stderr,
        "REPLAY_HANG": "1" if hang else "0",
    }
    if file is not None:
        environment["REPLAY_FILE"] = str(file)
    if resume_file is not None:
        environment["REPLAY_RESUME_FILE"] = str(resume_file)
    ctx = harness_context(
        "What was said before?",
        config={
            "cli_path": str(write_wrapper(tmp_path)),
            "data_dir": str(tmp_path / "data"),
            "environment": environment,
            **config,
        },
        streaming=streaming,
        deadline_s=deadline_s,
        conversation_state=state,
    )
    collected = await run_directly(ClaudeCodeRunner(), ctx)
    started: dict[str, Any] = json.loads(captured.read_text()) if captured.exists() else {}
    return collected, started


async def test_a_recorded_tool_call_turn_becomes_results(tmp_path: Path) -> None:
    collected, started = await replay(tmp_path)
    assert collected.types == [
        "state.updated",
        "state.updated",
        "tool.call.started",
        "tool.call.completed",
        "message.delta",
        "message.delta",
        "message.completed",
        "run.completed",
    ]
    session = json.loads(TOOL_CALL.read_text().splitlines()[0])["session_id"]
    assert collected.state() == {SESSION_KEY: session, WORKDIR_KEY: started["cwd"]}
    call = collected.data("tool.call.started")[0]
    assert call["tool_name"] == "mcp__mcphost__history_page"
    assert call["parameters"] == {"limit": 2}
    done = collected.data("tool.call.completed")[0]
    assert done["tool_call_id"] == call["tool_call_id"]
    assert "the sky is green" in done["result_preview"]
    assert done["error_code"] is None
    answer = collected.data("message.completed")[0]["message"]["content"]
    assert answer.startswith("Answer:")
    assert "the sky is green" in answer
    assert "".join(d["chunk"]["content"] for d in collected.data("message.delta")) == answer
    completed = collected.terminal
    usage = completed["data"]["usage"]
    assert usage["input_tokens"] == 34
    assert usage["output_tokens"] == 10
    assert usage["total_tokens"] == 44
    assert usage["cost_usd"] == pytest.approx(0.000336)
    assert completed["metadata"]["external"]["session_id"] == session
    assert completed["metadata"]["external"]["cli_version"] == "2.1.332"
    assert "diagnostics" not in completed["metadata"]


async def test_the_command_line_injects_the_run_server_and_carries_no_secret(tmp_path: Path) -> None:
    _, started = await replay(tmp_path, allowed_tools=["Read"], model="claude-x", max_turns=3)
    argv: list[str] = started["argv"][1:]
    assert argv[:5] == ["-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages"]
    assert argv[argv.index("--allowedTools") + 1] == "mcp__mcphost,Read"
    assert argv[argv.index("--permission-mode") + 1] == "dontAsk"
    assert argv[argv.index("--max-turns") + 1] == "3"
    assert argv[argv.index("--model") + 1] == "claude-x"
    assert "--strict-mcp-config" in argv
    assert argv[-2:] == ["--", "What was said before?"]
    assert "--resume" not in argv
    assert TOKEN not in json.dumps(argv)
    config_file = Path(argv[argv.index("--mcp-config") + 1])
    assert config_file.parent == Path(started["cwd"])
    assert not await anyio.Path(config_file).exists()  # removed once the CLI ended: it held the token
    env = started["env"]
    assert env["HOME"] == str((tmp_path / "data" / "claude-home").resolve())
    assert env["CLAUDE_CONFIG_DIR"] == env["HOME"] + "/.claude"
    assert env["ENABLE_TOOL_SEARCH"] == "false"
    assert env["MCP_CONNECTION_NONBLOCKING"] == "0"  # the first turn waits for the mcphost tools
    assert env["DISABLE_TELEMETRY"] == "1"
    assert TOKEN not in json.dumps(env)


@pytest.mark.parametrize("transport", ["http", "bridge"])
async def test_the_mcp_config_file_is_private_and_holds_the_server(tmp_path: Path, transport: str) -> None:
    # A stand-in that copies the config file before it is removed.
    copy = tmp_path / "mcp-copy.json"
    script = tmp_path / "copying-cli"
    script.write_text(
        "#!/bin/sh\n"
        'while [ "$1" != "--mcp-config" ]; do shift; done\n'
        f'stat -c %a "$2" > {tmp_path}/mode; cp "$2" {copy}\n'
    )
    script.chmod(0o755)
    ctx = harness_context(
        config={"cli_path": str(script), "data_dir": str(tmp_path / "data"), "mcp_transport": transport}
    )
    assert ctx.context.mcp is not None
    url = ctx.context.mcp.url
    await run_directly(ClaudeCodeRunner(), ctx)
    assert (tmp_path / "mode").read_text().strip() == "600"
    server = json.loads(copy.read_text())["mcpServers"]["mcphost"]
    if transport == "http":
        assert server == {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {TOKEN}"}}
    else:
        assert server["type"] == "stdio"
        assert server["args"][-2:] == ["--url", url]
        assert server["env"] == {"MCPHOST_RUN_TOKEN": TOKEN}


async def test_a_surface_without_streaming_gets_no_deltas(tmp_path: Path) -> None:
    collected, started = await replay(tmp_path, streaming=False)
    assert "message.delta" not in collected.types
    assert "--include-partial-messages" not in started["argv"]
    assert collected.terminal["type"] == "run.completed"


async def test_never_seen_and_malformed_lines_become_diagnostics_and_the_run_still_completes(
    tmp_path: Path,
) -> None:
    noise = [
        "this is not json",
        '{"type": "assistant", "message": ',  # cut off mid-line
        "[1, 2, 3]",
        '{"type": "telemetry_v9", "payload": {"x": 1}}',
        '{"type": "system", "subtype": "brand_new_subtype"}',
        '{"no_type": true}',
        '{"type": "user", "message": {"content": "a string where blocks were"}}',
        "",
    ]
    collected, _ = await replay(tmp_path, insert_after=1, insert=noise)
    assert collected.terminal["type"] == "run.completed"
    assert collected.data("message.completed")
    diagnostics = collected.terminal["metadata"]["diagnostics"]
    kinds = [(d["kind"], d["line"]) for d in diagnostics]
    assert kinds == [
        ("unparseable_line", 2),
        ("unparseable_line", 3),
        ("unparseable_line", 4),
        ("unknown_event", 5),
        ("unknown_event", 6),
        ("unknown_event", 7),
    ]
    assert "telemetry_v9" in diagnostics[3]["detail"]


async def test_an_init_without_the_mcphost_server_connected_fails_closed(tmp_path: Path) -> None:
    collected, _ = await replay(tmp_path, file=RECORDED / "claude_code_mcp_failed.jsonl")
    assert collected.types == ["run.failed"]  # no session saved, no answer delivered
    failed = collected.terminal["data"]
    assert failed["code"] == "runner.mcp_unavailable"
    assert "'failed'" in failed["message"]
    assert failed["details"]["mcp_servers"][0]["name"] == "mcphost"


async def test_a_result_without_an_init_event_fails_closed(tmp_path: Path) -> None:
    collected, _ = await replay(tmp_path, file=None, before=[result_line()])
    assert collected.terminal["data"]["code"] == "runner.mcp_unavailable"
    assert "message.completed" not in collected.types


async def test_permission_denials_deliver_the_answer_and_fail_with_the_denials(tmp_path: Path) -> None:
    collected, _ = await replay(tmp_path, file=RECORDED / "claude_code_permission_denied.jsonl")
    denied = collected.data("tool.call.completed")[0]
    assert denied["tool_name"] == "Write"
    assert denied["error_code"] == "unauthorized"
    assert collected.types[-2:] == ["message.completed", "run.failed"]
    failed = collected.terminal["data"]
    assert failed["code"] == "unauthorized"
    assert [d["tool_name"] for d in failed["details"]["permission_denials"]] == ["Write"]
    assert "config.allowed_tools" in failed["message"]


@pytest.mark.parametrize(
    ("result", "code", "retryable"),
    [
        ({"subtype": "error_during_execution", "is_error": True, "errors": ["boom"]}, "runner.error", False),
        ({"subtype": "error_max_turns", "is_error": True}, "runner.error", False),
        ({"is_error": True, "api_error_status": 401, "result": "Invalid API key"}, "unauthorized", False),
        ({"is_error": True, "api_error_status": 429, "result": "Slow down"}, "rate_limited", True),
        ({"is_error": True, "api_error_status": 529, "result": "Overloaded"}, "runner.error", True),
    ],
)
async def test_error_results_fail_with_a_precise_code(
    tmp_path: Path, result: JSONObject, code: str, retryable: bool
) -> None:
    collected, _ = await replay(tmp_path, file=None, before=[init_line(), result_line(**result)], exit_code=1)
    failed = collected.terminal["data"]
    assert (failed["code"], failed["retryable"]) == (code, retryable)
    assert "message.completed" not in collected.types
    if result.get("subtype") == "error_max_turns":
        assert "config.max_turns" in failed["message"]


async def test_a_crash_fails_with_the_exit_status_and_the_stderr_summary(tmp_path: Path) -> None:
    collected, _ = await replay(
        tmp_path, file=None, before=[init_line()], exit_code=3, stderr="fatal: something broke inside"
    )
    failed = collected.terminal["data"]
    assert failed["code"] == "runner.crashed"
    assert "status 3" in failed["message"]
    assert "something broke inside" in failed["message"]


async def test_a_clean_exit_without_a_result_is_empty_output(tmp_path: Path) -> None:
    collected, _ = await replay(tmp_path, file=None, before=[init_line()])
    assert collected.terminal["data"]["code"] == "runner.empty_output"


async def test_an_empty_answer_is_empty_output_not_a_blank_success(tmp_path: Path) -> None:
    collected, _ = await replay(tmp_path, file=None, before=[init_line(), result_line(result="")])
    assert collected.terminal["data"]["code"] == "runner.empty_output"


async def test_a_hanging_cli_is_stopped_before_the_deadline_with_its_whole_group(tmp_path: Path) -> None:
    collected, _ = await replay(tmp_path, file=None, before=[init_line()], hang=True, deadline_s=3.0)
    failed = collected.terminal["data"]
    assert failed["code"] == "runner.timeout"
    assert failed["retryable"]
    assert not group_alive(failed["details"]["process_group"])


async def test_a_saved_session_is_resumed_in_its_folder(tmp_path: Path) -> None:
    first, started = await replay(tmp_path)
    saved = first.state()
    second, resumed = await replay(tmp_path, state=saved)
    assert resumed["argv"][resumed["argv"].index("--resume") + 1] == saved[SESSION_KEY]
    assert resumed["cwd"] == started["cwd"]
    assert second.state() == {}  # the same session: nothing to write again
    assert second.terminal["type"] == "run.completed"


async def test_an_unknown_session_is_replaced_by_a_new_one(tmp_path: Path) -> None:
    first, _ = await replay(tmp_path)
    collected, started = await replay(
        tmp_path,
        state={**first.state(), SESSION_KEY: "11111111-2222-3333-4444-555555555555"},
        resume_file=RECORDED / "claude_code_resume_missing.jsonl",
    )
    assert "--resume" not in started["argv"]  # the second attempt starts afresh
    assert collected.terminal["type"] == "run.completed"
    assert collected.state()[SESSION_KEY] != "11111111-2222-3333-4444-555555555555"
    [diagnostic] = collected.terminal["metadata"]["diagnostics"]
    assert diagnostic["kind"] == "session_not_resumed"


async def test_without_a_conversation_nothing_is_saved(tmp_path: Path) -> None:
    ctx = harness_context(
        config={
            "cli_path": str(write_wrapper(tmp_path)),
            "data_dir": str(tmp_path / "data"),
            "environment": {"REPLAY_FILE": str(TOOL_CALL)},
        },
        conversation=False,
    )
    collected = await run_directly(ClaudeCodeRunner(), ctx)
    assert "state.updated" not in collected.types
    assert collected.terminal["type"] == "run.completed"


async def test_a_cancelled_run_stops_the_cli_and_its_group(tmp_path: Path) -> None:
    captured = tmp_path / "argv.json"
    ctx = harness_context(
        config={
            "cli_path": str(write_wrapper(tmp_path)),
            "data_dir": str(tmp_path / "data"),
            "environment": {
                "REPLAY_BEFORE": json.dumps([init_line()]),
                "REPLAY_HANG": "1",
                "REPLAY_ARGV": str(captured),
            },
        }
    )
    collected = Collected()
    session_saved = anyio.Event()

    async def send(result: AgentRunResult) -> None:
        await collected.send(result)
        if result.type == "state.updated":  # the CLI is up and said which session it runs
            session_saved.set()

    with anyio.fail_after(20), anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ClaudeCodeRunner().run, ctx, RunOutput(ctx.run_id, send))
            await session_saved.wait()
            scope.cancel()
    pid = json.loads(captured.read_text())["pid"]
    assert not group_alive(pid)  # the stand-in led its own group: pgid == pid
    assert "run.completed" not in collected.types


async def test_turns_of_one_session_wait_for_each_other(tmp_path: Path) -> None:
    first, _ = await replay(tmp_path)
    saved = first.state()
    hanging = {
        "cli_path": str(write_wrapper(tmp_path)),
        "data_dir": str(tmp_path / "data"),
        "environment": {"REPLAY_BEFORE": json.dumps([init_line()]), "REPLAY_HANG": "1"},
    }
    slow = harness_context(config=hanging, conversation_state=saved, deadline_s=4.0)
    waiting = harness_context(config=hanging, conversation_state=saved, deadline_s=2.5)
    results: dict[str, Collected] = {}

    async def run(name: str, ctx: AgentRunContext) -> None:
        results[name] = await run_directly(ClaudeCodeRunner(), ctx)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "slow", slow)
            await anyio.sleep(0.3)
            tg.start_soon(run, "waiting", waiting)
    assert results["slow"].terminal["data"]["code"] == "runner.timeout"
    waited = results["waiting"]
    assert waited.types == ["run.failed"]  # it never started its CLI
    assert waited.terminal["data"]["code"] == "runner.timeout"
    assert "earlier turn of the same session" in waited.terminal["data"]["message"]


async def test_a_prompt_too_long_for_the_command_line_is_handed_over_in_a_file(tmp_path: Path) -> None:
    captured = tmp_path / "argv.json"
    text = "long message " * 12_000
    ctx = harness_context(
        text,
        config={
            "cli_path": str(write_wrapper(tmp_path)),
            "data_dir": str(tmp_path / "data"),
            "environment": {"REPLAY_FILE": str(TOOL_CALL), "REPLAY_ARGV": str(captured)},
        },
    )
    await run_directly(ClaudeCodeRunner(), ctx)
    started = json.loads(captured.read_text())
    assert "INPUT.md" in started["argv"][-1]
    assert (Path(started["cwd"]) / "INPUT.md").read_text() == text
