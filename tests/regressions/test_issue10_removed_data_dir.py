"""Issue 10, item 9: with data_dir removed under a running host, requests failed with 500s and /healthz
stayed 200."""

from __future__ import annotations

import shutil
from pathlib import Path

from mcphost.app import open_host
from tests.e2e.httpkit import api_settings, asgi_client, event_body
from tests.mcphost.test_storage_faults import storage_error


async def test_a_data_dir_removed_under_a_running_host_is_503_and_unhealthy(
    database_url: str, tmp_path: Path
) -> None:
    """Issue 10, item 9: with data_dir removed under a running host, requests failed with 500s and /healthz
    stayed 200."""
    data_dir = tmp_path / "data"
    async with open_host(api_settings(database_url, data_dir)) as host, asgi_client(host) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/v1/runs")).status_code == 200
        shutil.rmtree(data_dir)
        host.stores.health.expire()  # the cached answer is at most a second old; do not wait for it
        storage_error(await client.get("/healthz"), str(data_dir), "removed")
        storage_error(await client.get("/v1/runs"), str(data_dir))
        storage_error(await client.post("/v1/events", json=event_body("lost?")), str(data_dir))
        storage_error(await client.post("/runs/run_x/mcp", json={}), str(data_dir))
        assert (await client.get("/metrics")).status_code == 200  # monitoring keeps working
        data_dir.mkdir()  # a new, empty folder is not the one the host opened
        host.stores.health.expire()
        storage_error(await client.get("/healthz"), "replaced")
