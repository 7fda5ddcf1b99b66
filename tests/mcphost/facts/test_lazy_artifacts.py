"""`artifacts_read` on a lazy artifact (a chat channel's inbound file) through the real facts server: the
read rule runs before any fetch, the first read fetches once and range reads work, a failed fetch is a
retryable tool error and the next read fetches again, a file past its bound is `payload_too_large`.

The origin here is a fetcher that serves bytes from a dict and counts its fetches — a fake of the
platform (the HTTP fetchers themselves are tested against a fake file host in
tests/mcphost/channels/test_attachments.py)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

from mcphost.errors import ArtifactFetchError
from mcphost.protocol import JSONObject
from tests.mcphost.facts._helpers import Served, connect, fails, ok


class Origin:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.failures = 0
        self.fetched: list[str] = []

    async def fetch(self, locator: JSONObject) -> AsyncIterator[bytes]:
        name = str(locator["name"])
        self.fetched.append(name)
        if self.failures:
            self.failures -= 1
            raise ArtifactFetchError("The file could not be fetched: HTTP 503 from the platform.")
        data = self.files[name]
        for start in range(0, len(data), 3):
            yield data[start : start + 3]


async def test_a_lazy_artifact_is_fetched_on_its_first_allowed_read_and_ranges_work(served: Served) -> None:
    origin = Origin()
    served.stores.artifacts.fetchers["chan"] = origin.fetch
    origin.files |= {"a.bin": bytes(range(40)), "other.txt": b"secret", "big.bin": b"x" * 100}
    artifacts = served.stores.artifacts

    async def lazy(name: str, conversation_id: str, *, declared: int | None = None, bound: int = 64) -> str:
        pending = await artifacts.put_lazy(
            origin="chan", locator={"name": name}, name=name, mime_type="application/octet-stream",
            declared_size=declared, max_bytes=bound, conversation_id=conversation_id,
        )  # fmt: skip
        return pending.artifact_id

    mine, foreign = await lazy("a.bin", "conv-1", declared=40), await lazy("other.txt", "conv-other")
    big = await lazy("big.bin", "conv-1")
    run = await served.start_run()
    async with connect(served, run) as client:
        refused = await fails(client, "artifacts_read", {"artifact_id": foreign})
        assert refused["code"] == "unauthorized"
        assert origin.fetched == [], "the read rule runs before any fetch"
        origin.failures = 1
        failed = await fails(client, "artifacts_read", {"artifact_id": mine})
        assert (failed["code"], failed["retryable"]) == ("runtime_error", True)
        assert "HTTP 503 from the platform" in str(failed["message"])
        part = await ok(client, "artifacts_read", {"artifact_id": mine, "offset": 10, "length": 5})
        assert base64.b64decode(str(part["data"])) == bytes(range(10, 15))
        assert (part["size"], part["eof"]) == (40, False)
        tail = await ok(client, "artifacts_read", {"artifact_id": mine, "offset": 38})
        assert (base64.b64decode(str(tail["data"])), tail["eof"]) == (bytes([38, 39]), True)
        meta = await ok(client, "artifacts_metadata", {"artifact_id": mine})
        assert meta["size"] == 40
        too_big = await fails(client, "artifacts_read", {"artifact_id": big})
        assert too_big["code"] == "payload_too_large"
        assert "max_attachment_bytes (64)" in str(too_big["message"])
    assert origin.fetched == ["a.bin", "a.bin", "big.bin"], "fetched once after the failure, never again"
