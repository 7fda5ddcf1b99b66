"""A host process for the recovery tests: registers as alive, starts one run, then waits to be killed.

Usage: python -m tests.mcphost.stores.host_child DATABASE_URL DATA_DIR HOST_ID
Prints the started run's id on one line once the run is running.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from mcphost.stores import open_stores
from tests.mcphost.stores.factories import new_run


async def main(database_url: str, data_dir: str, host_id: str) -> None:
    async with (
        open_stores(database_url, Path(data_dir), migrate=False) as stores,
        stores.hosts.alive(host_id),
    ):
        run, grant = new_run(f"conv-{host_id}", host_id=host_id)
        await stores.runs.admit(run, grant=grant, concurrency="enqueue")
        assert await stores.runs.try_start(run.run_id, host_id=host_id) is not None
        print(run.run_id, flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    database_url, data_dir, host_id = sys.argv[1:4]
    anyio.run(main, database_url, data_dir, host_id)
