"""The runner registry over real plugin processes: lookup, rejects, plugin status and restarts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from mcphost.app import plugin_specs
from mcphost.config import BUNDLED_PLUGINS, settings_from_mapping
from mcphost.errors import PluginError, RunnerNotFoundError
from mcphost.plugins.process import PluginSpec, PluginSupervisor
from mcphost.plugins.registry import RunnerRegistry
from tests.fakes.shadow_packages import write_shadow_packages
from tests.plugins.support import FAST, collect, echo_spec, eventually, make_context, script_spec


async def test_get_returns_the_manifest_and_the_plugin_that_serves_it() -> None:
    async with PluginSupervisor([echo_spec(), script_spec("bad_manifest.py")], timings=FAST) as supervisor:
        registry = RunnerRegistry(supervisor.plugins)
        entry = registry.get("plugin:mcphost/echo/default")
        assert entry.runner_id == "plugin:mcphost/echo/default"
        assert entry.manifest.permissions.state == ["read", "write"]
        assert entry.plugin is supervisor.get("echo")
        assert registry.get("plugin:test/badmanifest/good").plugin is supervisor.get("bad_manifest")
        assert [r.runner_id for r in registry.runners()] == [
            "plugin:mcphost/echo/default",
            "plugin:test/badmanifest/good",
        ]
        status, _ = await collect(entry.plugin, make_context())
        assert status == "completed"


async def test_an_unknown_runner_names_the_known_ones_and_where_to_look() -> None:
    async with PluginSupervisor([echo_spec()], timings=FAST) as supervisor:
        registry = RunnerRegistry(supervisor.plugins)
        with pytest.raises(RunnerNotFoundError) as caught:
            registry.get("plugin:acme/x/default")
        assert caught.value.message == (
            "Runner 'plugin:acme/x/default' is not registered; known runners: plugin:mcphost/echo/default. "
            "Check [[plugins]] in mcphost.toml."
        )
        assert caught.value.code == "runner.not_found"
        assert caught.value.details["known_runners"] == ["plugin:mcphost/echo/default"]


async def test_a_rejected_runner_says_why_it_is_not_registered() -> None:
    async with PluginSupervisor([script_spec("bad_manifest.py")], timings=FAST) as supervisor:
        registry = RunnerRegistry(supervisor.plugins)
        with pytest.raises(
            RunnerNotFoundError, match=r"its manifest was rejected: manifest 1 .*this host speaks '1'"
        ):
            registry.get("plugin:test/badmanifest/future")


async def test_rejected_lists_each_refused_manifest_with_its_plugin_and_reason() -> None:
    async with PluginSupervisor([script_spec("bad_manifest.py")], timings=FAST) as supervisor:
        rejected = RunnerRegistry(supervisor.plugins).rejected()
        assert [r.runner_id for r in rejected] == [
            "plugin:test/badmanifest/future",
            "Not A Runner Id",
            "plugin:acme/other/thief",
            "plugin:test/badmanifest/greedy",
            "plugin:test/badmanifest/formless",
        ]
        assert {r.plugin for r in rejected} == {"bad_manifest"}
        assert rejected[0].reason.endswith("protocol_version '2' is not supported; this host speaks '1'")
        assert rejected[0].raw["new_field"] == 1


async def test_plugins_shows_state_pid_restarts_and_last_error() -> None:
    ghost = PluginSpec("ghost", ["/nonexistent/mcphost-ghost-plugin"])
    async with PluginSupervisor([echo_spec(), ghost], timings=FAST) as supervisor:
        echo, missing = RunnerRegistry(supervisor.plugins).plugins()
        assert echo.name == "echo"
        assert echo.state == "running"
        assert echo.pid == supervisor.get("echo").pid
        assert echo.restarts == 0
        assert echo.last_error is None
        assert echo.runners == ("plugin:mcphost/echo/default",)
        assert echo.command[1:] == ("-m", "mcphost_runners.echo")
        assert missing.state == "failed"
        assert missing.pid is None
        assert missing.runners == ()
        assert missing.last_error is not None
        assert missing.last_error.startswith("cannot start command")


async def test_a_restarted_plugin_is_registered_again_with_its_new_process() -> None:
    async with PluginSupervisor([script_spec("misbehave.py")], timings=FAST) as supervisor:
        registry = RunnerRegistry(supervisor.plugins)
        entry = registry.get("plugin:test/misbehave/default")
        old_pid = registry.plugins()[0].pid
        with pytest.raises(PluginError):
            await collect(entry.plugin, make_context("crash"))
        # While the plugin restarts its runner stays registered: a run fails as crashed, not as not-found.
        assert registry.plugins()[0].state == "restarting"
        assert registry.get("plugin:test/misbehave/default").plugin is entry.plugin

        def restarted() -> bool:
            status = registry.plugins()[0]
            return status.state == "running" and status.pid not in (None, old_pid)

        await eventually(restarted, what="the restart")
        [status] = registry.plugins()
        assert status.restarts == 1
        assert status.last_error is not None
        assert status.last_error.startswith("exited with code 7")
        result, _ = await collect(registry.get("plugin:test/misbehave/default").plugin, make_context("ok"))
        assert result == "completed"


async def test_when_two_plugins_offer_one_runner_id_the_first_keeps_it() -> None:
    async with PluginSupervisor([echo_spec("echo-a"), echo_spec("echo-b")], timings=FAST) as supervisor:
        registry = RunnerRegistry(supervisor.plugins)
        assert registry.get("plugin:mcphost/echo/default").plugin is supervisor.get("echo-a")
        [duplicate] = registry.rejected()
        assert duplicate.plugin == "echo-b"
        assert (
            duplicate.reason
            == "runner id 'plugin:mcphost/echo/default' is already provided by plugin 'echo-a'"
        )
        assert [p.runners for p in registry.plugins()] == [("plugin:mcphost/echo/default",), ()]


async def test_the_bundled_plugins_start_from_a_folder_holding_packages_named_like_mcphosts(
    tmp_path: Path,
) -> None:
    """The host starts its bundled plugins with `-P`: the folder they start in (the host's working
    directory) is not on their module search path, so its `mcphost_runners/` is never imported."""
    folder = write_shadow_packages(tmp_path)
    settings = settings_from_mapping({}, source="<test>", environ={})
    specs = [replace(spec, cwd=folder) for spec in plugin_specs(settings)]
    async with PluginSupervisor(specs, timings=replace(FAST, initialize=30.0)) as supervisor:
        registry = RunnerRegistry(supervisor.plugins)
        assert [(p.name, p.state, p.last_error) for p in registry.plugins()] == [
            (name, "running", None) for name in BUNDLED_PLUGINS
        ]
        assert {r.runner_id for r in registry.runners()} == {
            f"plugin:mcphost/{name}/default" for name in BUNDLED_PLUGINS
        }
