"""`mcphost runners`: the configured plugins and their runners, without starting them unless `--check`.

Owns the static listing: a bundled plugin (`python -m mcphost_runners.<module>`) declares its runners as
`AgentRunner` classes whose class attributes make the manifest, so their manifests are built here in
process; a harness runner's CLI is looked up the way the runner does (`mcphost_runners.harness.resolve_cli`:
the agent's `config.cli_path`, else PATH, else the checkout's `node_modules/.bin`). A plugin of
`[[plugins]]` only tells its runners when it runs: it is listed with its command, and `--check` starts
every plugin (`app.open_host`) and lists what they registered, rejected manifests included. Does not own
the registry (`plugins.registry`) nor the plugin processes (`plugins.process`).

Invariants: without `--check` no plugin process is started; a harness runner whose CLI cannot be found is
`missing` with what to do, never `ready` — with `--check` too, where its plugin process does run.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mcphost.cli._common import EXIT_OK, dump
from mcphost.config import BUNDLED_PLUGINS, PluginConfig, Settings
from mcphost.protocol import AgentRunnerManifest

if TYPE_CHECKING:
    from mcphost_runners.sdk import AgentRunner


@dataclass
class RunnerListing:
    id: str
    name: str
    plugin: str
    status: str = "ready"
    """`ready`, `missing` (a harness runner whose CLI is not installed) or, for `--check`, as registered."""
    detail: str | None = None


@dataclass
class PluginListing:
    name: str
    command: list[str]
    state: str
    """`configured` (not started), `missing` (its program is not found), else the live process state."""
    runners: list[str] = field(default_factory=list[str])
    pid: int | None = None
    restarts: int = 0
    last_error: str | None = None


def bundled_module(plugin: PluginConfig) -> str | None:
    """The `mcphost_runners.<module>` a plugin runs as `<python> [-P] -m mcphost_runners.<module>`, when it is
    a bundled one (the host starts them with `-P`; a `[[plugins]]` entry may name one without)."""
    args = plugin.command[1:]
    if args[:1] == ["-P"]:
        args = args[1:]
    if len(args) == 2 and args[0] == "-m" and args[1] in BUNDLED_PLUGINS.values():
        return args[1]
    return None


def program_found(plugin: PluginConfig) -> bool:
    """Whether the plugin's program (its command's first word) exists: a path, or a name on PATH."""
    program = plugin.command[0]
    search = plugin.env.get("PATH", os.environ.get("PATH"))
    if os.sep in program:
        base = plugin.cwd if plugin.cwd and not os.path.isabs(program) else None
        path = os.path.join(base, program) if base else program
        return os.path.isfile(path) and os.access(path, os.X_OK)
    return shutil.which(program, path=search) is not None


def _bundled_classes(module: str) -> list[tuple[type[AgentRunner], AgentRunnerManifest]]:
    """The runner classes of a bundled plugin's module and the manifests they register."""
    from mcphost_runners.sdk import AgentRunner

    loaded = importlib.import_module(module)
    plugin_name = next(name for name, mod in BUNDLED_PLUGINS.items() if mod == module)
    return [
        (obj, obj().manifest(author="mcphost", plugin=plugin_name))
        for obj in vars(loaded).values()
        if isinstance(obj, type) and issubclass(obj, AgentRunner) and obj.__module__ == module
    ]


def bundled_manifests(settings: Settings) -> dict[str, AgentRunnerManifest]:
    """The manifests of every configured bundled plugin's runners, built in process (nothing started)."""
    found: dict[str, AgentRunnerManifest] = {}
    for plugin in settings.all_plugins():
        module = bundled_module(plugin)
        if module is not None:
            found.update((manifest.id, manifest) for _, manifest in _bundled_classes(module))
    return found


def bundled_runners(plugin: PluginConfig, module: str, settings: Settings) -> list[RunnerListing]:
    """The runners a bundled plugin registers, from their classes; harness CLIs looked up."""
    from mcphost_runners.harness import HarnessRunner, resolve_cli

    listed: list[RunnerListing] = []
    for obj, manifest in _bundled_classes(module):
        listing = RunnerListing(id=manifest.id, name=manifest.name, plugin=plugin.display_name)
        if issubclass(obj, HarnessRunner):
            cli_path = next(
                (
                    str(a.config["cli_path"])
                    for a in settings.agents
                    if a.runner == manifest.id and a.config.get("cli_path")
                ),
                None,
            )
            found = resolve_cli(obj.cli_name, cli_path, plugin.env.get("PATH", os.environ.get("PATH")))
            if found is None:
                listing.status = "missing"
                listing.detail = (
                    f"the {obj.cli_name!r} CLI is not installed: "
                    + (f"config.cli_path {cli_path!r} is not an executable" if cli_path else "not on PATH")
                    + f"; install it (npm) or set config.cli_path in the agents that use {manifest.id}"
                )
            else:
                listing.detail = f"{obj.cli_name} at {found}"
        listed.append(listing)
    return listed


def static_listing(settings: Settings) -> tuple[list[PluginListing], list[RunnerListing]]:
    plugins: list[PluginListing] = []
    runners: list[RunnerListing] = []
    for plugin in settings.all_plugins():
        module = bundled_module(plugin)
        listing = PluginListing(name=plugin.display_name, command=list(plugin.command), state="configured")
        if not program_found(plugin):
            listing.state = "missing"
            listing.last_error = f"{plugin.command[0]!r} is not found"
        elif module is not None:
            found = bundled_runners(plugin, module, settings)
            listing.runners = [r.id for r in found]
            runners += found
        else:
            listing.last_error = "its runners are known once it runs: `mcphost runners --check` starts it"
        plugins.append(listing)
    return plugins, runners


async def checked_listing(
    settings: Settings,
) -> tuple[list[PluginListing], list[RunnerListing], list[dict[str, Any]]]:
    """Start every plugin and list what registered; harness CLIs looked up as in the static listing."""
    from mcphost.app import open_host

    static = {r.id: r for r in static_listing(settings)[1]}
    async with open_host(settings, all_plugins=True) as host:
        registry = host.registry
        runners = [
            static.get(r.manifest.id)
            or RunnerListing(id=r.manifest.id, name=r.manifest.name, plugin=r.plugin.spec.name)
            for r in registry.runners()
        ]
        rejected = [{"id": r.runner_id, "plugin": r.plugin, "reason": r.reason} for r in registry.rejected()]
        plugins = [
            PluginListing(
                name=p.name,
                command=list(p.command),
                state=p.state,
                runners=list(p.runners),
                pid=p.pid,
                restarts=p.restarts,
                last_error=p.last_error,
            )
            for p in registry.plugins()
        ]
    return plugins, runners, rejected


async def cmd_runners(args: argparse.Namespace, settings: Settings) -> int:
    if args.check:
        plugins, runners, rejected = await checked_listing(settings)
    else:
        (plugins, runners), rejected = static_listing(settings), []
    if args.json:
        dump(
            {
                "checked": args.check,
                "runners": [asdict(r) for r in runners],
                "rejected": rejected,
                "plugins": [asdict(p) for p in plugins],
            }
        )
        return EXIT_OK
    out = sys.stdout
    print("plugins:" if args.check else "plugins (not started; --check starts them):", file=out)
    for p in plugins:
        pid = f" pid={p.pid} restarts={p.restarts}" if args.check else ""
        note = f"  {p.last_error}" if p.last_error else ""
        print(f"  {p.name:<20} {p.state:<10}{pid}{note}", file=out)
    print("runners:", file=out)
    for r in runners:
        detail = f"  {r.detail}" if r.detail and r.status != "ready" else ""
        print(f"  {r.id:<44} {r.status:<8} (plugin {r.plugin}){detail}", file=out)
    if rejected:
        print("rejected:", file=out)
        for r in rejected:
            print(f"  {r['id'] or '?':<44} plugin {r['plugin']}: {r['reason']}", file=out)
    return EXIT_OK
