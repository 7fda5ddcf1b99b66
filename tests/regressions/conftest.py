"""Fixtures the regression tests share: a host on the test's database and an API client of it."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import httpx2
import pytest

from mcphost.app import Host, open_host
from tests.e2e.httpkit import api_settings, asgi_client


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:
        yield opened
