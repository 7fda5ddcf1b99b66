"""The raw-statement floor: one echo run's SQL, captured from mcphost once, replayed through bare `sqlite3`.

Owns the capture and the replay. Capture: an in-process host (`bench._host.bench_host`) on a fresh SQLite
file runs a few echo runs to warm up, then one more with SQLAlchemy engine events recording every
transaction begun, every statement sent (`BEGIN`/`BEGIN IMMEDIATE` included; the writer thread sends its
`BEGIN IMMEDIATE` to sqlite3 itself, so its transactions get it added) and every commit and rollback,
until the run is closed. Replay: the same transactions, statements and parameters on a stdlib
`sqlite3` connection to that file with the host's pragmas (WAL, `synchronous=NORMAL`, foreign keys), each
SELECT's rows fetched. Every string parameter that is an id of the captured run (`run_…`, `evt_…`, the
conversation id, tokens) is renamed per replay, so the inserts insert new rows instead of failing on their
keys and the database grows as it does under the server.

CPU per replayed run is `time.process_time()` of this process: the floor of what any server that makes
those statements pays. Two ways: all of a run in one thread (no hops), and one worker-thread hop per
transaction (`anyio.to_thread`, what an async server with a dedicated writer thread pays at best).

`sampled` keeps one capture for a whole benchmark and replays it in blocks (`Sampler.block`), so the
floor can be measured next to each measurement it is compared with: on a shared machine whose speed
moves by tens of per cent from one minute to the next, a floor measured minutes after mcphost's rounds
made the distance swing as much (2.95x and 3.81x in two runs of one afternoon).
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import time
from collections.abc import AsyncGenerator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.to_thread

from bench._databases import workspace
from bench._host import bench_host, host_run, message
from mcphost.stores.engine import sqlite_path

WARMUP_RUNS = 3
_ID = re.compile(r"^[a-z]{2,8}_[0-9A-HJKMNP-TV-Z]{26}$")
"""`mcphost.models.new_id`: a prefix and a ULID."""


@dataclass
class Capture:
    """One run's transactions: each a list of (statement, parameters, executemany)."""

    transactions: list[list[tuple[str, Any, bool]]] = field(default_factory=list[list[tuple[str, Any, bool]]])
    ids: set[str] = field(default_factory=set[str])

    @property
    def statements(self) -> int:
        return sum(1 for tx in self.transactions for sql, _, _ in tx if sql not in ("COMMIT", "ROLLBACK"))


async def capture(tmp_root: Path | None = None) -> tuple[Capture, Path, Path]:
    """Capture one echo run on a fresh SQLite host; returns it, the database file and its folder (the
    caller removes the folder)."""
    import tempfile

    keep = Path(tempfile.mkdtemp(prefix="mcphost-bench-floor-", dir=tmp_root))
    out = Capture()
    # Several pooled connections work at once (a reader next to the writer): group by connection.
    open_: dict[int, list[tuple[str, Any, bool]]] = {}
    recording = False

    def on_begin(conn: object) -> None:
        # A transaction counts only from its begin: one begun before recording started is not the run's.
        if recording:
            open_[id(conn)] = []

    def on_statement(
        conn: object, _cur: object, statement: str, parameters: Any, _ctx: object, many: bool
    ) -> None:
        if recording and id(conn) in open_:
            open_[id(conn)].append((statement, parameters, many))

    def on_end(conn: object, word: str) -> None:
        tx = open_.pop(id(conn), None)
        if recording and tx:
            if not tx[0][0].startswith("BEGIN"):  # the writer thread sends BEGIN IMMEDIATE to sqlite3 itself
                tx.insert(0, ("BEGIN IMMEDIATE", (), False))
            tx.append((word, (), False))
            out.transactions.append(tx)

    def on_commit(conn: object) -> None:
        on_end(conn, "COMMIT")

    def on_rollback(conn: object) -> None:
        on_end(conn, "ROLLBACK")

    async with workspace("sqlite", tmp_root) as ws:
        async with bench_host(ws) as host:
            hooks = host.stores.db.hooks  # every engine's, the writer thread's too; safe while it serves
            hooks.add("begin", on_begin)
            hooks.add("before_cursor_execute", on_statement)
            hooks.add("commit", on_commit)
            hooks.add("rollback", on_rollback)
            for i in range(WARMUP_RUNS):
                await host.orchestrator.wait(await host_run(host, message("hello", f"conv-warm-{i}")))
            recording = True
            run_id = await host_run(host, message("hello", "conv-floor-captured"))
            await host.orchestrator.wait(run_id)
            await anyio.sleep(0.2)  # anything the run's close leaves behind
            recording = False
            # A transaction still open now (none expected) is left out: replaying half of one would
            # leave the replay connection inside it.
        path = sqlite_path(ws.database_url)
        assert path is not None
        copy = keep / "floor.db"
        shutil.copy(path, copy)
    out.ids = {"conv-floor-captured"} | {
        p for tx in out.transactions for _, params, many in tx for p in _flat(params, many) if _is_id(p)
    }
    return out, copy, keep


def _flat(params: Any, many: bool) -> list[Any]:
    def values(row: Any) -> Iterable[Any]:
        return cast(dict[str, Any], row).values() if isinstance(row, dict) else row

    if many:
        return [p for row in params for p in values(row)]
    return list(values(params or ()))


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and (value.startswith("conv-floor") or _ID.match(value) is not None)


class Replayer:
    """Replays a `Capture` on a `sqlite3` connection; `run(i)` replays it once with ids renamed by `i`."""

    def __init__(self, cap: Capture, path: Path) -> None:
        self.cap = cap
        self.con = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        for pragma in ("journal_mode=WAL", "foreign_keys=ON", "synchronous=NORMAL", "busy_timeout=30000"):
            self.con.execute(f"PRAGMA {pragma}")

    def close(self) -> None:
        self.con.close()

    def _rename(self, params: Any, many: bool, suffix: str) -> Any:
        def one(p: Any) -> Any:
            return p + suffix if isinstance(p, str) and p in self.cap.ids else p

        def row(r: Any) -> Any:
            if isinstance(r, dict):
                return {k: one(v) for k, v in cast(dict[str, Any], r).items()}
            return tuple(one(v) for v in r)

        if many:
            return [row(r) for r in params]
        return row(params) if params else ()

    def transaction(self, tx: list[tuple[str, Any, bool]], suffix: str) -> None:
        cur = self.con.cursor()
        for sql, params, many in tx:
            if many:
                cur.executemany(sql, self._rename(params, True, suffix))
            else:
                cur.execute(sql, self._rename(params, False, suffix))
                if cur.description is not None:
                    cur.fetchall()

    def run(self, i: int) -> None:
        for tx in self.cap.transactions:
            self.transaction(tx, f"-r{i}")

    async def run_hopping(self, i: int) -> None:
        for tx in self.cap.transactions:
            await anyio.to_thread.run_sync(self.transaction, tx, f"-r{i}")


async def cpu_ms_per_run(replayer: Replayer, runs: int, start: int, *, hop: bool) -> list[float]:
    """CPU ms of this process per replayed run, one sample per run."""
    samples: list[float] = []
    for i in range(start, start + runs):
        before = time.process_time()
        if hop:
            await replayer.run_hopping(i)
        else:
            replayer.run(i)
        samples.append(1000 * (time.process_time() - before))
    return samples


@dataclass
class Sampler:
    """One capture replayed in blocks; each replay renames the run's ids anew (`next_run`)."""

    cap: Capture
    replayer: Replayer
    hopping: list[float] = field(default_factory=list[float])
    """CPU ms per run of every block replayed with a hop per transaction, in order."""
    next_run: int = 0

    async def block(self, runs: int, *, hop: bool = True) -> list[float]:
        """Replay the run `runs` times; its samples (also kept in `hopping` when `hop`)."""
        samples = await cpu_ms_per_run(self.replayer, runs, self.next_run, hop=hop)
        self.next_run += runs
        if hop:
            self.hopping += samples
        return samples


@asynccontextmanager
async def sampled(tmp_root: Path | None = None) -> AsyncGenerator[Sampler, None]:
    """A capture (`capture`) to replay for as long as the block lasts; its files are removed after."""
    cap, path, folder = await capture(tmp_root)
    try:
        replayer = Replayer(cap, path)
        try:
            yield Sampler(cap, replayer)
        finally:
            replayer.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
