"""The group-committing audit writer: batches, fallbacks, and nothing lost on the way in or out."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from mcphost.facts._audit import AuditWriter
from mcphost.stores import AuditEntry, AuditRecord, AuditStore, Stores
from tests.mcphost.facts._helpers import admit_run


class CountingAudit(AuditStore):
    """The real audit store, counting the transactions it is asked for."""

    def __init__(self, store: AuditStore) -> None:
        super().__init__(store._db)
        self.batches: list[int] = []
        self.singles = 0

    async def append_many(self, entries: Sequence[AuditEntry]) -> list[AuditRecord]:
        self.batches.append(len(entries))
        return await super().append_many(entries)

    async def append(self, entry: AuditEntry) -> AuditRecord:
        self.singles += 1
        return await super().append(entry)


def entry(run_id: str, tool: str) -> AuditEntry:
    return AuditEntry(
        run_id=run_id, tool=tool, args_digest="0" * 64, bytes_in=2, bytes_out=3, outcome="ok", duration_ms=1.0
    )


async def test_entries_written_together_share_transactions_and_are_stored_when_write_returns(
    stores: Stores,
) -> None:
    run = await admit_run(stores)
    audit = CountingAudit(stores.audit)
    writer = AuditWriter(audit)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        async with anyio.create_task_group() as writers:
            for i in range(50):
                writers.start_soon(writer.write, entry(run.run_id, f"t{i}"))
        assert len(await stores.audit.list(run.run_id, limit=100)) == 50
        await writer.close()
    assert sum(audit.batches) == 50
    assert len(audit.batches) < 50
    assert audit.singles == 0


async def test_a_failing_batch_is_retried_entry_by_entry(stores: Stores) -> None:
    run = await admit_run(stores)
    audit = CountingAudit(stores.audit)
    writer = AuditWriter(audit)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        async with anyio.create_task_group() as writers:
            writers.start_soon(writer.write, entry(run.run_id, "good"))
            writers.start_soon(writer.write, entry("run_deleted", "orphan"))  # no runs row: FK violation
        await writer.close()
    assert [r.tool for r in await stores.audit.list(run.run_id)] == ["good"]
    assert audit.singles == 2


async def test_without_the_background_task_entries_are_stored_directly(stores: Stores) -> None:
    run = await admit_run(stores)
    writer = AuditWriter(stores.audit)
    await writer.write(entry(run.run_id, "before"))
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        await writer.close()
    await writer.write(entry(run.run_id, "after"))
    assert [r.tool for r in await stores.audit.list(run.run_id)] == ["before", "after"]


async def test_a_cancelled_writer_still_stores_its_entry(stores: Stores) -> None:
    run = await admit_run(stores)
    writer = AuditWriter(stores.audit)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await writer.write(entry(run.run_id, "cancelled"))
        await writer.close()
    assert [r.tool for r in await stores.audit.list(run.run_id)] == ["cancelled"]
