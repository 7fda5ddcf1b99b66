"""The runner SDK: the result builder in-process, `serve()` through real plugin subprocesses."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from functools import partial
from importlib import metadata
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

import mcphost_runners.sdk
from mcphost.plugins.process import PluginSupervisor
from mcphost.protocol import (
    AgentRunResult,
    ArtifactCreated,
    InvalidResult,
    Permissions,
    UnknownResult,
    classify_result,
)
from mcphost_runners._output import result_line
from mcphost_runners.sdk import AgentRunner, RunOutput
from tests.plugins.support import FAST, PLUGINS, REPO, collect, make_context, script_spec, types_of

SDK_PLUGIN = str(PLUGINS / "sdk_plugin.py")


def test_installed_version_is_the_distributions_or_a_placeholder() -> None:
    assert mcphost_runners.sdk.installed_version() == metadata.version("mcphost")
    assert mcphost_runners.sdk.installed_version("no-such-distribution-mcphost-test") == "0.0.0"


def test_the_public_surface_is_pinned() -> None:
    assert mcphost_runners.sdk.__all__ == [
        "AgentRunContext",
        "AgentRunner",
        "ArtifactChunk",
        "ArtifactMetadata",
        "ArtifactRef",
        "AssistantMessage",
        "Capabilities",
        "ConfigField",
        "ContextSupport",
        "Deleted",
        "EmbeddingAnswer",
        "EventPage",
        "EventRecord",
        "HistoryPage",
        "HistorySearch",
        "ImagePart",
        "KnowledgeBase",
        "KnowledgeChunk",
        "ModelInvocation",
        "ModelMessage",
        "ModelTool",
        "ModelUsage",
        "ModelsList",
        "Permissions",
        "RerankAnswer",
        "RerankScore",
        "RunAPI",
        "RunAPIError",
        "RunOutput",
        "RunTool",
        "SearchHit",
        "StateList",
        "StateListItem",
        "StateValue",
        "StateWritten",
        "StorageList",
        "StorageListItem",
        "StorageValue",
        "StorageWritten",
        "TextPart",
        "ToolCallPart",
        "ToolResult",
        "ToolResultPart",
        "TranscriptItem",
        "Usage",
        "installed_version",
        "serve",
    ]


def test_every_public_name_imports_from_the_sdk_module() -> None:
    namespace: dict[str, object] = {}
    exec("from mcphost_runners.sdk import *", namespace)
    missing = [name for name in mcphost_runners.sdk.__all__ if name not in namespace]
    assert missing == []
    # the parts are private modules; the names plugin authors use are the SDK's
    assert mcphost_runners.sdk.AgentRunner.__module__ == "mcphost_runners._runner"
    assert mcphost_runners.sdk.RunOutput.__module__ == "mcphost_runners._output"
    assert mcphost_runners.sdk.serve.__module__ == "mcphost_runners._plugin_server"


def collecting(run_id: str = "run_1") -> tuple[RunOutput, list[AgentRunResult]]:
    sent: list[AgentRunResult] = []

    async def send(result: AgentRunResult) -> None:
        sent.append(result)

    return RunOutput(run_id, send), sent


async def test_the_builder_numbers_results_from_one_and_stamps_them() -> None:
    out, sent = collecting("run_abc")
    await out.delta("he")
    await out.message("hello")
    await out.tool_started("call_1", "search", {"q": "x"})
    await out.tool_completed("call_1", "search", error_code="not_found", error_message="nothing")
    await out.state("actor", "likes", ["tea"])
    await out.action("reaction.add", payload={"emoji": "+1"})
    await out.completed("bye", finish_reason="length")
    assert [r.type for r in sent] == [
        "message.delta",
        "message.completed",
        "tool.call.started",
        "tool.call.completed",
        "state.updated",
        "action.requested",
        "run.completed",
    ]
    assert [r.sequence for r in sent] == list(range(1, 8))
    assert {r.run_id for r in sent} == {"run_abc"}
    assert all(r.timestamp is not None for r in sent)
    # What goes on the wire validates on the host side as the same, known result.
    for result in sent:
        wire = json.loads(json.dumps(result.model_dump(mode="json")))
        assert classify_result(wire) == result
    assert out.status == "completed"
    assert out.sequence == 7


async def test_a_failure_ends_the_run_and_nothing_may_follow() -> None:
    out, sent = collecting()
    await out.failed("rate_limited", "slow down", retryable=True, details={"after_s": 3})
    assert out.status == "failed"
    with pytest.raises(RuntimeError, match=r"already ended with run.failed; nothing may follow it"):
        await out.delta("late")
    assert len(sent) == 1
    assert sent[0].type == "run.failed"
    assert sent[0].data.code == "rate_limited"


async def test_an_unknown_error_code_is_refused_when_built() -> None:
    out, _ = collecting()
    with pytest.raises(ValueError, match="unknown error code 'oops'"):
        await out.failed("oops", "not a protocol code")


def encoding(run_id: str = "run_1") -> tuple[RunOutput, list[bytes]]:
    """A `RunOutput` whose results are encoded as `serve()` encodes them, the lines collected."""
    sent: list[bytes] = []

    async def send(result: AgentRunResult) -> None:
        sent.append(result_line(result))

    return RunOutput(run_id, send), sent


async def test_values_that_spell_nan_or_need_big_integers_are_sent_exactly() -> None:
    """The fast encoder writes NaN as `NaN`; a line that merely spells it is encoded again, the same."""
    out, sent = encoding()
    value = {"text": "NaN or -Infinity", "big": 2**70, "small": 1e-7, "nested": ["é\x00\u2028", None]}
    await out.state("conversation", "k", value)
    await out.message("Infinity")
    (state, message) = [json.loads(line)["params"]["result"] for line in sent]
    assert state["data"]["value"] == value
    assert message["data"]["message"]["content"] == "Infinity"
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in sent)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (float("nan"), r"data\.value\.x: nan is not a finite number"),
        (float("-inf"), r"data\.value\.x: -inf is not a finite number"),
        ("\ud800", r"data\.value\.x: contains a lone surrogate \(U\+D800\)"),
    ],
)
async def test_a_value_json_or_utf8_cannot_carry_is_refused_by_name_and_not_sent(
    value: object, reason: str
) -> None:
    out, sent = encoding()
    with pytest.raises(ValueError, match=rf"^state\.updated result: {reason}.*; it was not sent$"):
        await out.state("conversation", "k", {"x": value})
    # Nothing was sent, no sequence number was spent, and the run goes on.
    assert sent == []
    await out.state("conversation", "k", {"x": 1.5})
    await out.completed()
    wire = [json.loads(line)["params"]["result"] for line in sent]
    assert [(r["type"], r["sequence"]) for r in wire] == [("state.updated", 1), ("run.completed", 2)]


async def test_a_refused_value_nested_deep_is_still_named() -> None:
    out, sent = encoding()
    deep: object = float("inf")
    for _ in range(40):
        deep = {"d": deep}
    with pytest.raises(ValueError, match=r"^tool\.call\.started result: data\.parameters\.q(\.d){40}: inf "):
        await out.tool_started("call_1", "search", {"q": deep})
    assert sent == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("a\x00b", "contains a NUL character"),
        (2**63, "the integer is outside the signed 64-bit range"),
    ],
)
async def test_what_only_the_stores_refuse_is_sent_unchanged_and_the_host_names_it(
    value: object, reason: str
) -> None:
    out, sent = encoding()
    await out.state("conversation", "k", {"x": value})
    (line,) = sent
    wire = json.loads(line)["params"]["result"]
    assert wire["data"]["value"] == {"x": value}  # not turned into something else on the way
    refused = classify_result(wire)
    assert isinstance(refused, InvalidResult)
    assert refused.message.startswith(f"data.value.x: {reason}")


async def test_a_refused_value_escaping_the_runner_fails_the_run_saying_why() -> None:
    status, results = await run_sdk("not-a-number")
    assert status == "failed"
    assert [r["type"] for r in results] == ["message.delta", "run.failed"]
    assert results[-1]["data"]["code"] == "runner.error"
    assert results[-1]["data"]["message"] == (
        "state.updated result: data.value.mean: nan is not a finite number; JSON numbers must be finite; "
        "it was not sent"
    )
    # No state.updated with `{"mean": null}` reached the host.
    assert all(r["type"] != "state.updated" for r in results)


async def test_an_inline_artifact_carries_its_size_and_sha256() -> None:
    out, sent = collecting()
    ref = await out.artifact(name="a.txt", mime_type="text/plain", content=b"abc")
    assert ref.size == 3
    assert ref.sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    [result] = sent
    assert isinstance(result, ArtifactCreated)
    assert result.data.content_base64 == "YWJj"
    with pytest.raises(ValueError, match="the limit is 1048576"):
        await out.artifact(name="big.bin", content=b"x" * (1024 * 1024 + 1))
    with pytest.raises(ValueError, match="needs `content` or the `artifact_id`"):
        await out.artifact(name="nothing")
    by_ref = await out.artifact(name="made.txt", artifact_id="art_made_via_mcp")
    assert by_ref.artifact_id == "art_made_via_mcp"


def test_the_manifest_comes_from_class_attributes() -> None:
    class Notes(AgentRunner):
        name = "notes"
        label = {"en": "Notes"}
        permissions = Permissions(history=["page"], state=["read"])

    manifest = Notes().manifest(author="acme", plugin="kit")
    assert manifest.id == "plugin:acme/kit/notes"
    assert manifest.label == {"en": "Notes"}
    assert manifest.permissions.history == ["page"]
    assert manifest.protocol_version == "1"


# -- serve() through a real plugin process ------------------------------------------------------------


async def run_sdk(runner: str) -> tuple[str, list[Any]]:
    async with PluginSupervisor([script_spec("sdk_plugin.py", name="sdk")], timings=FAST) as supervisor:
        status, results = await collect(supervisor.plugins[0], make_context(), runner=runner)
    return status, [r.obj for r in results]


async def test_every_builder_method_reaches_the_host_valid_and_in_order() -> None:
    status, results = await run_sdk("everything")
    assert status == "completed"
    assert [r["type"] for r in results] == [
        "message.delta",
        "tool.call.started",
        "tool.call.completed",
        "state.updated",
        "artifact.created",
        "action.requested",
        "message.completed",
        "run.completed",
    ]
    assert [r["sequence"] for r in results] == list(range(1, 9))
    for raw in results:
        assert not isinstance(classify_result(raw), (InvalidResult, UnknownResult))


async def test_an_exception_fails_the_run_with_runner_error_and_a_traceback_on_stderr(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mcphost.plugins")
    status, results = await run_sdk("boom")
    assert status == "failed"
    assert [r["type"] for r in results] == ["message.delta", "run.failed"]
    assert results[-1]["data"]["code"] == "runner.error"
    assert results[-1]["data"]["message"] == "boom happened"
    stderr = [r.getMessage() for r in caplog.records if r.__dict__.get("plugin") == "sdk"]
    assert any("Traceback" in line for line in stderr)
    assert any('raise ValueError("boom happened")' in line for line in stderr)


async def test_a_run_that_returns_without_a_terminal_result_is_completed() -> None:
    status, results = await run_sdk("quiet")
    assert status == "completed"
    assert [(r["type"], r["sequence"]) for r in results] == [("run.completed", 1)]


async def test_print_goes_to_stderr_and_never_corrupts_the_protocol(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcphost.plugins")
    async with PluginSupervisor([script_spec("sdk_plugin.py", name="sdk")], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        status, results = await collect(plugin, make_context(), runner="printer")
        assert plugin.diagnostics == 0
    assert status == "completed"
    assert types_of(results) == ["message.completed", "run.completed"]
    assert any(
        r.getMessage() == "[plugin sdk] a stray print that must not reach the protocol"
        for r in caplog.records
    )


async def test_nothing_is_sent_after_the_run_ended(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcphost.plugins")
    status, results = await run_sdk("after-end")
    assert status == "completed"
    assert [r["type"] for r in results] == ["run.completed"]
    assert any("already ended with run.completed" in r.getMessage() for r in caplog.records)


async def test_results_emitted_from_two_tasks_keep_strictly_increasing_sequences() -> None:
    status, results = await run_sdk("parallel")
    assert status == "completed"
    assert [r["sequence"] for r in results] == list(range(1, 52))
    assert {r["data"]["chunk"]["content"] for r in results[:-1]} == {
        f"{t}{i}" for t in "ab" for i in range(25)
    }


async def test_a_cancel_stops_the_run_which_reports_cancelled() -> None:
    async with PluginSupervisor([script_spec("sdk_plugin.py", name="sdk")], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        ctx = make_context()
        outcome: list[tuple[str, list[Any]]] = []
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                status, results = await collect(plugin, ctx, runner="sleepy")
                outcome.append((status, [r.obj for r in results]))

            tg.start_soon(run)
            while True:
                if await plugin.cancel(ctx.run_id, "the user changed their mind"):
                    break
                await anyio.sleep(0.01)
    [(status, results)] = outcome
    assert status == "failed"
    assert [r["type"] for r in results][-1] == "run.failed"
    assert results[-1]["data"]["code"] == "cancelled"
    assert results[-1]["data"]["message"] == "Run cancelled: the user changed their mind"


# -- the raw wire ------------------------------------------------------------------------------------


class RawPlugin:
    """The SDK plugin driven line by line, to check what the host layer would hide."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        assert process.stdout is not None
        self._lines = BufferedByteReceiveStream(process.stdout)

    async def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.process.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        await self.process.stdin.send(data + b"\n")

    async def receive(self) -> dict[str, Any]:
        with anyio.fail_after(10):
            return json.loads(await self._lines.receive_until(b"\n", 8 * 1024 * 1024))

    async def request(self, request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await self.receive()

    async def wait(self) -> int:
        with anyio.fail_after(10):
            return await self.process.wait()


@asynccontextmanager
async def raw_plugin(*command: str) -> AsyncGenerator[RawPlugin]:
    process = await anyio.open_process([sys.executable, *(command or (SDK_PLUGIN,))], cwd=REPO)
    try:
        yield RawPlugin(process)
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()


@pytest.mark.parametrize("module", ["mcphost_runners.echo", "mcphost_runners.memo"])
async def test_a_bundled_runner_reports_the_installed_mcphost_version(module: str) -> None:
    async with raw_plugin("-m", module) as plugin:
        answer = await plugin.request(
            1, "initialize", {"protocol_version": "1", "host": {"name": "t", "version": "0"}}
        )
        assert answer["result"]["plugin"]["version"] == metadata.version("mcphost")


def run_params(runner: str, run_id: str = "run_raw") -> dict[str, Any]:
    return {"runner": runner, "context": make_context(run_id=run_id).model_dump(mode="json")}


async def test_initialize_answers_with_the_plugin_and_its_manifests() -> None:
    async with raw_plugin() as plugin:
        answer = await plugin.request(
            1, "initialize", {"protocol_version": "1", "host": {"name": "t", "version": "0"}}
        )
        assert answer["id"] == 1
        assert answer["result"]["plugin"] == {"author": "test", "name": "sdk", "version": "0.0.1"}
        ids = [m["id"] for m in answer["result"]["runners"]]
        assert ids[:2] == ["plugin:test/sdk/everything", "plugin:test/sdk/boom"]
        assert len(ids) == 10


async def test_unknown_methods_and_runners_are_json_rpc_errors() -> None:
    async with raw_plugin() as plugin:
        await plugin.send(
            {"jsonrpc": "2.0", "method": "telemetry/unknown", "params": {}}
        )  # a notification: ignored
        unknown = await plugin.request(1, "tools/list", {})
        assert unknown == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32601, "message": "Method not found: tools/list"},
        }
        no_runner = await plugin.request(2, "runner/run", run_params("nope"))
        assert no_runner["error"]["code"] == -32602
        assert "Unknown runner 'nope'" in no_runner["error"]["message"]


async def test_a_line_over_the_limit_from_the_host_is_skipped() -> None:
    async with raw_plugin() as plugin:
        await plugin.send(b"x" * (4 * 1024 * 1024 + 10))
        answer = await plugin.request(7, "no/such", {})
        assert answer["id"] == 7


@pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(("asyncio", dict[str, bool]()), id="pipe"),  # asyncio gives the plugin a pipe for stdout
        pytest.param(("asyncio", {"use_uvloop": True}), id="socket"),  # uvloop (libuv): a socket pair
    ],
)
async def test_output_larger_than_the_pipe_waits_for_the_host_and_arrives_whole_in_order() -> None:
    # The plugin writes its non-blocking stdout on the event loop: a full pipe must make it wait for
    # the reader and resume mid-line, never drop, split or reorder a line.
    async with raw_plugin() as plugin:
        await plugin.send({"jsonrpc": "2.0", "id": 1, "method": "runner/run", "params": run_params("bulk")})
        first = await plugin.receive()
        await anyio.sleep(0.3)  # let the plugin fill the pipe (and this side's buffer) before reading on
        messages = [first, *[await plugin.receive() for _ in range(251)]]
    results = [m["params"]["result"] for m in messages[:-1]]
    assert [r["sequence"] for r in results] == list(range(1, 252))
    assert [r["data"]["chunk"]["content"] for r in results[:-1]] == [
        f"{i:03d}" + "x" * 4096 for i in range(250)
    ]
    assert results[-1]["type"] == "run.completed"
    assert messages[-1] == {"jsonrpc": "2.0", "id": 1, "result": {"status": "completed"}}


async def test_lines_sent_back_to_back_reach_the_host_in_one_write() -> None:
    """The echo runner's results, sent without the runner letting the loop run between them, and the
    run's answer go out in one write, which the host reads at one wake-up as one batch (one transaction
    there): the run yields once between its last result and its answer (leaving its `RunAPI`), and the
    flusher waits a loop turn for it. The plugin's stdout is a `SOCK_SEQPACKET` socket here, which keeps
    each write a record of its own whenever the reader reads."""
    host_end, plugin_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    host_end.settimeout(10)
    with host_end:
        with plugin_end:
            process = await anyio.open_process(
                [sys.executable, "-m", "mcphost_runners.echo"], stdout=plugin_end.fileno(), cwd=REPO
            )
        try:
            assert process.stdin is not None
            request = {"jsonrpc": "2.0", "id": 1, "method": "runner/run", "params": run_params("default")}
            await process.stdin.send(json.dumps(request).encode() + b"\n")
            records = [await anyio.to_thread.run_sync(host_end.recv, 1 << 16)]
            while b'"id":1' not in records[-1]:  # the answer, in this write or a later one
                records.append(await anyio.to_thread.run_sync(host_end.recv, 1 << 16))
        finally:
            with anyio.CancelScope(shield=True):
                process.kill()
                await process.aclose()
    first = [json.loads(line) for line in records[0].splitlines()]
    assert [m["params"]["result"]["type"] for m in first[:4]] == [
        "message.delta",
        "message.completed",
        "state.updated",
        "run.completed",
    ]
    answer = json.loads(records[-1].splitlines()[-1])
    assert answer == {"jsonrpc": "2.0", "id": 1, "result": {"status": "completed"}}
    assert len(records) == 1  # the answer came in the results' write
    assert len(first) == 5


async def test_a_runner_that_sends_without_awaiting_anything_else_can_still_be_cancelled() -> None:
    """A runner whose loop awaits nothing but its results lets the plugin's loop run every
    `_CORK_BYTES`, even when the host drains a pipe large enough that no write ever waits: the
    plugin reads `runner/cancel` and the run ends cancelled."""
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)  # 1 MiB, the unprivileged maximum
    except OSError:
        pytest.skip("this system does not let a pipe grow to 1 MiB")
    with os.fdopen(read_end, "rb", buffering=0) as reading:
        try:
            process = await anyio.open_process([sys.executable, SDK_PLUGIN], stdout=write_end, cwd=REPO)
        finally:
            os.close(write_end)
        tail = b""
        flooding = threading.Event()

        def drain() -> None:  # faster than the plugin writes (nothing parsed), until the run's answer
            nonlocal tail
            seen = 0
            while chunk := reading.read(1 << 20):
                seen += len(chunk)
                if seen > 1 << 20:
                    flooding.set()
                tail = (tail + chunk)[-(1 << 16) :]
                if b'"id":1,' in tail:
                    return

        try:
            assert process.stdin is not None
            run = {"jsonrpc": "2.0", "id": 1, "method": "runner/run", "params": run_params("flood")}
            cancel = {
                "jsonrpc": "2.0",
                "method": "runner/cancel",
                "params": {"run_id": "run_raw", "reason": "enough"},
            }
            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(partial(anyio.to_thread.run_sync, drain, abandon_on_cancel=True))
                    await process.stdin.send(json.dumps(run).encode() + b"\n")
                    await anyio.to_thread.run_sync(flooding.wait, abandon_on_cancel=True)  # it floods
                    await process.stdin.send(json.dumps(cancel).encode() + b"\n")
        finally:
            with anyio.CancelScope(shield=True):
                process.kill()
                await process.aclose()
    lines = [json.loads(line) for line in tail.splitlines()[-2:]]
    assert lines[-1] == {"jsonrpc": "2.0", "id": 1, "result": {"status": "failed"}}
    assert lines[-2]["params"]["result"]["data"]["code"] == "cancelled"


async def test_shutdown_cancels_in_flight_runs_answers_and_exits() -> None:
    async with raw_plugin() as plugin:
        await plugin.send({"jsonrpc": "2.0", "id": 1, "method": "runner/run", "params": run_params("sleepy")})
        first = await plugin.receive()
        assert first["params"]["result"]["type"] == "message.delta"
        await plugin.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": {}})
        cancelled, run_answer, shutdown_answer = [await plugin.receive() for _ in range(3)]
        assert cancelled["params"]["result"]["type"] == "run.failed"
        assert cancelled["params"]["result"]["data"]["code"] == "cancelled"
        assert run_answer == {"jsonrpc": "2.0", "id": 1, "result": {"status": "failed"}}
        assert shutdown_answer == {"jsonrpc": "2.0", "id": 2, "result": {}}
        assert await plugin.wait() == 0


async def test_stdin_eof_makes_the_plugin_exit() -> None:
    async with raw_plugin() as plugin:
        assert plugin.process.stdin is not None
        await plugin.process.stdin.aclose()
        assert await plugin.wait() == 0


def test_a_serving_plugin_freezes_its_imports_and_collects_every_ten_thousand_allocations() -> None:
    # In a fresh interpreter: freezing this test process's heap would outlive the test. `serve` up to
    # its event loop (replaced: the check is what it did before), with the echo runner.
    child = (
        "import gc, os, anyio\n"
        "from mcphost.common import gcstart\n"
        "from mcphost_runners import _plugin_server\n"
        "from mcphost_runners.echo import EchoRunner\n"
        "default = gc.get_threshold()\n"
        "anyio.run = lambda *args, **kwargs: None\n"
        "_plugin_server.serve(EchoRunner(), author='t', plugin='p')\n"
        "assert gc.get_freeze_count() > 1000, gc.get_freeze_count()\n"
        "assert gc.get_threshold() == (gcstart.GEN0_THRESHOLD, *default[1:]), gc.get_threshold()\n"
        "assert gc.isenabled()\n"
        "os.write(2, b'ok')\n"  # serve made fd 1 a copy of stderr
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith("ok"), done.stderr
