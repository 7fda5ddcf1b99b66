"""The runner registry: which runners exist, which plugin serves each, and which manifests were refused.

Owns lookup by runner id and the operator's view of plugins (`mcphost runners`, `GET /v1/runners`). It does
not validate manifests (each plugin does that when it initializes, keeping the rejects with a reason) or
run anything (the orchestrator calls the plugin returned by `get()`).

Invariants:
- The registry holds no copy of plugin state: every call reads the live plugin objects, so a restarted
  plugin's re-registered manifests (or its new pid, state and error) show at once.
- One runner id has one plugin. When two plugins offer the same id, the first in configuration order
  keeps it and the other's manifest is listed among the rejected with the reason.
- A plugin that is `idle` (not started: no runner the host needed so far can be its) has no runners yet;
  `ready(runner_id)` starts the idle plugins that may serve the id (through the `start` the registry was
  built with, `PluginSupervisor.start`), so its first use starts it.
- A plugin that is restarting or failed keeps its last accepted runners registered: a run then waits
  for the restart, or fails with the plugin's `runner.crashed` error and reason (a crash loop), which is
  the truth, rather than `runner.not_found`.

This module imports nothing of the host but `errors` and `protocol` (not `plugins/process.py`, whose
supervisor builds the registry), so it states what it needs from a plugin as a `Protocol` and stays
generic in the plugin type: `get()` hands the orchestrator the concrete plugin class it was built with.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from mcphost.errors import RunnerNotFoundError
from mcphost.protocol import AgentRunnerManifest, JSONObject, RunnerIdError, parse_runner_id


class RejectedManifestView(Protocol):
    """What the registry reads of a refused manifest."""

    @property
    def plugin(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def runner_id(self) -> str | None: ...
    @property
    def raw(self) -> JSONObject: ...
    @property
    def reason(self) -> str: ...


class RunnerPlugin(Protocol):
    """What the registry reads of a plugin (`mcphost.plugins.PluginProcess` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def command(self) -> tuple[str, ...]: ...
    @property
    def state(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def restarts(self) -> int: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def manifests(self) -> Sequence[AgentRunnerManifest]: ...
    @property
    def rejected(self) -> Sequence[RejectedManifestView]: ...


P = TypeVar("P", bound=RunnerPlugin, covariant=True)
"""Covariant: a registry of a concrete plugin class serves where one of a protocol it satisfies is asked
(the orchestrator asks for `ExecutingPlugin`)."""


@dataclass(frozen=True, slots=True)
class RegisteredRunner(Generic[P]):
    """An accepted runner and the plugin process that serves it."""

    manifest: AgentRunnerManifest
    plugin: P

    @property
    def runner_id(self) -> str:
        return self.manifest.id


@dataclass(frozen=True, slots=True)
class RejectedRunner:
    """A manifest the host refused, and why."""

    plugin: str
    runner_id: str | None
    raw: JSONObject
    reason: str


@dataclass(frozen=True, slots=True)
class PluginStatus:
    """One plugin as an operator sees it."""

    name: str
    command: tuple[str, ...]
    state: str
    pid: int | None
    restarts: int
    last_error: str | None
    runners: tuple[str, ...]
    """Ids of the runners this plugin serves (accepted and not claimed by an earlier plugin)."""


class RunnerRegistry(Generic[P]):
    """Lookup of runners over a fixed set of live plugins, usually `PluginSupervisor.plugins`."""

    def __init__(
        self, plugins: Sequence[P], start: Callable[[str | None], Awaitable[None]] | None = None
    ) -> None:
        self._plugins = tuple(plugins)
        self._start = start

    async def ready(self, runner_id: str | None = None) -> None:
        """Start the idle plugins that may serve `runner_id` (None: every idle plugin), concurrently."""
        if self._start is not None and any(plugin.state == "idle" for plugin in self._plugins):
            await self._start(runner_id)

    def get(self, runner_id: str) -> RegisteredRunner[P]:
        """The runner with this id, or `RunnerNotFoundError` naming the known runners."""
        accepted, rejected = self._collect()
        found = accepted.get(runner_id)
        if found is not None:
            return found
        known = ", ".join(sorted(accepted)) or "none"
        details: JSONObject = {"runner_id": runner_id, "known_runners": sorted(accepted)}
        unstarted = self._unstarted_plugin(runner_id)
        if unstarted is not None:
            # The configuration is right; the plugin is what failed, and its last_error says how.
            raise RunnerNotFoundError(
                f"Runner {runner_id!r} is not registered: its plugin {unstarted.name!r} has not started "
                f"({unstarted.state}: {unstarted.last_error}).",
                details={**details, "plugin": unstarted.name},
            )
        why = next((r.reason for r in rejected if r.runner_id == runner_id), None)
        detail = f" (its manifest was rejected: {why})" if why else ""
        idle = [plugin.name for plugin in self._plugins if plugin.state == "idle"]
        if idle:
            known += f" (plugins not started yet: {', '.join(idle)})"
        raise RunnerNotFoundError(
            f"Runner {runner_id!r} is not registered{detail}; known runners: {known}. "
            "Check [[plugins]] in mcphost.toml.",
            details=details,
        )

    def _unstarted_plugin(self, runner_id: str) -> P | None:
        """The plugin named like the runner id's plugin part (as the bundled ones are) when it never got
        through `initialize`: no manifests, and the reason in `last_error`."""
        try:
            _, plugin_name, _ = parse_runner_id(runner_id)
        except RunnerIdError:
            return None
        return next(
            (p for p in self._plugins if p.name == plugin_name and not p.manifests and p.last_error),
            None,
        )

    def runners(self) -> list[RegisteredRunner[P]]:
        """Every accepted runner, in plugin configuration order."""
        return list(self._collect()[0].values())

    def rejected(self) -> list[RejectedRunner]:
        """Every refused manifest with the reason, in plugin configuration order."""
        return self._collect()[1]

    def plugins(self) -> list[PluginStatus]:
        accepted = self._collect()[0]
        return [
            PluginStatus(
                name=plugin.name,
                command=plugin.command,
                state=plugin.state,
                pid=plugin.pid,
                restarts=plugin.restarts,
                last_error=plugin.last_error,
                runners=tuple(rid for rid, entry in accepted.items() if entry.plugin is plugin),
            )
            for plugin in self._plugins
        ]

    def _collect(self) -> tuple[dict[str, RegisteredRunner[P]], list[RejectedRunner]]:
        # Recomputed per call: a handful of plugins and runners, and always in step with restarts.
        accepted: dict[str, RegisteredRunner[P]] = {}
        rejected: list[RejectedRunner] = []
        for plugin in self._plugins:
            rejected.extend(RejectedRunner(r.plugin, r.runner_id, r.raw, r.reason) for r in plugin.rejected)
            for manifest in plugin.manifests:
                first = accepted.get(manifest.id)
                if first is None:
                    accepted[manifest.id] = RegisteredRunner(manifest, plugin)
                else:
                    reason = f"runner id {manifest.id!r} is already provided by plugin {first.plugin.name!r}"
                    rejected.append(
                        RejectedRunner(plugin.name, manifest.id, manifest.model_dump(mode="json"), reason)
                    )
        return accepted, rejected


__all__ = [
    "PluginStatus",
    "RegisteredRunner",
    "RejectedManifestView",
    "RejectedRunner",
    "RunnerPlugin",
    "RunnerRegistry",
]
