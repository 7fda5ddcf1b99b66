"""The `mcphost-bridge` command as a process: exit statuses, stderr messages, stdout purity, arguments.

These drive `python -m mcphost_bridge` with raw JSON lines (no SDK client in between) so that every byte on stdout and
every exit status is checked as a client would see it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import cast

import httpx2
import pytest

import mcphost_bridge
from mcphost.context import mcp_access
from mcphost_bridge.__main__ import build_parser, main
from tests.bridge._helpers import (
    INITIALIZE_PARAMS,
    BridgeProcess,
    Endpoint,
    bridge_command,
    free_port,
    open_bridge,
)
from tests.fakes.shadow_packages import write_shadow_packages

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
}


def assert_only_jsonrpc(lines: list[bytes]) -> None:
    for line in lines:
        message: object = json.loads(line)
        assert isinstance(message, dict), line
        assert cast(dict[str, object], message).get("jsonrpc") == "2.0", line


async def start_legacy_session(bridge_process: BridgeProcess) -> None:
    response = await bridge_process.request(1, "initialize", INITIALIZE_PARAMS)
    assert response["result"]["protocolVersion"] == LEGACY
    await bridge_process.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


async def test_a_session_keeps_stdout_pure_and_eof_deletes_the_session_then_exits_zero(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    extra = ("--header", "X-Trace=abc 123")
    async with open_bridge(endpoint.url, tmp_path, token=endpoint.token, extra=extra) as bridge_process:
        await start_legacy_session(bridge_process)
        listed = await bridge_process.request(2, "tools/list", {})
        assert "echo" in {tool["name"] for tool in listed["result"]["tools"]}
        called = await bridge_process.request(
            "call-3",
            "tools/call",
            {"name": "progress", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}},
        )
        assert called["id"] == "call-3"
        assert called["result"]["content"][0]["text"] == "done"
        await bridge_process.close_stdin()
        assert await bridge_process.wait() == 0
    methods = [json.loads(line).get("method") for line in bridge_process.stdout_lines]
    assert methods.count("notifications/progress") == 2
    assert "notifications/message" in methods
    assert_only_jsonrpc(bridge_process.stdout_lines)
    deletes = [seen for seen in endpoint.seen if seen.method == "DELETE"]
    assert len(deletes) == 1
    assert deletes[0].headers["mcp-session-id"]
    assert all(seen.headers["x-trace"] == "abc 123" for seen in endpoint.seen)
    assert bridge_process.stderr == ""


@pytest.mark.parametrize("form", ["mcphost-bridge", "run context"])
async def test_the_bridge_relays_from_a_folder_holding_packages_named_like_mcphosts(
    endpoint: Endpoint, tmp_path: Path, form: str
) -> None:
    """A client (a harness CLI, an IDE) starts the bridge in its own working directory, which may be a
    project with `bridge/`, `mcphost_bridge/` or `mcphost/` packages: the installed script and the
    command the run context gives (`python -P -m ...`) never import those."""
    project = write_shadow_packages(tmp_path / "project")
    if form == "mcphost-bridge":
        prefix = [str(Path(sys.executable).parent / "mcphost-bridge")]
    else:
        *prefix, flag, _ = mcp_access("http://127.0.0.1:8787", "run_shadow").bridge.command
        assert flag == "--url"
    command = [*prefix, "--url", endpoint.url]
    async with open_bridge(
        endpoint.url, tmp_path, token=endpoint.token, command=command, cwd=project
    ) as bridge:
        await start_legacy_session(bridge)
        listed = await bridge.request(2, "tools/list", {})
        assert "echo" in {tool["name"] for tool in listed["result"]["tools"]}
        await bridge.close_stdin()
        assert await bridge.wait() == 0
    assert bridge.stderr == ""


async def test_a_malformed_line_gets_a_parse_error_and_the_bridge_keeps_going(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    async with open_bridge(endpoint.url, tmp_path, token=endpoint.token) as bridge_process:
        await start_legacy_session(bridge_process)
        await bridge_process.send(b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {')
        parse_error = await bridge_process.receive()
        assert parse_error == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32700, "message": "Parse error"}}
        await bridge_process.send(b'{"id": "x", "hello": "world"}')
        invalid = await bridge_process.receive()
        assert invalid["id"] == "x"
        assert invalid["error"]["code"] == -32600
        await bridge_process.send(b"this is not json at all")  # no id to answer: a stderr diagnostic only
        listed = await bridge_process.request(8, "tools/list", {})
        assert "tools" in listed["result"]
        await bridge_process.close_stdin()
        assert await bridge_process.wait() == 0
    assert_only_jsonrpc(bridge_process.stdout_lines)
    assert len(bridge_process.stdout_lines) == 4  # initialize, parse error, invalid request, tools/list
    assert bridge_process.stderr.count("a stdin line that is") == 3


async def test_eof_waits_for_the_answers_still_owed_then_exits_zero(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    async with open_bridge(endpoint.url, tmp_path, token=endpoint.token) as bridge_process:
        await start_legacy_session(bridge_process)
        await bridge_process.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "slow", "arguments": {"seconds": 1}},
            }
        )
        await bridge_process.close_stdin()
        assert await bridge_process.wait() == 0
    answers = [json.loads(line) for line in bridge_process.stdout_lines]
    assert answers[-1]["id"] == 2
    assert answers[-1]["result"]["content"][0]["text"] == "slept 1.0"


async def test_a_2026_exchange_relays_without_a_session_and_eof_sends_no_delete(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    async with open_bridge(endpoint.url, tmp_path, token=endpoint.token) as bridge_process:
        discovered = await bridge_process.request(1, "server/discover", {"_meta": MODERN_META})
        assert MODERN in discovered["result"]["supportedVersions"]
        called = await bridge_process.request(
            2, "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": MODERN_META}
        )
        assert called["result"]["structuredContent"] == {"text": "hi", "count": 1}
        missing = await bridge_process.request(3, "no/such/method", {"_meta": MODERN_META})
        assert missing["error"]["code"] == -32601  # a JSON-RPC 404 is an answer, not a missing endpoint
        await bridge_process.close_stdin()
        assert await bridge_process.wait() == 0
    assert [seen.method for seen in endpoint.seen] == ["POST", "POST", "POST"]
    assert endpoint.seen[1].headers["mcp-method"] == "tools/call"
    assert endpoint.seen[1].headers["mcp-name"] == "echo"
    assert_only_jsonrpc(bridge_process.stdout_lines)


async def test_a_wrong_token_exits_non_zero_with_the_servers_message_within_seconds(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    # --timeout 120 and a 60 s wait: the exit comes from the refusal, not from any of the bridge's timeouts
    async with open_bridge(
        endpoint.url, tmp_path, token="not-the-token", extra=("--timeout", "120")
    ) as bridge_process:
        await bridge_process.send(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS}
        )
        assert await bridge_process.wait(timeout=60) == 1
    stderr_lines = bridge_process.stderr.splitlines()
    assert len(stderr_lines) == 1
    assert "HTTP 401" in stderr_lines[0]
    assert "token does not belong to this run" in stderr_lines[0]
    assert "not-the-token" not in bridge_process.stderr
    # The request that was refused is answered with the server's error before the bridge leaves.
    [reply] = [json.loads(line) for line in bridge_process.stdout_lines]
    assert reply == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32001, "message": "token does not belong to this run"},
    }


async def test_a_missing_token_is_named_in_the_refusal(endpoint: Endpoint, tmp_path: Path) -> None:
    async with open_bridge(endpoint.url, tmp_path, token=None) as bridge_process:
        await bridge_process.send(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS}
        )
        assert await bridge_process.wait(timeout=60) == 1
    assert "no token was sent: set MCPHOST_RUN_TOKEN" in bridge_process.stderr


async def test_an_unreachable_port_exits_quickly_with_a_clear_message(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    # --timeout 120 and a 60 s wait: a refused connection ends the bridge, it does not wait out a timeout
    async with open_bridge(url, tmp_path, token="t", extra=("--timeout", "120")) as bridge_process:
        await bridge_process.send(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS}
        )
        assert await bridge_process.wait(timeout=60) == 1
    [line] = bridge_process.stderr.splitlines()
    assert line.startswith(f"mcphost-bridge: cannot reach {url}: ")
    [reply] = [json.loads(line) for line in bridge_process.stdout_lines]
    assert reply["id"] == 1
    assert "cannot reach" in reply["error"]["message"]


async def test_an_endpoint_that_is_not_there_exits_with_a_404_message(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    url = f"{endpoint.base}/runs/run_missing/mcp"
    async with open_bridge(url, tmp_path, token=endpoint.token) as bridge_process:
        await bridge_process.send(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS}
        )
        assert await bridge_process.wait(timeout=60) == 1
    [line] = bridge_process.stderr.splitlines()
    assert line == f"mcphost-bridge: {url} was not found (HTTP 404); check --url"


async def test_a_session_the_server_forgot_ends_the_bridge_with_a_clear_message(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    async with open_bridge(endpoint.url, tmp_path, token=endpoint.token) as bridge_process:
        await start_legacy_session(bridge_process)
        await bridge_process.request(2, "tools/list", {})
        session_id = endpoint.seen[-1].headers["mcp-session-id"]
        async with httpx2.AsyncClient() as http:  # someone else ends the session
            deleted = await http.delete(
                endpoint.url,
                headers={
                    "authorization": f"Bearer {endpoint.token}",
                    "mcp-session-id": session_id,
                    "mcp-protocol-version": LEGACY,
                },
            )
            assert deleted.status_code == 200
        # The bridge's GET stream reconnects, learns the session is gone and ends the bridge.
        assert await bridge_process.wait(timeout=60) == 1
    [line] = bridge_process.stderr.splitlines()
    assert line == (
        f"mcphost-bridge: {endpoint.url} no longer knows this session (HTTP 404: Session not found);"
        " restart the client for a new one"
    )


async def test_sigterm_closes_the_session_and_exits_with_128_plus_the_signal(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    async with open_bridge(endpoint.url, tmp_path, token=endpoint.token) as bridge_process:
        await start_legacy_session(bridge_process)
        await bridge_process.request(2, "tools/list", {})
        bridge_process.process.send_signal(signal.SIGTERM)
        assert await bridge_process.wait() == 128 + signal.SIGTERM
    assert [seen.method for seen in endpoint.seen].count("DELETE") == 1


async def test_verbose_logging_never_shows_the_token(endpoint: Endpoint, tmp_path: Path) -> None:
    async with open_bridge(
        endpoint.url, tmp_path, token=endpoint.token, extra=("--verbose",)
    ) as bridge_process:
        await start_legacy_session(bridge_process)
        await bridge_process.request(2, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        await bridge_process.close_stdin()
        assert await bridge_process.wait() == 0
    assert "POST" in bridge_process.stderr or "Sending client message" in bridge_process.stderr
    assert endpoint.token not in bridge_process.stderr
    assert_only_jsonrpc(bridge_process.stdout_lines)


def test_the_command_loads_nothing_but_the_standard_library_and_itself() -> None:
    # Importing the SDK, httpx2, pydantic or anyio took most of a second; a client lists tools sooner.
    listing = "import sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    bare = subprocess.run(
        [sys.executable, "-c", listing], capture_output=True, text=True, check=True, timeout=60
    )
    code = f"import mcphost_bridge.__main__, mcphost_bridge.relay; {listing}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    added = set(out.stdout.split()) - set(bare.stdout.split())
    assert "mcphost_bridge" in added
    assert sorted(m for m in added - {"mcphost_bridge"} if m not in sys.stdlib_module_names) == []


def test_help_explains_the_token_variable_and_the_exit_statuses() -> None:
    text = build_parser().format_help()
    for expected in ("--url", "--token-env", "--header", "--timeout", "MCPHOST_RUN_TOKEN", "exit status"):
        assert expected in text


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--url", "ftp://example.com/mcp"], "--url must be an http:// or https:// URL"),
        (["--url", "http://x/mcp", "--header", "no-equals-sign"], "--header expects K=V"),
        (["--url", "http://x/mcp", "--timeout", "0"], "--timeout must be a positive number"),
        (
            ["--url", "http://x/mcp", "--token-env", "MCPHOST_TEST_UNSET_VARIABLE"],
            "MCPHOST_TEST_UNSET_VARIABLE",
        ),
    ],
)
def test_bad_arguments_exit_2_with_a_reason(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCPHOST_TEST_UNSET_VARIABLE", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert complaint in captured.err


def test_python_dash_m_bridge_is_the_command() -> None:
    completed = subprocess.run(
        [*bridge_command("http://127.0.0.1:1/mcp"), "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert completed.returncode == 0
    assert completed.stdout.startswith("usage: mcphost-bridge")


def test_the_public_surface_is_pinned() -> None:
    assert mcphost_bridge.__all__ == ["DEFAULT_TOKEN_ENV", "BridgeConfig", "BridgeError", "run_bridge"]
