"""Fuzz approval decisions, notes and answers (`POST /v1/approvals/{approval_id}`) on SQLite and PostgreSQL.

The host holds a pending approval of every kind a run can ask: an `action` (it outlives its run), an
`interaction` and a `tool` call the run parked on (a decision starts the continuation run), and a `tool`
call whose run has ended (a decision finds no caller). Hypothesis draws a target (one of those, a decided
one, an unknown or malformed id) and a body: the decision (right for the kind, another kind's, not one at
all), a note or an answer (huge, deep, NUL, lone surrogates, NaN, huge integers, both at once, neither),
extra fields, and bodies that are not JSON. A target decided by an example is replaced by a fresh pending
one before the next. Then the same decisions race: two requests on one pending approval at once.

Every answer goes through `Exerciser` (no 5xx, no traceback, the documented error body, a refusal changes
no stored row or blob), with one documented exception: deciding the tool call of an ended run is a 409
that expires the approval (nothing waits for the decision any more), so that refusal may change exactly
that approval's row, to `expired`. A decision that parks nothing answers no continuation; one that does
answers the same continuation run every time it is repeated, racing copies included.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx2
import pytest
from hypothesis import strategies as st

from mcphost.app import Host, open_host
from mcphost.protocol import JSONObject
from mcphost.stores import ApprovalKind
from tests.e2e.httpkit import api_settings, asgi_client, event_body
from tests.fuzz._figures import Tally, examples, store_of, tally
from tests.fuzz.test_api_fuzz import BASE, LIMITS, RAW_VALUES, Exerciser, Sent, run_generated

TARGETS: dict[str, tuple[ApprovalKind, bool]] = {
    "action": ("action", False),
    "interaction": ("interaction", True),
    "parked-tool": ("tool", True),
    "ended-tool": ("tool", False),
}
"""The kinds of pending approval the host keeps one of: (kind, parked)."""
REQUESTS: dict[ApprovalKind, JSONObject] = {
    "action": {"action": "merge", "target": {"pr": 1}},
    "interaction": {"question": "Deploy?"},
    "tool": {"tool": "gh__merge", "arguments": {}},
}
ODD_IDS = ["apr_nope", "%00", "apr%0Ax", "x" * 300, "%C3%A9", "..", "apr_%FF", "%ED%A0%80"]
JSON_HEADERS = {"content-type": "application/json"}


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


class Approvals:
    """One pending approval per target kind, replaced once decided; the run they belong to."""

    def __init__(self, host: Host, run_id: str) -> None:
        self.host = host
        self.run_id = run_id
        self.pending: dict[str, str] = {}
        self.decided: list[str] = []

    async def refill(self) -> bool:
        """Ask for a new approval of each target whose one was decided; whether any was asked."""
        asked = False
        for target, (kind, parked) in TARGETS.items():
            current = self.pending.get(target)
            if current is not None and (await self.host.stores.approvals.get(current)).status == "pending":
                continue
            if current is not None:
                self.decided.append(current)
            record = await self.host.stores.approvals.request(
                self.run_id, kind, REQUESTS[kind], parked=parked
            )
            self.pending[target] = record.approval_id
            asked = True
        return asked


NOTES: list[str] = [
    *RAW_VALUES,
    '"' + "n" * 2000 + '"',
    '"' + "n" * 2001 + '"',
    '"' + "\u00e9" * 2000 + '"',
    '""',
    '" "',
    '"a\\nb"',
]
"""JSON text for `note` or `answer`."""


@dataclass(frozen=True)
class Decision:
    target: str
    """A key of TARGETS, `decided` (the first approval decided), or an odd id."""
    body: bytes


def decisions() -> st.SearchStrategy[Decision]:
    values = st.one_of(
        st.sampled_from(NOTES),
        st.text(max_size=80).map(lambda t: json.dumps(t)),
        st.integers().map(str),
        st.just("null"),
    )
    verdicts = st.one_of(
        st.sampled_from(['"approve"', '"deny"', '"answer"']),
        st.sampled_from(['"approve"', '"deny"', '"answer"']),
        st.sampled_from(['"APPROVE"', '""', '"approved"', "null", "1", '"approve\\u0000"', *RAW_VALUES[:6]]),
    )

    def body(parts: tuple[str, str | None, str | None, bool]) -> bytes:
        verdict, note, answer, extra = parts
        fields = [f'"decision": {verdict}']
        if note is not None:
            fields.append(f'"note": {note}')
        if answer is not None:
            fields.append(f'"answer": {answer}')
        if extra:
            fields.append('"approval_id": "apr_other"')
        return ("{" + ", ".join(fields) + "}").encode("utf-8", "surrogatepass")

    bodies = st.one_of(
        st.tuples(verdicts, st.none() | values, st.none() | values, st.just(False)).map(body),
        st.tuples(verdicts, st.none() | values, st.none() | values, st.booleans()).map(body),
        st.sampled_from([b"", b"not json", b"[]", b"null", b'{"decision": "approve"', b"\x00", b"\xff"]),
        st.sampled_from(RAW_VALUES).map(lambda raw: raw.encode("utf-8", "surrogatepass")),
    )
    targets = st.one_of(
        st.sampled_from(list(TARGETS)), st.sampled_from(list(TARGETS)), st.sampled_from(["decided", *ODD_IDS])
    )
    return st.builds(Decision, targets, bodies)


def expired_by_its_ended_run(response: httpx2.Response) -> frozenset[str]:
    """What a refusal may change: the approval a decision found abandoned (409 naming the run's status)."""
    if response.status_code == 409 and "run_status" in response.json()["error"].get("details", {}):
        return frozenset({"approvals"})
    return frozenset()


async def settle(host: Host, exerciser: Exerciser, response: httpx2.Response | None) -> None:
    """Wait for the continuation a decision started, so its writes land before the next request."""
    if response is None or response.status_code != 200:
        return
    run_id = response.json().get("continuation_run_id")
    if run_id is not None:
        with anyio.fail_after(60):
            await host.orchestrator.wait(run_id)
        exerciser.rows = None


async def test_generated_decisions_on_every_kind_of_approval(
    host: Host, database_url: str, tmp_path: Path
) -> None:
    figures = tally("approvals", store_of(database_url))
    async with asgi_client(host, limits=LIMITS) as client:
        admitted = await client.post("/v1/events", json=event_body("hi"))
        run_id = admitted.json()["run_id"]
        await host.orchestrator.wait(run_id)
        approvals = Approvals(host, run_id)
        await approvals.refill()
        exerciser = Exerciser(host, client, tmp_path / "data", figures)
        answered: dict[str, int] = {}

        async def exercise(decision: Decision) -> None:
            if await approvals.refill():
                exerciser.rows = None  # the new approvals are not the request's doing
            if decision.target in TARGETS:
                approval_id = approvals.pending[decision.target]
            elif decision.target == "decided":
                approval_id = approvals.decided[0] if approvals.decided else "apr_none"
            else:
                approval_id = decision.target
            sent = Sent("POST", f"{BASE}/v1/approvals/{approval_id}", JSON_HEADERS, decision.body)
            allow = expired_by_its_ended_run if decision.target == "ended-tool" else None
            response = await exerciser.send(sent, refusal_may_change=allow)
            if response is None:
                return
            exerciser.check_answer(sent, response)
            key = f"{decision.target if decision.target in TARGETS else 'other'}:{response.status_code}"
            answered[key] = answered.get(key, 0) + 1
            if response.status_code == 200:
                record = response.json()
                parked = decision.target in {"interaction", "parked-tool"}
                assert (record["continuation_run_id"] is not None) == (
                    parked and record["status"] != "pending"
                ), (
                    sent.describe(),
                    record,
                )
            if decision.target == "ended-tool" and response.status_code == 409:
                assert (await host.stores.approvals.get(approval_id)).status == "expired"
            await settle(host, exerciser, response)

        def each(decision: Decision) -> None:
            anyio.from_thread.run(exercise, decision)

        await anyio.to_thread.run_sync(
            run_generated, "POST /v1/approvals/{approval_id}", decisions(), each, examples(8) * 20
        )
    assert figures.server_errors == 0
    for target in TARGETS:  # each kind was both decided and refused
        assert any(k.startswith(f"{target}:4") for k in answered), answered
    assert any(k.endswith(":200") for k in answered), answered


RACES: list[tuple[str, str, str]] = [
    ("action", '{"decision": "approve"}', '{"decision": "deny", "note": "no"}'),
    ("action", '{"decision": "approve"}', '{"decision": "approve", "note": "twice"}'),
    ("interaction", '{"decision": "answer", "answer": "yes"}', '{"decision": "deny"}'),
    ("interaction", '{"decision": "answer", "answer": "yes"}', '{"decision": "answer", "answer": "no"}'),
    ("parked-tool", '{"decision": "approve"}', '{"decision": "approve"}'),
    ("parked-tool", '{"decision": "approve"}', '{"decision": "deny"}'),
    ("ended-tool", '{"decision": "approve"}', '{"decision": "deny"}'),
]
"""Two decisions sent at once on one pending approval."""


async def race(
    client: httpx2.AsyncClient, approval_id: str, bodies: tuple[str, str]
) -> list[httpx2.Response]:
    answers: list[httpx2.Response] = []

    async def decide(body: str) -> None:
        answers.append(await client.post(f"/v1/approvals/{approval_id}", content=body, headers=JSON_HEADERS))

    async with anyio.create_task_group() as tg:
        for body in bodies:
            tg.start_soon(decide, body)
    return answers


async def test_racing_decisions_agree_on_one_outcome(host: Host, database_url: str) -> None:
    figures = tally("approvals", store_of(database_url))
    async with asgi_client(host, limits=LIMITS) as client:
        run_id = (await client.post("/v1/events", json=event_body("hi"))).json()["run_id"]
        await host.orchestrator.wait(run_id)
        approvals = Approvals(host, run_id)
        for target, first, second in RACES * max(1, examples(8) // 4):
            await approvals.refill()
            approval_id = approvals.pending[target]
            answers = await race(client, approval_id, (first, second))
            count(figures, answers)
            assert all(a.status_code < 500 and "Traceback" not in a.text for a in answers), [
                a.text for a in answers
            ]
            stored = await host.stores.approvals.get(approval_id)
            won = [a.json() for a in answers if a.status_code == 200]
            lost = [a.json()["error"] for a in answers if a.status_code != 200]
            assert all(e["code"] == "conflict" for e in lost), (target, lost)
            if target == "ended-tool":  # nothing waits: it expired, and a denial of it answers it as it is
                assert stored.status == "expired", (target, won, lost)
            else:
                assert won, (target, lost)
            assert {w["status"] for w in won} <= {stored.status}, (target, won, stored)
            continuations = {w["continuation_run_id"] for w in won}
            assert len(continuations) <= 1, (target, won)  # repeated or raced, one continuation run
            if stored.parked:
                (continuation,) = continuations
                assert continuation is not None
                assert continuation == stored.continuation_run_id
                await host.orchestrator.wait(continuation)
            if first == second:
                assert len(won) == 2, (target, lost)


def count(figures: Tally, answers: list[httpx2.Response]) -> None:
    for answer in answers:
        figures.tried += 1
        figures.saw(str(answer.status_code))
        if answer.status_code >= 400:
            figures.refused += 1
        if answer.status_code >= 500:
            figures.server_errors += 1
