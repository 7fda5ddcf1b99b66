"""Inspection grants: what a grant allows, checked before anything is stored, and how it ends."""

from __future__ import annotations

import time

import anyio
import pytest

from mcphost.errors import InvalidArgumentError
from mcphost.inspection import INSPECTION_READ_TOOLS, create_grant, end_expired, end_grant
from mcphost.models import RunStatus
from mcphost.stores import Stores
from tests.e2e.httpkit import row_counts
from tests.mcphost.stores.factories import new_run


async def test_inspection_grant_tools_are_checked_before_anything_is_stored(stores: Stores) -> None:
    before = await row_counts(stores)
    for tools, words in [
        (["state_get"], "matches no tool an inspection grant can have"),
        (["artifacts_create"], "need --write"),
    ]:
        with pytest.raises(InvalidArgumentError, match=words):
            await create_grant(stores, conversation_id="c1", tools=tools)
    with pytest.raises(InvalidArgumentError, match="ttl"):
        await create_grant(stores, conversation_id="c1", ttl_s=0)
    assert await row_counts(stores) == before
    made = await create_grant(stores, conversation_id="c1", tools=["artifacts_*", "search__*"], write=True)
    assert made.grant.tools == {"run_context", "artifacts_metadata", "artifacts_read", "artifacts_create"}
    assert made.grant.host_tool_globs == ("search__*",)  # a facts glob never reaches host tools
    assert made.grant.artifact_create is True
    assert made.run.status is RunStatus.RUNNING
    assert (
        made.run.conversation_id is None
    )  # the grant never queues behind or ahead of the conversation's runs
    assert made.run.host_id is None  # so host recovery never fails it


async def test_an_inspection_grant_gets_host_tools_only_by_name(stores: Stores) -> None:
    everything = await create_grant(stores, conversation_id="c1", tools=["*"])
    assert everything.grant.host_tool_globs == ()
    assert everything.grant.tools == set(INSPECTION_READ_TOOLS)
    stored = await stores.runs.grant(everything.run.run_id)
    assert stored.grant.host_tool_globs == ()
    named = await create_grant(
        stores, conversation_id="c1", tools=["history_*"], host_tools=["search__query", "up__*"]
    )
    assert named.grant.host_tool_globs == ("search__query", "up__*")
    assert named.grant.tools == {"run_context", "history_page", "history_search"}
    before = await row_counts(stores)
    for glob in ["*", "search_query", "*_*"]:
        with pytest.raises(InvalidArgumentError, match="does not name a host tool"):
            await create_grant(stores, conversation_id="c1", host_tools=[glob])
    assert await row_counts(stores) == before


async def test_ending_a_grant_cancels_it_once_and_refuses_a_run_of_a_runner(stores: Stores) -> None:
    made = await create_grant(stores, conversation_id="c1", ttl_s=60)
    ended = await end_grant(stores, made.run.run_id, "done looking")
    assert ended.status is RunStatus.CANCELLED
    assert ended.error is not None
    assert ended.error.details == {"reason": "done looking"}
    assert (await stores.runs.grant(made.run.run_id)).revoked
    again = await end_grant(stores, made.run.run_id, "twice")
    assert again.status is RunStatus.CANCELLED
    assert again.error == ended.error
    run, grant = new_run()
    await stores.runs.admit(run, grant=grant, concurrency="enqueue")
    with pytest.raises(InvalidArgumentError, match="not an inspection grant"):
        await end_grant(stores, run.run_id, "x")
    assert (await stores.runs.get(run.run_id)).status is RunStatus.QUEUED


async def test_only_grants_past_their_deadline_are_completed_by_the_sweep(stores: Stores) -> None:
    short = await create_grant(stores, conversation_id="c1", ttl_s=0.05)
    long = await create_grant(stores, conversation_id="c1", ttl_s=60)
    await anyio.sleep(0.1)  # past the short grant's deadline
    assert time.time() >= short.grant.deadline_at
    ended = await end_expired(stores)
    assert [run.run_id for run in ended] == [short.run.run_id]
    assert ended[0].status is RunStatus.COMPLETED
    assert ended[0].error is None
    assert (await stores.runs.get(long.run.run_id)).status is RunStatus.RUNNING
    assert await end_expired(stores) == []
