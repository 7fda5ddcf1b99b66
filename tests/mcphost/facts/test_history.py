"""What the handlers show a model: truncation, artifact handles, capped event data, search ranking, inline
state values and artifact encodings."""

from __future__ import annotations

import base64
import time

from mcphost.facts._args import MAX_READ_BYTES
from mcphost.protocol.facts import TranscriptRole
from tests.mcphost.facts._helpers import MODERN, Served, connect, fails, ok, raises_mcp_error


async def test_long_content_is_cut_at_4000_characters_and_flagged(served: Served) -> None:
    long = "é" * 4500
    await served.stores.transcript.append(
        conversation_id="conv-1",
        role="assistant",
        content=long,
        contents=[
            {"type": "text", "text": long},
            {"type": "image", "artifact_id": "art_1", "mime_type": "image/png"},
        ],
        artifacts=[{"artifact_id": "art_1", "mime_type": "image/png"}],
    )
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        plain = (await ok(client, "history_page", {"limit": 2}))["items"]
        full = (await ok(client, "history_page", {"limit": 2, "include_artifacts": True}))["items"]
    old = plain[1]
    assert (len(old["content"]), old["truncated"]) == (4000, True)
    assert old["contents"] == [{"type": "text", "text": "é" * 4000}]
    assert (old["artifacts"], old["artifact_count"]) == ([], 1)
    assert [c["type"] for c in full[1]["contents"]] == ["text", "image"]
    assert full[1]["artifacts"] == [
        {"artifact_id": "art_1", "mime_type": "image/png", "name": None, "size": None, "sha256": None}
    ]
    assert plain[0]["truncated"] is False


async def test_pages_walk_the_whole_thread_without_gaps(served: Served) -> None:
    for i in range(7):
        await served.stores.transcript.append(conversation_id="conv-1", role="user", content=f"m{i}")
    run = await served.start_run(text="m7")
    seen: list[str] = []
    cursor = None
    async with connect(served, run, mode=MODERN) as client:
        while True:
            args = {"limit": 3} if cursor is None else {"limit": 3, "before_cursor": cursor}
            page = await ok(client, "history_page", args)
            seen.extend(i["content"] for i in page["items"])
            if not page["has_more"]:
                break
            cursor = page["next_cursor"]
    assert seen == [f"m{i}" for i in range(7, -1, -1)]


async def test_large_event_data_is_left_out_and_flagged(served: Served) -> None:
    await served.stores.events.append(
        event_id="evt_big",
        event_type="tool.call.completed",
        kind="telemetry",
        source="system",
        payload={"result_preview": "x" * 300_000},
        conversation_id="conv-1",
    )
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        event = await ok(client, "events_get", {"event_id": "evt_big"})
        page = (await ok(client, "events_page"))["items"]
    assert (event["data"], event["data_truncated"]) == (None, True)
    assert event["data_size"] > 300_000
    assert [(e["event_id"], e["data_truncated"]) for e in page] == [
        (run.event.event_id, False),
        ("evt_big", True),
    ]
    assert page[0]["data"]["input"]["text"] == "hello there"


async def test_search_ranks_by_words_found_then_recency_and_filters_roles(served: Served) -> None:
    transcript = served.stores.transcript
    rows: list[tuple[TranscriptRole, str]] = [
        ("user", "red apple"),
        ("assistant", "red apple pie"),
        ("user", "apple"),
    ]
    for role, content in rows:
        await transcript.append(conversation_id="conv-1", role=role, content=content)
    run = await served.start_run(text="unrelated")
    async with connect(served, run, mode=MODERN) as client:
        hits = (await ok(client, "history_search", {"query": "red apple pie"}))["hits"]
        users = (await ok(client, "history_search", {"query": "apple", "roles": ["user"], "top_k": 1}))[
            "hits"
        ]
        blank = await fails(client, "history_search", {"query": "   "})
    assert [h["item"]["content"] for h in hits] == ["red apple pie", "red apple", "apple"]
    assert [h["item"]["content"] for h in users] == ["apple"]
    assert blank["code"] == "invalid_argument"


async def test_state_list_inlines_values_until_64_kib_then_omits_them(served: Served) -> None:
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        for key in ("a", "b", "c"):
            await ok(client, "state_set", {"scope": "conversation", "key": key, "value": "v" * 30_000})
        listed = (await ok(client, "state_list", {"scope": "conversation"}))["items"]
    assert [("value" in i, i.get("value_omitted", False)) for i in listed] == [
        (True, False),
        (True, False),
        (False, True),
    ]


async def test_artifact_bytes_are_text_only_when_textual_and_valid_utf8(served: Served) -> None:
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        raw = base64.b64encode("née".encode()).decode()
        text = await ok(
            client, "artifacts_create", {"name": "n.txt", "mime_type": "text/plain", "base64": raw}
        )
        cut = await ok(
            client, "artifacts_read", {"artifact_id": text["artifact_id"], "offset": 0, "length": 2}
        )
        assert cut["encoding"] == "base64"  # the read ends inside "é"
        whole = await ok(client, "artifacts_read", {"artifact_id": text["artifact_id"]})
        assert (whole["data"], whole["encoding"]) == ("née", "utf-8")
        json_doc = await ok(
            client, "artifacts_create", {"name": "d.json", "mime_type": "application/json", "text": "{}"}
        )
        assert (await ok(client, "artifacts_read", {"artifact_id": json_doc["artifact_id"]}))[
            "encoding"
        ] == "utf-8"
        past = await fails(client, "artifacts_read", {"artifact_id": text["artifact_id"], "offset": 99})
        assert past["code"] == "invalid_argument"


async def test_big_and_expired_artifacts(served: Served) -> None:
    run = await served.start_run()
    stores = served.stores
    big = await stores.artifacts.put_bytes(
        b"z" * (MAX_READ_BYTES + 10),
        name="big.txt",
        mime_type="text/plain",
        max_bytes=2 * MAX_READ_BYTES,
        owner_run_id=run.run_id,
    )
    gone = await stores.artifacts.put_bytes(
        b"old",
        name="old.txt",
        mime_type="text/plain",
        max_bytes=10,
        owner_run_id=run.run_id,
        expires_at=time.time() - 1,
    )
    async with connect(served, run, mode=MODERN) as client:
        with raises_mcp_error("payload_too_large"):
            await client.read_resource(f"mcphost://artifacts/{big.artifact_id}")
        tail = await ok(client, "artifacts_read", {"artifact_id": big.artifact_id, "offset": MAX_READ_BYTES})
        assert (tail["length"], tail["eof"]) == (10, True)
        expired = await fails(client, "artifacts_metadata", {"artifact_id": gone.artifact_id})
        assert expired["code"] == "unauthorized"
        assert "does not exist or is not readable" in expired["message"]
        with raises_mcp_error("not_found") as missing_resource:
            await client.read_resource("mcphost://nothing/here")
        assert missing_resource[0].error.data is not None
        assert missing_resource[0].error.data["uri"] == "mcphost://nothing/here"
        assert missing_resource[0].error.data["code"] == "not_found"
        with raises_mcp_error("not_found"):
            await client.get_prompt("other")
