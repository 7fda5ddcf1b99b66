"""Every scope rule refuses with its code, leaves an audit row, and changes nothing.

Runs are real (grants from `build_grant`); each test makes the refused call through the SDK client over
HTTP and checks the `is_error` result, the audit row it left and, for writes, that no table changed.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from mcp import Client

from mcphost.facts import _dispatch
from mcphost.protocol import MAX_INLINE_ARTIFACT_BYTES
from mcphost.stores import AuditRecord
from tests.mcphost.facts._helpers import (
    ERAS,
    FULL_PERMISSIONS,
    MODERN,
    RUNNER,
    RunHandle,
    Served,
    connect,
    fails,
    ok,
    raises_mcp_error,
    table_fingerprint,
)


def same_answer(foreign: dict[str, Any], foreign_id: str, missing: dict[str, Any], missing_id: str) -> bool:
    """A refusal of another scope's id reads exactly like that of an id that does not exist."""
    assert foreign["code"] == "unauthorized", foreign
    return repr(foreign).replace(foreign_id, "ID") == repr(missing).replace(missing_id, "ID")


async def last_audit(served: Served, run: RunHandle) -> AuditRecord:
    return (await served.audit(run))[-1]


async def refused(
    served: Served, client: Client, run: RunHandle, tool: str, arguments: Mapping[str, Any], code: str
) -> dict[str, Any]:
    """Call `tool`, expect the error `code`, an audit row saying so, and no stored data changed."""
    before = await table_fingerprint(served.stores)
    data = await fails(client, tool, dict(arguments))
    assert data["code"] == code, data
    row = await last_audit(served, run)
    outcome = "refused" if code in {"unauthorized", "rate_limited", "deadline_exceeded"} else "error"
    assert (row.tool, row.outcome, row.code) == (tool, outcome, code)
    assert await table_fingerprint(served.stores) == before
    return data


@pytest.mark.parametrize("mode", ERAS)
async def test_another_conversations_history_is_unauthorized(served: Served, mode: str) -> None:
    a = await served.start_run(conversation_id="conv-a", text="secret of a")
    b = await served.start_run(conversation_id="conv-b", text="secret of b")
    b_cursor = b.context.context.latest_cursor
    assert b_cursor is not None
    async with connect(served, a, mode=mode) as client:
        for direction in ("before_cursor", "after_cursor"):
            data = await refused(served, client, a, "history_page", {direction: b_cursor}, "unauthorized")
            assert "conv-a" in str(data["message"])
        hits = (await ok(client, "history_search", {"query": "secret"}))["hits"]
        assert [h["item"]["content"] for h in hits] == ["secret of a"]


async def test_another_threads_history_is_unauthorized(served: Served) -> None:
    main = await served.start_run(conversation_id="conv-t", text="main line")
    threaded = await served.start_run(conversation_id="conv-t", thread_id="t1", text="in the thread")
    async with connect(served, threaded, mode=MODERN) as client:
        page = await ok(client, "history_page")
        assert [i["content"] for i in page["items"]] == ["in the thread"]
        cursor = main.context.context.latest_cursor
        await refused(served, client, threaded, "history_page", {"before_cursor": cursor}, "unauthorized")


async def test_a_cursor_pointing_at_nothing_is_invalid(served: Served) -> None:
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        await refused(
            served, client, run, "history_page", {"before_cursor": "bm90LWEtY3Vyc29y"}, "invalid_argument"
        )
        await refused(served, client, run, "history_page", {"before_cursor": "a b"}, "invalid_argument")


@pytest.mark.parametrize("mode", ERAS)
async def test_another_conversations_events_are_unauthorized(served: Served, mode: str) -> None:
    a = await served.start_run(conversation_id="conv-a")
    b = await served.start_run(conversation_id="conv-b")
    async with connect(served, a, mode=mode) as client:
        await refused(served, client, a, "events_get", {"event_id": b.event.event_id}, "unauthorized")
        b_page = await served.stores.events.page("conv-b")
        cursor = b_page.items[0].cursor
        await refused(served, client, a, "events_page", {"before_cursor": cursor}, "unauthorized")
        own = await ok(client, "events_page")
        assert [e["event_id"] for e in own["items"]] == [a.event.event_id]
        foreign = await fails(client, "events_get", {"event_id": b.event.event_id})
        missing = await fails(client, "events_get", {"event_id": "evt_missing"})
        assert same_answer(foreign, b.event.event_id, missing, "evt_missing")


async def test_a_run_without_a_conversation_sees_its_own_event_and_no_history(served: Served) -> None:
    loose = await served.start_run(conversation_id=None)
    other_loose = await served.start_run(conversation_id=None)
    async with connect(served, loose, mode=MODERN) as client:
        assert (await ok(client, "history_page"))["items"] == []
        assert (await ok(client, "events_page"))["items"] == []
        assert (await ok(client, "history_search", {"query": "hello"}))["hits"] == []
        own = await ok(client, "events_get", {"event_id": loose.event.event_id})
        assert own["run_id"] == loose.run_id
        await refused(
            served, client, loose, "events_get", {"event_id": other_loose.event.event_id}, "unauthorized"
        )


@pytest.mark.parametrize("mode", ERAS)
async def test_another_runs_artifact_is_unauthorized_everywhere(served: Served, mode: str) -> None:
    a = await served.start_run(conversation_id="conv-a")
    b = await served.start_run(conversation_id="conv-b")
    async with connect(served, b, mode=mode) as client_b:
        created = await ok(
            client_b, "artifacts_create", {"name": "b.txt", "mime_type": "text/plain", "text": "b"}
        )
    artifact_id = created["artifact_id"]
    async with connect(served, a, mode=mode) as client:
        await refused(served, client, a, "artifacts_read", {"artifact_id": artifact_id}, "unauthorized")
        await refused(served, client, a, "artifacts_metadata", {"artifact_id": artifact_id}, "unauthorized")
        with raises_mcp_error("unauthorized"):
            await client.read_resource(f"mcphost://artifacts/{artifact_id}")
        row = await last_audit(served, a)
        assert (row.tool, row.outcome, row.code) == ("resources/read", "refused", "unauthorized")
        for tool in ("artifacts_read", "artifacts_metadata"):
            foreign = await fails(client, tool, {"artifact_id": artifact_id})
            missing = await fails(client, tool, {"artifact_id": "art_missing"})
            assert same_answer(foreign, artifact_id, missing, "art_missing")
        with raises_mcp_error("unauthorized") as foreign_read:
            await client.read_resource(f"mcphost://artifacts/{artifact_id}")
        with raises_mcp_error("unauthorized") as missing_read:
            await client.read_resource("mcphost://artifacts/art_missing")
        assert foreign_read[0].message.replace(artifact_id, "ID") == missing_read[0].message.replace(
            "art_missing", "ID"
        )
        assert missing_read[0].error.data is not None
        assert missing_read[0].error.data["uri"] == "mcphost://artifacts/art_missing"


async def test_artifacts_of_the_conversation_and_of_the_runs_input_are_readable(served: Served) -> None:
    stores = served.stores
    upload = await stores.artifacts.put_bytes(
        b"uploaded", name="in.txt", mime_type="text/plain", max_bytes=100
    )
    stray = await stores.artifacts.put_bytes(b"stray", name="x.txt", mime_type="text/plain", max_bytes=100)
    sibling = await served.start_run(conversation_id="conv-s")
    async with connect(served, sibling, mode=MODERN) as client:
        made = await ok(
            client, "artifacts_create", {"name": "s.txt", "mime_type": "text/plain", "text": "sib"}
        )
    await served.finish(sibling)
    ref = {"artifact_id": upload.artifact_id, "name": "in.txt", "mime_type": "text/plain"}
    run = await served.start_run(conversation_id="conv-s", attachments=[ref])
    async with connect(served, run, mode=MODERN) as client:
        assert (await ok(client, "artifacts_read", {"artifact_id": upload.artifact_id}))["data"] == "uploaded"
        assert (await ok(client, "artifacts_read", {"artifact_id": made["artifact_id"]}))["data"] == "sib"
        await refused(
            served, client, run, "artifacts_read", {"artifact_id": stray.artifact_id}, "unauthorized"
        )


async def test_a_run_reads_its_events_raw_payload_and_no_other_run_does(served: Served) -> None:
    raw = await served.stores.artifacts.put_bytes(
        b'{"hook": 1}', name="raw.json", mime_type="application/json", max_bytes=100
    )
    hooked = await served.start_run(conversation_id="conv-h", raw_ref=raw.artifact_id)
    assert hooked.context.event.raw_ref == raw.artifact_id
    async with connect(served, hooked, mode=MODERN) as client:
        assert (await ok(client, "artifacts_read", {"artifact_id": raw.artifact_id}))["data"] == '{"hook": 1}'
    await served.finish(hooked)
    other = await served.start_run(conversation_id="conv-h")
    async with connect(served, other, mode=MODERN) as client:
        await refused(
            served, client, other, "artifacts_read", {"artifact_id": raw.artifact_id}, "unauthorized"
        )


async def test_another_runners_state_cannot_be_seen(served: Served) -> None:
    x = await served.start_run(runner="plugin:acme/x/default", binding_id="agent-x")
    async with connect(served, x, mode=MODERN) as client:
        for scope in ("conversation", "runner", "actor"):
            await ok(client, "state_set", {"scope": scope, "key": "k", "value": "x's"})
    y = await served.start_run(runner="plugin:acme/y/default", binding_id="agent-y")
    async with connect(served, y, mode=MODERN) as client:
        for scope in ("conversation", "runner", "actor"):
            assert (await ok(client, "state_get", {"scope": scope, "key": "k"}))["found"] is False
            assert (await ok(client, "state_list", {"scope": scope}))["items"] == []
            assert (await ok(client, "state_delete", {"scope": scope, "key": "k"}))["deleted"] is False
    rows = await served.audit(y)
    assert [(r.tool, r.outcome) for r in rows][:3] == [
        ("state_get", "ok"),
        ("state_list", "ok"),
        ("state_delete", "ok"),
    ]
    x_again = await served.start_run(runner="plugin:acme/x/default", binding_id="agent-x")
    async with connect(served, x_again, mode=MODERN) as client:
        assert (await ok(client, "state_get", {"scope": "conversation", "key": "k"}))["value"] == "x's"


async def test_a_state_scope_or_storage_area_the_grant_lacks_is_unauthorized(served: Served) -> None:
    run = await served.start_run(
        agent={"state": {"scopes": ["conversation"]}, "storage": {"areas": ["plugin"]}}
    )
    async with connect(served, run, mode=MODERN) as client:
        await refused(served, client, run, "state_get", {"scope": "actor", "key": "k"}, "unauthorized")
        await refused(
            served, client, run, "state_set", {"scope": "runner", "key": "k", "value": 1}, "unauthorized"
        )
        await refused(served, client, run, "storage_get", {"area": "workspace", "key": "k"}, "unauthorized")
        value = base64.b64encode(b"v").decode()
        args = {"area": "binding", "key": "k", "value_base64": value}
        await refused(served, client, run, "storage_set", args, "unauthorized")


async def test_writing_without_the_write_right_is_unauthorized(served: Served) -> None:
    read_only = await served.start_run(agent={"state": {"scopes": ["conversation"], "write": False}})
    no_create = await served.start_run(permissions={"artifacts": ["read"], "state": ["read"]})
    for run in (read_only, no_create):
        async with connect(served, run, mode=MODERN) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "state_set" not in names
            args = {"scope": "conversation", "key": "k", "value": 1}
            await refused(served, client, run, "state_set", args, "unauthorized")
            await refused(
                served, client, run, "state_delete", {"scope": "conversation", "key": "k"}, "unauthorized"
            )
    async with connect(served, no_create, mode=MODERN) as client:
        args = {"name": "a", "mime_type": "text/plain", "text": "x"}
        await refused(served, client, no_create, "artifacts_create", args, "unauthorized")


async def test_a_scope_whose_id_the_event_lacks_is_invalid_argument(served: Served) -> None:
    run = await served.start_run(actor_id=None, workspace_id=None)
    async with connect(served, run, mode=MODERN) as client:
        for scope in ("actor", "subject", "workspace"):
            await refused(served, client, run, "state_get", {"scope": scope, "key": "k"}, "invalid_argument")
            args = {"scope": scope, "key": "k", "value": 1}
            await refused(served, client, run, "state_set", args, "invalid_argument")
        await refused(served, client, run, "storage_list", {"area": "workspace"}, "invalid_argument")
        subject = await served.start_run(subject={"subject_type": "ticket", "subject_id": "T-1"})
    async with connect(served, subject, mode=MODERN) as client:
        await ok(client, "state_set", {"scope": "subject", "key": "k", "value": 1})


async def test_a_knowledge_base_outside_the_grant_is_unauthorized(served: Served) -> None:
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        await refused(
            served, client, run, "knowledge_retrieve", {"kb_id": "kb-secret", "query": "x"}, "unauthorized"
        )
    none = await served.start_run(agent={"resources": {"knowledge_bases": []}})
    async with connect(served, none, mode=MODERN) as client:
        await refused(served, client, none, "knowledge_list", {}, "unauthorized")


@pytest.mark.parametrize("mode", ERAS)
async def test_calls_after_the_deadline_are_deadline_exceeded(
    served: Served, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deadline is far enough for the first call on a loaded machine; the server's clock then moves past
    # it (the dispatcher's alone: the token stays valid, as it does until the run is ended).
    run = await served.start_run(timeout_s=600.0)
    async with connect(served, run, mode=mode) as client:
        await ok(client, "history_page")
        past = run.grant.deadline_at - time.time() + 1.0
        monkeypatch.setattr(
            _dispatch,
            "time",
            SimpleNamespace(time=lambda: time.time() + past, perf_counter=time.perf_counter),
        )
        data = await refused(served, client, run, "history_page", {}, "deadline_exceeded")
        assert data["retryable"] is False
        args = {"scope": "conversation", "key": "k", "value": 1}
        await refused(served, client, run, "state_set", args, "deadline_exceeded")


@pytest.mark.parametrize("mode", ERAS)
async def test_calls_over_the_rate_limit_are_rate_limited(served: Served, mode: str) -> None:
    run = await served.start_run(limits={"rate_per_s": 0.01, "rate_burst": 3})  # no refill during the test
    async with connect(served, run, mode=mode) as client:
        for _ in range(3):
            await ok(client, "run_context")
        data = await refused(served, client, run, "run_context", {}, "rate_limited")
        assert data["retryable"] is True
        assert 0 < data["details"]["retry_after_s"] <= 100
        args = {"scope": "conversation", "key": "k", "value": 1}
        await refused(served, client, run, "state_set", args, "rate_limited")
    rows = await served.audit(run)
    assert [r.outcome for r in rows] == ["ok"] * 3 + ["refused"] * 2


async def test_past_the_call_or_byte_budget_calls_are_rate_limited(served: Served) -> None:
    calls = await served.start_run(limits={"call_budget": 2})
    async with connect(served, calls, mode=MODERN) as client:
        await ok(client, "history_page")
        await fails(client, "history_page", {"limit": 0})  # an error still uses a call
        data = await refused(served, client, calls, "history_page", {}, "rate_limited")
        assert data["retryable"] is False
    data_bytes = await served.start_run(limits={"byte_budget": 100})
    async with connect(served, data_bytes, mode=MODERN) as client:
        await ok(client, "run_context")  # about 2 KiB: over the budget after this call
        await refused(served, client, data_bytes, "history_page", {}, "rate_limited")


async def test_oversized_payloads_are_refused_and_nothing_is_stored(served: Served) -> None:
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        big = "x" * (MAX_INLINE_ARTIFACT_BYTES + 1)
        data = await refused(
            served,
            client,
            run,
            "artifacts_create",
            {"name": "a", "mime_type": "text/plain", "text": big},
            "payload_too_large",
        )
        assert data["details"] == {"max_bytes": MAX_INLINE_ARTIFACT_BYTES}
        b64 = base64.b64encode(b"\0" * (MAX_INLINE_ARTIFACT_BYTES + 1)).decode()
        args = {"name": "a", "mime_type": "image/png", "base64": b64}
        await refused(served, client, run, "artifacts_create", args, "payload_too_large")
        value = "y" * (256 * 1024)
        args = {"scope": "conversation", "key": "big", "value": value}
        await refused(served, client, run, "state_set", args, "payload_too_large")


async def test_invalid_arguments_name_the_field(served: Served) -> None:
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        data = await refused(served, client, run, "history_page", {"limit": 101}, "invalid_argument")
        assert "limit" in str(data["message"])
        assert data["details"]["errors"][0]["field"] == "limit"
        await refused(served, client, run, "history_page", {"colour": "red"}, "invalid_argument")
        args = {"scope": "conversation", "key": "bad key!", "value": 1}
        await refused(served, client, run, "state_set", args, "invalid_argument")
        args = {"name": "a", "mime_type": "text/plain", "base64": "***"}
        await refused(served, client, run, "artifacts_create", args, "invalid_argument")


async def test_cursors_do_not_show_positions_that_count_other_conversations_rows(served: Served) -> None:
    """Positions are installation-wide sequences: read from a cursor, the gap between two of a run's own
    items would count the rows other conversations wrote in between. Cursors are enciphered."""
    transcript = served.stores.transcript
    await transcript.append(conversation_id="conv-a", role="user", content="first")
    for n in range(5):
        await transcript.append(conversation_id="conv-b", role="user", content=f"elsewhere {n}")
    run = await served.start_run(conversation_id="conv-a", text="second")
    async with connect(served, run, mode=MODERN) as client:
        page = await ok(client, "history_page", {"limit": 1})
        older = await ok(client, "history_page", {"before_cursor": page["next_cursor"], "limit": 1})
        events = await ok(client, "events_page", {"limit": 1})
        await ok(client, "state_set", {"scope": "conversation", "key": "k1", "value": 1})
        await ok(client, "state_set", {"scope": "conversation", "key": "k2", "value": 2})
        keys = await ok(client, "state_list", {"scope": "conversation", "limit": 1})
    assert [i["content"] for i in older["items"]] == ["first"]
    cursors = [page["next_cursor"], older["items"][0]["cursor"], events["items"][0]["cursor"]]
    cursors.append(keys["next_cursor"])
    for cursor in cursors:
        body = cursor.removeprefix(".")  # one cursor in 64 begins with "." so it is never read as an option
        blob = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        for plain in (b'"v"', b'"k"', b"k1"):
            assert plain not in blob, blob


async def test_each_unauthorized_refusal_names_the_layer_that_removed_it_and_the_key_that_adds_it(
    served: Served,
) -> None:
    no_history = {k: v for k, v in FULL_PERMISSIONS.items() if k != "history"}
    narrow = await served.start_run(
        permissions=no_history,
        agent={"state": {"scopes": ["conversation"], "write": False}, "storage": {"areas": ["plugin"]}},
    )
    runner = RUNNER
    async with connect(served, narrow, mode=MODERN) as client:
        history = await refused(served, client, narrow, "history_page", {}, "unauthorized")
        assert history["details"]["layer"] == "manifest"
        assert history["message"] == (
            f"This run may not call 'history_page': the manifest of runner {runner!r} does not declare "
            f"permissions.history 'page' (manifest layer). To allow it, add 'page' to permissions.history "
            f"in the manifest of runner {runner!r} (its author's change)."
        )
        write = await refused(
            served,
            client,
            narrow,
            "state_set",
            {"scope": "conversation", "key": "k", "value": 1},
            "unauthorized",
        )
        assert (write["details"]["layer"], write["details"]["fix"]) == (
            "agent",
            "set state.write = true in the [[agents]] entry of 'agent-a'",
        )
        scope = await refused(
            served, client, narrow, "state_get", {"scope": "actor", "key": "k"}, "unauthorized"
        )
        assert scope["details"]["fix"] == "add 'actor' to state.scopes in the [[agents]] entry of 'agent-a'"
        area = await refused(served, client, narrow, "storage_list", {"area": "binding"}, "unauthorized")
        assert area["details"]["layer"] == "agent"
        assert "storage.areas" in area["details"]["fix"]
        kb = await refused(
            served, client, narrow, "knowledge_retrieve", {"kb_id": "kb-other", "query": "x"}, "unauthorized"
        )
        assert (
            kb["details"]["fix"]
            == "add 'kb-other' to resources.knowledge_bases in the [[agents]] entry of 'agent-a'"
        )
        host = await refused(served, client, narrow, "github__issues", {}, "unauthorized")
        assert host["details"]["layer"] == "agent"
        assert "search__*" not in host["message"]  # the agent's own globs stay unsaid
