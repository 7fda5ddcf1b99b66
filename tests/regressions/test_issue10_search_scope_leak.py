"""Issue 10, item 1: history_search returned another conversation's rows that held this scope's token."""

from __future__ import annotations

from mcphost.stores import Stores
from tests.mcphost.stores.test_search_scope import thread_tokens


async def test_a_planted_thread_token_does_not_bring_another_threads_rows(stores: Stores) -> None:
    """Issue 10, item 1: history_search returned another conversation's rows that held this scope's token."""
    t = stores.transcript
    await t.append(conversation_id="conv-a", role="user", content="the lighthouse of a", actor_id="alice")
    planted = " ".join(thread_tokens("conv-a"))
    await t.append(
        conversation_id="conv-b", role="user", content=f"{planted} lighthouse secret of b", actor_id="mallory"
    )
    await t.append(
        conversation_id="conv-a", thread_id="t1", role="user", content=f"{planted} lighthouse in t1"
    )
    await t.append(
        conversation_id="conv-a",
        thread_id="t2",
        role="user",
        content=" ".join(thread_tokens("conv-a", "t1")) + " lighthouse in t2",
    )
    hits = await t.search("conv-a", query="lighthouse")
    assert [(h.record.conversation_id, h.record.content, h.record.actor_id) for h in hits] == [
        ("conv-a", "the lighthouse of a", "alice")
    ]
    assert [h.record.content for h in await t.search("conv-a", "t1", query="lighthouse")] == [
        f"{planted} lighthouse in t1"
    ]
    assert await t.search("conv-a", query="secret") == []
    assert await t.search("conv-c", query="lighthouse") == []
