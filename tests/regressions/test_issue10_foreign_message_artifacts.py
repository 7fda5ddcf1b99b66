"""Issue 10, item 8: a runner's message.completed could list another conversation's artifacts in
message.artifacts, and they were stored and streamed."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from mcphost.app import Host, open_host
from mcphost.models import RunStatus
from tests.mcphost.hostkit import error_code, host_settings, message, run_event
from tests.mcphost.test_orchestrator import results_of


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(host_settings(database_url, tmp_path / "data")) as opened:
        yield opened


async def test_a_message_may_not_carry_another_conversations_artifact(host: Host) -> None:
    """Issue 10, item 8: a runner's message.completed could list another conversation's artifacts in
    message.artifacts, and they were stored and streamed."""
    foreign = await host.stores.artifacts.put_bytes(
        b"secret of c2", name="s.txt", mime_type="text/plain", max_bytes=100, conversation_id="c2"
    )
    other_run = await host.stores.artifacts.put_bytes(
        b"of another run",
        name="o.txt",
        mime_type="text/plain",
        max_bytes=100,
        owner_run_id="run_other",
        conversation_id="c1",
    )
    for artifact_id, code in [
        (foreign.artifact_id, "unauthorized"),
        (other_run.artifact_id, "unauthorized"),
        ("art_missing", "invalid_argument"),
    ]:
        run = await run_event(host, message(f"msg-artifact:{artifact_id}"))
        assert run.status is RunStatus.FAILED
        assert error_code(run) == code
        assert run.error is not None
        assert artifact_id in run.error.message
        # Neither stored nor streamed: the message is not among the results, nor in the transcript.
        assert "message.completed" not in [r.type for r in await results_of(host, run)]
    transcript = (await host.stores.transcript.page("c1", None, limit=100)).items
    assert [t.role for t in transcript] == ["user", "user", "user"]
    assert all(not t.artifacts for t in transcript)
