"""A host starts only the plugins its agents' runners need; the other bundled ones start on first use.

The bundled plugins serve only `plugin:mcphost/<name>/...` ids, so the host knows before starting them
which one a runner needs; a `[[plugins]]` entry may serve any id and is always started.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from mcphost.app import _PRESTARTED, open_host, plugin_specs, plugins_first  # pyright: ignore[reportPrivateUsage]
from mcphost.common.procgroup import release_process
from mcphost.config import BUNDLED_PLUGINS, DEFAULT_AGENT_RUNNER, HostSettings, PluginConfig, Settings
from mcphost.errors import RunnerNotFoundError
from mcphost.plugins.process import PluginProcess, PluginSpec, PluginSupervisor, Prestarted
from mcphost.stores import Database, engine
from tests.mcphost.hostkit import ECHO_RUNNER, MISBEHAVE, agent
from tests.plugins.support import FAST, group_alive


def _settings(tmp_path: Path, *plugins: PluginConfig) -> Settings:
    return Settings(
        source="<test>",
        host=HostSettings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'host.db'}", data_dir=tmp_path),
        plugins=list(plugins),
        agents=[agent("memo", DEFAULT_AGENT_RUNNER)],
    )


def _states(plugins: Sequence[PluginProcess]) -> dict[str, str]:
    return {p.name: p.state for p in plugins}


async def test_a_host_starts_only_the_bundled_plugin_its_agents_use_and_the_rest_on_first_use(
    tmp_path: Path,
) -> None:
    async with open_host(_settings(tmp_path)) as host:
        plugins = {p.name: p for p in host.supervisor.plugins}
        assert {name: p.state for name, p in plugins.items()} == {
            "memo": "running",
            "echo": "idle",
            "claude-code": "idle",
            "codex-agent": "idle",
        }
        assert [name for name, p in plugins.items() if p.pid is not None] == ["memo"]
        assert host.registry.get(DEFAULT_AGENT_RUNNER).plugin is plugins["memo"]

        with pytest.raises(RunnerNotFoundError) as caught:
            host.registry.get(ECHO_RUNNER)
        assert caught.value.message == (
            f"Runner {ECHO_RUNNER!r} is not registered; known runners: {DEFAULT_AGENT_RUNNER} "
            "(plugins not started yet: echo, claude-code, codex-agent). Check [[plugins]] in mcphost.toml."
        )

        await host.registry.ready(ECHO_RUNNER)  # its first use: echo starts, and only echo
        assert plugins["echo"].state == "running"
        assert host.registry.get(ECHO_RUNNER).plugin is plugins["echo"]
        assert plugins["claude-code"].state == plugins["codex-agent"].state == "idle"
        await host.registry.ready(ECHO_RUNNER)  # started once
        assert plugins["echo"].restarts == 0

        await host.registry.ready()  # every idle plugin
        assert {p.state for p in plugins.values()} == {"running"}
        # The prefix the host relies on is the one each bundled plugin's runners have.
        for entry in host.registry.runners():
            assert entry.runner_id.startswith(f"plugin:mcphost/{entry.plugin.name}/")
        assert {e.plugin.name for e in host.registry.runners()} == set(BUNDLED_PLUGINS)


async def test_every_plugin_starts_when_all_are_asked_for(tmp_path: Path) -> None:
    async with open_host(_settings(tmp_path), all_plugins=True) as host:
        assert _states(host.supervisor.plugins) == dict.fromkeys(BUNDLED_PLUGINS, "running")


async def test_a_configured_plugin_may_serve_any_runner_so_it_always_starts(tmp_path: Path) -> None:
    settings = _settings(tmp_path, PluginConfig(command=MISBEHAVE, name="misbehave"))
    specs = plugin_specs(settings)
    assert [(s.name, s.serves) for s in specs] == [
        ("misbehave", None),
        *((name, f"plugin:mcphost/{name}/") for name in BUNDLED_PLUGINS),
    ]
    async with open_host(settings) as host:
        states = _states(host.supervisor.plugins)
    assert states == {
        "misbehave": "running",
        "echo": "idle",
        "memo": "running",
        "claude-code": "idle",
        "codex-agent": "idle",
    }


_SLOW_ECHO = (
    "import runpy, time; time.sleep(1.5); runpy.run_module('mcphost_runners.echo', run_name='__main__')"
)


async def test_without_waiting_the_supervisor_returns_while_its_plugins_start_and_ready_waits_for_them() -> (
    None
):
    spec = PluginSpec("slow", [sys.executable, "-c", _SLOW_ECHO])
    started = time.monotonic()
    async with PluginSupervisor([spec], wait=False) as supervisor:
        entered = time.monotonic() - started
        (plugin,) = supervisor.plugins
        assert plugin.state == "starting"  # spawned, not answered yet: the caller goes on meanwhile
        await supervisor.ready()
        assert plugin.state == "running"
        assert time.monotonic() - started >= 1.5
    assert entered < 1.0


async def test_a_host_starts_its_plugins_while_it_opens_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisors: list[PluginSupervisor] = []
    states_while_migrating: list[dict[str, str]] = []
    enter, migrate = PluginSupervisor.__aenter__, engine.migrate

    async def recording_enter(self: PluginSupervisor) -> PluginSupervisor:
        supervisors.append(self)
        return await enter(self)

    async def recording_migrate(db: Database) -> None:
        states_while_migrating.extend(_states(s.plugins) for s in supervisors)
        await migrate(db)

    monkeypatch.setattr(PluginSupervisor, "__aenter__", recording_enter)
    monkeypatch.setattr(engine, "migrate", recording_migrate)
    async with open_host(_settings(tmp_path)) as host:
        assert _states(host.supervisor.plugins)["memo"] == "running"
    # The memo plugin was already spawned when the migration began (not after the database was open).
    assert [states["memo"] for states in states_while_migrating] == ["starting"]


async def test_plugins_spawned_first_are_taken_over_by_the_host_and_nothing_else_starts(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path)
    async with plugins_first(settings):
        prestarted = _PRESTARTED.get()
        assert prestarted is not None
        spawned = prestarted.pids
        assert list(spawned) == ["memo"]  # only the plugin the agents use
        async with open_host(settings) as host:
            memo = host.supervisor.get("memo")
            assert memo.state == "running"
            assert memo.pid == spawned["memo"]  # the same process, not a second one
            assert memo.restarts == 0
            assert prestarted.pids == {}
            assert [p.name for p in host.supervisor.plugins if p.pid is not None] == ["memo"]
        assert not group_alive(spawned["memo"])  # the host stopped it as its own


async def test_plugins_spawned_first_that_no_host_takes_are_stopped_on_leaving(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    async with plugins_first(settings):
        prestarted = _PRESTARTED.get()
        assert prestarted is not None
        pids = list(prestarted.pids.values())
        assert len(pids) == 1
        assert group_alive(pids[0])
    assert _PRESTARTED.get() is None
    assert not group_alive(pids[0])


async def test_a_plugin_spawned_first_for_another_spec_is_not_taken(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    prestarted = Prestarted(FAST)
    [memo] = [spec for spec in plugin_specs(settings) if spec.name == "memo"]
    await prestarted.spawn([memo])
    try:
        assert prestarted.take(replace(memo, env={"OTHER": "1"})) is None
        process = prestarted.take(memo)
        assert process is not None
        assert prestarted.take(memo) is None  # once
        await prestarted.aclose()  # nothing left to stop: the taken one is the taker's
        assert process.returncode is None
    finally:
        await prestarted.aclose()
    await release_process(process)  # its taker's job: stdin closed, it exits on EOF
    with anyio.fail_after(10):
        await process.wait()
