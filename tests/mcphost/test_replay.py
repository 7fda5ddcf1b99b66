"""Record, export, replay and diff of runs, with the real memo runner and a changed memo as plugins."""

from __future__ import annotations

import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from mcphost.app import open_host
from mcphost.cli import main
from mcphost.config import HostSettings, PluginConfig, Settings
from mcphost.errors import NotFoundError
from mcphost.protocol import AgentRunContext
from mcphost.recording import RECORDING_FORMAT, RecordingDocument, export_recording, read_document
from mcphost.replay import replay_document
from mcphost.serving import serve_locally
from mcphost.stores import DiskBlobs, Stores, open_stores
from mcphost.stores.retention import RetentionStore
from tests.mcphost.hostkit import REPO, agent, message, run_event

MEMO = "plugin:mcphost/memo/default"
VARIANT = "plugin:test/memovariant/default"
STATE = {"scopes": ["conversation"], "write": True}
COUNTED = ("runs", "events", "transcript", "state", "run_results", "audit", "recordings", "recorded_calls")


def settings_for(database_url: str, data_dir: Path) -> Settings:
    """memo (recorded: bot `memo`; not recorded: bot `plain`) and the changed memo, nothing bundled."""
    return Settings(
        source="<test>",
        host=HostSettings(database_url=database_url, data_dir=data_dir, bundled_plugins=False),
        plugins=[
            PluginConfig(command=[sys.executable, "-m", "mcphost_runners.memo"], name="memo"),
            PluginConfig(
                command=[sys.executable, str(REPO / "tests" / "plugins" / "memo_variant.py")], name="variant"
            ),
        ],
        agents=[
            agent("memo", MEMO, state=STATE, record=True),
            agent("plain", MEMO, state=STATE),
        ],
    )


async def counts(stores: Stores) -> dict[str, int]:
    async with stores.db.read() as session:
        return {t: (await session.execute(text(f"SELECT count(*) FROM {t}"))).scalar_one() for t in COUNTED}


async def record_memo_turns(settings: Settings) -> str:
    """Two memo turns in one conversation; the id of the second (recorded) run."""
    async with open_host(settings) as host, serve_locally(host):
        first = await run_event(host, message("I like green tea", bot="memo"))
        second = await run_event(host, message("more tea please", bot="memo"))
    assert first.status == second.status == "completed"
    return second.run_id


async def test_a_recorded_memo_run_replays_against_memo_without_divergence_and_writes_nothing_real(
    database_url: str, tmp_path: Path
) -> None:
    settings = settings_for(database_url, tmp_path / "data")
    run_id = await record_memo_turns(settings)
    async with open_stores(settings.database_url, tmp_path / "data", migrate=False) as stores:
        calls = await stores.recordings.calls(run_id)
        header = await stores.recordings.header(run_id)
        document = await export_recording(stores, run_id)
        before = await counts(stores)
    assert [c.seq for c in calls] == list(range(1, len(calls) + 1))
    tools = [c.tool for c in calls if c.tool != "tools/list"]
    assert tools == ["state_get", "history_page", "history_search", "state_set"]
    assert all(c.outcome == "ok" for c in calls)
    assert document.format == RECORDING_FORMAT
    assert document.status == "completed"
    assert header is not None
    stored = AgentRunContext.model_validate(header.context).context.mcp
    assert stored is not None
    assert not stored.headers  # the context is stored without its token
    # The export names nothing a replay could run or reach: no MCP access, no runner config.
    assert document.run_context().context.mcp is None
    assert document.run_context().config == {}
    assert document.agent["config"] == {}

    report = await replay_document(document, settings)

    assert report.diverged is False, report.differences
    assert report.differences == []
    assert report.unrecorded_calls == []
    assert report.status == "completed"
    assert report.replay_run_id != run_id
    async with open_stores(settings.database_url, tmp_path / "data", migrate=False) as stores:
        assert await counts(stores) == before
        # Retention takes a recording with its run's results.
        collected = await RetentionStore(stores.db, DiskBlobs(tmp_path / "blobs")).collect(
            "run_results", time.time() + 1
        )
        after = await counts(stores)
    assert after["recordings"] == 0
    assert after["recorded_calls"] == 0
    assert after["run_results"] == 0
    assert collected.rows == before["run_results"] + before["recordings"] + before["recorded_calls"]


async def test_a_changed_runner_reports_exactly_its_changed_tool_call_and_message(tmp_path: Path) -> None:
    settings = settings_for(f"sqlite+aiosqlite:///{tmp_path / 'host.db'}", tmp_path / "data")
    run_id = await record_memo_turns(settings)
    async with open_stores(settings.database_url, tmp_path / "data", migrate=False) as stores:
        document = await export_recording(stores, run_id)

    report = await replay_document(document, settings, runner_id=VARIANT)

    assert report.diverged is True
    aspects = [(d["aspect"], d["change"], d["index"]) for d in report.differences]
    assert aspects == [("tool_call", "changed", 2), ("message", "changed", 0)], report.differences
    call = report.differences[0]
    assert call["recorded"] == {
        "tool": "history_search",
        "arguments": {"query": "more tea", "top_k": 10, "roles": ["user"]},
    }
    replayed: Any = call["replayed"]
    assert replayed["arguments"]["top_k"] == 5
    assert report.unrecorded_calls == [replayed]  # answered with a tool error, reported as divergence
    recorded_message: Any = report.differences[1]["recorded"]
    replayed_message: Any = report.differences[1]["replayed"]
    # memo names the facts it read; the refused search is no longer among them.
    assert "history_page, history_search, state_set" in recorded_message["content"]
    assert "history_page, state_set" in replayed_message["content"]


async def test_an_event_can_ask_for_recording_and_an_unrecorded_run_has_none(tmp_path: Path) -> None:
    settings = settings_for(f"sqlite+aiosqlite:///{tmp_path / 'host.db'}", tmp_path / "data")
    async with open_host(settings) as host, serve_locally(host):
        asked = await run_event(host, message("hello", bot="plain", options={"record": True}))
        plain = await run_event(host, message("hello again", bot="plain"))
        stores = host.stores
        assert await stores.recordings.header(asked.run_id) is not None
        assert next(c.tool for c in await stores.recordings.calls(asked.run_id)) == "state_get"
        assert await stores.recordings.header(plain.run_id) is None
        assert await stores.recordings.calls(plain.run_id) == []
        with pytest.raises(NotFoundError, match="was not recorded"):
            await export_recording(stores, plain.run_id)


def _config(tmp_path: Path) -> Path:
    """A config file for the CLI: the test's SQLite database, memo and the changed memo."""
    path = tmp_path / "mcphost.toml"
    variant = json.dumps(str(REPO / "tests" / "plugins" / "memo_variant.py"))
    path.write_text(
        f"""
[host]
database_url = "sqlite+aiosqlite:///{(tmp_path / "host.db").as_posix()}"
data_dir = "{(tmp_path / "data").as_posix()}"
bundled_plugins = false

[[plugins]]
command = ["python", "-m", "mcphost_runners.memo"]
name = "memo"

[[plugins]]
command = ["python", {variant}]
name = "variant"

[[agents]]
id = "memo"
runner = "{MEMO}"
match = {{ conversation_id = "rec" }}
state = {{ scopes = ["conversation"], write = true }}
record = true

[[agents]]
id = "plain"
runner = "{MEMO}"
match = {{ conversation_id = "plain" }}
"""
    )
    return path


def test_the_cli_exports_replays_and_runs_a_suite_with_junit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    cfg = ["--config", str(config)]
    assert main(["run", "I like green tea", "--conversation", "rec", *cfg]) == 0
    capsys.readouterr()
    assert main(["runs", "--json", *cfg]) == 0
    runs = json.loads(capsys.readouterr().out.splitlines()[0])["items"]
    recorded = runs[0]["run_id"]

    assert main(["replay", recorded, "--json", *cfg]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["run_id"] == recorded
    assert report["diverged"] is False
    assert report["differences"] == []
    assert set(report) >= {"run_id", "replay_run_id", "diverged", "differences"}

    suite = tmp_path / "suite"
    suite.mkdir()
    assert main(["record", "export", recorded, "-o", str(suite / "tea.json"), *cfg]) == 0
    assert read_document(suite / "tea.json").run_id == recorded
    capsys.readouterr()

    junit = tmp_path / "junit.xml"
    assert main(["replay", "--suite", str(suite), "--junit", str(junit), *cfg]) == 0
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("1", "0", "0")
    assert [c.get("name") for c in root.iter("testcase")] == ["tea"]

    (suite / "broken.json").write_text('{"format": "mcphost.recording/1", "run_id": 3}')
    assert main(["replay", "--suite", str(suite), "--junit", str(junit), "--runner", VARIANT, *cfg]) == 2
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "1", "1")
    failure = root.find("testcase[@name='tea']/failure")
    assert failure is not None
    assert "history_search" in (failure.text or "")
    error = root.find("testcase[@name='broken']/error")
    assert error is not None
    assert "not a valid recording" in (error.get("message") or "")
    out = capsys.readouterr()
    assert "Traceback" not in out.err


def test_replay_refuses_with_exit_2_and_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    cfg = ["--config", str(config)]
    assert main(["run", "hello", "--conversation", "plain", *cfg]) == 0
    assert main(["runs", "--json", *cfg]) == 0
    plain = json.loads(capsys.readouterr().out.splitlines()[-1])["items"][0]["run_id"]

    cases = {
        "run_unknown": "does not exist",
        plain: "was not recorded",
    }
    for run_id, why in cases.items():
        assert main(["replay", run_id, *cfg]) == 2
        err = capsys.readouterr().err
        assert why in err
        assert "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
    assert main(["record", "export", plain, *cfg]) == 2
    assert "was not recorded" in capsys.readouterr().err
    assert main(["replay", *cfg]) == 2
    assert "RUN_ID or --suite" in capsys.readouterr().err

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json").write_text("not json")
    assert main(["replay", "--suite", str(bad), "--json", *cfg]) == 2
    document = json.loads(capsys.readouterr().out)
    assert "not a JSON document" in document["recordings"][0]["error"]


def test_a_replay_on_an_unknown_runner_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    cfg = ["--config", str(config)]
    assert main(["run", "hello", "--conversation", "rec", *cfg]) == 0
    assert main(["runs", "--json", *cfg]) == 0
    recorded = json.loads(capsys.readouterr().out.splitlines()[-1])["items"][0]["run_id"]
    assert main(["replay", recorded, "--runner", "plugin:test/nothing/default", *cfg]) == 2
    err = capsys.readouterr().err
    assert "plugin:test/nothing/default" in err
    assert "Traceback" not in err
    assert main(["replay", recorded, "--runner", "no runner at all", *cfg]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_document_with_a_bad_context_is_refused_worded(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    document = RecordingDocument(
        run_id="run_x",
        agent_id="memo",
        runner_id=MEMO,
        status="completed",
        envelope={"event_type": "message.received"},
        context={"run_id": "run_x"},
        agent={"id": "memo", "runner": MEMO},
        calls=[],
        results=[],
    )
    path.write_text(json.dumps(document.model_dump(mode="json")))
    with pytest.raises(Exception, match="context is not valid"):
        read_document(path)
