"""`AgentRunner`: the base class of a runner written with the SDK (re-exported by `mcphost_runners.sdk`).

Owns the runner's manifest (class attributes become the `AgentRunnerManifest` the plugin announces in
`initialize`) and the `run()` contract. Does not own the results (`_output.RunOutput`) nor the stdio
protocol (`_plugin_server`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import ClassVar

from mcphost.protocol import (
    PROTOCOL_VERSION,
    AgentRunContext,
    AgentRunnerManifest,
    Capabilities,
    ConfigField,
    ContextSupport,
    JSONObject,
    Permissions,
    runner_id_of,
)
from mcphost_runners._output import RunOutput


class AgentRunner:
    """Base class of a runner: class attributes make the manifest, `run()` does the work."""

    name: ClassVar[str] = "default"
    """The last part of the runner id `plugin:<author>/<plugin>/<name>`."""
    label: ClassVar[dict[str, str]] = {}
    description: ClassVar[dict[str, str] | None] = None
    capabilities: ClassVar[Capabilities] = Capabilities()
    permissions: ClassVar[Permissions] = Permissions()
    """The most this runner may ever be granted (PROTOCOL §2)."""
    config_schema: ClassVar[list[ConfigField]] = []
    context_support: ClassVar[ContextSupport] = ContextSupport()
    metadata: ClassVar[JSONObject] = {}
    calls_run_api: ClassVar[bool] = False
    """True for a runner whose runs call the host through `out.api`: the plugin then imports the MCP
    client on a background thread as soon as it starts serving, while it waits for `initialize` and its
    first run, instead of during that run (the import is most of a second; not part of the manifest)."""

    def manifest(self, *, author: str, plugin: str) -> AgentRunnerManifest:
        """This runner's manifest inside plugin `author/plugin`."""
        return AgentRunnerManifest(
            id=runner_id_of(author, plugin, self.name),
            name=self.name,
            label=self.label or {"en": self.name},
            description=self.description,
            protocol_version=PROTOCOL_VERSION,
            capabilities=self.capabilities,
            permissions=self.permissions,
            context=self.context_support,
            config_schema=self.config_schema,
            metadata=self.metadata,
        )

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        """Handle one run: emit results through `out`. Returning without a terminal result completes it."""
        raise NotImplementedError(f"{type(self).__name__} must implement run()")

    @asynccontextmanager
    async def lifespan(self) -> AsyncGenerator[None]:
        """What outlives one run (a harness's warm pool): entered before the plugin serves its first
        run, left after the last one ended. The default holds nothing."""
        yield
