"""Plugin processes against real subprocesses: the echo runner and the misbehaving raw-protocol plugin."""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import replace

import anyio
import pytest

from mcphost.errors import PluginError, RunnerNotFoundError
from mcphost.plugins.process import PluginSpec, PluginSupervisor, RawResult, plugin_environment
from mcphost.plugins.registry import RunnerRegistry
from mcphost.protocol import MAX_LINE_BYTES, MAX_RESULT_BYTES
from tests.plugins.support import (
    FAST,
    REPO,
    collect,
    echo_spec,
    eventually,
    group_alive,
    make_context,
    script_spec,
    types_of,
)


def misbehave(*args: str, name: str = "misbehave", env: dict[str, str] | None = None) -> PluginSpec:
    return script_spec("misbehave.py", *args, name=name, env=env)


def contents(results: list[RawResult]) -> list[object]:
    return [
        r.obj["data"].get("message", {}).get("content")
        for r in results
        if r.obj.get("type") == "message.completed"
    ]


async def test_initialize_registers_the_manifests_the_plugin_declares() -> None:
    async with PluginSupervisor([echo_spec()], timings=FAST) as supervisor:
        plugin = supervisor.get("echo")
        assert plugin.state == "running"
        assert plugin.pid is not None
        assert plugin.info is not None
        assert (plugin.info.author, plugin.info.name) == ("mcphost", "echo")
        assert [m.id for m in plugin.manifests] == ["plugin:mcphost/echo/default"]
        assert plugin.rejected == ()
        assert plugin.last_error is None


async def test_rejected_manifests_are_kept_with_a_precise_reason() -> None:
    async with PluginSupervisor([script_spec("bad_manifest.py")], timings=FAST) as supervisor:
        plugin = supervisor.get("bad_manifest")
        assert [m.id for m in plugin.manifests] == ["plugin:test/badmanifest/good"]
        reasons = {r.index: r.reason for r in plugin.rejected}
        assert reasons[1] == (
            "manifest 1 ('plugin:test/badmanifest/future'): protocol_version '2' is not supported; this host speaks '1'"
        )
        assert reasons[2].startswith("manifest 2 ('Not A Runner Id'): id: Runner id 'Not A Runner Id'")
        assert "plugin:<author>/<plugin>/<runner>" in reasons[2]
        assert reasons[3] == (
            "manifest 3 ('plugin:acme/other/thief'): runner id 'plugin:acme/other/thief' does not belong to plugin "
            "'test/badmanifest'; expected 'plugin:test/badmanifest/<runner>'"
        )
        assert reasons[4].startswith("manifest 4 ('plugin:test/badmanifest/greedy'): permissions.state.1:")
        assert "needs a non-empty 'options' list" in reasons[5]
        assert all(r.plugin == "bad_manifest" for r in plugin.rejected)
        assert plugin.rejected[0].raw["protocol_version"] == "2"
        # The good runner is served although its siblings were refused.
        status, results = await collect(plugin, make_context(), runner="good")
        assert (status, contents(results)) == ("completed", ["good"])


async def test_a_rejected_runner_cannot_be_run() -> None:
    async with PluginSupervisor([script_spec("bad_manifest.py")], timings=FAST) as supervisor:
        send, _receive = anyio.create_memory_object_stream[RawResult](1)
        with _receive, pytest.raises(RunnerNotFoundError, match="has no accepted runner 'future'"):
            await supervisor.plugins[0].run("future", make_context(), send)


async def test_twenty_concurrent_runs_share_one_process_and_get_their_own_results() -> None:
    async with PluginSupervisor([echo_spec()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        pid = plugin.pid
        outcomes: dict[str, tuple[str, list[RawResult]]] = {}

        async def one(i: int) -> None:
            ctx = make_context(f"text number {i}")
            outcomes[ctx.run_id] = await collect(plugin, ctx)
            assert contents(outcomes[ctx.run_id][1]) == [f"text number {i}"]

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(one, i)
        assert len(outcomes) == 20
        for run_id, (status, results) in outcomes.items():
            assert status == "completed"
            assert {r.obj["run_id"] for r in results} == {run_id}
        assert plugin.pid == pid


async def test_runs_of_one_process_proceed_concurrently() -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        started = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(collect, plugin, make_context("slow:0.5"))
        # One after the other this would take 10 s.
        assert anyio.current_time() - started < 4


async def test_results_arrive_in_the_order_the_plugin_wrote_them() -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        status, results = await collect(supervisor.plugins[0], make_context("flood:300"), buffer=1)
        assert status == "completed"
        assert [r.obj["sequence"] for r in results] == list(range(1, 302))
        assert [r.obj["data"]["chunk"]["content"] for r in results[:3]] == ["chunk 1", "chunk 2", "chunk 3"]
        compact = json.dumps(results[0].obj, separators=(",", ":"), ensure_ascii=False).encode()
        assert results[0].nbytes == len(compact)


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("dup-seq", ["message.delta"] * 3 + ["message.completed", "run.completed"]),
        ("gap-seq", ["message.delta"] * 3 + ["message.completed", "run.completed"]),
        ("no-output", []),
        ("after-complete", ["message.completed", "run.completed", "message.delta"]),
        ("unknown-type", ["telemetry.custom", "message.completed", "run.completed"]),
        ("invalid-data", ["message.delta", "run.completed"]),
        ("artifact-bad-sha", ["artifact.created", "message.completed", "run.completed"]),
    ],
)
async def test_results_pass_through_unjudged(behaviour: str, expected: list[str]) -> None:
    # Judging results is the orchestrator's job; the wire delivers them exactly as written.
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        status, results = await collect(supervisor.plugins[0], make_context(behaviour))
        assert status == "completed"
        assert types_of(results) == expected


async def test_a_cancel_reaches_the_plugin_and_the_run_ends_cancelled() -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        ctx = make_context("slow:30")
        outcome: list[tuple[str, list[RawResult]]] = []
        started = anyio.current_time()
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                outcome.append(await collect(plugin, ctx))

            tg.start_soon(run)
            assert not await plugin.cancel("run_not_active", "nothing to cancel")
            while True:  # the run becomes active once its request is written
                if await plugin.cancel(ctx.run_id, "the user asked"):
                    break
                await anyio.sleep(0.01)
        [(status, results)] = outcome
        assert status == "failed"
        assert results[-1].obj["type"] == "run.failed"
        assert results[-1].obj["data"]["code"] == "cancelled"
        assert anyio.current_time() - started < 10


async def test_a_crash_fails_in_flight_runs_and_the_plugin_restarts() -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        old_pid = plugin.pid
        errors: list[PluginError] = []

        async def doomed(text: str) -> None:
            with pytest.raises(PluginError) as caught:
                await collect(plugin, make_context(text))
            errors.append(caught.value)

        async with anyio.create_task_group() as tg:
            tg.start_soon(doomed, "slow:30")
            tg.start_soon(doomed, "crash")
        assert len(errors) == 2
        for error in errors:
            assert error.code == "runner.crashed"
            assert error.message.startswith("Plugin 'misbehave' exited with code 7")
            assert "was in flight" in error.message
            assert "crashing on purpose" in error.message
        await eventually(
            lambda: plugin.state == "running" and plugin.pid not in (None, old_pid), what="a restart"
        )
        assert plugin.restarts == 1
        assert plugin.last_error is not None
        assert plugin.last_error.startswith("exited with code 7")
        status, results = await collect(plugin, make_context("ok"))
        assert (status, contents(results)) == ("completed", ["ok"])


async def test_a_plugin_that_stops_answering_fails_its_runs_and_is_restarted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probing = replace(FAST, probe_interval=0.2, probe_timeout=1.0)
    async with PluginSupervisor([misbehave()], timings=probing) as supervisor:
        plugin = supervisor.plugins[0]
        old_pid = plugin.pid
        # Alive and answering: probes come and go (answered with -32601) and log nothing.
        await anyio.sleep(0.6)
        status, _ = await collect(plugin, make_context("ok"))
        assert (status, plugin.restarts, plugin.diagnostics) == ("completed", 0, 0)

        errors: list[PluginError] = []

        async def doomed(text: str) -> None:
            with pytest.raises(PluginError) as caught:
                await collect(plugin, make_context(text))
            errors.append(caught.value)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(doomed, "slow:60")
                tg.start_soon(doomed, "freeze")
        for error in errors:
            assert error.code == "runner.crashed"
            assert "stopped answering (no answer to a probe within 1 s)" in error.message
        assert len(errors) == 2
        assert "did not answer a liveness probe within 1 s; restarting it" in caplog.text
        await eventually(
            lambda: plugin.state == "running" and plugin.pid not in (None, old_pid), what="a restart"
        )
        assert plugin.restarts == 1
        status, results = await collect(plugin, make_context("ok"))
        assert (status, contents(results)) == ("completed", ["ok"])


async def test_a_plugin_that_ignores_unknown_requests_is_not_probed_to_death(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # bad_manifest.py never answers a method it does not know, against JSON-RPC: its first probe, sent
    # while it is known to be answering, goes unanswered, so probing stops instead of killing it.
    probing = replace(FAST, probe_interval=0.1, probe_timeout=0.5)
    async with PluginSupervisor(
        [script_spec("bad_manifest.py", name="sloppy")], timings=probing
    ) as supervisor:
        plugin = supervisor.plugins[0]
        await eventually(
            lambda: "does not answer JSON-RPC requests it does not know" in caplog.text, what="the warning"
        )
        await anyio.sleep(1.0)
        assert (plugin.state, plugin.restarts) == ("running", 0)
        status, _ = await collect(plugin, make_context("hi"), runner="good")
        assert status == "completed"


async def test_a_run_asked_for_while_its_plugin_restarts_waits_for_the_new_process_and_completes() -> None:
    # Regression: such a run failed `runner.crashed` at once, so one poison event failed every
    # conversation served by the plugin until the restart.
    slow_restart = replace(FAST, backoff_initial=1.0)
    async with PluginSupervisor([misbehave()], timings=slow_restart) as supervisor:
        plugin = supervisor.plugins[0]
        old_pid = plugin.pid
        with pytest.raises(PluginError):
            await collect(plugin, make_context("crash"))
        assert plugin.state == "restarting"
        status, results = await collect(plugin, make_context("ok"))
        assert (status, contents(results)) == ("completed", ["ok"])
        assert plugin.pid not in (None, old_pid)
        assert plugin.restarts == 1


async def test_a_run_waiting_for_a_restart_ends_with_its_callers_deadline() -> None:
    slow_restart = replace(FAST, backoff_initial=30.0)
    async with PluginSupervisor([misbehave()], timings=slow_restart) as supervisor:
        plugin = supervisor.plugins[0]
        with pytest.raises(PluginError):
            await collect(plugin, make_context("crash"))
        assert plugin.state == "restarting"
        with pytest.raises(TimeoutError), anyio.fail_after(0.5):
            await collect(plugin, make_context("ok"))
        assert plugin.state == "restarting"  # still waiting to restart: the run gave up on its own


async def test_a_crash_looping_plugin_is_failed_with_the_reason_and_its_runs_fail_at_once() -> None:
    looping = replace(FAST, crash_loop_limit=3, crash_loop_window=60.0, crash_loop_retry=60.0)
    async with PluginSupervisor([misbehave(), echo_spec()], timings=looping) as supervisor:
        plugin, echo = supervisor.plugins
        for _ in range(3):  # each run waits for the restart the previous crash caused, then crashes it
            with pytest.raises(PluginError, match="exited with code 7"):
                await collect(plugin, make_context("crash"))
        await eventually(lambda: plugin.state == "failed", what="the crash loop verdict")
        assert plugin.last_error is not None
        assert plugin.last_error.startswith("crash loop: ended 3 times within 60 s (last: exited with code 7")
        assert "tried again every 60 s or when the host restarts" in plugin.last_error
        [status] = [s for s in RunnerRegistry(supervisor.plugins).plugins() if s.name == "misbehave"]
        assert (status.state, status.last_error) == ("failed", plugin.last_error)
        with pytest.raises(
            PluginError, match=r"is not running \(failed: crash loop: ended 3 times"
        ) as caught:
            with anyio.fail_after(5):  # at once, not after a wait for a restart that is not coming
                await collect(plugin, make_context("ok"))
        assert caught.value.details["state"] == "failed"
        assert (await collect(echo, make_context("unrelated")))[0] == "completed"


async def test_a_crash_looping_plugin_is_started_again_after_crash_loop_retry_and_serves_runs() -> None:
    looping = replace(FAST, crash_loop_limit=2, crash_loop_window=60.0, crash_loop_retry=1.0)
    async with PluginSupervisor([misbehave()], timings=looping) as supervisor:
        plugin = supervisor.plugins[0]
        for _ in range(2):
            with pytest.raises(PluginError, match="exited with code 7"):
                await collect(plugin, make_context("crash"))
        await eventually(lambda: plugin.state == "failed", what="the crash loop verdict")
        await eventually(lambda: plugin.state == "running", what="the retry after crash_loop_retry")
        status, results = await collect(plugin, make_context("ok"))
        assert (status, contents(results)) == ("completed", ["ok"])
        # The count starts afresh: one more crash restarts it and does not mark it failed again.
        with pytest.raises(PluginError, match="exited with code 7"):
            await collect(plugin, make_context("crash"))
        assert (await collect(plugin, make_context("ok")))[0] == "completed"


async def test_a_plugin_that_never_answers_initialize_fails_without_hurting_the_host() -> None:
    # Long enough for the echo plugin to start on a loaded machine, which it must do meanwhile.
    timings = replace(FAST, initialize=3.0)
    async with PluginSupervisor(
        [misbehave("--silent", name="silent"), echo_spec()], timings=timings
    ) as supervisor:
        silent, echo = supervisor.plugins
        assert silent.state == "failed"
        assert silent.last_error == "did not answer 'initialize' within 3 s"
        assert silent.manifests == ()
        assert echo.state == "running"
        status, _ = await collect(echo, make_context("still here"))
        assert status == "completed"
        await eventually(lambda: silent.restarts >= 1, what="a retry")


async def test_a_plugin_that_exits_at_once_is_failed_with_its_exit_code_and_retried() -> None:
    async with PluginSupervisor([misbehave("--exit-immediately")], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        assert plugin.state == "failed"
        assert plugin.last_error == (
            "exited with code 3 before answering 'initialize'; last stderr line: 'misbehave: exiting at once as asked'"
        )
        await eventually(lambda: plugin.restarts >= 2, what="retries with backoff")
        assert plugin.state in ("failed", "starting")


_RESPAWN_SCRIPT = """
import gc
from collections.abc import Callable
from dataclasses import replace

import anyio

from mcphost.plugins.process import PluginSupervisor
from tests.plugins.support import FAST, script_spec

timings = replace(FAST, backoff_initial=0.0, backoff_max=0.0)


async def once(delay: float) -> None:
    async with PluginSupervisor([script_spec("misbehave.py", "--exit-immediately")], timings=timings):
        await anyio.sleep(delay)


for attempt in range(20):
    anyio.run(once, 0.005 * (attempt % 6))  # a fresh loop each time: what it leaves behind warns as it closes
    gc.collect()
print("clean")
"""


async def test_stopping_while_a_plugin_respawns_leaks_no_process() -> None:
    # Regression: a cancellation landing inside the spawn left an unreaped child and open pipes behind,
    # which only shows once the event loop is closed; hence a separate interpreter with many loops.
    done = await anyio.run_process(
        [sys.executable, "-X", "dev", "-c", _RESPAWN_SCRIPT],
        cwd=REPO,
        check=False,
        env=plugin_environment({}),
    )
    stderr = done.stderr.decode()
    assert done.stdout.decode().strip() == "clean", stderr
    assert "ResourceWarning" not in stderr
    assert "is closed" not in stderr  # asyncio: "Loop ... that handles pid ... is closed"


async def test_a_command_that_cannot_start_is_failed_not_fatal() -> None:
    ghost = PluginSpec("ghost", ["/nonexistent/mcphost-ghost-plugin"])
    async with PluginSupervisor([ghost, echo_spec()], timings=FAST) as supervisor:
        plugin = supervisor.get("ghost")
        assert plugin.state == "failed"
        assert plugin.last_error is not None
        assert plugin.last_error.startswith("cannot start command ['/nonexistent/mcphost-ghost-plugin']")
        assert supervisor.get("echo").state == "running"


async def test_stderr_lines_reach_the_host_log_tagged_with_the_plugin(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mcphost.plugins")
    async with PluginSupervisor([misbehave(name="noisy")], timings=FAST) as supervisor:
        await collect(supervisor.plugins[0], make_context("stderr:hello from the plugin side"))

        def logged() -> bool:
            return any(r.getMessage() == "[plugin noisy] hello from the plugin side" for r in caplog.records)

        await eventually(logged, what="the stderr line in the log")
    [record] = [r for r in caplog.records if "hello from the plugin side" in r.getMessage()]
    assert record.__dict__["plugin"] == "noisy"
    assert record.name == "mcphost.plugins"


async def test_shutdown_leaves_no_process_of_the_group() -> None:
    async with PluginSupervisor([echo_spec()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        pgid = plugin.pid
        assert pgid is not None
        assert group_alive(pgid)
    assert not group_alive(pgid)
    assert plugin.state == "stopped"
    assert plugin.pid is None


def logged_grandchild(caplog: pytest.LogCaptureFixture, plugin: str) -> int | None:
    for record in caplog.records:
        text = record.getMessage()
        if text.startswith(f"[plugin {plugin}] grandchild "):
            return int(text.rsplit(" ", 1)[1])
    return None


async def test_a_plugin_ignoring_shutdown_and_sigterm_is_killed_with_its_grandchild(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mcphost.plugins")
    async with PluginSupervisor([misbehave("--stubborn", name="stubborn")], timings=FAST) as supervisor:
        pgid = supervisor.plugins[0].pid
        assert pgid is not None
        await eventually(
            lambda: logged_grandchild(caplog, "stubborn") is not None, what="the grandchild's pid"
        )
        child = logged_grandchild(caplog, "stubborn")
        assert child is not None
        assert os.getpgid(child) == pgid
    # Killed; the orphaned grandchild is reaped by init a moment later, then the group is gone.
    await eventually(lambda: not group_alive(pgid), what="the process group to disappear")


async def test_a_grandchild_left_by_a_plugin_that_exited_cleanly_is_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mcphost.plugins")
    async with PluginSupervisor([misbehave("--grandchild", name="parent")], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        pgid = plugin.pid
        assert pgid is not None
        await eventually(lambda: logged_grandchild(caplog, "parent") is not None, what="the grandchild's pid")
    assert plugin.last_error is None  # it answered `shutdown` and exited by itself
    await eventually(lambda: not group_alive(pgid), what="the grandchild to be stopped")


async def test_a_cancelled_host_still_stops_every_plugin() -> None:
    pgids: list[int] = []
    async with anyio.create_task_group() as tg:

        async def host() -> None:
            async with PluginSupervisor([echo_spec("a"), echo_spec("b")], timings=FAST) as supervisor:
                pgids.extend(p.pid for p in supervisor.plugins if p.pid is not None)
                tg.cancel_scope.cancel()
                await anyio.sleep_forever()

        tg.start_soon(host)
    assert len(pgids) == 2
    assert not any(group_alive(pgid) for pgid in pgids)


async def test_an_error_in_the_body_propagates_unwrapped_and_still_stops_the_plugins() -> None:
    pgids: list[int] = []

    async def host() -> None:
        async with PluginSupervisor([echo_spec()], timings=FAST) as supervisor:
            pgids.extend(p.pid for p in supervisor.plugins if p.pid is not None)
            raise KeyError("from the body")

    with pytest.raises(KeyError, match="from the body"):
        await host()
    [pgid] = pgids
    assert not group_alive(pgid)


async def test_a_non_json_line_is_a_diagnostic_and_the_reader_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        status, results = await collect(plugin, make_context("bad-line"))
        assert (status, contents(results)) == ("completed", ["ok"])
        assert plugin.diagnostics == 1
        assert any("wrote a line that is not JSON" in r.getMessage() for r in caplog.records)
        status, _ = await collect(plugin, make_context("ok"))
        assert status == "completed"


async def test_a_line_nested_past_the_parsers_recursion_limit_is_a_diagnostic(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        status, results = await collect(plugin, make_context("deep-line:100000"))
        assert (status, contents(results)) == ("completed", ["ok"])
        assert plugin.diagnostics == 1
        assert any("nested too deep to parse" in r.getMessage() for r in caplog.records)
        status, _ = await collect(plugin, make_context("ok"))
        assert status == "completed"


async def test_a_line_over_the_limit_fails_only_its_own_run() -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        big_ctx, ok_ctx = make_context("line-too-long"), make_context("slow:0.3")
        outcomes: dict[str, tuple[str, list[RawResult]]] = {}

        async def run(ctx_text: str) -> None:
            ctx = big_ctx if ctx_text == "big" else ok_ctx
            outcomes[ctx_text] = await collect(plugin, ctx)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "ok")
            tg.start_soon(run, "big")
        _, big = outcomes["big"]
        [dropped] = big
        assert dropped.dropped
        assert dropped.obj == {"run_id": big_ctx.run_id}
        assert dropped.nbytes > MAX_LINE_BYTES
        assert contents(outcomes["ok"][1]) == ["slept 0.3"]
        assert plugin.pid is not None


async def test_a_line_over_the_limit_without_a_run_is_only_a_diagnostic(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        status, results = await collect(plugin, make_context("garbage-too-long"))
        assert (status, contents(results)) == ("completed", ["ok"])
        assert plugin.diagnostics == 1
        assert any("over the 4194304-byte limit; dropped" in r.getMessage() for r in caplog.records)


async def test_a_result_over_one_mebibyte_is_delivered_with_its_size() -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        _, results = await collect(supervisor.plugins[0], make_context("oversized"))
        big = results[0]
        assert not big.dropped
        assert big.nbytes > MAX_RESULT_BYTES
        assert len(big.obj["data"]["message"]["content"]) == 1536 * 1024


async def test_a_result_for_an_unknown_run_is_dropped_as_a_diagnostic(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        ctx = make_context("wrong-run-id")
        status, results = await collect(plugin, ctx)
        assert status == "completed"
        # Routed by the notification's run_id; the result's own run_id is for the orchestrator to judge.
        assert [r.obj["run_id"] for r in results] == ["run_someone_else", ctx.run_id, ctx.run_id]
        assert plugin.diagnostics == 1
        assert any(
            "result for run 'run_nobody', which is not active" in r.getMessage() for r in caplog.records
        )


async def test_late_answers_for_an_abandoned_run_are_not_diagnostics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A caller that gives up (deadline, Ctrl-C) makes the host send runner/cancel; the plugin's answers
    # that follow are expected, not protocol violations to warn the operator about.
    caplog.set_level(logging.DEBUG, logger="mcphost.plugins")
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        ctx = make_context("slow:30")
        with anyio.move_on_after(0.5):
            await collect(plugin, ctx)
        await eventually(
            lambda: any("abandoned" in r.getMessage() for r in caplog.records), what="a late answer"
        )
        assert plugin.diagnostics == 0
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        status, results = await collect(plugin, make_context("ok"))
        assert (status, contents(results)) == ("completed", ["ok"])


async def test_an_error_answer_to_a_run_raises_and_the_process_stays() -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        pid = plugin.pid
        with pytest.raises(
            PluginError, match=r"answered 'runner/run' for run .* with JSON-RPC error -32000: no runs today"
        ):
            await collect(plugin, make_context("rpc-error"))
        assert plugin.diagnostics == 1
        status, _ = await collect(plugin, make_context("ok"))
        assert status == "completed"
        assert plugin.pid == pid


async def test_a_caller_that_stops_listening_does_not_block_the_plugin() -> None:
    async with PluginSupervisor([misbehave()], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        send, receive = anyio.create_memory_object_stream[RawResult](0)
        receive.close()
        assert await plugin.run("default", make_context("flood:50"), send) == "completed"
        status, _ = await collect(plugin, make_context("ok"))
        assert status == "completed"


async def test_the_plugin_environment_is_an_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPHOST_API_KEY", "host-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cloud-secret")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    spec = misbehave(env={"PLUGIN_TOKEN": "given to the plugin"})
    async with PluginSupervisor([spec], timings=FAST) as supervisor:
        plugin = supervisor.plugins[0]
        seen = {}
        for name in ("MCPHOST_API_KEY", "AWS_SECRET_ACCESS_KEY", "PLUGIN_TOKEN", "PATH", "LC_ALL"):
            _, results = await collect(plugin, make_context(f"env:{name}"))
            seen[name] = contents(results)[0]
    assert seen == {
        "MCPHOST_API_KEY": "<unset>",
        "AWS_SECRET_ACCESS_KEY": "<unset>",
        "PLUGIN_TOKEN": "given to the plugin",
        "PATH": os.environ["PATH"],
        "LC_ALL": "C.UTF-8",
    }


def test_plugin_environment_keeps_only_allowed_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPHOST_API_KEY", "host-secret")
    monkeypatch.setenv("BASH_FUNC_x%%", "() { echo pwned; }")
    monkeypatch.setenv("TZ", "() { a function, not a zone; }")
    env = plugin_environment({"EXTRA": "1"})
    assert "MCPHOST_API_KEY" not in env
    assert "TZ" not in env
    assert not any(key.startswith("BASH_FUNC") for key in env)
    assert env["EXTRA"] == "1"
    assert env["PATH"] == os.environ["PATH"]


def test_the_supervisor_refuses_duplicate_plugin_names() -> None:
    with pytest.raises(ValueError, match="repeated: echo"):
        PluginSupervisor([echo_spec(), echo_spec()])


def test_a_spec_needs_a_command() -> None:
    with pytest.raises(ValueError, match="needs a non-empty command"):
        PluginSpec("empty", [])


async def test_the_host_introduces_itself_with_its_version(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcphost.plugins")
    # A fake plugin written inline reports the `initialize` params it got on stderr.
    script = (
        "import json,sys\n"
        "msg=json.loads(sys.stdin.readline())\n"
        "sys.stderr.write('params '+json.dumps(msg['params'])+'\\n');sys.stderr.flush()\n"
        "plugin={'author':'t','name':'p','version':'1'}\n"
        "print(json.dumps({'jsonrpc':'2.0','id':msg['id'],'result':{'plugin':plugin}}),flush=True)\n"
        "sys.stdin.read()\n"
    )
    spec = PluginSpec("inline", [sys.executable, "-c", script])

    def params() -> list[str]:
        return [
            r.getMessage().split(" params ", 1)[1] for r in caplog.records if " params " in r.getMessage()
        ]

    async with PluginSupervisor([spec], host_version="9.9.9", timings=FAST) as supervisor:
        assert supervisor.plugins[0].state == "running"
        await eventually(lambda: bool(params()), what="the logged params")
    assert json.loads(params()[0]) == {
        "protocol_version": "1",
        "host": {"name": "mcphost", "version": "9.9.9"},
    }
