"""An active run's in-memory result feed: what it hands to readers and when it sends them to the store."""

from __future__ import annotations

from mcphost.feed import FEED_KEPT, ResultFeed
from mcphost.stores.results import StoredResult


def _results(first: int, last: int) -> list[StoredResult]:
    return [
        StoredResult(run_id="run_x", seq=seq, type="message.delta", payload={"n": seq}, created_at=0.0)
        for seq in range(first, last + 1)
    ]


def test_a_reader_gets_the_results_after_its_sequence_in_order() -> None:
    feed = ResultFeed()
    assert feed.after(0) == []
    feed.publish(_results(1, 3))
    feed.publish(_results(4, 5))
    assert [r.seq for r in feed.after(0) or []] == [1, 2, 3, 4, 5]
    assert [r.seq for r in feed.after(3) or []] == [4, 5]
    assert feed.after(5) == []


def test_a_reader_further_behind_than_the_feed_keeps_is_sent_to_the_store() -> None:
    feed = ResultFeed()
    total = 2 * FEED_KEPT
    for seq in range(1, total + 1):
        feed.publish(_results(seq, seq))
    assert feed.after(0) is None
    kept = feed.after(total - FEED_KEPT)
    assert kept is not None
    assert [r.seq for r in kept] == list(range(total - FEED_KEPT + 1, total + 1))


def test_a_batch_that_skips_sequences_sends_readers_behind_it_to_the_store() -> None:
    feed = ResultFeed()
    feed.publish(_results(1, 2))
    feed.publish(_results(5, 5))  # 3..4 committed without being published
    assert feed.after(2) is None
    assert [r.seq for r in feed.after(4) or []] == [5]


def test_publish_and_close_wake_the_tickets_taken_before_them() -> None:
    feed = ResultFeed()
    ticket = feed.signal.ticket()
    feed.publish(_results(1, 1))
    assert ticket.is_set()
    ticket = feed.signal.ticket()
    assert not ticket.is_set()
    feed.close(None)
    assert ticket.is_set()
    assert feed.closed
    assert feed.run is None
