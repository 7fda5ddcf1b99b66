"""Codex's `exec --json` JSONL → results, replayed from recordings of the real CLI through the real
runner (`mcphost_runners/codex.py`) with a stand-in CLI (`tests/fakes/replay_cli.py`)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from mcphost.protocol import JSONObject, ModelEndpoints, WarmSessionAccess
from mcphost_runners.codex import CodexConfig, CodexRunner, toml_value
from mcphost_runners.harness import SESSION_KEY, WORKDIR_KEY, ExternalSession, prepare_workspace
from tests.fakes.harness_support import TOKEN, Collected, harness_context, mcp_access, run_directly
from tests.fakes.replay_cli import write_wrapper

RECORDED = Path(__file__).resolve().parents[1] / "fakes" / "recorded"
TOOL_CALL = RECORDED / "codex_tool_call.jsonl"
THREAD = "01a236b4-aaaa-7222-85b1-77e14856e645"
MCP_DOWN = (
    "ERROR codex_core::session: Failed to create session: required MCP servers failed to initialize: "
    "mcphost: handshaking with MCP server failed: connection refused"
)


def event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


def item(phase: str, **fields: Any) -> str:
    return event(f"item.{phase}", item=fields)


STARTED = event("thread.started", thread_id=THREAD)
DONE = event("turn.completed", usage={"input_tokens": 5, "cached_input_tokens": 1, "output_tokens": 2})


async def replay(
    tmp_path: Path,
    *,
    file: Path | None = TOOL_CALL,
    before: list[str] | None = None,
    insert_after: int = -1,
    insert: list[str] | None = None,
    exit_code: int = 0,
    stderr: str = "",
    state: JSONObject | None = None,
    streaming: bool = True,
    environment: dict[str, str] | None = None,
    **config: Any,
) -> tuple[Collected, dict[str, Any]]:
    captured = tmp_path / "argv.json"
    env = {
        "REPLAY_ARGV": str(captured),
        "REPLAY_BEFORE": json.dumps(before or []),
        "REPLAY_AFTER_LINE": str(insert_after),
        "REPLAY_INSERT": json.dumps(insert or []),
        "REPLAY_EXIT": str(exit_code),
        "REPLAY_STDERR": stderr,
        **(environment or {}),
    }
    if file is not None:
        env["REPLAY_FILE"] = str(file)
    ctx = harness_context(
        "What was said before?",
        config={
            "cli_path": str(write_wrapper(tmp_path)),
            "data_dir": str(tmp_path / "data"),
            "environment": env,
            **config,
        },
        conversation_state=state,
        streaming=streaming,
    )
    collected = await run_directly(CodexRunner(), ctx)
    started: dict[str, Any] = json.loads(captured.read_text()) if captured.exists() else {}
    return collected, started


def settings(argv: list[str]) -> dict[str, str]:
    """The `-c key=value` pairs of a Codex command line."""
    return dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "-c")


async def test_a_recorded_tool_call_turn_becomes_results(tmp_path: Path) -> None:
    collected, started = await replay(tmp_path)
    assert collected.types == [
        "state.updated",
        "state.updated",
        "tool.call.started",
        "tool.call.completed",
        "message.delta",
        "message.completed",
        "run.completed",
    ]
    thread = json.loads(TOOL_CALL.read_text().splitlines()[0])["thread_id"]
    assert collected.state() == {SESSION_KEY: thread, WORKDIR_KEY: started["cwd"]}
    call = collected.data("tool.call.started")[0]
    assert (call["tool_name"], call["parameters"]) == ("mcp__mcphost__history_page", {"limit": 2})
    assert "the sky is green" in collected.data("tool.call.completed")[0]["result_preview"]
    answer = collected.data("message.completed")[0]["message"]["content"]
    assert "the sky is green" in answer
    completed = collected.terminal
    assert completed["data"]["usage"]["input_tokens"] == 46
    assert completed["data"]["usage"]["output_tokens"] == 14
    # Codex's own warning item (an unknown model name) is kept as a diagnostic, not an error.
    [warning] = completed["metadata"]["diagnostics"]
    assert warning["kind"] == "cli_warning"
    assert "Model metadata" in warning["detail"]


async def test_the_command_line_injects_the_required_server_with_the_token_only_in_the_environment(
    tmp_path: Path,
) -> None:
    _, started = await replay(
        tmp_path,
        environment={"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_API_KEY": "sk-fake"},
        model="mcphost-fake",
        prompt="Be brief.",
    )
    argv: list[str] = started["argv"][1:]
    assert argv[:6] == ["exec", "--json", "--skip-git-repo-check", "--sandbox", "read-only", "-c"]
    assert argv[-2:] == ["--", "What was said before?"]
    assert "resume" not in argv
    assert argv[argv.index("-m") + 1] == "mcphost-fake"
    found = settings(argv)
    assert found["mcp_servers.mcphost.url"] == '"http://127.0.0.1:9/runs/run/mcp"'
    assert found["mcp_servers.mcphost.bearer_token_env_var"] == '"MCPHOST_RUN_TOKEN"'
    assert found["mcp_servers.mcphost.required"] == "true"
    assert found["mcp_servers.mcphost.default_tools_approval_mode"] == '"approve"'
    assert found["approval_policy"] == '"never"'
    assert found["model_provider"] == '"mcphost"'
    provider = found["model_providers.mcphost"]
    assert '"base_url" = "http://127.0.0.1:1/v1"' in provider
    assert '"wire_api" = "responses"' in provider
    assert json.loads(found["developer_instructions"]).startswith(
        "Be brief.\n\nThis run is hosted by mcphost."
    )
    assert TOKEN not in json.dumps(argv)
    env = started["env"]
    assert env["MCPHOST_RUN_TOKEN"] == TOKEN
    codex_home = Path(env["CODEX_HOME"])
    assert codex_home == (tmp_path / "data" / "codex-home" / ".codex").resolve()
    config_toml = codex_home / "config.toml"
    assert stat.S_IMODE(config_toml.stat().st_mode) == 0o600
    assert "[analytics]\nenabled = false" in config_toml.read_text()
    assert "plugins = false" in config_toml.read_text()


async def test_the_bridge_transport_forwards_only_the_token_variable(tmp_path: Path) -> None:
    _, started = await replay(tmp_path, mcp_transport="bridge")
    found = settings(started["argv"])
    assert "mcp_servers.mcphost.url" not in found
    assert json.loads(found["mcp_servers.mcphost.args"])[-2:] == ["--url", "http://127.0.0.1:9/runs/run/mcp"]
    assert found["mcp_servers.mcphost.env_vars"] == '["MCPHOST_RUN_TOKEN"]'


async def test_a_saved_thread_is_resumed(tmp_path: Path) -> None:
    first, started = await replay(tmp_path)
    _, resumed = await replay(tmp_path, state=first.state())
    argv: list[str] = resumed["argv"]
    assert argv[argv.index("resume") + 1 : argv.index("resume") + 4] == [
        first.state()[SESSION_KEY],
        "--",
        "What was said before?",
    ]
    assert resumed["cwd"] == started["cwd"]


async def test_an_unknown_thread_is_replaced_by_a_new_one(tmp_path: Path) -> None:
    first, _ = await replay(tmp_path)
    script = tmp_path / "picky-cli"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do if [ "$a" = resume ]; then echo "Error: no rollout found for thread id x" >&2; exit 1; fi; done\n'
        f"cat {TOOL_CALL}\n"
    )
    script.chmod(0o755)
    ctx = harness_context(
        config={"cli_path": str(script), "data_dir": str(tmp_path / "data")},
        conversation_state={**first.state(), SESSION_KEY: "gone"},
    )
    collected = await run_directly(CodexRunner(), ctx)
    assert collected.terminal["type"] == "run.completed"
    assert collected.state()[SESSION_KEY] != "gone"
    kinds = [d["kind"] for d in collected.terminal["metadata"]["diagnostics"]]
    assert kinds[0] == "session_not_resumed"


async def test_a_failed_turn_fails_the_run_with_the_cli_message(tmp_path: Path) -> None:
    collected, _ = await replay(tmp_path, file=RECORDED / "codex_turn_failed.jsonl", exit_code=1)
    failed = collected.terminal["data"]
    assert failed["code"] == "runner.error"
    assert "bad request from fake" in failed["message"]
    assert "message.completed" not in collected.types


@pytest.mark.parametrize(
    ("message", "code"),
    [("unexpected status 401 Unauthorized", "unauthorized"), ("429 Too Many Requests", "rate_limited")],
)
async def test_model_api_refusals_get_precise_codes(tmp_path: Path, message: str, code: str) -> None:
    failed_turn = event("turn.failed", error={"message": message})
    collected, _ = await replay(tmp_path, file=None, before=[STARTED, failed_turn], exit_code=1)
    assert collected.terminal["data"]["code"] == code


async def test_a_required_server_that_cannot_start_fails_closed(tmp_path: Path) -> None:
    collected, _ = await replay(tmp_path, file=None, exit_code=1, stderr=MCP_DOWN)
    assert collected.types == ["run.failed"]
    failed = collected.terminal["data"]
    assert failed["code"] == "runner.mcp_unavailable"
    assert "handshaking" in failed["message"]


async def test_a_completed_turn_without_a_thread_fails_closed(tmp_path: Path) -> None:
    answer = item("completed", id="item_1", type="agent_message", text="hi")
    collected, _ = await replay(tmp_path, file=None, before=[answer, DONE])
    assert collected.terminal["data"]["code"] == "runner.mcp_unavailable"


async def test_a_crash_fails_with_the_stderr_summary(tmp_path: Path) -> None:
    collected, _ = await replay(
        tmp_path, file=None, before=[STARTED], exit_code=101, stderr="thread 'main' panicked"
    )
    failed = collected.terminal["data"]
    assert failed["code"] == "runner.crashed"
    assert "status 101" in failed["message"]
    assert "panicked" in failed["message"]


async def test_never_seen_events_and_items_become_diagnostics(tmp_path: Path) -> None:
    noise = [
        "{not json",
        event("session.configured_v2", model="x"),
        item("completed", id="item_9", type="hologram", payload={}),
        event("error", message="Reconnecting... 1/5"),
        item("completed", id="item_8", type="todo_list", items=[]),
        item("completed", id="item_7", type="reasoning", text="thinking"),
    ]
    collected, _ = await replay(tmp_path, insert_after=3, insert=noise)
    assert collected.terminal["type"] == "run.completed"
    kinds = [d["kind"] for d in collected.terminal["metadata"]["diagnostics"]]
    assert kinds == ["cli_warning", "unparseable_line", "unknown_event", "unknown_event", "cli_error"]


async def test_tool_errors_carry_their_codes(tmp_path: Path) -> None:
    lines = [
        STARTED,
        item(
            "started",
            id="a",
            type="mcp_tool_call",
            server="mcphost",
            tool="state_set",
            arguments={"scope": "actor"},
        ),
        item(
            "completed",
            id="a",
            type="mcp_tool_call",
            server="mcphost",
            tool="state_set",
            arguments={},
            status="completed",
            result={
                "content": [{"type": "text", "text": "unauthorized: this run may not write 'actor' state"}],
                "is_error": True,
            },
        ),
        item(
            "completed",
            id="b",
            type="mcp_tool_call",
            server="mcphost",
            tool="x",
            status="failed",
            error={"message": "gone"},
        ),
        item(
            "completed",
            id="e",
            type="mcp_tool_call",
            server="mcphost",
            tool="state_get",
            status="failed",
            error=None,
            result={
                "content": [{"type": "text", "text": "not_found: no such key"}],
                "structured_content": None,
            },
        ),
        item("started", id="c", type="command_execution", command="touch /etc/x", status="in_progress"),
        item(
            "completed",
            id="c",
            type="command_execution",
            command="touch /etc/x",
            exit_code=1,
            aggregated_output="denied",
            status="failed",
        ),
        item("completed", id="d", type="agent_message", text="tried"),
        DONE,
    ]
    collected, _ = await replay(tmp_path, file=None, before=lines)
    assert [(d["tool_call_id"], d["tool_name"]) for d in collected.data("tool.call.started")] == [
        ("a", "mcp__mcphost__state_set"),
        ("b", "mcp__mcphost__x"),
        ("e", "mcp__mcphost__state_get"),
        ("c", "shell"),
    ]
    errors = {
        d["tool_call_id"]: (d["error_code"], d["error_message"])
        for d in collected.data("tool.call.completed")
    }
    assert errors["a"] == ("unauthorized", "this run may not write 'actor' state")
    assert errors["b"] == ("runtime_error", "gone")
    assert errors["e"] == ("not_found", "no such key")
    assert errors["c"][0] == "runtime_error"
    assert "denied" in errors["c"][1]
    assert collected.terminal["type"] == "run.completed"


def test_toml_values_render_json_for_codex_overrides() -> None:
    assert toml_value('a "quoted" \\ line\n') == '"a \\"quoted\\" \\\\ line\\n"'
    assert toml_value(True) == "true"
    assert toml_value(3) == "3"
    assert toml_value(1.5) == "1.5"
    assert toml_value(["x", 2]) == '["x", 2]'
    assert toml_value({"name": "p", "n": {"deep": False}}) == '{"name" = "p", "n" = {"deep" = false}}'
    with pytest.raises(ValueError, match="null"):
        toml_value(None)


@pytest.mark.parametrize("named", [{"model": "host:gpt"}, {"model_source": "host", "model": "gpt"}])
def test_a_host_model_is_the_run_s_openai_endpoint_cold_and_the_session_s_warm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: dict[str, str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-plugin-environment")
    ctx = harness_context("hi", config={})
    access = mcp_access("http://127.0.0.1:9/runs/run/mcp").model_copy(
        update={
            "session": WarmSessionAccess(
                session_id="ws_1",
                url="http://127.0.0.1:9/warm/ws_1/mcp",
                headers={"Authorization": "Bearer st"},
                models=ModelEndpoints(
                    anthropic="http://127.0.0.1:9/sessions/ws_1/models/anthropic",
                    openai="http://127.0.0.1:9/sessions/ws_1/models/openai/v1",
                ),
            )
        }
    )
    endpoints = ModelEndpoints(
        anthropic="http://127.0.0.1:9/runs/run/models/anthropic",
        openai="http://127.0.0.1:9/runs/run/models/openai/v1",
    )
    ctx = ctx.model_copy(
        update={"context": ctx.context.model_copy(update={"mcp": access, "models": endpoints})}
    )
    config = CodexConfig.model_validate(
        {
            "data_dir": str(tmp_path / "data"),
            **named,
            "base_url": "http://127.0.0.1:1/v1",
            "environment": {"OPENAI_API_KEY": "sk-agent", "CODEX_API_KEY": "sk-agent-2"},
            "pass_env": ["OPENAI_API_KEY"],
        }
    )
    runner, session = CodexRunner(), ExternalSession()
    workspace = prepare_workspace(ctx, config, session)
    # A warm process outlives its run: it calls the session's endpoint with the session token.
    for launch, model, base, token in (
        (runner.launch(ctx, config, workspace, Path("/bin/codex"), session), None, "runs/run", TOKEN),
        (
            runner.launch_warm(ctx, config, workspace, Path("/bin/codex"), session),
            '"gpt"',
            "sessions/ws_1",
            "st",
        ),
    ):
        found = settings(launch.argv)
        assert found["model_provider"] == '"mcphost"'
        provider = found["model_providers.mcphost"]
        assert f'"base_url" = "http://127.0.0.1:9/{base}/models/openai/v1"' in provider
        assert '"wire_api" = "responses"' in provider
        assert '"env_key" = "MCPHOST_MODEL_TOKEN"' in provider
        assert found.get("model") == model
        assert TOKEN not in json.dumps(launch.argv)
        assert launch.env["MCPHOST_MODEL_TOKEN"] == token
        assert not {"OPENAI_API_KEY", "CODEX_API_KEY", "ANTHROPIC_API_KEY"} & set(launch.env)
    cold = runner.launch(ctx, config, workspace, Path("/bin/codex"), session).argv
    assert cold[cold.index("-m") + 1] == "gpt"


def test_a_host_model_the_run_is_not_granted_is_a_clear_error(tmp_path: Path) -> None:
    ctx = harness_context("hi", config={})
    config = CodexConfig.model_validate({"data_dir": str(tmp_path / "data"), "model": "host:gpt"})
    session = ExternalSession()
    workspace = prepare_workspace(ctx, config, session)
    with pytest.raises(ValueError, match=r"resources\.models"):
        CodexRunner().launch(ctx, config, workspace, Path("/bin/codex"), session)


def test_a_host_model_source_without_a_model_is_refused() -> None:
    with pytest.raises(ValueError, match=r"model_source = 'host' needs model = '<id>'"):
        CodexConfig.model_validate({"model_source": "host"})
    with pytest.raises(ValueError, match=r"model_source = 'host' needs model"):
        CodexConfig.model_validate({"model_source": "host", "model": "host:"})
