"""Issue 10, item 9: an artifact upload to a full disk was a generic 500 instead of a 507 with a clear
message."""

from __future__ import annotations

import os
from pathlib import Path

from mcphost.api import ApiLimits
from mcphost.app import open_host
from mcphost.stores.health import DATA_DIR_MARKER
from tests.e2e.httpkit import api_settings, asgi_client, row_counts
from tests.mcphost.test_storage_faults import tmpfs


async def test_an_upload_to_a_full_disk_is_507_and_stores_nothing(database_url: str, tmp_path: Path) -> None:
    """Issue 10, item 9: an artifact upload to a full disk was a generic 500 instead of a 507 with a clear
    message."""
    with tmpfs(tmp_path / "small", "1m") as mount:
        data_dir = mount / "data"
        async with (
            open_host(api_settings(database_url, data_dir)) as host,
            asgi_client(host, limits=ApiLimits(max_upload_bytes=8 * 1024 * 1024)) as client,
        ):
            before = await row_counts(host.stores)
            response = await client.post(
                "/v1/artifacts", params={"name": "big.bin"}, content=os.urandom(2 * 1024 * 1024)
            )
            assert response.status_code == 507, response.text
            error = response.json()["error"]
            assert error["code"] == "storage_full"
            assert "is full, so nothing was stored" in error["message"]
            assert str(data_dir) in error["message"]
            assert "Traceback" not in response.text
            assert await row_counts(host.stores) == before
            left = [p.name for p in data_dir.rglob("*") if p.is_file()]
            assert left == [DATA_DIR_MARKER]  # the staged part is gone
            small = await client.post("/v1/artifacts", params={"name": "small.bin"}, content=b"fits")
            assert small.status_code == 201, small.text
