"""scale: the reads behind the facts tools, on a small database versus a big one, alternating.

Two databases of the same dialect, both real files (or PostgreSQL databases): *small* holds 1k transcript
rows, 1k events and 1k state rows in one conversation / one state owner, plus a 1 MiB artifact; *big*
holds 1M of each (100k with `--quick`) and a 1 GiB artifact (100 MiB with `--quick`). Rows are
bulk-loaded through the driver (`_bulk.py`); the artifact goes through `ArtifactStore.put_stream`.

Measured through the stores the facts tools call (`transcript.page`, `events.page`, `artifacts.read`,
`state.get`), random positions each call:
- history_page, newest page (no cursor) and deep (before a random cursor anywhere in the conversation);
- events_page, deep and filtered by two event types;
- artifacts_read, 64 KiB at a random offset (the tool's default length);
- state_get, a random key.
Calls alternate one by one between the small and the big database (ABBA). Target: each big-database
p50 within 2x the small one. The one-off cost of the first range read of an
artifact (the whole blob is hashed once per store instance) is reported as a note, not a sample.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

from bench._alternate import Samples, interleave, timed_ms
from bench._bulk import (
    ANCHOR_RUN,
    EVENT_COLUMNS,
    STATE_COLUMNS,
    TRANSCRIPT_COLUMNS,
    event_rows,
    load,
    state_key,
    state_rows,
    transcript_rows,
)
from bench._config import BenchConfig, MiB
from bench._databases import DialectName, Workspace, workspace
from bench._stats import Row, Stat, judge
from mcphost.stores import Stores, open_stores

NAME = "scale"
CONVERSATION = "conv-scale"
STATE_SCOPE = "conversation"
STATE_OWNER = ("plugin:bench/scale/default", "scale", CONVERSATION, "")
READ_LENGTH = 64 * 1024
TARGET_RATIO = 2.0
WARMUP_CALLS = 5
_PIECE = 1 * MiB


@dataclass
class Loaded:
    """One prepared database: its stores and what the reads need."""

    stores: Stores
    rows: int
    transcript_cursors: list[str]
    event_cursors: list[str]
    artifact_id: str
    artifact_size: int
    state_rows: int
    load_s: float
    first_read_ms: float = 0.0


async def _pieces(size: int) -> AsyncIterator[bytes]:
    block = random.Random(size).randbytes(_PIECE)
    sent = 0
    while sent < size:
        n = min(_PIECE, size - sent)
        yield sent.to_bytes(8, "big") + block[8:n] if n > 8 else block[:n]
        sent += n


async def _prepare(ws: Workspace, rows: int, state_count: int) -> float:
    """Migrate and bulk-load; the seconds it took."""
    start = time.perf_counter()
    async with open_stores(ws.database_url, ws.data_dir):
        pass
    await load(
        ws.database_url, "transcript", TRANSCRIPT_COLUMNS, transcript_rows(CONVERSATION, rows, prefix="t")
    )
    await load(ws.database_url, "events", EVENT_COLUMNS, event_rows(CONVERSATION, rows, prefix="e"))
    await load(ws.database_url, "state", STATE_COLUMNS, state_rows(STATE_SCOPE, STATE_OWNER, state_count))
    return time.perf_counter() - start


async def _loaded(stores: Stores, rows: int, state_count: int, artifact_size: int, load_s: float) -> Loaded:
    transcript = [r.cursor for r in await stores.transcript.for_run(ANCHOR_RUN)]
    events = [e.cursor for e in await stores.events.for_run(ANCHOR_RUN)]
    if not transcript or not events:
        raise RuntimeError("bulk-loaded anchors are missing: _bulk.py and the stores disagree on columns")
    record = await stores.artifacts.put_stream(
        _pieces(artifact_size),
        name="scale.bin",
        mime_type="application/octet-stream",
        max_bytes=artifact_size,
        conversation_id=CONVERSATION,
    )
    if await stores.state.get(STATE_SCOPE, STATE_OWNER, state_key(state_count - 1)) is None:
        raise RuntimeError(
            "bulk-loaded state is unreadable: _bulk.py and the stores disagree on the owner form"
        )
    loaded = Loaded(stores, rows, transcript, events, record.artifact_id, artifact_size, state_count, load_s)
    offset = max(0, artifact_size - READ_LENGTH)
    loaded.first_read_ms = await timed_ms(
        lambda: stores.artifacts.read(record.artifact_id, offset, READ_LENGTH)
    )
    return loaded


Query = Callable[[Loaded, random.Random], Awaitable[object]]


async def _history_latest(d: Loaded, _: random.Random) -> None:
    page = await d.stores.transcript.page(CONVERSATION, limit=50)
    assert len(page.items) == min(50, d.rows)


async def _history_deep(d: Loaded, rng: random.Random) -> None:
    await d.stores.transcript.page(CONVERSATION, before=rng.choice(d.transcript_cursors), limit=50)


async def _events_deep_filtered(d: Loaded, rng: random.Random) -> None:
    await d.stores.events.page(
        CONVERSATION,
        before=rng.choice(d.event_cursors),
        limit=50,
        event_types=["tool.call.started", "message.completed"],
    )


async def _artifact_range(d: Loaded, rng: random.Random) -> None:
    top = max(0, d.artifact_size - READ_LENGTH) // 4096
    data = await d.stores.artifacts.read(d.artifact_id, rng.randint(0, top) * 4096, READ_LENGTH)
    assert len(data) == min(READ_LENGTH, d.artifact_size)


async def _state_get(d: Loaded, rng: random.Random) -> None:
    entry = await d.stores.state.get(STATE_SCOPE, STATE_OWNER, state_key(rng.randrange(d.state_rows)))
    assert entry is not None


QUERIES: list[tuple[str, Query, str]] = [
    ("history_page newest", _history_latest, "rows"),
    ("history_page deep", _history_deep, "rows"),
    ("events_page deep, 2 types", _events_deep_filtered, "rows"),
    ("artifacts_read 64 KiB", _artifact_range, "artifact"),
    ("state_get", _state_get, "state"),
]


def _size(d: Loaded, what: str) -> str:
    if what == "artifact":
        return _human_bytes(d.artifact_size)
    return _human_count(d.state_rows if what == "state" else d.rows)


def _human_count(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def _human_bytes(n: int) -> str:
    if n >= 1024 * MiB and n % (1024 * MiB) == 0:
        return f"{n // (1024 * MiB)} GiB"
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    return f"{n // 1024} KiB"


async def run(cfg: BenchConfig) -> list[Row]:
    rows: list[Row] = []
    for dialect in cfg.dialects:
        rows.extend(await _dialect(dialect, cfg))
    return rows


async def _dialect(dialect: DialectName, cfg: BenchConfig) -> list[Row]:
    sizes = cfg.sizes
    out: list[Row] = []
    async with workspace(dialect, cfg.tmp_root) as small_ws, workspace(dialect, cfg.tmp_root) as big_ws:
        _check_disk(big_ws, sizes.scale_big_artifact)
        small_load = await _prepare(small_ws, sizes.scale_small_rows, sizes.scale_small_rows)
        big_load = await _prepare(big_ws, sizes.scale_big_rows, sizes.scale_state_rows)
        async with (
            open_stores(small_ws.database_url, small_ws.data_dir) as small_stores,
            open_stores(big_ws.database_url, big_ws.data_dir) as big_stores,
        ):
            small = await _loaded(
                small_stores,
                sizes.scale_small_rows,
                sizes.scale_small_rows,
                sizes.scale_small_artifact,
                small_load,
            )
            big = await _loaded(
                big_stores, sizes.scale_big_rows, sizes.scale_state_rows, sizes.scale_big_artifact, big_load
            )
            for label, query, what in QUERIES:
                rng_small, rng_big = random.Random(1), random.Random(2)

                def bound(d: Loaded, rng: random.Random, q: Query = query) -> Callable[[], Awaitable[object]]:
                    return lambda: q(d, rng)

                await interleave(
                    bound(small, rng_small), bound(big, rng_big), WARMUP_CALLS, Samples([], [], 0)
                )
                samples = Samples([], [], 0)
                await interleave(
                    bound(small, rng_small),
                    bound(big, rng_big),
                    sizes.scale_calls * sizes.scale_rounds,
                    samples,
                )
                base = Stat.of(samples.baseline, "ms")
                subj = Stat.of(samples.subject, "ms")
                extra: dict[str, float | str] = {}
                if what == "artifact":
                    extra = {
                        "first_read_small_ms": small.first_read_ms,
                        "first_read_big_ms": big.first_read_ms,
                    }
                elif label == QUERIES[0][0]:
                    extra = {"load_small_s": small.load_s, "load_big_s": big.load_s}
                row = Row(
                    benchmark=NAME,
                    case=f"{dialect}, {label}",
                    baseline_label=_size(small, what),
                    subject_label=_size(big, what),
                    baseline=base,
                    subject=subj,
                    target=f"big ≤ {TARGET_RATIO:g}x small",
                    extra=extra,
                )
                ratio = row.ratio
                out.append(replace(row, verdict=judge(ratio is not None and ratio <= TARGET_RATIO)))
    return out


def _check_disk(ws: Workspace, artifact_bytes: int) -> None:
    """Refuse to start when the scratch folder cannot hold the big artifact twice over plus the rows."""
    free = shutil.disk_usage(ws.data_dir.parent).free
    need = 2 * artifact_bytes + 4 * 1024 * MiB
    if free < need:
        raise RuntimeError(
            f"scale needs about {need // MiB} MiB free under {ws.data_dir.parent}, found {free // MiB} MiB; "
            "free some space or run with --quick"
        )
