"""Fuzz the signed webhook ingress `POST /v1/hooks/{source}`, for every verification scheme, on SQLite and
PostgreSQL.

The host has one source per scheme (`sw` Standard Webhooks, `gh` GitHub, `tok` a shared bearer), each
mapping its payload to an event an echo agent takes. Hypothesis draws a delivery: the source (or an unknown
one), a body (a valid payload with generated JSON or a hand-written bad value in one of its mapped fields,
bytes that are not JSON or not UTF-8, NUL, deep nesting, a body past the source's `max_bytes`), how it is
signed (rightly, forged, with the wrong secret or scheme, unsigned, the signature header twice or huge, a
timestamp outside the tolerance or not a number) and its delivery id (empty, huge, control characters,
non-ASCII, the id of an event posted to `/v1/events`). Each goes to the real app (`build_app`) through
`httpx2.ASGITransport`, and `Exerciser` checks the answer:
- no 5xx, no traceback; a refusal is the documented error body and changes no stored row and no blob;
- a delivery that is not rightly signed is refused 401 (404 for an unknown source, 413 when oversized),
  whatever else is wrong with it;
- what a 202 stored reads back through the API without a 5xx (no poison value in a mapped field).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import strategies as st

from mcphost.app import Host, open_host
from mcphost.config import HookConfig
from mcphost.models import AgentConfig
from tests.e2e.httpkit import api_settings, asgi_client, event_body
from tests.fuzz._figures import examples, store_of, tally
from tests.fuzz.test_api_fuzz import BASE, LIMITS, RAW_VALUES, Exerciser, Sent, read_back, run_generated
from tests.mcphost.hostkit import ECHO_RUNNER

SW_KEY = b"0123456789abcdef0123456789abcdef"
SW_SECRET = "whsec_" + base64.b64encode(SW_KEY).decode()
GH_SECRET = "github-shared-secret-1234"
BEARER = "bearer-shared-secret-5678"
MAX_BYTES = 16 * 1024
TOLERANCE_S = 60

PAYLOADS: dict[str, dict[str, Any]] = {
    "sw": {"type": "chat.message", "data": {"room": "room-1", "user": {"id": "u-7"}, "text": "hi"}},
    "gh": {"repository": {"full_name": "acme/widgets"}, "commits": [{"message": "fix the build"}]},
    "tok": {"msg": "hi", "type": "ping"},
}
"""A payload each source maps to an event."""
SLOTS: dict[str, list[tuple[str, ...]]] = {
    "sw": [("type",), ("data", "room"), ("data", "user", "id"), ("data", "text"), ("data",), ("extra",)],
    "gh": [("repository", "full_name"), ("commits",), ("repository",), ("extra",)],
    "tok": [("msg",), ("type",), ("extra",)],
}
"""Where a generated value goes: the mapped fields first."""


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    base = api_settings(database_url, tmp_path / "data")
    hooked = AgentConfig(id="hooked", runner=ECHO_RUNNER, event_types=["webhook.received", "github.push"])
    hooks = {
        "sw": HookConfig(
            verify="standard-webhooks",
            secret=SW_SECRET,
            tolerance_s=TOLERANCE_S,
            conversation_id="$.data.room",
            actor_id="$.data.user.id",
            text="$.data.text",
            agent="hooked",
            max_bytes=MAX_BYTES,
        ),
        "gh": HookConfig(
            verify="github",
            secret=GH_SECRET,
            event_type="github.push",
            conversation_id="$.repository.full_name",
            text="$.commits[0].message",
            agent="hooked",
            max_bytes=MAX_BYTES,
        ),
        "tok": HookConfig(
            verify="bearer",
            secret=BEARER,
            conversation_id="ops",
            text="$.msg",
            agent="hooked",
            max_bytes=MAX_BYTES,
        ),
    }
    settings_ = base.model_copy(update={"agents": [*base.agents, hooked], "hooks": hooks})
    async with open_host(settings_) as opened:
        yield opened


# -- what a delivery is made of ---------------------------------------------------------------------------


def with_value(source: str, slot: tuple[str, ...], raw: str) -> bytes:
    """The source's payload with `raw` (JSON text, or not) at `slot`."""
    payload = json.loads(json.dumps(PAYLOADS[source]))
    marker = "\u2603MARK\u2603"
    node = payload
    for part in slot[:-1]:
        node = node[part]
    node[slot[-1]] = marker
    return json.dumps(payload).replace(json.dumps(marker), raw).encode("utf-8", "surrogatepass")


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=60),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
EXTRA_RAW = [
    '"' + "x" * (MAX_BYTES // 2) + '"',  # under the cap, but a huge id or text
    '"room 1"',
    '"a/../b"',
    '"\\n"',
    '"\\u202e"',
    '"' + "r" * 201 + '"',
    "12345678901234567890123456789",
    "1.5e300",
    '{"$": 1}',
]


def bodies(source: str) -> st.SearchStrategy[bytes]:
    slots = SLOTS[source]
    generated = st.tuples(st.sampled_from(slots), JSON_VALUES).map(
        lambda sv: with_value(source, sv[0], json.dumps(sv[1]))
    )
    raw = st.tuples(st.sampled_from(slots), st.sampled_from([*RAW_VALUES, *EXTRA_RAW])).map(
        lambda sv: with_value(source, sv[0], sv[1])
    )
    whole = st.sampled_from(
        [
            json.dumps(PAYLOADS[source]).encode(),
            b"",
            b"not json",
            b"\x00",
            b'{"msg": "a\x00b"}',
            b"\xff\xfe{}",
            json.dumps(PAYLOADS[source]).encode("utf-16"),
            b'{"a": 1}\x00',
            b'{"a": 1} {"b": 2}',
            b'{"a": 1, "a": 2}',
            b"[" * 100_000,
            *(raw.encode("utf-8", "surrogatepass") for raw in RAW_VALUES),
            json.dumps({**PAYLOADS[source], "pad": "x" * MAX_BYTES}).encode(),  # one past the cap
        ]
    )
    return st.one_of(generated, generated, raw, whole, st.binary(max_size=64))


SIGNINGS = [
    "good",
    "good",
    "good",
    "forged",
    "wrong secret",
    "missing",
    "twice",
    "huge",
    "wrong scheme",
    "stale",
    "future",
    "bad timestamp",
    "timestamp 0",
    "timestamp 12 digits",
    "timestamp 40 digits",
    "timestamp -1",
]
"""How a delivery is signed ("good" thrice: most deliveries should reach the payload)."""
ODD_IDS = [
    "",
    " ",
    "x" * 201,
    "x" * 8000,
    "d\x00d",
    "d\td",
    "d\x7fd",
    "dé",
    "\u202eevil",
    "../../x",
    "-leading-dash",
    "msg_2abc",
    "msg_2abc",  # twice: the second is a replay
]


@dataclass(frozen=True)
class Delivery:
    source: str
    body: bytes
    signing: str
    delivery_id: str
    """`:api-event` stands for the id of the event posted to `/v1/events` before the fuzz."""


def deliveries() -> st.SearchStrategy[Delivery]:
    usable = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,30}", fullmatch=True)
    ids = st.one_of(usable, usable, st.sampled_from([*ODD_IDS, ":api-event"]), st.text(max_size=40))
    known = st.sampled_from(["sw", "gh", "tok"]).flatmap(
        lambda source: st.builds(Delivery, st.just(source), bodies(source), st.sampled_from(SIGNINGS), ids)
    )
    unknown = st.builds(
        Delivery,
        st.sampled_from(["nope", "SW", "sw%00", "%2E%2E", "x" * 300, "s w", "\u00e9"]),
        st.just(json.dumps(PAYLOADS["sw"]).encode()),
        st.just("good"),
        ids,
    )
    return st.one_of(known, known, known, unknown)


def _header(name: str, value: str) -> tuple[bytes, bytes]:
    return (name.encode(), value.encode("utf-8", "surrogatepass"))


def signed(delivery: Delivery, api_event_id: str) -> Sent:
    """The request a sender of `delivery.source` would make, spoilt as `delivery.signing` says."""
    source, body, signing = delivery.source, delivery.body, delivery.signing
    delivery_id = api_event_id if delivery.delivery_id == ":api-event" else delivery.delivery_id
    headers = [_header("content-type", "application/json")]
    scheme = "sw" if source not in {"gh", "tok"} else source
    match scheme:
        case "sw":
            stamp = int(time.time())
            stamp += {"stale": -TOLERANCE_S - 5, "future": TOLERANCE_S + 5}.get(signing, 0)
            key = b"another-secret-of-32-bytes-long!" if signing == "wrong secret" else SW_KEY
            mac = hmac.new(
                key, f"{delivery_id}.{stamp}.".encode(errors="surrogatepass") + body, hashlib.sha256
            )
            signature = "v1," + base64.b64encode(mac.digest()).decode()
            if signing == "forged":
                signature = "v1," + base64.b64encode(hashlib.sha256(body).digest()).decode()
            elif signing == "wrong scheme":
                signature = signature.replace("v1,", "v1a,")
            elif signing == "huge":
                signature = " ".join(["v1,AAAA"] * 2000 + [signature])  # the good one past MAX_SIGNATURES
            odd_stamps = {
                "bad timestamp": "1e9",
                "timestamp 0": "0",
                "timestamp 12 digits": "9" * 12,
                "timestamp 40 digits": "9" * 40,
                "timestamp -1": "-1",
            }
            stamp_text = odd_stamps.get(signing, str(stamp))
            headers += [_header("webhook-id", delivery_id), _header("webhook-timestamp", stamp_text)]
            if signing != "missing":
                headers.append(_header("webhook-signature", signature))
            if signing == "twice":
                headers.insert(1, _header("webhook-signature", "v1,AAAA"))  # the first one is read
        case "gh":
            secret = b"not-the-secret" if signing == "wrong secret" else GH_SECRET.encode()
            signature = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
            if signing == "forged":
                signature = "sha256=" + hashlib.sha256(body).hexdigest()
            elif signing in {"wrong scheme", "bad timestamp"}:
                signature = signature.replace("sha256=", "sha1=")
            elif signing == "huge":
                signature = signature + " " * 100 + "0" * 20_000
            elif signing in {"stale", "future"}:  # GitHub signs no time: a replay is stopped by its id only
                pass
            headers += [_header("x-github-event", "push"), _header("x-github-delivery", delivery_id)]
            if signing != "missing":
                headers.append(_header("x-hub-signature-256", signature))
            if signing == "twice":
                headers.insert(1, _header("x-hub-signature-256", "sha256=" + "0" * 64))
        case _:
            token = {"wrong secret": "not-the-secret", "forged": BEARER[:-1]}.get(signing, BEARER)
            authorization = f"{'Basic' if signing == 'wrong scheme' else 'Bearer'} {token}"
            if signing == "huge":
                authorization = "Bearer " + "t" * 30_000
            if signing != "missing":
                headers.append(_header("authorization", authorization))
            if signing == "twice":
                headers.insert(1, _header("authorization", "Bearer not-it"))
            headers.append(_header("idempotency-key", delivery_id))
    return Sent("POST", f"{BASE}/v1/hooks/{source}", headers, body)


def rightly_signed(delivery: Delivery) -> bool:
    """GitHub and bearer deliveries carry no timestamp: "stale" and the like are signed rightly for them."""
    untimed = delivery.signing in {"stale", "future"} or delivery.signing.startswith("timestamp")
    return (
        delivery.signing == "good"
        or (delivery.source == "gh" and untimed)
        or (delivery.source == "tok" and (untimed or delivery.signing == "bad timestamp"))
    )


async def test_every_scheme_with_generated_deliveries(host: Host, database_url: str, tmp_path: Path) -> None:
    figures = tally("hooks", store_of(database_url))
    async with asgi_client(host, limits=LIMITS) as client:
        posted = await client.post("/v1/events", json=event_body("hello"))  # no API key on this host
        assert posted.status_code == 202, posted.text
        api_event_id = posted.json()["event_id"]
        await host.orchestrator.wait(posted.json()["run_id"])
        exerciser = Exerciser(host, client, tmp_path / "data", figures)
        answered: dict[str, int] = {}

        async def exercise(delivery: Delivery) -> None:
            sent = signed(delivery, api_event_id)
            response = await exerciser.send(sent)
            if response is None:
                return
            exerciser.check_answer(sent, response)
            status = response.status_code
            answered[f"{delivery.source}:{status}"] = answered.get(f"{delivery.source}:{status}", 0) + 1
            if not rightly_signed(delivery) and delivery.source in PAYLOADS:
                assert status in {401, 413}, (
                    f"{delivery.signing}: {sent.describe()} → {status} {response.text}"
                )
            for secret in (SW_SECRET, GH_SECRET, BEARER):
                assert secret not in response.text, sent.describe()
            if status == 202:
                await read_back(exerciser, response.json()["run_id"])

        def each(delivery: Delivery) -> None:
            anyio.from_thread.run(exercise, delivery)

        await anyio.to_thread.run_sync(
            run_generated, "POST /v1/hooks/{source}", deliveries(), each, examples(8) * 20
        )
    assert figures.server_errors == 0
    for source in PAYLOADS:  # every scheme both admitted deliveries and refused them
        assert answered.get(f"{source}:202", 0) > 0, answered
        assert answered.get(f"{source}:401", 0) > 0, answered


# -- found by the fuzz, fixed elsewhere ------------------------------------------------------------------


async def test_a_delivery_whose_id_is_an_api_events_id_is_not_answered_with_that_run(host: Host) -> None:
    async with asgi_client(host) as client:
        posted = await client.post("/v1/events", json=event_body("hello"))
        assert posted.status_code == 202, posted.text
        await host.orchestrator.wait(posted.json()["run_id"])
        body = json.dumps(PAYLOADS["gh"]).encode()
        sent = signed(Delivery("gh", body, "good", posted.json()["event_id"]), posted.json()["event_id"])
        assert isinstance(sent.headers, list)
        answer = await client.post("/v1/hooks/gh", content=body, headers=sent.headers)
        assert answer.status_code in {202, 409}, answer.text
        assert answer.json().get("run_id") != posted.json()["run_id"], answer.text
