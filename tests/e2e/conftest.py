"""Fixtures of the end-to-end tests: `replicas`, two `mcphost serve` processes on one database."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from tests.e2e.replicas import Replicas, start_replicas


@pytest.fixture
async def replicas(database_url: str, tmp_path: Path) -> AsyncGenerator[Replicas]:
    """Two servers on `database_url` (each dialect), both serving; stopped after the test."""
    started = await start_replicas(tmp_path, database_url)
    try:
        yield started
    finally:
        started.stop()
