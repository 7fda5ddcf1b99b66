"""The facts server through the stdio bridge (`python -P -m mcphost_bridge`), as the run context describes it."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.fakes.shadow_packages import write_shadow_packages
from tests.mcphost.facts._helpers import ERAS, RunHandle, Served, raises_mcp_error
from tests.mcphost.facts.scenario import exercise, seed


@asynccontextmanager
async def bridged(
    run: RunHandle, tmp_path: Path, mode: str, cwd: Path | None = None
) -> AsyncGenerator[Client]:
    """The SDK client on the bridge subprocess started with the command and env the context gives."""
    mcp = run.context.context.mcp
    assert mcp is not None
    command, *args = mcp.bridge.command
    params = StdioServerParameters(command=command, args=args, env=dict(mcp.bridge.env), cwd=cwd)
    with (tmp_path / "bridge.stderr").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            yield client


@pytest.mark.parametrize("mode", ERAS)
async def test_every_tool_resource_and_prompt_answers_through_the_bridge(
    served: Served, tmp_path: Path, mode: str
) -> None:
    seeded = await seed(served)
    run = await served.start_run()
    async with bridged(run, tmp_path, mode) as client:
        await exercise(client, served, run, seeded)
    assert "Traceback" not in (tmp_path / "bridge.stderr").read_text()


async def test_the_bridge_of_a_finished_run_is_refused_with_the_reason(
    served: Served, tmp_path: Path
) -> None:
    run = await served.start_run()
    await served.finish(run)
    with raises_mcp_error(f"run {run.run_id} is not active"):
        async with bridged(run, tmp_path, "legacy") as client:
            await client.list_tools()
    assert run.token not in (tmp_path / "bridge.stderr").read_text()


async def test_the_bridge_starts_from_a_folder_holding_packages_named_like_mcphosts(
    served: Served, tmp_path: Path
) -> None:
    """A harness CLI starts the bridge in its own working directory, which may be a project with a
    `bridge/` or `mcphost_bridge/` package; the context's command (`-P`) never imports those."""
    folder = write_shadow_packages(tmp_path / "project")
    run = await served.start_run()
    async with bridged(run, tmp_path, "legacy", cwd=folder) as client:
        tools = await client.list_tools()
    assert "history_page" in {tool.name for tool in tools.tools}
    assert "Traceback" not in (tmp_path / "bridge.stderr").read_text()
