"""The retention collector (`mcphost/retention.py`) on both stores, with real files: run folders and
harness-home session files of finished runs go while a held run's stay, a dry run changes nothing, the
metrics hook sees each kind, and two hosts never collect at the same time."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
from sqlalchemy import update

from mcphost.app import open_host
from mcphost.config import RetentionSettings
from mcphost.models import RunStatus
from mcphost.retention import LEASE, Collector, run_collector
from mcphost.stores import Stores, open_stores
from mcphost.stores.leases import LeaseStore
from mcphost.stores.retention import Collected
from mcphost.stores.tables import RunRow
from tests.mcphost.hostkit import host_settings
from tests.mcphost.stores.factories import admitted

OLD = time.time() - 30 * 86400


async def _finished_long_ago(stores: Stores, run_id: str) -> None:
    await stores.runs.finish(run_id, RunStatus.CANCELLED)
    async with stores.db.write() as session:
        await session.execute(update(RunRow).where(RunRow.run_id == run_id).values(ended_at=OLD))


def _file(path: Path, size: int, *, mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


async def test_run_folders_and_home_files_of_finished_runs_go_and_a_held_runs_stay(
    stores: Stores, tmp_path: Path
) -> None:
    harness = tmp_path / "harness"
    finished = await admitted(stores, conversation_id="done")
    held = await admitted(stores, conversation_id="live")  # queued: held
    earlier = await admitted(stores, conversation_id="live")  # finished, but its conversation goes on
    await _finished_long_ago(stores, finished.run_id)
    await _finished_long_ago(stores, earlier.run_id)
    _file(harness / "runs" / finished.run_id / "out" / "a.txt", 1000)
    _file(harness / "runs" / finished.run_id / "b.txt", 24)
    _file(harness / "runs" / held.run_id / "a.txt", 10)
    _file(harness / "runs" / earlier.run_id / "a.txt", 10)
    _file(harness / "runs" / "run_unknown" / "a.txt", 10)  # not in this database: kept
    home = harness / "claude-home" / ".claude"
    _file(home / "projects" / "p" / "sess-old.jsonl", 300, mtime=OLD)
    _file(home / "projects" / "p" / "sess-live.jsonl", 50, mtime=OLD)  # continued by the held run
    _file(home / "projects" / "p" / "sess-new.jsonl", 50)  # written recently
    _file(home / ".credentials.json", 5, mtime=OLD)  # not session history: never touched
    _file(harness / "codex-home" / ".codex" / "sessions" / "2026" / "rollout-x.jsonl", 200, mtime=OLD)
    await stores.state.set(
        "conversation", ("plugin:x/claude/default", "default", "live", ""), "external.session_id", "sess-live"
    )
    settings = RetentionSettings(run_folders_days=1, harness_homes_days=1, harness_dirs=[harness])
    seen: list[Collected] = []

    async def on_collected(item: Collected) -> None:
        seen.append(item)

    collector = Collector(stores, settings, holder="host-a", on_collected=on_collected)
    before = _tree(harness)

    dry = await collector.dry_run()
    assert [(c.kind, c.rows, c.bytes) for c in dry] == [("run_folders", 1, 1024), ("harness_homes", 2, 500)]
    assert _tree(harness) == before
    assert seen == []

    done = await collector.tick()
    assert done is not None
    assert [(c.kind, c.rows, c.bytes) for c in done] == [("run_folders", 1, 1024), ("harness_homes", 2, 500)]
    assert seen == done
    assert _tree(harness) == before - {
        f"runs/{finished.run_id}/out/a.txt",
        f"runs/{finished.run_id}/b.txt",
        "claude-home/.claude/projects/p/sess-old.jsonl",
        "codex-home/.codex/sessions/2026/rollout-x.jsonl",
    }
    assert not (harness / "runs" / finished.run_id).exists()
    assert not (harness / "codex-home" / ".codex" / "sessions" / "2026").exists()  # emptied: pruned
    assert (harness / "codex-home" / ".codex" / "sessions").is_dir()
    assert await LeaseStore(stores.db).holder(LEASE) is None  # released after the pass


async def test_without_any_key_nothing_is_collected_and_the_job_returns(
    stores: Stores, tmp_path: Path
) -> None:
    harness = tmp_path / "harness"
    finished = await admitted(stores, conversation_id="done")
    await _finished_long_ago(stores, finished.run_id)
    _file(harness / "runs" / finished.run_id / "a.txt", 10)
    collector = Collector(stores, RetentionSettings(harness_dirs=[harness]), holder="host-a")
    assert await collector.tick() == []
    await run_collector(collector)  # returns at once: nothing is configured
    assert _tree(harness) == {f"runs/{finished.run_id}/a.txt"}


async def test_two_hosts_never_collect_at_the_same_time(
    stores: Stores, database_url: str, tmp_path: Path
) -> None:
    settings = RetentionSettings(run_results_days=1, audit_days=1)
    async with open_stores(database_url, tmp_path / "other") as other:
        inside = anyio.Event()
        go_on = anyio.Event()

        async def pause_after_first_kind(item: Collected) -> None:
            if item.kind == "run_results":
                inside.set()
                await go_on.wait()

        a = Collector(stores, settings, holder="host-a", on_collected=pause_after_first_kind)
        b = Collector(other, settings, holder="host-b")
        results: dict[str, list[Collected] | None] = {}

        async def run_a() -> None:
            results["a"] = await a.tick()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_a)
            await inside.wait()  # a is half way through its pass, holding the lease
            assert await b.tick() is None
            assert await LeaseStore(other.db).holder(LEASE) == "host-a"
            go_on.set()
        assert [c.kind for c in results["a"] or []] == ["run_results", "audit"]
        again = await b.tick()  # a has finished: b's turn
        assert again is not None
        assert [c.kind for c in again] == ["run_results", "audit"]


async def test_a_serving_host_collects_at_start_counts_it_in_metrics_and_dates_new_artifacts(
    database_url: str, tmp_path: Path
) -> None:
    base = host_settings(database_url, tmp_path / "data")
    settings = base.model_copy(update={"retention": RetentionSettings(artifacts_days=2)})
    async with open_stores(database_url, tmp_path / "data") as stores:
        expired = await stores.artifacts.put_bytes(
            b"e" * 321, name=None, mime_type="text/plain", max_bytes=1024, expires_at=1.0
        )
    async with open_host(settings) as host:
        with anyio.fail_after(60):  # the pass runs in the background right after start
            while not host.metrics.value("mcphost_retention_reclaimed_rows_total", kind="artifacts"):  # noqa: ASYNC110  # a counter, no event
                await anyio.sleep(0.05)
        text = host.metrics.render(active_runs=0, plugins=[]).decode()
        assert 'mcphost_retention_reclaimed_rows_total{kind="artifacts"} 1.0' in text.splitlines()
        assert 'mcphost_retention_reclaimed_bytes_total{kind="artifacts"} 321.0' in text.splitlines()
        assert 'mcphost_retention_reclaimed_rows_total{kind="transcript"} 0.0' in text.splitlines()
        assert await host.stores.artifacts.blobs.stored_size(expired.sha256) is None
        before = time.time()
        new = await host.stores.artifacts.put_bytes(b"n", name=None, mime_type="text/plain", max_bytes=8)
        assert new.expires_at is not None
        assert before + 2 * 86400 <= new.expires_at <= time.time() + 2 * 86400
