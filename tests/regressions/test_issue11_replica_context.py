"""Issue 11: the run context was built twice, so on a replica that did not run the run, run_context, the
instructions prompt and knowledge_list answered differently."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from mcphost.stores import Stores
from tests.mcphost.facts._helpers import Served, serve_facts
from tests.mcphost.facts.test_context import answers


@pytest.fixture
async def served(stores: Stores) -> AsyncGenerator[Served]:
    async with serve_facts(stores) as found:
        yield found


async def test_the_hosts_copy_and_the_stored_copy_give_byte_identical_answers(
    served: Served, stores: Stores
) -> None:
    """Issue 11: the run context was built twice, so on a replica that did not run the run, run_context, the
    instructions prompt and knowledge_list answered differently."""
    run = await served.start_run(text="same everywhere")
    from_provider = await answers(served, run)
    del served.contexts[run.run_id]  # as on a replica that does not run it
    from_store = await answers(served, run)
    assert from_store == from_provider
    async with serve_facts(stores, context_provider=None) as replica:
        assert await answers(replica, run) == from_provider
