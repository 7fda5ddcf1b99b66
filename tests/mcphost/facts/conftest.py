"""Fixtures of the facts server tests; the helpers they use are in `_helpers.py`."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from mcphost.stores import Stores
from tests.mcphost.facts._helpers import Served, serve_facts


@pytest.fixture
async def served(stores: Stores) -> AsyncGenerator[Served]:
    async with serve_facts(stores) as found:
        yield found
