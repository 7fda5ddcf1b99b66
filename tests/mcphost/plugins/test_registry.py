"""The runner registry over real plugin processes: lookup, rejects, plugin status and restarts."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mcphost.app import plugin_specs
from mcphost.config import BUNDLED_PLUGINS, settings_from_mapping
from mcphost.errors import PluginError, RunnerNotFoundError
from mcphost.plugins._startup import INSTALLED_AT
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


SHADOW_REMEDY = (
    "rename that folder or take it off the plugin's module search path "
    "(PYTHONPATH, or the working directory of a `python -m` command without -P)"
)


def memo_that_cannot_start(case: str, tmp_path: Path) -> tuple[PluginSpec, str]:
    """The bundled memo plugin's command in a setting where its code cannot be imported, and what the
    reason must say."""
    python, own = sys.executable, str(INSTALLED_AT / "mcphost_runners")
    command = [python, "-P", "-m", "mcphost_runners.memo"]
    empty = tmp_path / "empty"
    empty.mkdir()
    match case:
        case "shadowed":  # a folder on PYTHONPATH with a package named like ours, which raises
            folder = write_shadow_packages(tmp_path / "project")
            shadow = folder / "mcphost_runners"
            return PluginSpec("memo", command, {"PYTHONPATH": str(folder)}), (
                f"mcphost's 'mcphost_runners' is shadowed: Python imported it from {str(shadow)!r} instead "
                f"of {own!r}; {SHADOW_REMEDY}; last stderr line: "
                + repr(f"ImportError: {shadow / '__init__.py'} is not part of mcphost")
            )
        case "shadowed without the module":  # a package named like ours that imports, without memo
            (tmp_path / "project" / "mcphost_runners").mkdir(parents=True)
            (tmp_path / "project" / "mcphost_runners" / "__init__.py").write_text("")
            return PluginSpec("memo", command, {"PYTHONPATH": str(tmp_path / "project")}), (
                "mcphost's 'mcphost_runners' is shadowed: Python found a 'mcphost_runners' without "
                f"'mcphost_runners.memo' before {own!r}; {SHADOW_REMEDY}"
            )
        case "not installed":  # -S: no site-packages, so no mcphost for this interpreter
            return PluginSpec("memo", [python, "-S", *command[1:]], {"PYTHONPATH": str(empty)}), (
                f"module not found: {python!r} does not see mcphost's 'mcphost_runners' (installed in "
                f"{str(INSTALLED_AT)!r}); run mcphost with the Python it is installed in, or reinstall it"
            )
        case _:  # a plugin of the user's named memo whose own package is missing
            missing = [python, "-P", "-m", "acme_missing.memo"]
            return PluginSpec("memo", missing, {"PYTHONPATH": str(empty)}), (
                f"module not found: 'acme_missing' is not installed for {python!r}"
            )


@pytest.mark.parametrize("case", ["shadowed", "shadowed without the module", "not installed", "not ours"])
async def test_a_runner_whose_plugin_cannot_import_its_code_is_refused_with_what_failed(
    tmp_path: Path, case: str
) -> None:
    spec, diagnosis = memo_that_cannot_start(case, tmp_path)
    async with PluginSupervisor([spec], timings=FAST) as supervisor:
        [status] = RunnerRegistry(supervisor.plugins).plugins()
        reason = f"exited with code 1 before answering 'initialize'; {diagnosis}"
        assert (status.state, status.last_error) == ("failed", reason)
        with pytest.raises(RunnerNotFoundError) as caught:
            RunnerRegistry(supervisor.plugins).get("plugin:mcphost/memo/default")
    assert caught.value.message == (
        f"Runner 'plugin:mcphost/memo/default' is not registered: its plugin 'memo' has not started "
        f"(failed: {reason})."
    )
    assert caught.value.details == {
        "runner_id": "plugin:mcphost/memo/default",
        "known_runners": [],
        "plugin": "memo",
    }
