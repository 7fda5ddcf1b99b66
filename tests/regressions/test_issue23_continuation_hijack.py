"""Issue 23, defect 1: a parked run's continuation could be taken by whoever posted its event id first."""

from __future__ import annotations

from pathlib import Path

import httpx2

from mcphost.app import open_host
from mcphost.ingress import continuation_event_id
from mcphost.models import AgentEventEnvelope, RunStatus
from mcphost.protocol import JSONObject
from tests.e2e.httpkit import api_settings, asgi_client, event_body
from tests.mcphost.test_hooks import API_KEY, hooked_settings, sw_headers, sw_payload

MERGE: JSONObject = {"tool": "gh__merge", "arguments": {"pr": 1}}


def _admitted(response: httpx2.Response) -> str:
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


async def test_a_continuation_id_taken_before_the_decision_neither_continues_nor_uses_the_approval(
    database_url: str, tmp_path: Path
) -> None:
    """Issue 23, defect 1: a parked run's continuation could be hijacked — its event id was always
    `<approval_id>.continue`, so an API client or a hook sender posting that id first became the
    continuation and ran the approved call in its own conversation."""
    settings = hooked_settings(database_url, tmp_path / "data")
    auth = {"Authorization": f"Bearer {API_KEY}"}
    async with open_host(settings) as host, asgi_client(host, headers=auth) as client:
        parked_run = _admitted(await client.post("/v1/events", json=event_body("hi", conversation="parked")))
        await host.orchestrator.wait(parked_run)
        approval = await host.stores.approvals.request(parked_run, "tool", MERGE, parked=True)
        # every id a continuation has had: the one it has, and `<approval_id>.continue` before it
        ids = [continuation_event_id(approval.approval_id), f"{approval.approval_id}.continue"]
        attacks: list[str] = []
        refused: list[httpx2.Response] = []
        for event_id in ids:  # an API client, in its own conversation
            posted = await client.post(
                "/v1/events", json=event_body("mine", conversation="evil", event_id=event_id)
            )
            if posted.status_code == 400:
                refused.append(posted)
            else:
                attacks.append(_admitted(posted))
            body = sw_payload("mine too")  # a hook sender, holding only its own signing secret
            attacks.append(
                _admitted(
                    await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body, msg_id=event_id))
                )
            )
        for run_id in attacks:
            await host.orchestrator.wait(run_id)

        decided = await client.post(f"/v1/approvals/{approval.approval_id}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        continuation_id = decided.json()["continuation_run_id"]
        assert continuation_id not in attacks
        continuation = await host.orchestrator.wait(continuation_id)
        assert continuation.status is RunStatus.COMPLETED, continuation.error
        assert (continuation.agent_id, continuation.conversation_id) == ("echo", "parked")
        assert continuation.event_id == ids[0]
        for run_id in attacks:
            assert await host.stores.approvals.use(run_id, MERGE) is None
        used = await host.stores.approvals.use(continuation_id, MERGE)
        assert used is not None
        assert (used.continuation_run_id, used.used_by_run_id) == (continuation_id, continuation_id)
        assert [r.json()["error"]["details"]["reason"] for r in refused] == ["reserved_event_id"]


async def test_a_continuation_id_of_another_conversation_or_agent_cannot_use_the_approval(
    database_url: str, tmp_path: Path
) -> None:
    """Issue 23, defect 1 (continuation hijack), beyond the reserved prefix: `ApprovalStore.use` checks
    the run is the approval's own continuation (same agent and conversation), not only its event id."""
    async with open_host(api_settings(database_url, tmp_path / "data")) as host, asgi_client(host) as client:
        parked_run = _admitted(await client.post("/v1/events", json=event_body("hi", conversation="parked")))
        await host.orchestrator.wait(parked_run)
        approval = await host.stores.approvals.request(parked_run, "tool", MERGE, parked=True)
        forged = AgentEventEnvelope.model_validate(
            event_body("mine", conversation="elsewhere", event_id=continuation_event_id(approval.approval_id))
        )
        other = (await host.orchestrator.submit(forged, via="approval")).run
        await host.orchestrator.wait(other.run_id)
        await host.stores.approvals.decide(approval.approval_id, "approve")
        assert await host.stores.approvals.use(other.run_id, MERGE) is None
        await host.stores.approvals.continued(approval.approval_id, other.run_id)
        assert await host.stores.approvals.use(other.run_id, MERGE) is None
        assert (await host.stores.approvals.get(approval.approval_id)).used_by_run_id is None
