"""The warm pool with real child processes (`cat` stands in for a CLI in its streaming-input mode):
reuse, LRU eviction past the size and memory caps, the idle timeout, config changes and dead processes."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from mcphost.common.lines import TooLong
from mcphost.common.procgroup import StopTimings
from mcphost_runners import _harness_warm
from mcphost_runners._harness_warm import PoolLimits, WarmPool, WarmProcess, WarmProcessGoneError, start_warm

CAT = shutil.which("cat")
pytestmark = pytest.mark.skipif(CAT is None, reason="needs cat")
FAST = StopTimings(terminate=1.0, kill=1.0)


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def starter(
    tmp_path: Path, key: str, fingerprint: str = "f1", secret: Path | None = None
) -> Callable[[], Awaitable[WarmProcess]]:
    async def start() -> WarmProcess:
        assert CAT is not None
        secrets = [secret] if secret is not None else []
        return await start_warm(
            key,
            fingerprint,
            [CAT],
            cwd=tmp_path,
            env={"PATH": os.environ["PATH"]},
            stderr_path=tmp_path / f"{key}.stderr",
            secrets=secrets,
        )

    return start


async def echo(process: WarmProcess, text: str) -> bytes | TooLong:
    await process.send(text.encode() + b"\n")
    async for line in process.lines():
        return line
    raise AssertionError("EOF")


async def test_a_session_reuses_its_process_and_a_config_change_replaces_it(tmp_path: Path) -> None:
    secret = tmp_path / "token.json"
    secret.write_text("{}")
    async with WarmPool(timings=FAST).running() as pool:
        first, fresh = await pool.acquire("s1", "f1", starter(tmp_path, "s1", secret=secret))
        assert fresh
        assert await echo(first, "one") == b"one"
        pool.release(first)
        first.forget_secrets()
        assert not secret.exists()

        again, fresh = await pool.acquire("s1", "f1", starter(tmp_path, "s1"))
        assert (again is first, fresh) == (True, False)
        assert await echo(again, "two") == b"two"  # the same stdin/stdout across turns
        pool.release(again)

        changed, fresh = await pool.acquire("s1", "f2", starter(tmp_path, "s1", "f2"))
        assert fresh
        assert changed.pid != first.pid
        assert gone(first.pid)
        pool.release(changed)
    assert gone(changed.pid)  # leaving running() stops every warm process
    assert len(pool) == 0


async def test_past_max_sessions_the_least_recently_used_idle_process_is_stopped(tmp_path: Path) -> None:
    async with WarmPool(timings=FAST, limits=PoolLimits(max_sessions=2)).running() as pool:
        a, _ = await pool.acquire("a", "f1", starter(tmp_path, "a"))
        b, _ = await pool.acquire("b", "f1", starter(tmp_path, "b"))
        pool.release(b)
        pool.release(a)  # a used last: b is the least recently used
        c, _ = await pool.acquire("c", "f1", starter(tmp_path, "c"))
        assert sorted(pool.pids()) == ["a", "c"]
        assert gone(b.pid)
        assert not gone(a.pid)

        # A busy process is never evicted, even past the cap.
        d, _ = await pool.acquire("d", "f1", starter(tmp_path, "d"))
        assert sorted(pool.pids()) == ["c", "d"]
        pool.release(d)
        assert c.busy
        pool.release(c)


async def test_idle_processes_are_stopped_after_the_idle_timeout(tmp_path: Path) -> None:
    async with WarmPool(timings=FAST, limits=PoolLimits(idle_timeout_s=0.2)).running() as pool:
        busy, _ = await pool.acquire("busy", "f1", starter(tmp_path, "busy"))
        idle, _ = await pool.acquire("idle", "f1", starter(tmp_path, "idle"))
        pool.release(idle)
        with anyio.fail_after(10):
            # The sweeper runs every second; it takes a process out of the pool, then stops it.
            while "idle" in pool.pids() or not gone(idle.pid):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert pool.pids() == {"busy": busy.pid}  # a turn in progress is never idle
        pool.release(busy)


async def test_past_the_memory_cap_idle_processes_are_stopped_oldest_first(tmp_path: Path) -> None:
    pool = WarmPool(timings=FAST, limits=PoolLimits(max_rss_mb=1_000_000))
    a, _ = await pool.acquire("a", "f1", starter(tmp_path, "a"))
    b, _ = await pool.acquire("b", "f1", starter(tmp_path, "b"))
    pool.release(a)
    pool.release(b)
    assert a.rss_mb() > 0
    pool.limits = PoolLimits(max_rss_mb=b.rss_mb() + a.rss_mb() / 2)
    await pool.sweep()
    assert pool.pids() == {"b": b.pid}
    assert gone(a.pid)
    await pool.discard("b", "test over")


async def a_pool_whose_idle_process_died(tmp_path: Path) -> tuple[WarmPool, WarmProcess]:
    """A pool holding session `s`'s idle process, killed behind the pool's back."""
    pool = WarmPool(timings=FAST)
    dead, _ = await pool.acquire("s", "f1", starter(tmp_path, "s"))
    pool.release(dead)
    os.killpg(dead.pid, signal.SIGKILL)
    with anyio.fail_after(10):
        while not gone(dead.pid):  # noqa: ASYNC110  # no event tells a process died
            await anyio.sleep(0.02)
    return pool, dead


async def test_a_process_the_sweeper_found_dead_is_reported_to_the_next_turn(tmp_path: Path) -> None:
    pool, dead = await a_pool_whose_idle_process_died(tmp_path)
    await pool.sweep()  # the background sweeper's pass, before the session's next turn
    assert len(pool) == 0
    with pytest.raises(WarmProcessGoneError, match=f"warm process {dead.pid} of session s exited"):
        await pool.acquire("s", "f1", starter(tmp_path, "s"))  # this turn runs cold
    replaced, fresh = await pool.acquire("s", "f1", starter(tmp_path, "s"))
    assert fresh
    assert replaced.pid != dead.pid
    await pool.discard("s", "test over")


@pytest.mark.parametrize(
    ("stat", "live"),
    [
        ("41 (claude) S 1 41 41 0", True),
        ("41 (claude code) R 1 41 41 0", True),
        ("41 (claude) Z 1 41 41 0", False),
        ("41 (claude) X 1 41 41 0", False),  # dead while its parent reaps it
        (ProcessLookupError(3, "No such process"), False),  # reaped while its stat was read
        (PermissionError(13, "Permission denied"), True),  # /proc withheld: nothing says it exited
    ],
)
def test_a_leader_counts_as_live_until_its_stat_says_it_exited(
    monkeypatch: pytest.MonkeyPatch, stat: str | OSError, live: bool
) -> None:
    # A process the sweeper looks at while it is being reaped passes through `X`, or its stat cannot be
    # read: read as live, it stayed in the pool and its next turn was not told it had died.
    def read_text(path: Path) -> str:
        assert path == Path("/proc/41/stat")
        if isinstance(stat, OSError):
            raise stat
        return stat

    monkeypatch.setattr(Path, "read_text", read_text)
    assert _harness_warm._leader_live(41) is live  # pyright: ignore[reportPrivateUsage]


async def test_a_turn_that_comes_while_the_sweeper_stops_a_dead_process_is_told_it_died(
    tmp_path: Path,
) -> None:
    pool, dead = await a_pool_whose_idle_process_died(tmp_path)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.sweep)
        # Until the sweep has taken it out of the pool and is stopping it (nothing signals that).
        while pool.get("s") is not None:
            await anyio.lowlevel.checkpoint()
        with pytest.raises(WarmProcessGoneError, match=f"warm process {dead.pid} of session s exited"):
            await pool.acquire("s", "f1", starter(tmp_path, "s"))  # not a new process: this turn runs cold
    assert len(pool) == 0


async def test_a_process_that_died_between_turns_is_removed_and_reported(tmp_path: Path) -> None:
    pool, dead = await a_pool_whose_idle_process_died(tmp_path)
    with pytest.raises(WarmProcessGoneError, match=f"warm process {dead.pid} of session s exited"):
        await pool.acquire("s", "f1", starter(tmp_path, "s"))
    assert len(pool) == 0
    replaced, fresh = await pool.acquire("s", "f1", starter(tmp_path, "s"))
    assert fresh
    assert replaced.pid != dead.pid
    await pool.discard("s", "test over")
