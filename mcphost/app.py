"""The composition of the host: stores, plugins, registry, bindings, orchestrator, the facts MCP server,
and the HTTP app around them.

`open_host(settings)` enters every long-lived part once, in dependency order, and leaves them in reverse
order with bounded shutdowns: the orchestrator (active runs cancelled and closed), then the facts server,
then the upstream tool servers (`gateway`), then the database, then the plugin processes (started
first, so their start overlaps the database's opening and migration; the host waits for their
`initialize` answers before it builds the rest; within `plugins_first`, which the command line enters
before it imports the server stack, the supervisor takes over the processes spawned there); the scheduler and the retention job (`run_collector`)
are tasks of the host. The facts server gets its seams here: run
contexts from the orchestrator, host tools from the gateway, retrieval from the knowledge bases, the
host's `HttpGuard` and the MCP-call metric; it is built when its endpoint (`facts.FactsEndpoint`, the
endpoint of `/runs/{run_id}/mcp`) first needs it, so a host imports the MCP SDK only then (or when it has
upstream tool servers). `build_app(host)` is the Starlette app over an open host (the `/v1` API with its
middleware and error mapping from `api`, the console, and the facts endpoint); `create_app(settings)` is
the same app with a lifespan that opens the host itself and preloads the MCP server. Serving it is
`serving.py`.

Invariants:
- Errors become HTTP in one place, `api/_errors.py`; the guards in front of the routes are
  `api/_middleware.py`.
- `/v1` and `/runs/{run_id}/mcp` are guarded by one `HttpGuard` instance (`Host.guard`, built from the
  settings, handed to the facts server and to the API's state): the same Host and Origin headers get the
  same verdict on both.
- Wiring: the orchestrator calls `FactsEndpoint.end_run`, `ModelProxy.end_run` (and the run metrics) when
  each run ends, inspection grants included, and `ModelProxy.settle` as each run it executed begins to
  close (its model calls' usage rows are written before its end); the model proxy trusts a grant from
  memory only while `Orchestrator.executing` says the run executes here, and hangs a call's `chat {model}`
  span under the span around the run's runner (from `Orchestrator.context`); the facts server's context
  provider is `Orchestrator.context`, which
  holds a run's context (token included) in memory only while the run is active on this process; every
  other process sharing the database serves the copy the runs store kept, without its token, when the
  run started. No token is ever stored.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Imported where they are used instead: importing this module (every command that opens the
    # database does) costs no more than its own lines; the server stack loads when a host is opened
    # and the API when an app is built (tests/mcphost/cli/test_startup.py checks).
    from starlette.applications import Starlette
    from starlette.types import Lifespan

    from mcphost.api import ApiLimits
    from mcphost.bindings import Bindings
    from mcphost.channels import ChannelAdapter
    from mcphost.config import Settings
    from mcphost.continuations import Continuations
    from mcphost.delivery import DeliverySender
    from mcphost.facts import FactsEndpoint
    from mcphost.facts.server import FactsServer
    from mcphost.gateway.host_tools import Gateway
    from mcphost.guard import HttpGuard
    from mcphost.knowledge.bases import KnowledgeBases
    from mcphost.metrics import HostMetrics
    from mcphost.models import Run
    from mcphost.orchestrator import Orchestrator
    from mcphost.plugins.process import PluginProcess, PluginSpec, PluginSupervisor, Prestarted
    from mcphost.plugins.registry import RunnerRegistry
    from mcphost.proxy import ModelProxy
    from mcphost.recording import ReplayBook
    from mcphost.schedules import Scheduler
    from mcphost.stores import Stores


@dataclass(frozen=True)
class Host:
    settings: Settings
    stores: Stores
    supervisor: PluginSupervisor
    registry: RunnerRegistry[PluginProcess]
    bindings: Bindings
    orchestrator: Orchestrator
    facts: FactsEndpoint
    """The per-run MCP endpoint; its server (`facts.server.FactsServer`) loads on first need."""
    gateway: Gateway
    knowledge: KnowledgeBases
    metrics: HostMetrics
    scheduler: Scheduler
    guard: HttpGuard
    """The Host/Origin/API-key policy of `/v1` and of the facts server's MCP endpoint (one instance)."""
    continuations: Continuations
    """Starts the continuation run of each decided or expired parked approval."""
    sender: DeliverySender
    """Sends the outbound webhook outbox (woken at once by a manual redelivery)."""
    models: ModelProxy
    """The per-run model endpoints (`/runs/{run_id}/models/...`) over `[models]`."""
    channels: Mapping[str, ChannelAdapter] = field(default_factory=dict[str, "ChannelAdapter"])
    """The `[channels.<id>]` chat platforms' adapters, their credentials read at start."""


async def preload_for(host: Host, run: Run) -> None:
    """Load the MCP server now, while the just-started `run`'s runner gets going, when that runner will
    likely call it: the run has an MCP endpoint and the runner's manifest does not say it never calls
    it (`context.calls_mcp`, false for echo). For the one-shot commands (`mcphost run`, `mcphost
    replay`); a run not started yet, or of a runner not registered here, loads it with its first call."""
    from mcphost.errors import RunnerNotFoundError

    ctx = await host.orchestrator.context(run.run_id)
    if ctx is None or ctx.context.mcp is None or run.runner_id is None:
        return
    try:
        calls_mcp = host.registry.get(run.runner_id).manifest.context.calls_mcp
    except RunnerNotFoundError:
        return
    if calls_mcp:
        host.facts.preload()


def plugin_specs(settings: Settings) -> list[PluginSpec]:
    """The configured plugins, then the bundled ones, which serve only `plugin:mcphost/<name>/...` ids."""
    from mcphost.plugins.process import PluginSpec

    configured = len(settings.plugins)
    return [
        PluginSpec(
            name=p.display_name,
            command=list(p.command),
            env=dict(p.env),
            cwd=p.cwd,
            serves=f"plugin:mcphost/{p.display_name}/" if i >= configured else None,
        )
        for i, p in enumerate(settings.all_plugins())
    ]


_PRESTARTED: ContextVar[Prestarted | None] = ContextVar("mcphost_prestarted_plugins", default=None)
"""The plugin processes `plugins_first` spawned, for the next `open_host` in this context to take over."""


def _first_runner_ids(settings: Settings) -> set[str]:
    return {a.runner for a in settings.agents}


@asynccontextmanager
async def plugins_first(settings: Settings) -> AsyncGenerator[None, None]:
    """Spawn the plugins a host of `settings` starts first (those that may serve an agent's runner), for
    an `open_host(settings)` inside the block to take over (`plugins.process.Prestarted`).

    The command line enters this before it imports the command that opens the host (the server stack,
    SQLAlchemy, the MCP server), so each plugin's interpreter start and imports overlap the host's on the
    other core instead of following them. Leaving stops the processes no host took."""
    from mcphost.plugins.process import Prestarted

    runner_ids = _first_runner_ids(settings)
    prestarted = Prestarted()
    try:
        await prestarted.spawn(
            [spec for spec in plugin_specs(settings) if any(spec.may_serve(rid) for rid in runner_ids)]
        )
        token = _PRESTARTED.set(prestarted)
        try:
            yield
        finally:
            _PRESTARTED.reset(token)
    finally:
        await prestarted.aclose()


@asynccontextmanager
async def open_database(settings: Settings) -> AsyncGenerator[Stores, None]:
    """Only the stores (with pending migrations applied): for read-only commands."""
    from mcphost.retention import DAY_S
    from mcphost.stores import open_stores

    async with open_stores(
        settings.database_url,
        settings.host.data_dir,
        blob_backend=settings.host.blob_backend,
        migrate=True,
        cursor_secret=settings.host.cursor_secret,
        webhooks=settings.webhooks,
        channels=settings.channels,
        approval_expiry_s=settings.host.approval_expiry_s,
        artifact_ttl_s=None if (days := settings.retention.artifacts_days) is None else days * DAY_S,
        pool_size=settings.host.database_pool_size,
    ) as stores:
        yield stores


@asynccontextmanager
async def _tracing() -> AsyncGenerator[None, None]:
    """Tracing as the `OTEL_*` variables ask (off by default); queued spans are exported at the end,
    off the event loop (the exporter's flush blocks)."""
    import anyio.to_thread

    from mcphost import tracing

    with tracing.from_environment():
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(tracing.flush)


@asynccontextmanager
async def open_host(
    settings: Settings, *, replay: ReplayBook | None = None, all_plugins: bool = False
) -> AsyncGenerator[Host, None]:
    """Every part of a running host. Config problems raise before anything starts.

    Only the plugins that may serve the runner of one of the config's agents are started (concurrently);
    the other bundled ones stay idle until a runner of theirs is first asked for (`RunnerRegistry.ready`),
    or with `all_plugins` (`mcphost runners --check`) every plugin is started.

    With `replay` (`mcphost replay`, on a scratch database), runs start on the recorded context and
    every MCP call and model call is answered from the recording."""
    import anyio

    from mcphost import tracing
    from mcphost.bindings import Bindings
    from mcphost.channels import ChannelEvent, DiscordAdapter, adapters, channel_files
    from mcphost.continuations import Continuations, run_continuations
    from mcphost.delivery import DeliverySender
    from mcphost.facts import FactsEndpoint, granted_tools
    from mcphost.gateway.host_tools import Gateway
    from mcphost.guard import HttpGuard
    from mcphost.knowledge.bases import KnowledgeBases
    from mcphost.llm import host_model_infos
    from mcphost.metrics import HostMetrics
    from mcphost.models import AgentEventEnvelope
    from mcphost.orchestrator import Orchestrator
    from mcphost.plugins.process import PluginSupervisor
    from mcphost.plugins.registry import RunnerRegistry
    from mcphost.projection import Projector
    from mcphost.proxy import ModelProxy
    from mcphost.proxy.calls import ModelCalls
    from mcphost.retention import Collector, run_collector
    from mcphost.runtimes.remote import RemoteRuns
    from mcphost.schedules import Scheduler, run_scheduler
    from mcphost.stores.leases import LeaseStore
    from mcphost.stores.retention import Collected
    from mcphost.stores.usage import ModelBudget
    from mcphost.stores.warm import WarmSessionStore
    from mcphost.warm import WarmSessions

    bindings = Bindings(settings.agents, source=settings.source)
    projector = Projector(settings)
    projector.check()  # a bad skill folder stops the host here, with the key to fix
    channels = adapters(settings.channels, os.environ)
    metrics = HostMetrics()
    async with (
        _tracing(),
        # Entered first and not waited for: the plugins start while the database is opened (migrated).
        PluginSupervisor(
            plugin_specs(settings),
            runner_ids=None if all_plugins else _first_runner_ids(settings),
            wait=False,
            prestarted=_PRESTARTED.get(),
        ) as supervisor,
        open_database(settings) as stores,
    ):
        await supervisor.ready()
        registry = RunnerRegistry(supervisor.plugins, supervisor.start)
        warm = await WarmSessions.open(
            WarmSessionStore(stores.db),
            max_sessions=settings.host.warm_max_sessions,
            idle_timeout_s=settings.host.warm_idle_timeout_s,
            max_rss_mb=settings.host.warm_max_rss_mb,
        )
        orchestrator = Orchestrator(
            stores=stores,
            registry=registry,
            bindings=bindings,
            public_url=settings.public_url,
            default_timeout_s=settings.host.run_timeout_s,
            max_concurrent_runs=settings.host.max_concurrent_runs,
            knowledge_bases={kb: (cfg.name, cfg.description) for kb, cfg in settings.knowledge.items()},
            skills={name: (cfg.display_name, cfg.description) for name, cfg in settings.skills.items()},
            models=host_model_infos(settings.models),
            tool_list=granted_tools,
            revise_context=replay.context if replay is not None else None,
            warm=warm,
        )
        gateway = Gateway.from_settings(settings, stores)
        knowledge = KnowledgeBases.from_settings(stores.db, settings)
        guard = HttpGuard.from_settings(settings)

        async def run_trace(run_id: str) -> dict[str, str] | None:
            """The span around the run's runner, which model calls at the wire endpoints hang under."""
            ctx = await orchestrator.context(run_id)
            return (
                None if ctx is None else tracing.carrier_of(ctx.runtime.traceparent, ctx.runtime.tracestate)
            )

        models = ModelProxy(
            stores,
            settings.models,
            budgets={a.id: ModelBudget.model_validate(a.budget.model_dump()) for a in settings.agents},
            guard=guard,
            on_call=metrics.model_call,
            replay=replay,
            executing=orchestrator.executing,
            warm=warm,
            run_trace=run_trace,
        )
        model_calls = ModelCalls(models, settings.models)

        def facts_server() -> FactsServer:
            from mcphost.facts.server import FactsServer  # imported already by `FactsEndpoint.load`

            return FactsServer(
                stores,
                context_provider=orchestrator.context,
                host_tools=gateway,
                knowledge=knowledge,
                models=model_calls,
                guard=guard,
                on_call=metrics.mcp_call,
                replay=replay,
                park=orchestrator.park,
                warm=warm,
                skills=projector,
            )

        facts = FactsEndpoint(facts_server, warm=warm)

        async def end_run(run_id: str, _run: Run | None) -> None:
            await facts.end_run(run_id)
            await models.end_run(run_id)

        async def count_run(_run_id: str, run: Run | None) -> None:
            if run is not None:  # None: the orchestrator could neither record nor read the run's end
                metrics.run_ended(run)

        orchestrator.on_run_end.extend([end_run, count_run])
        orchestrator.on_run_closing.append(models.settle)
        orchestrator.projector = projector
        orchestrator.remote = RemoteRuns(stores, orchestrator.host_id, lease_s=settings.host.runtime_lease_s)
        scheduler = Scheduler(
            stores,
            settings.schedules,
            submit=partial(orchestrator.submit, via="schedule"),
            bindings=bindings,
            host_id=orchestrator.host_id,
            on_fire=metrics.schedule_fired,
        )

        async def submit_continuation(event: AgentEventEnvelope) -> str:
            return (await orchestrator.submit(event, via="approval")).run.run_id

        continuations = Continuations(stores, submit_continuation)
        sender = DeliverySender(
            stores.deliveries,
            settings.webhooks,
            orchestrator.host_id,
            channels=channels,
            on_outcome=metrics.delivery,
            follow=orchestrator.results,
            artifacts=stores.artifacts,
            events=stores.events,
        )
        host = Host(
            settings,
            stores,
            supervisor,
            registry,
            bindings,
            orchestrator,
            facts,
            gateway,
            knowledge,
            metrics,
            scheduler,
            guard,
            continuations,
            sender,
            models,
            channels,
        )

        async def count_collected(item: Collected) -> None:
            metrics.reclaimed(item.kind, item.rows, item.bytes)

        collector = Collector(
            stores, settings.retention, holder=orchestrator.host_id, on_collected=count_collected
        )
        async with (
            gateway.running(),
            facts.running(),
            models.running(),
            orchestrator.running(),
            sender.running(),
            channel_files(channels, stores.artifacts),
            anyio.create_task_group() as tg,
        ):
            await tg.start(run_scheduler, scheduler)
            await tg.start(run_collector, collector)
            await tg.start(run_continuations, continuations)
            for source in channels.values():
                if isinstance(source, DiscordAdapter) and source.config.gateway:
                    # Imported here: `websockets` costs a host without a Gateway channel ~0.05 s to start.
                    from mcphost.channels.discord_gateway import DiscordGateway

                    async def ingest(
                        event: ChannelEvent, raw: bytes, source: DiscordAdapter = source
                    ) -> object:
                        from mcphost.api import admit_channel_event  # the API's admission of a channel event

                        return await admit_channel_event(
                            stores, orchestrator, metrics, source, event, raw, stream_reply=sender.stream
                        )

                    gateway_link = DiscordGateway(
                        source, ingest, LeaseStore(stores.db), holder=orchestrator.host_id
                    )
                    await tg.start(gateway_link.run)
            try:
                yield host
            finally:
                tg.cancel_scope.cancel()


def _starlette(settings: Settings, lifespan: Lifespan[Starlette] | None = None) -> Starlette:
    """The app's routes (the facts server's are added by `_attach`), middleware and error handlers."""
    from starlette.applications import Starlette

    from mcphost import console
    from mcphost.api import EXCEPTION_HANDLERS, middleware, routes

    return Starlette(
        routes=[*routes(), *console.routes()],
        middleware=middleware(settings.host.cors_origins, site_paths=console.is_console_path),
        exception_handlers=dict(EXCEPTION_HANDLERS),
        lifespan=lifespan,
    )


def _attach(app: Starlette, host: Host, limits: ApiLimits | None) -> None:
    """Serve `host` from `app`: the state the routes and middleware read, and the facts server's route
    (the facts server is itself the endpoint of `/runs/{run_id}/mcp`)."""
    from mcphost.api import ApiLimits, ApiState

    app.state.api = ApiState(
        stores=host.stores,
        orchestrator=host.orchestrator,
        registry=host.registry,
        bindings=host.bindings,
        metrics=host.metrics,
        guard=host.guard,
        limits=limits or ApiLimits(),
        hooks=host.settings.hooks,
        channels=host.channels,
        scheduler=host.scheduler,
        continuations=host.continuations,
        webhooks=host.settings.webhooks,
        wake_deliveries=host.sender.wake,
        stream_reply=host.sender.stream,
        knowledge=host.knowledge,
        gateway=host.gateway,
    )
    app.router.routes[0:0] = [*host.facts.routes, *host.models.routes]


def build_app(host: Host, *, limits: ApiLimits | None = None) -> Starlette:
    """The HTTP app over an open host: `/v1`, `/healthz`, `/metrics`, `/openapi.json`, the MCP endpoint and
    the console (`/`, `/console/`)."""
    app = _starlette(host.settings)
    _attach(app, host, limits)
    return app


def run_app(host: Host) -> Starlette:
    """The HTTP app of a one-shot host (`mcphost run`, `mcphost replay`): only what its runs call, their
    MCP endpoints (`/runs/{run_id}/mcp`, `/sessions/{session_id}/mcp`) and model endpoints, each with
    its own checks (the host's `HttpGuard`, the run's token). No `/v1`, console or metrics: nobody but
    the runs is told its loopback port, and leaving the API out spares the command its imports."""
    from starlette.applications import Starlette

    return Starlette(routes=[*host.facts.routes, *host.models.routes])


def create_app(settings: Settings, *, limits: ApiLimits | None = None) -> Starlette:
    """The same app, opening the host in its lifespan (for running under any ASGI server)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None, None]:
        async with open_host(settings) as host:
            _attach(app, host, limits)
            host.facts.preload()  # a server that runs this app serves runs: load their MCP server now
            yield

    return _starlette(settings, lifespan)
