"""Inbound files become lazy artifacts: a real host (SQLite file or PostgreSQL, the echo plugin), signed
Slack and Telegram requests carrying files, and a fake of where the platforms serve files
(`tests/fakes/chat_files.py`). Nothing is downloaded when the event arrives; the first read fetches
once, bounded; a failed fetch is retried on the next read."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.errors import ArtifactFetchError, PayloadTooLargeError
from mcphost.models import AgentConfig
from mcphost.stores import ArtifactRecord, PendingArtifact
from tests.e2e.httpkit import api_settings, asgi_client
from tests.fakes._serve import serve_loopback
from tests.fakes.chat_files import FakeFiles
from tests.mcphost.hostkit import ECHO_RUNNER
from tests.mcphost.test_channels import (
    ENV,
    TG_TOKEN,
    channel,
    slack_headers,
    slack_message,
    telegram_update,
    tg_headers,
)

SLACK_TOKEN = ENV["SLACK_BOT_TOKEN"]
BOUND = 4096


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


@dataclass
class Files:
    host: Host
    client: httpx2.AsyncClient
    fake: FakeFiles
    base: str


@pytest.fixture
async def files(database_url: str, tmp_path: Path) -> AsyncGenerator[Files, None]:
    fake = FakeFiles(slack_token=SLACK_TOKEN, telegram_token=TG_TOKEN)
    async with serve_loopback(fake.app) as base:
        agents = [AgentConfig(id="chat", runner=ECHO_RUNNER, match={"bot_id": ["slack", "tg"]})]
        channels = {
            "slack": channel("slack", f"{base}/api", max_attachment_bytes=BOUND, timeout_s=1),
            "tg": channel("telegram", base, max_attachment_bytes=BOUND),
        }
        settings = api_settings(database_url, tmp_path / "data").model_copy(
            update={"agents": agents, "channels": channels}
        )
        async with open_host(settings) as host, asgi_client(host) as client:
            yield Files(host, client, fake, base)
        fake.released.set()


def slack_file(base: str, name: str, size: int, **extra: Any) -> dict[str, Any]:
    return {"id": f"F{name}", "name": name, "mimetype": "text/plain", "size": size,
            "url_private_download": f"{base}/files/{name}", **extra}  # fmt: skip


async def attachments(files: Files, path: str, body: bytes, headers: dict[str, str]) -> list[dict[str, Any]]:
    response = await files.client.post(path, content=body, headers=headers)
    assert response.status_code == 200, response.text
    run = await files.host.stores.runs.get(response.headers["x-mcphost-run-id"])
    event = await files.host.stores.events.get(run.event_id)
    found = event.payload["input"]["attachments"]
    assert isinstance(found, list)
    return found  # pyright: ignore[reportUnknownVariableType]


async def test_slack_files_become_artifacts_fetched_once_on_first_read_with_ranges(files: Files) -> None:
    text = b"hello from a slack file\n" * 10
    files.fake.files["files/notes.txt"] = text
    files.fake.files["files/blob.bin"] = bytes(range(256))
    body = slack_message("see files", files=[slack_file(files.base, "notes.txt", len(text)),
                                            slack_file(files.base, "blob.bin", 256, mimetype="application/octet-stream")])  # fmt: skip
    refs = await attachments(files, "/v1/channels/slack", body, slack_headers(body))
    assert [(r["name"], r["mime_type"], r["size"]) for r in refs] == [
        ("notes.txt", "text/plain", len(text)),
        ("blob.bin", "application/octet-stream", 256),
    ]
    assert files.fake.gets == [], "nothing is downloaded when the event arrives"
    store = files.host.stores.artifacts
    first = refs[0]["artifact_id"]
    assert isinstance(await store.describe(first), PendingArtifact)
    assert await store.read(first, 6, 4) == b"from"
    assert await store.read(first) == text
    assert await store.read(refs[1]["artifact_id"], 250) == bytes(range(250, 256))
    assert files.fake.gets == ["files/notes.txt", "files/blob.bin"], "each file is fetched once"
    stored = await store.describe(first)
    assert isinstance(stored, ArtifactRecord)
    assert stored.size == len(text)
    assert stored.conversation_id == "slack:C1"


async def test_a_failed_fetch_answers_a_precise_error_and_the_next_read_fetches_again(files: Files) -> None:
    files.fake.files["files/flaky.txt"] = b"eventually"
    files.fake.fail["files/flaky.txt"] = [503, 404]
    body = slack_message("flaky", files=[slack_file(files.base, "flaky.txt", 10)])
    (ref,) = await attachments(files, "/v1/channels/slack", body, slack_headers(body))
    store = files.host.stores.artifacts
    with pytest.raises(ArtifactFetchError, match=r"HTTP 503 from the platform\. Reading the artifact again"):
        await store.read(ref["artifact_id"])
    with pytest.raises(ArtifactFetchError, match="HTTP 404: the platform no longer has the file"):
        await store.read(ref["artifact_id"])
    pending = await store.describe(ref["artifact_id"])
    assert isinstance(pending, PendingArtifact)
    assert (pending.error_code, pending.attempts) == ("fetch_failed", 2)
    assert await store.read(ref["artifact_id"]) == b"eventually"
    assert len(files.fake.gets) == 3


async def test_a_platform_that_does_not_answer_times_out_and_is_retried(files: Files) -> None:
    files.fake.files["files/slow.txt"] = b"late"
    files.fake.hang.add("files/slow.txt")
    body = slack_message("slow", files=[slack_file(files.base, "slow.txt", 4)])
    (ref,) = await attachments(files, "/v1/channels/slack", body, slack_headers(body))
    with pytest.raises(ArtifactFetchError, match="no answer within 1 s"):
        await files.host.stores.artifacts.read(ref["artifact_id"])
    files.fake.hang.clear()
    assert await files.host.stores.artifacts.read(ref["artifact_id"]) == b"late"


async def test_files_past_the_bound_are_refused_declared_or_found_while_streaming(files: Files) -> None:
    files.fake.files["files/big.bin"] = b"x" * (BOUND + 1)
    files.fake.files["files/liar.bin"] = b"y" * (BOUND * 3)
    files.fake.chunked.add("files/liar.bin")
    files.fake.files["files/plain-big.bin"] = b"z" * (BOUND * 2)
    body = slack_message("big", files=[slack_file(files.base, "big.bin", BOUND + 1),
                                      slack_file(files.base, "liar.bin", 10),
                                      slack_file(files.base, "plain-big.bin", 10)])  # fmt: skip
    declared, liar, plain = await attachments(files, "/v1/channels/slack", body, slack_headers(body))
    store = files.host.stores.artifacts
    with pytest.raises(
        PayloadTooLargeError,
        match=f"declared {BOUND + 1} bytes; this channel's max_attachment_bytes is {BOUND}",
    ):
        await store.read(declared["artifact_id"])
    assert files.fake.gets == [], "a file declared past the bound is never fetched"
    for ref in (liar, plain):
        with pytest.raises(
            PayloadTooLargeError, match=f"ran past this channel's max_attachment_bytes \\({BOUND}\\)"
        ):
            await store.read(ref["artifact_id"])
        with pytest.raises(PayloadTooLargeError):
            await store.read(ref["artifact_id"])
    assert files.fake.gets == ["files/liar.bin", "files/plain-big.bin"], (
        "a file over the bound is not fetched again"
    )


async def test_the_bot_token_is_never_sent_off_the_platform_file_host(files: Files) -> None:
    body = slack_message("elsewhere", files=[slack_file(files.base, "x", 1,
                                                        url_private_download="http://127.0.0.2:9/files/x")])  # fmt: skip
    (ref,) = await attachments(files, "/v1/channels/slack", body, slack_headers(body))
    with pytest.raises(
        ArtifactFetchError, match=r"is not on https://files\.slack\.com; the bot token is not sent"
    ):
        await files.host.stores.artifacts.read(ref["artifact_id"])
    assert files.fake.gets == []


async def test_concurrent_first_reads_fetch_once(files: Files) -> None:
    files.fake.files["files/shared.txt"] = b"shared bytes"
    body = slack_message("shared", files=[slack_file(files.base, "shared.txt", 12)])
    (ref,) = await attachments(files, "/v1/channels/slack", body, slack_headers(body))
    got: list[bytes] = []

    async def read() -> None:
        got.append(await files.host.stores.artifacts.read(ref["artifact_id"]))

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(read)
    assert got == [b"shared bytes"] * 5
    assert files.fake.gets == ["files/shared.txt"]


async def test_a_telegram_document_is_located_with_getfile_and_fetched_with_the_token_in_its_path(
    files: Files,
) -> None:
    files.fake.files["tg/documents/DOC1"] = b"%PDF-1.7 tiny"
    body = telegram_update(901, "", caption="a doc", document={"file_id": "DOC1", "file_unique_id": "u1",
                                                              "file_name": "a.pdf", "mime_type": "application/pdf", "file_size": 13})  # fmt: skip
    (ref,) = await attachments(files, "/v1/channels/tg", body, tg_headers())
    assert (ref["name"], ref["mime_type"], ref["size"]) == ("a.pdf", "application/pdf", 13)
    assert await files.host.stores.artifacts.read(ref["artifact_id"], 0, 4) == b"%PDF"
    assert files.fake.gets == ["tg/documents/DOC1"]
    missing = telegram_update(902, "", caption="gone", document={"file_id": "GONE", "file_size": 3})
    (gone,) = await attachments(files, "/v1/channels/tg", missing, tg_headers())
    with pytest.raises(ArtifactFetchError, match="HTTP 400 Bad Request: invalid file_id") as caught:
        await files.host.stores.artifacts.read(gone["artifact_id"])
    assert TG_TOKEN not in json.dumps(caught.value.to_dict())
