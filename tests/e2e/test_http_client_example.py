"""`examples/http_client.py` against a real server: uvicorn on a free port over a real host."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

from mcphost.app import open_host
from mcphost.config import HostSettings, Settings
from mcphost.models import AgentConfig
from tests.e2e.httpkit import served
from tests.mcphost.hostkit import ECHO_RUNNER, REPO

EXAMPLE = REPO / "examples" / "http_client.py"


def settings(tmp_path: Path, api_key: str | None = None) -> Settings:
    return Settings(
        source="<test>",
        host=HostSettings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}", data_dir=tmp_path, api_key=api_key
        ),
        agents=[AgentConfig(id="default", runner=ECHO_RUNNER)],
    )


async def run_example(*args: str, **env: str) -> tuple[int, str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("MCPHOST_API_KEY", "MCPHOST_URL")}
    done = await anyio.run_process([sys.executable, str(EXAMPLE), *args], env=clean | env, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_the_http_client_example_streams_a_reply_from_a_real_server(tmp_path: Path) -> None:
    async with open_host(settings(tmp_path)) as host, served(host) as url:
        code, out, err = await run_example("hello from the example", "--url", url, "--conversation", "ex1")
        assert code == 0, err
        assert out == "hello from the example\n"
        assert err.startswith("run run_")
        assert err.strip().endswith(": completed")
        runs = await host.stores.runs.list(conversation_id="ex1")
        assert [r.status.value for r in runs.items] == ["completed"]


async def test_the_http_client_example_sends_the_api_key_and_reports_refusals(tmp_path: Path) -> None:
    async with open_host(settings(tmp_path, api_key="example-key")) as host, served(host) as url:
        code, _, err = await run_example("hi", "--url", url)
        assert code == 1
        assert "401 unauthorized" in err
        code, out, err = await run_example("hi", "--url", url, MCPHOST_API_KEY="example-key")
        assert code == 0, err
        assert out == "hi\n"
