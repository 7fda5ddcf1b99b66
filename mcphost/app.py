"""The composition of the host: stores, plugin processes, the registry, bindings and the orchestrator.

`open_host(settings)` enters every long-lived part once, in dependency order, and leaves them in
reverse order with bounded shutdowns: the orchestrator (active runs cancelled and closed), then the
plugin processes, then the database. The CLI's one-shot commands and the HTTP server use the same
composition, so `mcphost run` and `mcphost serve` run events through the same code.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from mcphost.bindings import Bindings
from mcphost.config import Settings
from mcphost.orchestrator import Orchestrator
from mcphost.plugins import PluginProcess, PluginSpec, PluginSupervisor
from mcphost.registry import RunnerRegistry
from mcphost.stores import Stores, open_stores

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Host:
    settings: Settings
    stores: Stores
    supervisor: PluginSupervisor
    registry: RunnerRegistry[PluginProcess]
    bindings: Bindings
    orchestrator: Orchestrator


def plugin_specs(settings: Settings) -> list[PluginSpec]:
    return [
        PluginSpec(name=p.display_name, command=list(p.command), env=dict(p.env), cwd=p.cwd)
        for p in settings.all_plugins()
    ]


@asynccontextmanager
async def open_database(settings: Settings) -> AsyncGenerator[Stores, None]:
    """Only the stores (with pending migrations applied): for read-only commands."""
    async with open_stores(
        settings.database_url, settings.host.data_dir, blob_backend=settings.host.blob_backend, migrate=True
    ) as stores:
        yield stores


@asynccontextmanager
async def open_host(settings: Settings) -> AsyncGenerator[Host, None]:
    """Every part of a running host. Config problems raise before anything starts."""
    bindings = Bindings(settings.agents, source=settings.source)
    async with open_database(settings) as stores, PluginSupervisor(plugin_specs(settings)) as supervisor:
        registry = RunnerRegistry(supervisor.plugins)
        orchestrator = Orchestrator(
            stores=stores,
            registry=registry,
            bindings=bindings,
            public_url=settings.public_url,
            default_timeout_s=settings.host.run_timeout_s,
            max_concurrent_runs=settings.host.max_concurrent_runs,
            knowledge_bases={kb: (cfg.name, cfg.description) for kb, cfg in settings.knowledge.items()},
        )
        async with orchestrator.running():
            yield Host(settings, stores, supervisor, registry, bindings, orchestrator)
