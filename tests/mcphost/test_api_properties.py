"""Property: whatever arrives over HTTP, the API answers with a status below 500 and a JSON error body
without a traceback, and a refused request changes no stored row and leaves no blob behind.

Hypothesis runs in a worker thread and drives the real app (in the test's event loop) through
`anyio.from_thread`, so one host with real plugins serves every generated example.
"""

from __future__ import annotations

import json
import string
import urllib.parse
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcphost.api import ApiLimits
from mcphost.app import Host, open_host
from tests.e2e.httpkit import api_settings, asgi_client, blob_files, row_counts

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
HEADER_TEXT = st.text(alphabet=string.ascii_letters + string.digits + " -=,;:/.*", max_size=40)
IDS = st.one_of(st.sampled_from(["c1", "run_x", "art_x", "a b", "..", "%", "x" * 300]), st.text(max_size=30))
# These two are built apart: inside `st.one_of(..., JSON)` pyright infers their keys as unknown.
CONVERSATIONS = st.fixed_dictionaries(
    {"conversation_id": IDS},
    optional={"bot_id": st.one_of(st.sampled_from(["echo", "nobody"]), IDS), "thread_id": IDS},
)
INPUTS = st.fixed_dictionaries(
    {},
    optional={
        "text": st.one_of(st.text(max_size=50), JSON),
        "attachments": st.lists(st.fixed_dictionaries({"artifact_id": IDS}), max_size=2),
        "contents": JSON,
    },
)


ENVELOPES = st.fixed_dictionaries(
    {},
    optional={
        "event_type": st.one_of(
            st.sampled_from(["message.received", "group.member_joined", "x", "A.b"]), JSON
        ),
        "event_id": st.one_of(st.text(max_size=30), JSON),
        "source": st.one_of(st.sampled_from(["api", "cli", "nope"]), JSON),
        "conversation": st.one_of(CONVERSATIONS, JSON),
        "actor": st.one_of(st.fixed_dictionaries({"actor_id": IDS}), JSON),
        "input": st.one_of(INPUTS, JSON),
        "data": JSON,
        "agent_id": st.one_of(st.sampled_from(["echo", "ghost"]), JSON),
        "surprise": JSON,
    },
)
BODIES = st.one_of(
    ENVELOPES.map(lambda d: json.dumps(d).encode()),
    JSON.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=120),
)
QUERIES = st.dictionaries(
    st.sampled_from(
        [
            "limit",
            "cursor",
            "status",
            "conversation_id",
            "after",
            "before",
            "thread_id",
            "stream",
            "event_type",
            "name",
            "mime_type",
            "x",
        ]
    ),
    HEADER_TEXT,
    max_size=3,
)


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: bytes | None


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


@st.composite
def calls(draw: st.DrawFn) -> Call:
    kind = draw(
        st.sampled_from(
            [
                "events",
                "runs",
                "run",
                "results",
                "cancel",
                "audit",
                "transcript",
                "events_page",
                "upload",
                "download",
                "metadata",
            ]
        )
    )
    params = draw(QUERIES)
    headers: dict[str, str] = {}
    some_id = _quote(draw(IDS)) or "x"
    match kind:
        case "events":
            return Call("POST", "/v1/events", params, {"content-type": "application/json"}, draw(BODIES))
        case "runs":
            return Call("GET", "/v1/runs", params, headers, None)
        case "run":
            return Call("GET", f"/v1/runs/{some_id}", params, headers, None)
        case "results":
            headers = {"accept": draw(st.sampled_from(["application/json", "text/event-stream", "*/*"]))}
            if draw(st.booleans()):
                headers["last-event-id"] = draw(HEADER_TEXT)
            return Call("GET", f"/v1/runs/{some_id}/results", params, headers, None)
        case "cancel":
            return Call("POST", f"/v1/runs/{some_id}/cancel", params, headers, draw(BODIES))
        case "audit":
            return Call("GET", f"/v1/runs/{some_id}/audit", params, headers, None)
        case "transcript":
            return Call("GET", f"/v1/conversations/{some_id}/transcript", params, headers, None)
        case "events_page":
            return Call("GET", f"/v1/conversations/{some_id}/events", params, headers, None)
        case "upload":
            content_type = draw(
                st.one_of(
                    st.sampled_from(["multipart/form-data; boundary=b", "multipart/form-data", "text/plain"]),
                    HEADER_TEXT,
                )
            )
            body = draw(
                st.one_of(
                    st.binary(max_size=200),
                    st.just(b'--b\r\nContent-Disposition: form-data; name="file"\r\n\r\n'),
                )
            )
            return Call("POST", "/v1/artifacts", params, {"content-type": content_type}, body)
        case "download":
            return Call("GET", "/v1/artifacts/{artifact}/content", {}, {"range": draw(HEADER_TEXT)}, None)
        case _:
            return Call("GET", f"/v1/artifacts/{some_id}", params, headers, None)


@pytest.fixture
async def host(tmp_path: Path) -> AsyncGenerator[Host, None]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'db' / 'mcphost.db'}"
    async with open_host(api_settings(url, tmp_path / "data")) as opened:
        yield opened


async def test_generated_requests_never_get_a_500_and_refusals_change_nothing(
    host: Host, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    async with asgi_client(host, limits=ApiLimits(max_upload_bytes=100)) as client:
        artifact = (await client.post("/v1/artifacts", content=b"0123456789")).json()["artifact_id"]
        seen: dict[int, int] = {}

        async def exercise(call: Call) -> None:
            before, files = await row_counts(host.stores), blob_files(data_dir)
            path = call.path.replace("{artifact}", artifact)
            try:
                response = await client.request(
                    call.method, path, params=call.params, headers=call.headers, content=call.body
                )
            except httpx2.InvalidURL:
                return  # the client refused to build it; nothing reached the server
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
            assert response.status_code < 500 or response.status_code == 503, response.text
            assert "Traceback" not in response.text
            if response.status_code >= 400:
                body = response.json()
                assert set(body) == {"error"}
                assert isinstance(body["error"]["code"], str)
                assert isinstance(body["error"]["message"], str)
                assert await row_counts(host.stores) == before, (call, response.text)
                assert blob_files(data_dir) == files
            elif path == "/v1/events":
                run_id = response.headers.get("x-run-id") or response.json()["run_id"]
                with anyio.fail_after(30):
                    await host.orchestrator.wait(run_id)  # so its writes do not land in a later example

        @settings(
            max_examples=250,
            deadline=None,
            database=None,
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.filter_too_much,
                HealthCheck.data_too_large,
            ],
        )
        @given(call=calls())
        def property_holds(call: Call) -> None:
            anyio.from_thread.run(exercise, call)

        await anyio.to_thread.run_sync(property_holds)
    assert seen.get(400, 0) > 50  # the generator reaches validation, not only routing
    assert any(status < 300 for status in seen)
