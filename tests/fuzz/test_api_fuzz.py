"""Fuzz the HTTP API from its own OpenAPI document, on SQLite and PostgreSQL.

Schemathesis reads `/openapi.json` (the real `openapi()`) and generates, for every operation, requests
that fit the document (positive) and requests that break it (negative); hand-written strategies add the
inputs parsers get wrong: huge integers, NaN/Infinity literals, NUL and lone surrogates, deep nesting,
oversized bodies, wrong content types and other credentials (a run's token as the API key). Every
request goes to the real app (`build_app`) over a host with real plugins, through `httpx2.ASGITransport`.

For every answer:
- no 5xx, and no traceback in the body;
- schemathesis' conformance checks (status code, content type, headers, response schema) pass;
- a refusal (4xx) is the documented error body and leaves every stored row as it was
  (`_rows.fingerprint` before and after), and no blob behind.

Hypothesis runs in a worker thread and calls into the test's event loop (`anyio.from_thread`), so one
host serves every example. Examples are derandomized, so CI runs the same requests every time;
`MCPHOST_FUZZ_EXAMPLES` sets the examples per operation and mode to go further.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx2
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

# schemathesis types its checks' `case` parameter as its generic `Case` unparameterized: partly unknown.
from schemathesis.checks import not_a_server_error  # pyright: ignore[reportUnknownVariableType]
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Err
from schemathesis.specs.openapi.checks import (
    content_type_conformance,  # pyright: ignore[reportUnknownVariableType]
    response_headers_conformance,  # pyright: ignore[reportUnknownVariableType]
    response_schema_conformance,  # pyright: ignore[reportUnknownVariableType]
    status_code_conformance,  # pyright: ignore[reportUnknownVariableType]
)

from mcphost.api import ApiLimits, openapi
from mcphost.app import Host, open_host
from mcphost.config import HookConfig, KnowledgeBaseConfig
from mcphost.grants import mint_token
from mcphost.models import AgentConfig
from mcphost.timetable import ScheduleSpec
from tests._json import obj_or_none
from tests.e2e.httpkit import api_settings, asgi_client, blob_files, event_body
from tests.fuzz._figures import Tally, examples, store_of, tally
from tests.fuzz._rows import changed, fingerprint
from tests.mcphost.hostkit import ECHO_RUNNER

API_KEY = "fuzz-api-key-0123456789"
BASE = "http://127.0.0.1:8787"
LIMITS = ApiLimits(max_upload_bytes=4096, max_event_bytes=64 * 1024)
SCHEMA = schemathesis.openapi.from_dict(openapi())


def operations_of(schema: Any) -> list[Any]:
    """Every operation of a loaded document (a document schemathesis cannot read fails here)."""
    out: list[Any] = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()
        out.append(result.ok())
    return out


OPERATIONS = operations_of(SCHEMA)
CHECKS: list[Callable[..., bool | None]] = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@dataclass(frozen=True)
class Sent:
    """A request as it goes on the wire."""

    method: str
    url: str
    headers: dict[str, str] | list[tuple[bytes, bytes]]
    """A list when a header repeats or its value is not ASCII."""
    body: bytes | None

    def describe(self) -> str:
        body = (self.body or b"")[:300]
        return f"{self.method} {self.url[:300]} headers={self.headers} body={body!r}"


@dataclass
class Seeded:
    run_id: str
    artifact_id: str
    conversation_id: str
    other_token: str
    """A run token: never an API key."""
    schedule_id: str
    kb_id: str = "docs"


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    base = api_settings(database_url, tmp_path / "data", api_key=API_KEY)
    # `/v1/hooks/fuzz` takes the API key as its bearer, so generated payloads reach the mapping too.
    hooked = AgentConfig(id="hooked", runner=ECHO_RUNNER, event_types=["webhook.received"])
    hook = HookConfig(
        verify="bearer", secret=API_KEY, agent="hooked", conversation_id="c-hook", text="$.text"
    )
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(
        "# Backups\n\nBackups run nightly and keep thirty days.\n", encoding="utf-8"
    )
    # `/v1/knowledge/docs/search` searches a real ingested knowledge base (ingested in `seed`).
    knowledge = {"docs": KnowledgeBaseConfig(name="Docs", paths=[str(docs)])}
    settings_ = base.model_copy(
        update={"agents": [*base.agents, hooked], "hooks": {"fuzz": hook}, "knowledge": knowledge}
    )
    async with open_host(settings_) as opened:
        yield opened


async def seed(host: Host, client: httpx2.AsyncClient) -> Seeded:
    """A finished echo run on conversation c1 and an artifact: ids that exist, for the path parameters."""
    artifact = await client.post("/v1/artifacts", content=b"0123456789", params={"name": "a.txt"})
    assert artifact.status_code == 201, artifact.text
    admitted = await client.post("/v1/events", json=event_body("hello", bot="echo"))
    assert admitted.status_code == 202, admitted.text
    run_id = admitted.json()["run_id"]
    with anyio.fail_after(30):
        await host.orchestrator.wait(run_id)
    await host.knowledge.ingest("docs")
    token, _ = mint_token()
    # Stored straight (no agent takes schedule events here) with a period that never comes due in a test,
    # so no fire writes rows behind the requests' backs.
    await host.stores.schedules.create(ScheduleSpec(id="yearly", every="366d"))
    return Seeded(run_id, artifact.json()["artifact_id"], "c1", token, "yearly")


class Exerciser:
    """Sends one request, checks the answer and the stored rows, and counts it.

    The rows are read once per request: what they were after one request is what they are before the next
    (runs an admitted event starts are waited for, and the heartbeat column is not in the digest).
    """

    def __init__(self, host: Host, client: httpx2.AsyncClient, data_dir: Path, figures: Tally) -> None:
        self.host = host
        self.client = client
        self.data_dir = data_dir
        self.figures = figures
        self.rows: dict[str, str] | None = None
        self.files: list[Path] = []

    async def send(
        self, sent: Sent, *, refusal_may_change: Callable[[httpx2.Response], frozenset[str]] | None = None
    ) -> httpx2.Response | None:
        """`refusal_may_change` names the tables a documented refusal writes to (by its answer)."""
        if self.rows is None:
            self.rows, self.files = await fingerprint(self.host.stores), blob_files(self.data_dir)
        before, files = self.rows, self.files
        try:
            response = await self.client.request(
                sent.method, sent.url, headers=sent.headers, content=sent.body
            )
        except (httpx2.InvalidURL, httpx2.LocalProtocolError, UnicodeEncodeError):
            return None  # the client refused to build it; nothing reached the app
        self.figures.tried += 1
        status = response.status_code
        self.figures.saw(str(status))
        if status >= 500:
            self.figures.server_errors += 1
        if status < 400 and sent.method == "POST":
            run_id = response.headers.get("x-run-id")
            if (
                run_id is None
                and status == 202
                and response.headers.get("content-type") == "application/json"
            ):
                run_id = response.json().get("run_id")  # an event or a webhook admitted
            if run_id is not None:
                with anyio.fail_after(60):
                    await self.host.orchestrator.wait(run_id)  # its writes land before the next request
        self.rows, self.files = await fingerprint(self.host.stores), blob_files(self.data_dir)
        if status >= 400:
            self.figures.refused += 1
            allowed = refusal_may_change(response) if refusal_may_change is not None else frozenset[str]()
            if set(changed(before, self.rows)) - allowed or self.files != files:
                self.figures.rows_changed_by_refusals += 1
                raise AssertionError(
                    f"refused with {status} but changed {changed(before, self.rows)} "
                    f"(blobs {len(files)}→{len(self.files)}): {sent.describe()} → {response.text[:500]}"
                )
        return response

    def check_answer(self, sent: Sent, response: httpx2.Response) -> None:
        """No 5xx and no traceback; a refusal has the documented error body."""
        problem = None
        if response.status_code >= 500:
            problem = f"{response.status_code}"
        elif "Traceback" in response.text:
            problem = "traceback in the body"
        elif response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = None
            answer = obj_or_none(body)
            error = obj_or_none(answer["error"]) if answer is not None and "error" in answer else None
            ok = (
                answer is not None
                and set(answer) == {"error"}
                and error is not None
                and isinstance(error.get("code"), str)
                and isinstance(error.get("message"), str)
            )
            if not ok:
                problem = "refusal without the documented error body"
        if problem is not None:
            raise AssertionError(
                f"{problem}: {sent.describe()} → {response.status_code} {response.text[:800]}"
            )


def wire(case: Any) -> Sent:
    """The request schemathesis would send for `case`, as bytes (requests prepares it)."""
    kwargs = case.as_transport_kwargs(base_url=BASE, headers={"Authorization": f"Bearer {API_KEY}"})
    kwargs.pop("cookies", None)
    prepared = requests.Request(**kwargs).prepare()
    body = prepared.body
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    assert body is None or isinstance(body, bytes), type(body)
    headers = {
        k: v if isinstance(v, str) else v.decode("latin-1")
        for k, v in prepared.headers.items()
        if k.lower() not in {"connection", "x-schemathesis-testcaseid"}
    }
    return Sent(str(prepared.method), str(prepared.url), headers, body)


def case_strategies(seeded: Seeded) -> list[tuple[str, st.SearchStrategy[Any]]]:
    """For every operation and both modes: generated cases, half of them with path ids that exist."""
    known_ids = {
        "run_id": seeded.run_id,
        "artifact_id": seeded.artifact_id,
        "conversation_id": seeded.conversation_id,
        "scope": "conversation",
        "key": "turns",  # the echo run's state value
        "source": "fuzz",
        "schedule_id": seeded.schedule_id,
        "delivery_id": "msg_none",  # the fuzz host has no [[webhooks]]: redelivery answers 404
        "approval_id": "apr_none",  # no runner of the fuzz host asks: a decision answers 404
        "kb_id": "docs",
        "channel_id": "nochannel",  # the fuzz host has no [channels]: every request answers 404
        "runtime": "noruntime",  # nor runtimes: drain/disable/enable answer 404
    }
    out: list[tuple[str, st.SearchStrategy[Any]]] = []
    for operation in OPERATIONS:
        names = [p.name for p in operation.path_parameters]
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)
            if names:
                fixed = {n: known_ids[n] for n in names}
                strategy = st.one_of(
                    strategy, operation.as_strategy(generation_mode=mode, path_parameters=fixed)
                )
            out.append((f"{operation.method.upper()} {operation.path} {mode.value}", strategy))
    return out


def run_generated(name: str, strategy: st.SearchStrategy[Any], body: Callable[[Any], None], n: int) -> None:
    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    @given(item=strategy)
    def property_holds(item: Any) -> None:
        body(item)

    try:
        property_holds()
    except Unsatisfiable:
        assert name.endswith("negative"), name  # nothing of the operation can be made invalid
    except BaseException as exc:
        exc.add_note(f"while fuzzing {name}")
        raise


async def test_every_operation_from_the_openapi_document(
    host: Host, database_url: str, tmp_path: Path
) -> None:
    figures = tally("api", store_of(database_url))
    async with asgi_client(host, limits=LIMITS, headers={"authorization": f"Bearer {API_KEY}"}) as client:
        seeded = await seed(host, client)
        exerciser = Exerciser(host, client, tmp_path / "data", figures)
        exercised: dict[str, int] = {}

        async def exercise(case: Any) -> None:
            sent = wire(case)
            response = await exerciser.send(sent)
            if response is None:
                return
            label = f"{case.operation.method.upper()} {case.operation.path}"
            exercised[label] = exercised.get(label, 0) + 1
            exerciser.check_answer(sent, response)
            try:
                case.validate_response(response, checks=CHECKS)
            except (AssertionError, FailureGroup) as exc:
                raise AssertionError(f"{sent.describe()} → {response.status_code}\n{exc}") from None

        def each(case: Any) -> None:
            anyio.from_thread.run(exercise, case)

        for name, strategy in case_strategies(seeded):
            await anyio.to_thread.run_sync(run_generated, name, strategy, each, examples(8))
    assert set(exercised) == {f"{o.method.upper()} {o.path}" for o in OPERATIONS}
    assert figures.server_errors == 0


# -- hand-written adversarial inputs -------------------------------------------------------------------

DEEP = 400
RAW_VALUES: list[str] = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e400",
    str(2**64),
    str(-(2**63) - 1),
    "9" * 5000,  # past Python's int-from-string digit limit
    '"\\u0000"',
    '"a\\u0000b"',
    '"\\ud800"',
    '"x\\udfffy"',
    '"\\ud83d"',
    "[" * DEEP + "]" * DEEP,
    '{"a":' * DEEP + "1" + "}" * DEEP,
    "[" * 3000 + "]" * 3000,
    '"' + "x" * 70_000 + '"',
    "{}",
    "[]",
    "null",
    "true",
    "-0",
    "0.1e-400",
]
"""JSON text put where a field's value goes (NaN, Infinity and overlong digit runs are not JSON)."""

QUERY_VALUES: list[str] = [
    "NaN",
    "Infinity",
    "-1",
    "0",
    "1e400",
    str(2**64),
    "9" * 5000,
    "\x00",
    "a\x00b",
    "\ud800",
    "%00",
    "x" * 5000,
    "../../etc/passwd",
    "' OR 1=1 --",
]

ENVELOPE_SLOTS = [
    "event_type",
    "event_id",
    "source",
    "agent_id",
    "conversation.conversation_id",
    "conversation.bot_id",
    "conversation.thread_id",
    "conversation.workspace_id",
    "actor.actor_id",
    "input.text",
    "input.attachments",
    "input.attachments.0.artifact_id",
    "data",
    "data.nested",
    "subject",
    "delivery",
    "",
]
"""Where a raw value goes in an otherwise valid envelope ("" = the whole body)."""


def envelope_with(slot: str, raw: str, bot: str) -> bytes:
    """A valid echo (or other bot) envelope with `raw` (JSON text) at `slot`."""
    if not slot:
        return raw.encode("utf-8", "surrogatepass")
    body: dict[str, Any] = event_body("fuzz", bot=bot)
    marker = "\u2603MARK\u2603"
    node: Any = body
    parts = slot.split(".")
    for part in parts[:-1]:
        if isinstance(node, list):
            node = cast(list[Any], node)[int(part)]
            continue
        if part == "attachments":
            node.setdefault("attachments", [{"artifact_id": "art_x"}])
            node = node["attachments"]
            continue
        node = node.setdefault(part, {})
    node[parts[-1]] = marker
    return json.dumps(body).replace(json.dumps(marker), raw).encode("utf-8", "surrogatepass")


GET_PATHS = [
    "/v1/runs",
    "/v1/runs/{run_id}",
    "/v1/runs/{run_id}/results",
    "/v1/runs/{run_id}/audit",
    "/v1/conversations/{conversation_id}/transcript",
    "/v1/conversations/{conversation_id}/events",
    "/v1/artifacts/{artifact_id}",
    "/v1/artifacts/{artifact_id}/content",
    "/v1/runners",
    "/v1/knowledge/{kb_id}/search",
    "/v1/tools",
]
QUERY_NAMES = ["limit", "cursor", "after", "before", "status", "thread_id", "event_type", "stream", "name"]
BOUND_VALUES = [
    "2147483648",
    "9223372036854775808",
    "99999999999999999999",
    "-9223372036854775809",
    "-1",
    "1e400",
    "NaN",
    "\x00",
    "\ud800",
]
"""Put in every documented query parameter of every GET operation."""
PATH_VALUES = ["%00", "%ED%A0%80", "%FF", "x" * 3000, "..%2F..", "%2E%2E", "NaN", "1e400", "%0A", "run_%25"]
CONTENT_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
    "multipart/form-data; boundary=",
    "application/json; charset=latin-1",
    "application/json; charset=utf-16",
    "application/xml",
    "",
    "application/json\x00",
    "*/*",
]


def adversarial_requests(seeded: Seeded) -> list[Sent]:
    """Every hand-written bad input, each in a few places: the same list on every run."""
    auth = {"authorization": f"Bearer {API_KEY}"}
    json_auth = {**auth, "content-type": "application/json"}
    ids = {**vars(seeded), "scope": "conversation", "key": "turns"}
    out: list[Sent] = []
    for i, raw in enumerate(RAW_VALUES):
        for j in range(3):
            slot = ENVELOPE_SLOTS[(3 * i + j) % len(ENVELOPE_SLOTS)]
            bot = "echo" if j % 2 == 0 else "nobody"
            out.append(Sent("POST", f"{BASE}/v1/events", json_auth, envelope_with(slot, raw, bot)))
        out.append(Sent("POST", f"{BASE}/v1/events?stream=true", json_auth, envelope_with("", raw, "echo")))
        cancel = ('{"reason": ' + raw + "}").encode("utf-8", "surrogatepass")
        out.append(Sent("POST", f"{BASE}/v1/runs/{seeded.run_id}/cancel", json_auth, cancel))
    for i, value in enumerate(QUERY_VALUES):
        for j in range(2):
            path = GET_PATHS[(2 * i + j) % len(GET_PATHS)].format(**ids)
            name = QUERY_NAMES[(2 * i + j) % len(QUERY_NAMES)]
            quoted = urllib.parse.quote(value.encode("utf-8", "surrogatepass"), safe="")
            out.append(Sent("GET", f"{BASE}{path}?{name}={quoted}", auth, None))
    for path, operations in openapi()["paths"].items():
        operation = operations.get("get")
        if not path.startswith("/v1") or operation is None:
            continue
        for parameter in operation.get("parameters", []):
            if parameter["in"] != "query":
                continue
            for value in BOUND_VALUES:
                quoted = urllib.parse.quote(value.encode("utf-8", "surrogatepass"), safe="")
                out.append(
                    Sent("GET", f"{BASE}{path.format(**ids)}?{parameter['name']}={quoted}", auth, None)
                )
    for i, value in enumerate(PATH_VALUES):
        for j in range(2):
            path = GET_PATHS[(2 * i + j + 1) % len(GET_PATHS)]
            url = BASE + re.sub(r"{\w+}", value, path)
            out.append(Sent("GET", url, auth, None))
    targets = ["/v1/events", "/v1/artifacts", f"/v1/runs/{seeded.run_id}/cancel"]
    good = json.dumps(event_body("ct", bot="echo")).encode()
    for content_type in CONTENT_TYPES:
        for target in targets:
            out.append(Sent("POST", BASE + target, {**auth, "content-type": content_type}, good))
    for size in (LIMITS.max_event_bytes + 1, LIMITS.max_upload_bytes + 1, 2 * 1024 * 1024):
        body = json.dumps(event_body("x" * size, bot="echo")).encode()
        for target in targets:
            out.append(Sent("POST", BASE + target, json_auth, body))
    keys = [seeded.other_token, API_KEY + "x", API_KEY[:-1], "", f"{API_KEY}\x00", "Basic Zm9vOmJhcg=="]
    for i, key in enumerate(keys):
        headers = {"authorization": key if key.startswith("Basic") else f"Bearer {key}"}
        for j in range(2):
            out.append(
                Sent("GET", BASE + GET_PATHS[(2 * i + j) % len(GET_PATHS)].format(**ids), headers, None)
            )
        out.append(Sent("POST", f"{BASE}/v1/events", {**headers, "content-type": "application/json"}, good))
    return out


async def read_back(exerciser: Exerciser, run_id: str) -> None:
    """What an accepted request stored reads back without a 500 (no poison value)."""
    run = await exerciser.client.get(f"/v1/runs/{run_id}")
    assert run.status_code == 200, run.text
    conversation = urllib.parse.quote(run.json()["run"]["conversation_id"] or "none", safe="")
    for path in (
        f"/v1/runs/{run_id}/results",
        f"/v1/runs/{run_id}/audit",
        f"/v1/conversations/{conversation}/events",
        f"/v1/conversations/{conversation}/transcript",
    ):
        sent = Sent("GET", BASE + path, {"accept": "application/json"}, None)
        response = await exerciser.send(sent)
        assert response is not None
        exerciser.check_answer(sent, response)


async def test_adversarial_inputs_are_refused_cleanly(host: Host, database_url: str, tmp_path: Path) -> None:
    figures = tally("api-adv", store_of(database_url))
    async with asgi_client(host, limits=LIMITS, headers={"authorization": f"Bearer {API_KEY}"}) as client:
        seeded = await seed(host, client)
        exerciser = Exerciser(host, client, tmp_path / "data", figures)
        requests_ = adversarial_requests(seeded)
        for sent in requests_:
            response = await exerciser.send(sent)
            assert response is not None, sent.describe()
            exerciser.check_answer(sent, response)
            if sent.method == "POST" and response.status_code == 202:
                await read_back(exerciser, response.json()["run_id"])
    assert figures.tried >= len(requests_)  # and the read-backs of what was accepted
    assert figures.refused > figures.tried * 3 // 4


# -- once-failing inputs, pinned ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        # These answered 500 before 96184b9 (storable JSON, bounded ?after=): an ?after= beyond the seq
        # column overflowed (PostgreSQL int32, SQLite int64) and a NUL reached asyncpg, whose text cannot
        # hold \x00. Each is now refused as a bad argument, on both stores.
        "/v1/runs/{run_id}/audit?after=2147483648",
        "/v1/runs/{run_id}/audit?after=99999999999999999999",
        "/v1/runs/%00",
        "/v1/runs/%00/results",
        "/v1/conversations/c1/events?event_type=%00",
    ],
)
async def test_an_out_of_range_after_or_a_nul_in_a_parameter_is_400(host: Host, path: str) -> None:
    async with asgi_client(host, limits=LIMITS, headers={"authorization": f"Bearer {API_KEY}"}) as client:
        seeded = await seed(host, client)
        before = await fingerprint(host.stores)
        response = await client.get(path.format(run_id=seeded.run_id))
        assert response.status_code == 400, response.text
        assert set(response.json()) == {"error"}
        assert response.json()["error"]["code"] == "invalid_argument", response.text
        assert await fingerprint(host.stores) == before
