"""Remote runs across a real network link: a real `mcphost serve` listening on a bridge in the root
namespace (its database on 127.0.0.1: a SQLite file or PostgreSQL) and two real `mcphost runtime`
daemons, each in a network namespace of its own joined to the bridge by a veth pair (`netns.py`).

What only a network shows: a link taken down mid-run (packets vanish, nothing is refused or reset), the
lease lapsing and the run moving to the other runtime; the old runtime, reconnected, refused on every
channel (results, end, MCP) and serving again; a short outage that the outbox rides out, every result
delivered once and in order. Also kill -9, cancel and drain with the runtimes behind the link.

Timings (requeue after a kill or a cut, cancel to terminal) are printed, not asserted: they are
measured numbers for the docs, and the bounds here are hang guards only. Skipped without root or
`ip netns`.
"""

from __future__ import annotations

import re
import secrets
import signal
import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.e2e.netns import Network, network, unavailable
from tests.e2e.probe_plugin import token_tag
from tests.e2e.runtimes import (
    Daemon,
    cli,
    mcp_status,
    messages,
    results,
    runtimes,
    submit,
    wait_alive,
    wait_file,
    wait_terminal,
    write_config,
)
from tests.faults.test_host_kill import Server

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

TICKS = 20
TICK_S = 0.25
"""A `tick:` run replies TICKS times, one every TICK_S (5 s): long enough to interrupt mid-run."""
LEASE_S = 5.0
"""Short, so a lost runtime's run moves on soon; not shorter: on a loaded machine heartbeats 0.5 s apart
were seen 3 s apart, and a lease lapsing where no test wants it makes a run's results appear twice."""
HANG_GUARD_S = 60.0
CLAIM_POSTED_S = 1.0
"""How long after a runtime logged a run's end its next claim (a long poll) has surely reached the host:
the slot is freed and the claim posted within milliseconds; the rest is margin for a loaded machine."""


@dataclass
class Cluster:
    client: httpx2.AsyncClient
    url: str
    net: Network
    daemons: dict[str, Daemon]
    folder: Path

    async def place(self, name: str, text: str, conversation: str) -> str:
        """Submit a run that runtime `name` claims (the other is drained meanwhile, then enabled)."""
        others = [d for d in self.daemons if d != name]
        for other in others:
            assert (await self.client.post(f"/v1/runtimes/{other}/drain")).status_code == 200
        run_id = await submit(self.client, text, conversation)
        await self.wait_claimed(name, run_id)
        for other in others:
            assert (await self.client.post(f"/v1/runtimes/{other}/enable")).status_code == 200
        return run_id

    async def wait_claimed(self, name: str, run_id: str, after: int = 0) -> int:
        """The fence of runtime `name`'s claim of `run_id` (one with a fence above `after`), from its log."""
        pattern = re.compile(rf"run {re.escape(run_id)}: claimed \(fence (\d+)")
        with anyio.fail_after(HANG_GUARD_S):
            while True:
                fences = [int(f) for f in pattern.findall(self.daemons[name].logged())]
                if fences and max(fences) > after:
                    return max(fences)
                await anyio.sleep(0.1)

    async def wait_messages(self, run_id: str, count: int) -> list[str]:
        with anyio.fail_after(HANG_GUARD_S):
            while True:
                if len(found := messages(await results(self.client, run_id))) >= count:
                    return found
                await anyio.sleep(0.1)

    async def ticking(self, name: str, conversation: str) -> tuple[str, str]:
        """A `tick:` run on runtime `name` that has delivered two results: its id and its token."""
        marker = self.folder / f"{conversation}.token"
        run_id = await self.place(name, f"tick:{TICKS}:{TICK_S}:{marker}", conversation)
        token = await wait_file(marker)
        await self.wait_messages(run_id, 2)
        return run_id, token

    async def completed(self, run_id: str) -> list[str]:
        """The run's messages once it completed, with exactly one terminal result."""
        run = await wait_terminal(self.client, run_id, HANG_GUARD_S)
        assert run["status"] == "completed", run
        stored = await results(self.client, run_id)
        assert sum(r["type"] in ("run.completed", "run.failed", "run.cancelled") for r in stored) == 1
        return messages(stored)

    async def wait_logged(self, name: str, text: str) -> None:
        with anyio.fail_after(HANG_GUARD_S):
            while True:
                if text in self.daemons[name].logged():
                    return
                await anyio.sleep(0.1)


@asynccontextmanager
async def cluster(folder: Path, database_url: str, *, lease_s: float = LEASE_S) -> AsyncGenerator[Cluster]:
    """The host on the bridge and runtimes r1, r2 in their namespaces, both alive; all torn down after."""
    if (why := unavailable()) is not None:
        pytest.skip(why)
    with network(("r1", "r2")) as net:
        key = secrets.token_urlsafe(24)
        config = write_config(folder, database_url, lease_s=lease_s, api_key=key)
        server = Server(config, folder / "serve.log", listen=f"{net.address}:0")
        daemons: dict[str, Daemon] = {}
        try:
            tokens: dict[str, str] = {}

            async def add(name: str) -> None:
                tokens[name] = (
                    await anyio.to_thread.run_sync(cli, config, "runtimes", "add", name, "--labels", "pool=a")
                ).strip()

            async with anyio.create_task_group() as tg:  # three process start-ups at once
                for name in ("r1", "r2"):
                    tg.start_soon(add, name)
                await server.ready()
            url = server.url
            assert url.startswith(f"http://{net.address}:"), url
            for name, token in sorted(tokens.items()):
                daemons[name] = Daemon(config, url, token, name, net.exec(name))
            async with httpx2.AsyncClient(
                base_url=url, timeout=30, headers={"authorization": f"Bearer {key}"}
            ) as client:
                for daemon in daemons.values():
                    await wait_alive(client, daemon)
                yield Cluster(client, url, net, daemons, folder)
        finally:
            for daemon in daemons.values():
                daemon.stop()
            if server.process.poll() is None:
                server.process.send_signal(signal.SIGTERM)
                server.process.wait(timeout=60)


def ticks(tag: str, through: int = TICKS) -> list[str]:
    return [f"tick {index} {tag}" for index in range(1, through + 1)]


def split_attempts(found: list[str], old: str, new: str) -> int:
    """How many of the old attempt's ticks come first; asserts the rest is the new attempt's, whole."""
    kept = sum(1 for text in found if text.endswith(f" {old}"))
    assert found == ticks(old, kept) + ticks(new), found
    return kept


async def test_kill_9_of_a_runtime_behind_a_link_moves_its_run_to_the_other(
    database_url: str, tmp_path: Path
) -> None:
    async with cluster(tmp_path, database_url) as c:
        run_id, old_token = await c.ticking("r1", "c-kill")

        killed_at = time.monotonic()
        c.daemons["r1"].kill()
        await c.wait_claimed("r2", run_id)
        new_token = await wait_file(tmp_path / "c-kill.token", not_equal=old_token)
        moved_in = time.monotonic() - killed_at
        assert await mcp_status(c.client, run_id, old_token) == 401
        found = await c.completed(run_id)
        assert split_attempts(found, token_tag(old_token), token_tag(new_token)) >= 2
        print(f"kill -9: running again on r2 {moved_in:.2f} s after the kill (lease {LEASE_S} s)")


async def test_a_cut_link_loses_the_lease_and_the_reconnected_runtime_is_fenced_out(
    database_url: str, tmp_path: Path
) -> None:
    async with cluster(tmp_path, database_url) as c:
        run_id, old_token = await c.ticking("r1", "c-cut")
        old_fence = await c.wait_claimed("r1", run_id)

        cut_at = time.monotonic()
        c.net.cut("r1")
        new_fence = await c.wait_claimed("r2", run_id, after=old_fence)
        new_token = await wait_file(tmp_path / "c-cut.token", not_equal=old_token)
        moved_in = time.monotonic() - cut_at
        assert await mcp_status(c.client, run_id, old_token) == 401
        assert await mcp_status(c.client, run_id, new_token) == 200
        await anyio.sleep(1.0)  # r1's runner ticks on, unaware: its outbox grows behind the cut
        c.net.mend("r1")

        # r1 hears it lost the run (a heartbeat's `lost` or a 409 on its results) and drops it
        await c.wait_logged("r1", f"run {run_id}: no longer held")
        late = {"fence": old_fence, "first_seq": 1, "results": [{"result": {"type": "message.completed"}}]}
        auth = {"authorization": f"Bearer {c.daemons['r1'].token}"}
        for path, body in (
            ("results", late),
            ("end", {"fence": old_fence, "status": "completed", "last_seq": 0}),
        ):
            refused = await c.client.post(f"/v1/runtime/runs/{run_id}/{path}", json=body, headers=auth)
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"]["details"]["reason"] in (
                "not_held",
                "stale_fence",
                "lease_expired",
            )

        split_attempts(await c.completed(run_id), token_tag(old_token), token_tag(new_token))
        assert new_fence > old_fence
        print(f"link cut: running again on r2 {moved_in:.2f} s after the cut (lease {LEASE_S} s)")

        # r1 serves on: with r2 drained, the next run is r1's, and completes there
        after = await c.place("r1", "after the cut", "c-after")
        assert await c.completed(after) == ["after the cut"]


async def test_a_claim_answered_into_a_cut_link_is_requeued_to_the_other_runtime(
    database_url: str, tmp_path: Path
) -> None:
    async with cluster(tmp_path, database_url) as c:
        warmup = await c.place("r1", "warm up", "c-warmup")
        assert await c.completed(warmup) == ["warm up"]
        # The host records the run's end before r1 has its answer; r1 frees its slot and posts its next
        # claim only then. Cut once that long poll is surely at the host, or the run never reaches r1.
        await c.wait_logged("r1", f"run {warmup}: ended")
        await anyio.sleep(CLAIM_POSTED_S)
        assert (await c.client.post("/v1/runtimes/r2/drain")).status_code == 200
        c.net.cut("r1")
        cut_at = time.monotonic()
        run_id = await submit(c.client, "claimed behind the cut", "c-lost-claim")
        with anyio.fail_after(HANG_GUARD_S):  # the host hands it to r1: the answer goes into the void
            while True:
                if (await runtimes(c.client))["r1"]["running"] == 1:
                    break
                await anyio.sleep(0.1)
        assert (await c.client.post("/v1/runtimes/r2/enable")).status_code == 200
        await c.wait_claimed("r2", run_id)
        moved_in = time.monotonic() - cut_at
        assert await c.completed(run_id) == ["claimed behind the cut"]
        c.net.mend("r1")

        # r1's claim loop waits for that answer (TCP delivers it once the link is back, or its read times
        # out) before it claims again: when r1 has run the next run, it has seen the lost claim's answer.
        after = await c.place("r1", "after the lost claim", "c-after")
        assert await c.completed(after) == ["after the lost claim"]
        logged = c.daemons["r1"].logged()
        assert f"run {run_id}: claimed" not in logged, "a claim that lapsed on the way never starts a runner"
        if f"run {run_id}: its claim" in logged:
            print("r1 got the lapsed claim's answer once the link was back, and did not start it")
        print(
            f"a claim answered into a cut link: running on r2 {moved_in:.2f} s after the cut (lease {LEASE_S} s)"
        )


async def test_a_cancel_reaches_a_run_across_the_link(database_url: str, tmp_path: Path) -> None:
    async with cluster(tmp_path, database_url) as c:
        marker = tmp_path / "cancel.token"
        run_id = await c.place("r2", f"keep:120:{marker}", "c-cancel")
        await wait_file(marker)
        started = time.monotonic()
        answer = await c.client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "stop"})
        assert answer.status_code == 202, answer.text
        run = await wait_terminal(c.client, run_id, HANG_GUARD_S)
        took = time.monotonic() - started
        assert run["status"] == "cancelled", run
        await c.wait_logged("r2", f"run {run_id}: cancel")
        print(f"cancel across the link: POST cancel to terminal `cancelled` in {took:.2f} s")


async def test_a_draining_runtime_finishes_its_run_and_claims_nothing(
    database_url: str, tmp_path: Path
) -> None:
    async with cluster(tmp_path, database_url) as c:
        first, token = await c.ticking("r1", "c-drain-1")
        busy = await c.place("r2", f"keep:120:{tmp_path / 'busy.token'}", "c-busy")
        assert (await c.client.post("/v1/runtimes/r1/drain")).json()["state"] == "draining"

        waiting = await submit(c.client, "after the drain", "c-drain-2")
        assert await c.completed(first) == ticks(token_tag(token))
        await anyio.sleep(3.0)  # six of r1's claim loops: idle and draining, it takes nothing; r2 is busy
        assert (await c.client.get(f"/v1/runs/{waiting}")).json()["run"]["status"] == "running"
        assert f"run {waiting}: claimed" not in c.daemons["r1"].logged()
        listed = await runtimes(c.client)
        assert (listed["r1"]["state"], listed["r1"]["running"]) == ("draining", 0)

        assert (
            await c.client.post(f"/v1/runs/{busy}/cancel", json={"reason": "make room"})
        ).status_code == 202
        await c.wait_claimed("r2", waiting)
        assert await c.completed(waiting) == ["after the drain"]
        assert f"run {waiting}: claimed" not in c.daemons["r1"].logged()


OUTAGE_LEASE_S = 12.0


@pytest.mark.parametrize(
    "outage_s",
    [
        pytest.param(1.5, id="short"),
        # Past TCP's retransmissions at about 0.2, 0.6, 1.4, 3 and 6.2 s
        # after a request left: one caught by the cut would be sent again only at 12.6 s, after the
        # lease, so the runtime must abandon its heartbeat and send the next on a new connection.
        pytest.param(8.0, id="most-of-the-lease"),
    ],
)
async def test_results_made_during_an_outage_shorter_than_the_lease_arrive_once_in_order(
    database_url: str, tmp_path: Path, outage_s: float
) -> None:
    async with cluster(tmp_path, database_url, lease_s=OUTAGE_LEASE_S) as c:
        run_id, token = await c.ticking("r1", "c-outage")

        c.net.cut("r1")
        await anyio.sleep(outage_s)
        journaled = len(messages(await results(c.client, run_id)))
        c.net.mend("r1")

        found = await c.completed(run_id)
        assert (await anyio.Path(tmp_path / "c-outage.token").read_text()) == token, "never claimed again"
        assert found == ticks(token_tag(token)), "every result once, in order, one attempt"
        print(
            f"outage of {outage_s} s (lease {OUTAGE_LEASE_S} s): {journaled} of {TICKS} results journaled "
            "when the link came back, the rest after it, each once"
        )
