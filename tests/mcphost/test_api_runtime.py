"""The runtime protocol (`/v1/runtime/...`) and the runtimes admin API on a real host (real plugin,
real stores on both dialects), driven as a runtime would drive it: register, claim, post results in
order, end; and every refusal a runtime can meet, precisely worded, never a 500."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.config import Settings
from mcphost.errors import ConflictError
from mcphost.models import AgentConfig
from mcphost.stores.dispatch import Adopted, PostedResult, QueuedRun, shift_of
from tests.e2e.httpkit import asgi_client
from tests.mcphost.hostkit import ECHO_RUNNER, host_settings

ADMIN = "admin-key-for-runtime-tests-000"


def settings_for(database_url: str, data_dir: Path, *, lease_s: float = 15.0) -> Settings:
    base = host_settings(database_url, data_dir, api_key=ADMIN, runtime_lease_s=lease_s)

    def remote(agent_id: str, labels: dict[str, str], **kw: Any) -> AgentConfig:
        return AgentConfig.model_validate(
            {
                "id": agent_id,
                "runner": ECHO_RUNNER,
                "match": {"bot_id": agent_id},
                "runtime": {"labels": labels},
            }
            | kw
        )

    agents = [
        remote("remote", {"pool": "a"}),
        remote("nowhere", {"pool": "zzz"}, timeout_s=3),
        AgentConfig.model_validate({"id": "here", "runner": ECHO_RUNNER, "match": {"bot_id": "here"}}),
        AgentConfig.model_validate(
            {
                "id": "fragile",
                "runner": ECHO_RUNNER,
                "match": {"bot_id": "fragile"},
                "runtime": {"labels": {"pool": "a"}, "on_lost": "fail"},
            }
        ),
    ]
    return base.model_copy(update={"agents": agents})


def key(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


ADMIN_HEADERS = key(ADMIN)
REGISTER: dict[str, Any] = {"capabilities": {"runners": [ECHO_RUNNER]}, "slots": 1}


@pytest.fixture
async def host(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncGenerator[Host]:
    """A host whose runtimes' leases last 15 s, or 1 s for the tests of a lapsed lease (by name)."""
    lease_s = 1.0 if "lease" in request.node.name or "lost" in request.node.name else 15.0
    async with open_host(settings_for(database_url, tmp_path / "data", lease_s=lease_s)) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient]:
    async with asgi_client(host) as opened:
        yield opened


async def runtime(host: Host, client: httpx2.AsyncClient, name: str, labels: dict[str, str]) -> str:
    _, token = await host.stores.runtimes.add(name, labels)
    answer = await client.post("/v1/runtime/register", json=REGISTER, headers=key(token))
    assert answer.status_code == 200, answer.text
    return token


async def submit(client: httpx2.AsyncClient, bot: str, text: str = "hi") -> str:
    answer = await client.post(
        "/v1/events",
        json={
            "event_type": "message.received",
            "conversation": {"conversation_id": f"c-{bot}", "bot_id": bot},
            "actor": {"actor_id": "u1"},
            "input": {"text": text},
        },
        headers=ADMIN_HEADERS,
    )
    assert answer.status_code == 202, answer.text
    return answer.json()["run_id"]


async def claim(client: httpx2.AsyncClient, token: str, wait_s: float = 5.0) -> dict[str, Any]:
    answer = await client.post("/v1/runtime/claim", json={"wait_s": wait_s}, headers=key(token))
    assert answer.status_code == 200, answer.text
    return answer.json()


async def claimed_run(
    host: Host, client: httpx2.AsyncClient, bot: str = "remote"
) -> tuple[str, str, dict[str, Any]]:
    """Runtime `a1` (pool a) registered, a run of agent `bot` submitted and claimed by it: (its token,
    the run id, the claimed run)."""
    token = await runtime(host, client, "a1", {"pool": "a"})
    run_id = await submit(client, bot)
    claimed = (await claim(client, token))["run"]
    assert claimed["run_id"] == run_id
    return token, run_id, claimed


async def post_results(
    client: httpx2.AsyncClient,
    token: str,
    run_id: str,
    batch: list[dict[str, Any]],
    *,
    fence: int = 1,
    first_seq: int = 1,
    **more: Any,
) -> httpx2.Response:
    """POST a batch of results of the claim `fence` of the run as the runtime of `token` (`more`: `end`)."""
    body = {"fence": fence, "first_seq": first_seq, "results": batch, **more}
    return await client.post(f"/v1/runtime/runs/{run_id}/results", json=body, headers=key(token))


async def post_end(
    client: httpx2.AsyncClient, token: str, run_id: str, *, last_seq: int, fence: int = 1
) -> httpx2.Response:
    """End the claim `fence` of the run as completed through `last_seq`, as the runtime of `token`."""
    body = {"fence": fence, "status": "completed", "last_seq": last_seq}
    return await client.post(f"/v1/runtime/runs/{run_id}/end", json=body, headers=key(token))


async def wait_status(client: httpx2.AsyncClient, run_id: str, timeout: float = 20) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            run = (await client.get(f"/v1/runs/{run_id}", headers=ADMIN_HEADERS)).json()["run"]
            if run["status"] in ("completed", "failed", "cancelled"):
                return run
            await anyio.sleep(0.05)


def results(run_id: str, *texts: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "result": {
                "type": "message.completed",
                "run_id": run_id,
                "sequence": i + 1,
                "data": {"message": {"content": t}},
            }
        }
        for i, t in enumerate(texts)
    ]
    out.append(
        {"result": {"type": "run.completed", "run_id": run_id, "sequence": len(texts) + 1, "data": {}}}
    )
    return out


async def stored_results(client: httpx2.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    answer = await client.get(
        f"/v1/runs/{run_id}/results", headers={**ADMIN_HEADERS, "accept": "application/json"}
    )
    return answer.json()["results"]


def refusal(answer: httpx2.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, (answer.status_code, answer.text)
    return answer.json()["error"]


async def test_a_remote_run_is_claimed_posted_in_order_and_ends_once(
    host: Host, client: httpx2.AsyncClient
) -> None:
    token, run_id, claimed = await claimed_run(host, client)
    assert claimed["fence"] == 1
    assert claimed["runner_id"] == ECHO_RUNNER
    auth = claimed["context"]["context"]["mcp"]["headers"]["Authorization"]
    assert auth.startswith("Bearer mcpf.1."), "a claim carries its fenced token, never the run's own"

    batch = results(run_id, "hello")
    first = await post_results(client, token, run_id, batch)
    assert first.json() == {"accepted_through": 2, "cancel": None}
    again = await post_results(client, token, run_id, batch)
    assert again.json()["accepted_through"] == 2, "a retried batch is accepted again, stored once"
    end = await post_end(client, token, run_id, last_seq=2)
    assert end.status_code == 200, end.text

    run = await wait_status(client, run_id)
    assert run["status"] == "completed"
    stored = await stored_results(client, run_id)
    messages = [r for r in stored if r["type"] == "message.completed"]
    assert [m["data"]["message"]["content"] for m in messages] == ["hello"]
    assert [r["type"] for r in stored].count("run.completed") == 1

    late = await post_results(client, token, run_id, batch)
    assert refusal(late, 409)["details"]["reason"] == "not_held"


async def test_the_last_results_may_carry_the_runs_end_so_no_end_request_follows(
    host: Host, client: httpx2.AsyncClient
) -> None:
    token, run_id, _ = await claimed_run(host, client)
    batch = results(run_id, "hello")

    bogus = await post_results(client, token, run_id, batch, end="done")
    assert "end" in refusal(bogus, 400)["message"]
    first = await post_results(client, token, run_id, batch, end="completed")
    assert first.json() == {"accepted_through": 2, "cancel": None}

    run = await wait_status(client, run_id)
    assert run["status"] == "completed"
    stored = await stored_results(client, run_id)
    assert [r["type"] for r in stored if r["type"] != "message.delta"] == [
        "message.completed",
        "run.completed",
    ]
    late = await post_results(client, token, run_id, batch, end="completed")
    assert refusal(late, 409)["details"]["reason"] == "not_held"


async def test_a_batch_retried_with_its_end_is_accepted_again_and_nothing_follows_it(host: Host) -> None:
    dispatch = host.stores.dispatch
    added, _ = await host.stores.runtimes.add("a1", {"pool": "a"})
    record = await host.stores.runtimes.register(
        added.runtime_id, capabilities={"runners": [ECHO_RUNNER]}, slots=1, labels={}
    )
    run_id = "run_queued_by_hand"  # no executor on the host reads or drops this row
    await dispatch.enqueue(
        QueuedRun(
            run_id=run_id,
            host_id="h1",
            runner_id=ECHO_RUNNER,
            selector={"pool": "a"},
            on_lost="requeue",
            context={},
            token_hash="00" * 32,
            deadline_at=time.time() + 600,
        )
    )
    claimed = await dispatch.claim(record, lease_s=15)
    assert claimed is not None
    assert (claimed.run_id, claimed.fence) == (run_id, 1)

    def posted(seq: int) -> PostedResult:
        return PostedResult(seq=seq, nbytes=2, dropped=False, result={"run_id": run_id, "sequence": seq})

    batch = [posted(1), posted(2)]
    assert await dispatch.post_results(record.runtime_id, run_id, 1, 1, batch, "completed") == (2, None)
    assert await dispatch.post_results(record.runtime_id, run_id, 1, 1, batch, "completed") == (2, None)
    with pytest.raises(ConflictError) as after_end:
        await dispatch.post_results(record.runtime_id, run_id, 1, 3, [posted(3)])
    assert after_end.value.details["reason"] == "ended"
    view = await dispatch.view(run_id, 0)
    assert view is not None
    assert (view.end_status, view.end_through, [r.seq for r in view.results]) == ("completed", 2, [1, 2])
    assert [e["event"] for e in await dispatch.events(run_id)] == ["queued", "claimed", "ended"]


async def test_bad_input_on_the_runtime_protocol_is_refused_precisely(
    host: Host, client: httpx2.AsyncClient
) -> None:
    mine = await runtime(host, client, "a1", {"pool": "a"})
    other = await runtime(host, client, "a2", {"pool": "b"})
    run_id = await submit(client, "remote")
    assert (await claim(client, mine))["run"]["run_id"] == run_id
    path = f"/v1/runtime/runs/{run_id}/results"
    good = {"fence": 1, "first_seq": 1, "results": results(run_id, "x")}

    assert "Bearer" in refusal(await client.post("/v1/runtime/claim", json={}), 401)["message"]
    forged = await client.post("/v1/runtime/claim", json={}, headers=key("mcprt_" + "A" * 43))
    assert "Not a runtime token" in refusal(forged, 401)["message"]
    api_key = await client.post("/v1/runtime/claim", json={}, headers=ADMIN_HEADERS)
    assert "API keys" in refusal(api_key, 401)["message"], "an API key cannot act as a runtime"
    assert (await client.get("/v1/runs", headers=key(mine))).status_code == 401, (
        "a runtime token is no API key"
    )

    theirs = await client.post(path, json=good, headers=key(other))
    assert refusal(theirs, 409)["details"]["reason"] == "not_held"
    stale = await client.post(path, json={**good, "fence": 7}, headers=key(mine))
    assert refusal(stale, 409)["details"] == {"run_id": run_id, "reason": "stale_fence", "fence": 1}
    gap = await client.post(path, json={**good, "first_seq": 3}, headers=key(mine))
    assert refusal(gap, 409)["details"]["expected"] == 1
    early_end = await client.post(
        f"/v1/runtime/runs/{run_id}/end",
        json={"fence": 1, "status": "completed", "last_seq": 5},
        headers=key(mine),
    )
    assert refusal(early_end, 409)["details"]["reason"] == "sequence_gap"

    deep: Any = "leaf"
    for _ in range(200):
        deep = {"d": deep}
    too_deep = {
        "fence": 1,
        "first_seq": 1,
        "results": [{"result": {"type": "message", "run_id": run_id, "data": deep}}],
    }
    assert "nest" in refusal(await client.post(path, json=too_deep, headers=key(mine)), 400)["message"]
    huge = b'{"fence":1,"first_seq":1,"results":[{"result":{"x":"' + b"a" * (9 * 1024 * 1024) + b'"}}]}'
    oversized = await client.post(
        path, content=huge, headers={**key(mine), "content-type": "application/json"}
    )
    assert refusal(oversized, 413)["code"] == "payload_too_large"
    for raw in (
        b'{"fence":1,"first_seq":1,"results":[{"result":{"v":NaN}}]}',
        b'{"fence":1,"first_seq":1,"results":[{"result":{"v":123456789012345678901234567890}}]}',
        b'{"fence":1,"first_seq":1,"results":[{"result":{"v":"a\\u0000b"}}]}',
        b'{"fence":1,"first_seq":1,"results":[],"extra":1}',
        b'{"fence":"1","first_seq":1,"results":[{"result":{}}]}',
        b"not json",
    ):
        bad = await client.post(path, content=raw, headers={**key(mine), "content-type": "application/json"})
        assert bad.status_code == 400, (raw[:60], bad.status_code, bad.text)
    bad_register = await client.post(
        "/v1/runtime/register",
        json={**REGISTER, "slots": 10**9, "labels": {"Bad Key": "v"}},
        headers=key(mine),
    )
    assert refusal(bad_register, 400)["code"] == "invalid_argument"
    forged_run = await client.post(
        "/v1/runtime/runs/run_nope/end",
        json={"fence": 1, "status": "completed", "last_seq": 0},
        headers=key(mine),
    )
    assert refusal(forged_run, 409)["details"]["reason"] == "not_held"

    # Nothing of the refused posts was stored: the good batch is still the first.
    ok = await client.post(path, json=good, headers=key(mine))
    assert ok.json()["accepted_through"] == 2


async def test_the_runtimes_api_lists_drains_disables_and_enables(
    host: Host, client: httpx2.AsyncClient
) -> None:
    token = await runtime(host, client, "a1", {"pool": "a"})
    listed = (await client.get("/v1/runtimes", headers=ADMIN_HEADERS)).json()["runtimes"]
    assert [(r["name"], r["state"], r["alive"], r["labels"]) for r in listed] == [
        ("a1", "online", True, {"pool": "a"})
    ]
    assert listed[0]["capabilities"]["runners"] == [ECHO_RUNNER]
    assert (await client.get("/v1/runtimes", headers=key(token))).status_code == 401

    drained = await client.post("/v1/runtimes/a1/drain", headers=ADMIN_HEADERS)
    assert drained.json()["state"] == "draining"
    await submit(client, "remote")
    assert await claim(client, token, wait_s=0.3) == {"run": None, "state": "draining"}, (
        "drain claims nothing new"
    )
    disabled = await client.post("/v1/runtimes/a1/disable", headers=ADMIN_HEADERS)
    assert disabled.json()["state"] == "disabled"
    refused = await client.post("/v1/runtime/claim", json={"wait_s": 0}, headers=key(token))
    assert "disabled" in refusal(refused, 403)["message"]
    assert (await client.post("/v1/runtimes/a1/enable", headers=ADMIN_HEADERS)).json()["state"] == "online"
    assert (await claim(client, token))["run"] is not None
    missing = await client.post("/v1/runtimes/nope/drain", headers=ADMIN_HEADERS)
    assert refusal(missing, 404)["details"] == {"runtime": "nope"}


async def test_a_lapsed_lease_requeues_the_run_and_fences_the_old_runtime_out(
    host: Host, client: httpx2.AsyncClient
) -> None:
    old = await runtime(host, client, "a1", {"pool": "a"})
    new = await runtime(host, client, "a2", {"pool": "a"})
    run_id = await submit(client, "remote")
    first = (await claim(client, old))["run"]
    old_mcp = first["context"]["context"]["mcp"]
    # a1 stops heartbeating: after the lease (1 s) the run's executor puts it back in the queue.
    second = (await claim(client, new, wait_s=10))["run"]
    assert second["run_id"] == run_id
    assert second["fence"] > first["fence"]
    assert second["attempt"] == 2

    late = await post_results(client, old, run_id, results(run_id, "late"), fence=first["fence"])
    assert refusal(late, 409)["details"]["reason"] == "not_held"
    beat = await client.post(
        "/v1/runtime/heartbeat",
        json={"runs": [{"run_id": run_id, "fence": first["fence"]}]},
        headers=key(old),
    )
    assert beat.json()["lost"] == [run_id]

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    mcp_headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    stale_call = await client.post(
        f"/runs/{run_id}/mcp", content=json.dumps(initialize), headers={**mcp_headers, **old_mcp["headers"]}
    )
    assert stale_call.status_code == 401, stale_call.text
    fresh_call = await client.post(
        f"/runs/{run_id}/mcp",
        content=json.dumps(initialize),
        headers={**mcp_headers, **second["context"]["context"]["mcp"]["headers"]},
    )
    assert fresh_call.status_code == 200, fresh_call.text

    posted = await post_results(client, new, run_id, results(run_id, "second"), fence=second["fence"])
    assert posted.status_code == 200, posted.text
    await post_end(client, new, run_id, last_seq=2, fence=second["fence"])
    run = await wait_status(client, run_id)
    assert run["status"] == "completed"
    stored = await stored_results(client, run_id)
    assert [r["data"]["message"]["content"] for r in stored if r["type"] == "message.completed"] == ["second"]

    placement = await placement_of(client, run_id)
    assert (placement["runtime_name"], placement["fence"], placement["attempts"]) == (
        "a2",
        second["fence"],
        2,
    )
    assert [e["event"] for e in placement["events"]] == ["queued", "claimed", "requeued", "claimed", "ended"]
    requeued = placement["events"][2]
    assert (requeued["runtime"], requeued["fence"]) == ("a1", 1), "the lost claim's runtime and fence"
    assert "missed its heartbeats (fence 1)" in requeued["why"]


async def test_a_run_whose_agent_says_fail_fails_when_its_runtime_is_lost(
    host: Host, client: httpx2.AsyncClient
) -> None:
    _, run_id, _ = await claimed_run(host, client, "fragile")
    run = await wait_status(client, run_id)
    assert run["status"] == "failed"
    assert "on_lost is 'fail'" in run["error"]["message"]
    placement = await placement_of(client, run_id)
    assert [e["event"] for e in placement["events"]] == ["queued", "claimed", "lost"]
    lost = placement["events"][-1]
    assert (lost["runtime"], lost["fence"], lost["renewals"]) == ("a1", 1, 0)
    assert "missed its heartbeats" in lost["why"]


async def test_a_run_no_runtime_can_take_fails_naming_its_selector(
    host: Host, client: httpx2.AsyncClient
) -> None:
    await runtime(host, client, "a1", {"pool": "a"})
    run_id = await submit(client, "nowhere")
    run = await wait_status(client, run_id)
    assert run["status"] == "failed"
    assert "pool=zzz" in run["error"]["message"]
    assert "1 registered, 0 eligible" in run["error"]["message"]


async def test_a_cancel_reaches_the_runtime_in_its_next_heartbeat(
    host: Host, client: httpx2.AsyncClient
) -> None:
    token, run_id, claimed = await claimed_run(host, client)
    fence = claimed["fence"]
    started = time.monotonic()
    cancelled = await client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "stop"}, headers=ADMIN_HEADERS)
    assert cancelled.status_code == 202, cancelled.text
    with anyio.fail_after(5):
        while True:
            beat = await client.post(
                "/v1/runtime/heartbeat",
                json={"runs": [{"run_id": run_id, "fence": fence}]},
                headers=key(token),
            )
            runs = beat.json()["runs"]
            if runs and runs[0]["cancel"] is not None:
                break
            await anyio.sleep(0.05)
    assert runs[0]["cancel"] == "stop"
    await post_end(client, token, run_id, last_seq=0, fence=fence)
    run = await wait_status(client, run_id)
    assert run["status"] == "cancelled"
    assert time.monotonic() - started < 5.0, (
        "ended by the runtime's answer, before the cancel grace cut it off"
    )


async def placement_of(client: httpx2.AsyncClient, run_id: str) -> dict[str, Any]:
    answer = await client.get(f"/v1/runs/{run_id}/runtime", headers=ADMIN_HEADERS)
    assert answer.status_code == 200, answer.text
    assert answer.json()["run_id"] == run_id
    return answer.json()["runtime"]


async def test_a_remote_runs_audit_keeps_its_runtime_claim_timings_renewals_and_output(
    host: Host, client: httpx2.AsyncClient
) -> None:
    token, run_id, claimed = await claimed_run(host, client)
    queued = await placement_of(client, run_id)
    assert (queued["state"], queued["runtime_name"], queued["fence"], queued["renewals"]) == (
        "claimed",
        "a1",
        1,
        0,
    )
    listed = (await client.get("/v1/runtimes", headers=ADMIN_HEADERS)).json()["runtimes"][0]
    assert [(r["run_id"], r["fence"], r["attempt"]) for r in listed["runs"]] == [(run_id, 1, 1)], (
        "the runtimes list names the runs each one holds"
    )

    for _ in range(2):
        beat = await client.post(
            "/v1/runtime/heartbeat", json={"runs": [{"run_id": run_id, "fence": 1}]}, headers=key(token)
        )
        assert beat.json()["runs"][0]["run_id"] == run_id
    assert (await post_results(client, token, run_id, results(run_id, "hello"))).is_success
    output = {"fence": 1, "text": "line one\nline two é\n", "cut_bytes": 1200, "cut_lines": 30}
    posted = await client.post(f"/v1/runtime/runs/{run_id}/output", json=output, headers=key(token))
    assert posted.status_code == 200, posted.text
    artifact_id = posted.json()["artifact_id"]
    assert (await post_end(client, token, run_id, last_seq=2)).is_success
    assert (await wait_status(client, run_id))["status"] == "completed"

    kept = await placement_of(client, run_id)
    assert kept["state"] == "ended", "kept after the queue row is gone"
    assert (kept["runtime_id"], kept["runtime_name"]) == (listed["runtime_id"], "a1")
    assert (kept["fence"], kept["attempts"], kept["renewals"], kept["end_status"]) == (1, 1, 2, "completed")
    assert kept["queued_at"] <= kept["claimed_at"] <= kept["first_result_at"] <= kept["ended_at"]
    assert kept["last_renewal_at"] is not None
    assert kept["output_artifact_id"] == artifact_id
    assert [e["event"] for e in kept["events"]] == ["queued", "claimed", "output", "ended"]
    ended = kept["events"][-1]
    assert (ended["status"], ended["fence"], ended["renewals"]) == ("completed", 1, 2)
    assert claimed["attempt"] == 1

    content = await client.get(f"/v1/artifacts/{artifact_id}/content", headers=ADMIN_HEADERS)
    text = content.content.decode()
    assert text.startswith("[mcphost: 1200 earlier bytes in 30 lines were cut"), text
    assert text.endswith("line one\nline two é\n")
    meta = (await client.get(f"/v1/artifacts/{artifact_id}", headers=ADMIN_HEADERS)).json()
    assert meta["owner_run_id"] == run_id
    assert meta["mime_type"].startswith("text/plain")

    local = await submit(client, "here")
    assert (await wait_status(client, local))["status"] == "completed"
    answer = await client.get(f"/v1/runs/{local}/runtime", headers=ADMIN_HEADERS)
    assert answer.json() == {"run_id": local, "runtime": None}, "a local run ran on the host itself"
    missing = await client.get("/v1/runs/run_nope/runtime", headers=ADMIN_HEADERS)
    assert refusal(missing, 404)["code"] == "not_found"


async def test_bad_output_posts_are_refused_precisely_and_store_nothing(
    host: Host, client: httpx2.AsyncClient
) -> None:
    mine = await runtime(host, client, "a1", {"pool": "a"})
    other = await runtime(host, client, "a2", {"pool": "b"})
    run_id = await submit(client, "remote")
    assert (await claim(client, mine))["run"]["run_id"] == run_id
    path = f"/v1/runtime/runs/{run_id}/output"
    good = {"fence": 1, "text": "ok\n"}

    assert refusal(await client.post(path, json=good), 401)["code"] == "unauthorized"
    forged = await client.post(path, json=good, headers=key("mcprt_" + "B" * 43))
    assert "Not a runtime token" in refusal(forged, 401)["message"]
    theirs = await client.post(path, json=good, headers=key(other))
    assert refusal(theirs, 409)["details"]["reason"] == "not_held", "another runtime's run"
    stale = await client.post(path, json={**good, "fence": 2}, headers=key(mine))
    assert refusal(stale, 409)["details"] == {"run_id": run_id, "reason": "stale_fence", "fence": 1}
    unknown = await client.post("/v1/runtime/runs/run_nope/output", json=good, headers=key(mine))
    assert refusal(unknown, 409)["details"]["reason"] == "not_held"

    over = await client.post(path, json={"fence": 1, "text": "x" * (1024 * 1024 + 1)}, headers=key(mine))
    assert "at most 1048576" in refusal(over, 400)["message"]
    multibyte = await client.post(path, json={"fence": 1, "text": "é" * (600 * 1024)}, headers=key(mine))
    assert refusal(multibyte, 400)["code"] == "invalid_argument", (
        "the bound is in UTF-8 bytes, not characters"
    )
    huge = b'{"fence":1,"text":"' + b"a" * (9 * 1024 * 1024) + b'"}'
    oversized = await client.post(
        path, content=huge, headers={**key(mine), "content-type": "application/json"}
    )
    assert refusal(oversized, 413)["code"] == "payload_too_large"
    for raw in (
        b'{"fence":1,"text":"a\\u0000b"}',
        b'{"fence":1,"text":"\\ud800"}',
        b'{"fence":1,"text":"a","cut_bytes":-1}',
        b'{"fence":1,"text":"a","cut_lines":123456789012345678901234567890}',
        b'{"fence":1,"text":"a","cut_bytes":NaN}',
        b'{"fence":1,"text":"a","extra":1}',
        b'{"fence":"1","text":"a"}',
        b'{"fence":1,"text":{"deep":[1]}}',
        b'{"fence":0,"text":"a"}',
        b"[]",
        b"not json",
    ):
        bad = await client.post(path, content=raw, headers={**key(mine), "content-type": "application/json"})
        assert bad.status_code == 400, (raw[:60], bad.status_code, bad.text)

    placement = await placement_of(client, run_id)
    assert [e["event"] for e in placement["events"]] == ["queued", "claimed"], "nothing refused was kept"
    assert placement["output_artifact_id"] is None
    ok = await client.post(path, json=good, headers=key(mine))
    assert ok.status_code == 200, ok.text
    again = await client.post(path, json={**good, "text": "retried\n"}, headers=key(mine))
    placement = await placement_of(client, run_id)
    assert [e["event"] for e in placement["events"]] == ["queued", "claimed", "output"], (
        "a retried post replaces its claim's output"
    )
    assert placement["output_artifact_id"] == again.json()["artifact_id"]


async def test_a_journaled_result_leaves_the_queue_and_an_adopting_host_keeps_the_claim(
    host: Host, client: httpx2.AsyncClient
) -> None:
    """What a host that adopts a remote run after its host died relies on: a posted result is either
    journaled or still a queue row (the journaling transaction deletes the row), and adopting a claim
    keeps its fence, stretches its lease and finds the shift of its attempt."""
    token, run_id, claimed = await claimed_run(host, client)
    fence = claimed["fence"]
    message, terminal = results(run_id, "one")
    posted = await post_results(client, token, run_id, [message], fence=fence)
    assert posted.json()["accepted_through"] == 1
    with anyio.fail_after(20):
        while True:
            if await host.stores.results.list(run_id):
                break
            await anyio.sleep(0.05)
    view = await host.stores.dispatch.view(run_id, 0)
    assert view is not None
    assert view.results == [], "the journaled result left the queue in the transaction that journaled it"

    adopted = await host.stores.dispatch.adopt(run_id, "host-next", grace_s=60)
    assert adopted == Adopted(fence=fence, shift=0)
    view = await host.stores.dispatch.view(run_id, 0)
    assert view is not None
    assert view.state == "claimed"
    assert view.fence == fence
    assert view.lease_until > time.time() + 30, "the claim's lease lasts the adoption's grace"
    assert (await host.stores.dispatch.events(run_id))[-1]["event"] == "adopted"
    assert await host.stores.dispatch.adopt("run_missing", "host-next", grace_s=60) is None
    assert shift_of([{"event": "requeued", "shift": 7}, {"event": "claimed"}, {"event": "adopted"}]) == 7
    assert shift_of([{"event": "claimed"}]) == 0

    last = await post_results(client, token, run_id, [terminal], fence=fence, first_seq=2)
    assert last.json()["accepted_through"] == 2
    end = await post_end(client, token, run_id, last_seq=2, fence=fence)
    assert end.status_code == 200, end.text
    assert (await wait_status(client, run_id))["status"] == "completed"
