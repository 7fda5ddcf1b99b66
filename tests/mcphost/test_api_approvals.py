"""`/v1/approvals` through the real app (SQLite file and PostgreSQL): listing, idempotent decisions, 409
on the other decision, every bad request refused with a precise 4xx that changes nothing, and a parked
run's continuation, which only the host makes (tests/regressions/test_issue23_continuation_hijack.py)."""

from __future__ import annotations

from pathlib import Path

from mcphost.app import open_host
from mcphost.models import RunStatus
from mcphost.stores import ApprovalRecord, open_stores
from mcphost.stores.approvals import RECOVERED_NOTE
from tests.e2e.httpkit import api_settings, asgi_client, event_body, row_counts
from tests.mcphost.stores.factories import admitted


async def test_an_approval_is_listed_decided_once_and_refused_a_second_decision(
    database_url: str, tmp_path: Path
) -> None:
    async with open_host(api_settings(database_url, tmp_path / "data")) as host, asgi_client(host) as client:
        admitted = await client.post("/v1/events", json=event_body("hi"))
        run_id = admitted.json()["run_id"]
        await host.orchestrator.wait(run_id)
        # an action: it outlives its run (a tool call's approval ends with the run, see below)
        asked = await host.stores.approvals.request(
            run_id, "action", {"action": "merge", "target": {"pr": 1}}
        )
        listed = await client.get("/v1/approvals", params={"status": "pending"})
        assert listed.status_code == 200, listed.text
        (item,) = listed.json()["items"]
        assert {k: item[k] for k in ("approval_id", "run_id", "kind", "status", "request")} == {
            "approval_id": asked.approval_id,
            "run_id": run_id,
            "kind": "action",
            "status": "pending",
            "request": {"action": "merge", "target": {"pr": 1}},
        }
        url = f"/v1/approvals/{asked.approval_id}"
        decided = await client.post(url, json={"decision": "deny", "note": "not today"})
        assert decided.status_code == 200, decided.text
        assert (decided.json()["status"], decided.json()["note"]) == ("denied", "not today")
        again = await client.post(url, json={"decision": "deny"})
        assert (again.status_code, again.json()) == (200, decided.json())
        # The decision is counted once by /metrics (the repeat changed nothing).
        scraped = (await client.get("/metrics")).text
        assert 'mcphost_approval_decisions_total{decision="denied"} 1.0' in scraped
        assert 'mcphost_approval_decisions_total{decision="approved"} 0.0' in scraped
        assert 'mcphost_approval_decisions_total{decision="answered"} 0.0' in scraped
        other = await client.post(url, json={"decision": "approve"})
        assert other.status_code == 409
        assert other.json()["error"]["code"] == "conflict"
        assert "already denied; it cannot be approved" in other.json()["error"]["message"]
        shown = await client.get(url)
        assert ApprovalRecord.model_validate(shown.json()).status == "denied"
        assert (await client.get("/v1/approvals", params={"run_id": run_id})).json()["items"] == [
            shown.json()
        ]
        assert (await host.stores.runs.get(run_id)).status is RunStatus.COMPLETED
        call = await host.stores.approvals.request(run_id, "tool", {"tool": "gh__merge", "arguments": {}})
        late = await client.post(f"/v1/approvals/{call.approval_id}", json={"decision": "approve"})
        assert late.status_code == 409, late.text
        assert late.json()["error"]["details"]["run_status"] == "completed"
        assert (await client.get(f"/v1/approvals/{call.approval_id}")).json()["status"] == "expired"
        merge = await host.stores.approvals.request(run_id, "action", {"action": "merge"})
        approved = await client.post(f"/v1/approvals/{merge.approval_id}", json={"decision": "approve"})
        assert approved.status_code == 200, approved.text
        assert host.metrics.value("mcphost_approval_decisions_total", decision="approved") == 1
        assert host.metrics.value("mcphost_approval_decisions_total", decision="denied") == 1


BAD_DECISIONS: list[tuple[bytes, int, str]] = [
    (b'{"decision": "maybe"}', 400, "decision"),
    (b'{"decision": "approve", "extra": 1}', 400, "extra"),
    (b'{"decision": "approve", "note": "x\\u0000y"}', 400, "NUL"),
    (b'{"decision": "approve", "note": NaN}', 400, "finite"),
    (b'{"decision": "approve", "note": "' + b"n" * 2001 + b'"}', 400, "2000"),
    (b'{"decision": "approve", "note": 12345678901234567890123}', 400, "note"),
    (b"[" * 200 + b"]" * 200, 400, "64 levels"),
    (b"not json", 400, "JSON"),
    (b"", 400, ""),
    (b'{"decision": "approve", "note": "' + b"n" * 70_000 + b'"}', 413, ""),
]


async def test_a_bad_decision_is_refused_with_a_4xx_and_changes_nothing(
    database_url: str, tmp_path: Path
) -> None:
    async with open_host(api_settings(database_url, tmp_path / "data")) as host, asgi_client(host) as client:
        run_id = (await client.post("/v1/events", json=event_body("hi"))).json()["run_id"]
        await host.orchestrator.wait(run_id)
        asked = await host.stores.approvals.request(run_id, "tool", {"tool": "gh__merge"})
        before = await row_counts(host.stores)
        for body, status, fragment in BAD_DECISIONS:
            answer = await client.post(f"/v1/approvals/{asked.approval_id}", content=body)
            assert answer.status_code == status, (body[:80], answer.text)
            assert fragment in answer.json()["error"]["message"], (body[:80], answer.text)
        assert await row_counts(host.stores) == before
        assert (await host.stores.approvals.get(asked.approval_id)).status == "pending"


async def test_unknown_approvals_and_bad_queries_are_precise_4xx(database_url: str, tmp_path: Path) -> None:
    async with open_host(api_settings(database_url, tmp_path / "data")) as host, asgi_client(host) as client:
        missing = await client.post("/v1/approvals/apr_nope", json={"decision": "approve"})
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
        assert (await client.get("/v1/approvals/apr_nope")).status_code == 404
        assert (await client.get("/v1/approvals/apr%00x")).status_code == 400
        assert (await client.get("/v1/approvals", params={"status": "maybe"})).status_code == 400
        assert (await client.get("/v1/approvals", params={"limit": "1000"})).status_code == 400
        assert (await client.get("/v1/approvals", params={"cursor": "forged"})).status_code == 400
        assert (await client.get("/v1/approvals", params={"bogus": "1"})).status_code == 400
        assert (await client.get("/v1/approvals")).json() == {
            "items": [],
            "next_cursor": None,
            "has_more": False,
        }


async def test_a_host_start_expires_the_call_approvals_a_killed_host_left_pending_and_keeps_the_others(
    database_url: str, tmp_path: Path
) -> None:
    # The database as a host killed mid-call leaves it: its run running, its call's approval pending.
    async with open_stores(database_url, tmp_path / "data") as stores:
        killed = await admitted(stores, "c-killed", host_id="host-killed")
        assert await stores.runs.try_start(killed.run_id, host_id="host-killed") is not None
        waiting = await stores.approvals.request(
            killed.run_id, "tool", {"tool": "gh__merge", "arguments": {}}
        )
        parking = await stores.approvals.request(
            killed.run_id, "tool", {"tool": "gh__close", "arguments": {}}, parked=True
        )
        action = await stores.approvals.request(killed.run_id, "action", {"action": "deploy"})
    async with open_host(api_settings(database_url, tmp_path / "data")) as host, asgi_client(host) as client:
        assert (await host.stores.runs.get(killed.run_id)).status is RunStatus.FAILED
        expired = (await client.get(f"/v1/approvals/{waiting.approval_id}")).json()
        assert (expired["status"], expired["note"]) == ("expired", RECOVERED_NOTE)
        assert expired["decided_at"] is not None
        # A parked approval's decision is the point (it continues the conversation); an action outlives
        # its run: both stay pending for a person.
        pending = (await client.get("/v1/approvals", params={"status": "pending"})).json()["items"]
        assert sorted(a["approval_id"] for a in pending) == sorted([parking.approval_id, action.approval_id])
        late = await client.post(f"/v1/approvals/{waiting.approval_id}", json={"decision": "approve"})
        assert late.status_code == 409, late.text
