"""Issue 23, defect 8: a cancel sent to another replica lost its reason."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mcphost.app import open_host
from mcphost.models import RunStatus
from mcphost.orchestrator import _tuning as orchestrator_module
from tests.e2e.httpkit import asgi_client
from tests.mcphost.hostkit import host_settings, message, wait_running
from tests.mcphost.test_orchestrator import results_of


async def test_a_cancel_sent_to_another_host_on_the_database_ends_the_run_with_its_reason(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23, defect 8: a cancel sent to another replica lost its reason (the run on the executing
    host ended with a generic one)."""
    # `hang` ignores runner/cancel, so the host cuts it off and ends it with the cancel's reason.
    monkeypatch.setattr(orchestrator_module, "CANCEL_GRACE_S", 0.2)
    settings = host_settings(database_url, tmp_path / "data")
    async with open_host(settings) as executing, open_host(settings) as other, asgi_client(other) as client:
        run_id = (await executing.orchestrator.submit(message("hang"))).run.run_id
        await wait_running(executing, run_id)
        assert run_id not in other.orchestrator.active_run_ids()
        answer = await client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "the ticket was withdrawn"})
        assert answer.status_code == 202, answer.text
        with anyio.fail_after(15):
            run = await executing.orchestrator.wait(run_id)
        assert run.status is RunStatus.CANCELLED
        assert run.error is not None
        assert (run.error.code, run.error.message) == (
            "cancelled",
            "Run cancelled: the ticket was withdrawn.",
        )
        [end] = [r for r in await results_of(executing, run) if r.type == "run.failed"]
        assert "the ticket was withdrawn" in json.dumps(end.payload)

        # An `interrupt` admitted on the other host says which newer run interrupted it, as it does locally.
        first = (await executing.orchestrator.submit(message("hang", bot="int", conversation="ci"))).run
        await wait_running(executing, first.run_id)
        newer = (await other.orchestrator.submit(message("ok", bot="int", conversation="ci"))).run
        with anyio.fail_after(15):
            interrupted = await executing.orchestrator.wait(first.run_id)
        assert interrupted.error is not None
        assert (
            interrupted.error.message == f"Run cancelled: interrupted by a newer event (run {newer.run_id})."
        )
