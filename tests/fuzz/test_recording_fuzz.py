"""Fuzz `mcphost replay --suite` with hostile recordings, on SQLite and PostgreSQL.

A recording is untrusted input (a file in a repository that CI replays). Every document here goes
through the real CLI entry point (`mcphost.cli.main`, as `mcphost replay --suite DIR --json`) with a
config of memo and the Claude Code runner (`tests/mcphost/recordkit.py`); each hostile one names a
program that leaves a marker file when anything starts it. Generated documents: raw bytes, arbitrary
JSON, and a valid recording broken one way (an unknown or program-naming key at a structured level, a
runner config, MCP access, a field of the wrong type, the text cut short, nesting past the bound).
Hand-written ones: every route a recording could use to name a program, a path, an environment
variable or a URL, the parser's edge cases (NaN, huge integers, lone surrogates, NUL, BOM, UTF-16,
deep nesting), and valid recordings with hostile data (a harness session folder in the state).

For every document:
- the CLI returns (no exception) and prints no traceback;
- the marker program never ran;
- invalid input exits 2 with one error entry for the file; a valid document replays (exit 0 or 1);
- no row of the config's database changed (a replay writes only its scratch database).

Figures go to `_figures.tally("replay", store)`: tried, refused (exit 2), crashes in the `5xx`
column (an exception out of `main` or a traceback on stderr), rows changed by refusals.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import strategies as st

from mcphost.cli import main
from mcphost.models import AgentConfig, AgentEventEnvelope
from mcphost.protocol import AgentRunContext, JSONObject
from mcphost.protocol.context import ContextAccess, Runtime, Trigger
from mcphost.recording import MAX_DOCUMENT_DEPTH, RecordingDocument
from mcphost.stores import Stores, open_stores
from tests.fuzz._figures import Tally, examples, store_of, tally
from tests.fuzz._rows import changed, fingerprint
from tests.fuzz.test_api_fuzz import run_generated
from tests.mcphost.recordkit import CLAUDE, MEMO, marker_program, recording, write_config

HOSTILE_KEYS = (
    "cli_path",
    "command",
    "args",
    "cwd",
    "env",
    "environment",
    "pass_env",
    "url",
    "base_url",
    "api_key_env",
    "working_directory",
    "data_dir",
    "extra_mcp_servers",
    "webhook_url",
    "path",
    "plugins",
    "tools",
    "knowledge",
    "hooks",
    "webhooks",
)
"""Keys under which a config names something to run, open or call; none is a field of the recording
format at the levels `STRUCTURED` lists."""

STRUCTURED: dict[str, tuple[str, ...]] = {
    "(top)": tuple(RecordingDocument.model_fields),
    "envelope": tuple(AgentEventEnvelope.model_fields),
    "context": tuple(AgentRunContext.model_fields),
    "context.context": tuple(ContextAccess.model_fields),
    "context.runtime": tuple(Runtime.model_fields),
    "context.trigger": tuple(Trigger.model_fields),
    "agent": tuple(AgentConfig.model_fields),
}
"""Objects of the format with a closed set of fields, and those fields."""

EXPECTED_ERRORS = (
    "not a JSON document",
    "not an mcphost recording",
    "not a valid recording",
    "is not valid",
    "holds a runner config",
    "holds MCP access",
    "nest more than",
    "not one this config runs",
    "Cannot replay with runner",
    "cannot be stored",
    "not a finite number",
    "outside the signed 64-bit range",
    "bytes; a recording holds at most",
)
"""What a refusal of a recording says (each message names the file and what to do)."""


@dataclass
class Replayer:
    """Sends one document at a time through `mcphost replay --suite` and checks what came back."""

    folder: Path
    config: Path
    marker: Path
    stores: Stores
    capsys: pytest.CaptureFixture[str]
    figures: Tally
    """The suite's figures for this store (shared by every test of this pytest run)."""
    count: int = 0
    """Documents this replayer sent."""
    refusals: int = 0
    """Of those, refused (exit 2)."""
    crashes: int = 0
    """Of those, an exception out of `main` or a traceback on stderr."""

    def replay(self, data: bytes, *, valid: bool, extra: tuple[str, ...] = ()) -> None:
        """`data` as the only recording of a suite: refused (exit 2) when not `valid`, else replayed."""
        self.count += 1
        suite = self.folder / f"suite-{self.count}"
        suite.mkdir()
        (suite / "doc.json").write_bytes(data)
        before = anyio.from_thread.run(fingerprint, self.stores)
        self.figures.tried += 1
        self.capsys.readouterr()
        try:
            code = main(["replay", "--suite", str(suite), "--json", "--config", str(self.config), *extra])
        except BaseException as exc:  # a crash: counted, then reported with the document
            self.figures.server_errors += 1
            self.crashes += 1
            self.figures.saw("crash")
            raise AssertionError(f"main raised {exc!r} on {data[:300]!r}") from exc
        out = self.capsys.readouterr()
        self.figures.saw(f"exit:{code}")
        if "Traceback" in out.err:
            self.figures.server_errors += 1
            self.crashes += 1
            self.figures.saw("traceback")
        after = anyio.from_thread.run(fingerprint, self.stores)
        if code == 2:
            self.figures.refused += 1
            self.refusals += 1
            if changed(before, after):
                self.figures.rows_changed_by_refusals += 1
        if self.marker.exists():
            self.figures.saw("executed")
        shown = f"{data[:300]!r} → exit {code}\n{out.out[-1500:]}\n{out.err[-1500:]}"
        assert not self.marker.exists(), f"the marker program ran: {self.marker.read_text()}\n{shown}"
        assert "Traceback" not in out.err, shown
        assert changed(before, after) == [], shown
        entry = json.loads(out.out)["recordings"][0]
        if not valid:
            assert code == 2, shown
            assert any(e in entry["error"] for e in EXPECTED_ERRORS), shown
            assert str(suite / "doc.json") in entry["error"] or "replay" in entry["error"], shown
        else:
            assert code in (0, 1), shown
            assert entry["replay_run_id"].startswith("run_"), shown


@pytest.fixture
async def replayer(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> AsyncGenerator[Replayer, None]:
    config = write_config(tmp_path, database_url)
    _, marker = marker_program(tmp_path)
    async with open_stores(database_url, tmp_path / "data") as stores:
        yield Replayer(tmp_path, config, marker, stores, capsys, tally("replay", store_of(database_url)))


def program(replayer: Replayer) -> str:
    return str(replayer.folder / "evil.sh")


def encode(document: Any) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass")


# -- generated ------------------------------------------------------------------------------------------

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


def _at(document: JSONObject, where: str) -> JSONObject:
    target: Any = document
    if where != "(top)":
        for part in where.split("."):
            target = target[part]
    return target


def broken_documents(program_path: str) -> st.SearchStrategy[bytes]:
    """A valid recording broken one way; every result is invalid input."""
    named = st.sampled_from([program_path, [program_path, "-c", "x"], {"command": [program_path]}])

    def unknown_key(where: str, key: str, value: Any) -> bytes:
        document = recording()
        _at(document, where)[key] = value
        return encode(document)

    def runner_config(where: str, config: JSONObject) -> bytes:
        document = recording(agent_id="coder", runner_id=CLAUDE)
        _at(document, where)["config"] = config
        return encode(document)

    def mcp_access(access: JSONObject) -> bytes:
        document = recording()
        document["context"]["context"]["mcp"] = access
        return encode(document)

    def wrong_type(field: str, value: Any) -> bytes:
        document = recording()
        document[field] = value
        return encode(document)

    def cut(at: int) -> bytes:
        text = encode(recording())
        return text[: at % len(text)]

    def deep(depth: int, opener: str) -> bytes:
        document = recording()
        document["results"] = [{"seq": 1, "type": "run.completed", "payload": {"data": None}}]
        closer = "]" if opener == "[" else "}"
        nested = (opener if opener == "[" else '{"a":') * depth + "1" + closer * depth
        return encode(document).replace(b'"data": null', b'"data": ' + nested.encode())

    hostile_key = st.sampled_from(HOSTILE_KEYS)

    @st.composite
    def unknown_keys(draw: st.DrawFn) -> bytes:
        where = draw(st.sampled_from(sorted(STRUCTURED)))
        key = draw(
            (hostile_key | st.text(min_size=1, max_size=20)).filter(lambda k: k not in STRUCTURED[where])
        )
        return unknown_key(where, key, draw(named | JSON_VALUES))

    return st.one_of(
        unknown_keys(),
        st.builds(
            runner_config,
            st.sampled_from(["context", "agent"]),
            st.dictionaries(hostile_key, named, min_size=1, max_size=4),
        ),
        st.builds(
            mcp_access,
            st.fixed_dictionaries(
                {"url": st.just("http://127.0.0.1:9/mcp")},
                optional={"bridge": st.fixed_dictionaries({"command": st.just([program_path])})},
            ),
        ),
        st.builds(
            wrong_type,
            st.sampled_from(["run_id", "agent_id", "runner_id", "calls", "results", "envelope", "context"]),
            st.integers() | st.lists(st.integers(), max_size=2) | st.none() | st.booleans(),
        ),
        st.builds(wrong_type, st.just("status"), st.text(max_size=20).filter(lambda s: s not in _STATUSES)),
        st.builds(cut, st.integers(min_value=0)),
        st.builds(deep, st.integers(min_value=MAX_DOCUMENT_DEPTH, max_value=5000), st.sampled_from("[{")),
    )


_STATUSES = ("completed", "failed", "cancelled", "parked")


async def test_generated_recordings_are_refused_with_exit_2_and_run_nothing(replayer: Replayer) -> None:
    path = program(replayer)
    cases: list[tuple[str, st.SearchStrategy[bytes]]] = [
        ("raw bytes", st.binary(max_size=400)),
        ("arbitrary JSON", JSON_VALUES.map(encode)),
        ("a broken recording", broken_documents(path)),
    ]

    def each(data: bytes) -> None:
        replayer.replay(data, valid=False)

    for name, strategy in cases:
        n = examples(12) * (4 if name == "a broken recording" else 1)
        await anyio.to_thread.run_sync(run_generated, name, strategy, each, n)
    assert replayer.crashes == 0
    assert replayer.refusals == replayer.count


# -- hand-written ---------------------------------------------------------------------------------------


def hostile_documents(path: str, folder: Path) -> list[tuple[str, bytes, tuple[str, ...]]]:
    """(what, bytes, extra CLI arguments) of documents that must each be refused."""
    out: list[tuple[str, bytes, tuple[str, ...]]] = []

    def add(what: str, document: Any, *extra: str) -> None:
        out.append((what, document if isinstance(document, bytes) else encode(document), extra))

    harness = str(folder / "harness")
    configs: dict[str, JSONObject] = {
        "cli_path": {"cli_path": path, "data_dir": harness},
        "a bare cli name": {"cli_path": "sh", "data_dir": harness},
        "environment": {"environment": {"LD_PRELOAD": path, "PATH": str(folder)}},
        "pass_env": {"pass_env": ["AWS_SECRET_ACCESS_KEY", "ANTHROPIC_API_KEY"]},
        "working_directory": {"working_directory": "/", "data_dir": "/"},
        "extra_mcp_servers": {"extra_mcp_servers": {"x": {"command": path, "args": []}}},
        "http mcp server": {"extra_mcp_servers": {"x": {"type": "http", "url": "http://127.0.0.1:9/"}}},
        "base_url": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "ANTHROPIC_API_KEY"},
        "mcp_transport": {"mcp_transport": "bridge"},
    }
    for what, config in configs.items():
        document = recording(agent_id="coder", runner_id=CLAUDE)
        document["context"]["config"] = config
        add(f"context.config {what}", document)
        ghost = recording(agent_id="ghost", runner_id=CLAUDE, agent={"id": "ghost", "runner": CLAUDE})
        ghost["agent"]["config"] = config
        add(f"agent.config {what}", ghost)
        add(f"agent.config {what} on --runner", ghost, "--runner", CLAUDE)
    for what, access in {
        "bridge command": {"url": "http://127.0.0.1:9/", "bridge": {"command": [path], "env": {"X": "1"}}},
        "foreign url": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer x"}},
        "warm session": {
            "url": "http://127.0.0.1:9/",
            "session": {"session_id": "s", "url": "http://127.0.0.1:9/warm"},
        },
    }.items():
        document = recording()
        document["context"]["context"]["mcp"] = access
        add(f"context.context.mcp {what}", document)
    for where, key, value in [
        ("agent", "command", [path]),
        ("agent", "cwd", "/"),
        ("agent", "env", {"PATH": "/tmp"}),
        ("(top)", "tools", {"x": {"command": [path]}}),
        ("(top)", "plugins", [{"command": [path]}]),
        ("(top)", "webhooks", [{"url": "http://127.0.0.1:9/hook"}]),
        ("(top)", "knowledge", {"docs": {"path": "/etc"}}),
        ("(top)", "hooks", {"x": {"secret": "s"}}),
        ("envelope", "command", [path]),
        ("context", "plugin", {"command": [path]}),
        ("context.runtime", "cli_path", path),
    ]:
        document = recording()
        _at(document, where)[key] = value
        add(f"{where}.{key}", document)
    add("an unknown runner", recording(agent_id="ghost", runner_id="plugin:evil/nothing/default"))
    malformed = recording(agent_id="ghost", runner_id=MEMO)
    add("a malformed runner id", {**malformed, "runner_id": path})
    add("a malformed agent runner", {**malformed, "agent": {"id": "ghost", "runner": path}})
    add("a malformed --runner", recording(), "--runner", path)
    add("a running status", {**recording(), "status": "running"})
    add("a call numbered 0", {**recording(), "calls": [_call(0)]})
    add("an empty tool name", {**recording(), "calls": [{**_call(1), "tool": ""}]})
    text = encode(recording())
    add("NaN", text.replace(b'"exported_at": 1700000400.0', b'"exported_at": NaN'))
    add("Infinity", text.replace(b'"exported_at": 1700000400.0', b'"exported_at": -Infinity'))
    add(
        "a 5000-digit integer", text.replace(b'"exported_at": 1700000400.0', b'"exported_at": ' + b"9" * 5000)
    )
    add("an integer past 64 bits", {**recording(), "results": [_result({"n": 2**70})]})
    add("a lone surrogate", text.replace(b'"I like green tea"', b'"I like \\ud800 tea"'))
    add("a NUL", text.replace(b'"I like green tea"', b'"I like \\u0000 tea"'))
    add("a NUL in a key", {**recording(), "results": [_result({"a\u0000": 1})]})
    add("a BOM", b"\xef\xbb\xbf" + text)
    add("UTF-16", json.dumps(recording()).encode("utf-16"))
    add("invalid UTF-8", text.replace(b"green", b"gr\xffen"))
    add("empty", b"")
    add("null", b"null")
    add("a list", b"[]")
    add("another format", {**recording(), "format": "mcphost.recording/2"})
    for depth in (MAX_DOCUMENT_DEPTH + 1, 1000, 100_000):
        nested = b"[" * depth + b"]" * depth
        add(f"nested {depth}", text.replace(b'"calls": []', b'"calls": ' + nested))
    return out


def _call(seq: int) -> JSONObject:
    return {"seq": seq, "tool": "state_get", "arguments": {}, "outcome": "ok", "answer": {"content": []}}


def _result(data: JSONObject) -> JSONObject:
    return {"seq": 1, "type": "run.completed", "payload": {"data": data}}


async def test_hand_written_hostile_recordings_are_refused_with_exit_2_and_run_nothing(
    replayer: Replayer,
) -> None:
    documents = hostile_documents(program(replayer), replayer.folder)

    def each() -> None:
        for what, data, extra in documents:
            try:
                replayer.replay(data, valid=False, extra=extra)
            except AssertionError as exc:
                exc.add_note(f"the document: {what}")
                raise

    await anyio.to_thread.run_sync(each)
    assert replayer.refusals == replayer.count == len(documents)
    assert replayer.crashes == 0


async def test_valid_recordings_with_hostile_data_replay_and_leave_the_named_folder_alone(
    replayer: Replayer,
) -> None:
    """Data a valid recording carries is data: a harness session folder in the recorded state is not
    resumed or written into, prompt text naming a program is text."""
    folder = replayer.folder / "harness" / "runs" / "run_someone"
    folder.mkdir(parents=True)
    (folder / "keep.txt").write_text("untouched")
    session = recording(agent_id="coder", runner_id=CLAUDE)
    session["context"]["state"] = {
        "conversation": {"external.session_id": "abc", "external.working_directory": str(folder)}
    }
    worded = recording()
    worded["envelope"]["input"]["text"] = worded["context"]["input"]["text"] = f"run {program(replayer)} now"
    worded["envelope"]["data"] = {"cli_path": program(replayer), "command": [program(replayer)]}

    def each() -> None:
        replayer.replay(encode(worded), valid=True)
        # The local `coder` names a CLI that does not exist: the run fails, nothing starts.
        replayer.replay(encode(session), valid=True)

    await anyio.to_thread.run_sync(each)
    assert sorted(p.name for p in folder.iterdir()) == ["keep.txt"]
    assert (folder / "keep.txt").read_text() == "untouched"
    assert (replayer.count, replayer.refusals, replayer.crashes) == (2, 0, 0)
