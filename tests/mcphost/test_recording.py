"""A recording is untrusted input: `mcphost replay` refuses one that names a program, a path, MCP access
or a runner the config does not run, or that is too large or too deep, with exit 2 and one line per
file, never a traceback, and starts nothing it names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from mcphost.cli import main
from mcphost.config import load_settings
from mcphost.protocol import AgentRunContext, JSONObject, ModelEndpoints
from mcphost.recording import MAX_DOCUMENT_BYTES, MAX_DOCUMENT_DEPTH, RecordingDocument, ReplayBook
from mcphost.replay import _replay_agent  # pyright: ignore[reportPrivateUsage] -- how replay picks the agent
from tests.mcphost.hostkit import REPO
from tests.mcphost.recordkit import (
    CLAUDE,
    CONFIGURED_RUNNERS,
    MEMO,
    marker_program,
    recording,
    write,
    write_config,
)


def _suite(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, Any, str]:
    """`mcphost replay --suite tmp_path/suite --json --junit …`: exit code, JSON document, stderr."""
    suite, junit = str(tmp_path / "suite"), str(tmp_path / "junit.xml")
    code = main(["replay", "--suite", suite, "--json", "--junit", junit, "--config", str(config), *extra])
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def _errors(document: Any) -> dict[str, str]:
    return {r["file"]: r["error"] for r in document["recordings"] if "error" in r}


@pytest.mark.parametrize("route", ["context.config", "agent.config"])
def test_a_recording_naming_a_cli_path_is_refused_and_the_program_never_runs(
    route: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, f"sqlite+aiosqlite:///{(tmp_path / 'host.db').as_posix()}")
    program, marker = marker_program(tmp_path)
    runner_config: JSONObject = {"cli_path": str(program), "data_dir": str(tmp_path / "harness")}
    extra: list[str] = []
    if route == "context.config":  # the agent is configured here; the recorded context names the CLI
        document = recording(agent_id="coder", runner_id=CLAUDE)
        document["context"]["config"] = runner_config
    else:  # the agent is not configured here; its recorded entry names the CLI, used on another runner
        document = recording(
            agent_id="ghost", runner_id=MEMO, agent={"id": "ghost", "runner": MEMO, "config": runner_config}
        )
        extra = ["--runner", CLAUDE]
    (tmp_path / "suite").mkdir()
    write(tmp_path / "suite" / "crafted.json", document)

    code, report, err = _suite(tmp_path, config, capsys, *extra)

    assert not marker.exists(), marker.read_text()
    assert code == 2
    error = _errors(report)["crafted.json"]
    assert f"{route} holds a runner config ('cli_path', 'data_dir')" in error
    assert "config of the agent in the local config" in error
    assert "Traceback" not in err
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert (root.get("tests"), root.get("errors")) == ("1", "1")


def test_a_recording_on_a_runner_the_config_does_not_run_names_the_configured_runners(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, f"sqlite+aiosqlite:///{(tmp_path / 'host.db').as_posix()}")
    unknown = "plugin:evil/nothing/default"
    (tmp_path / "suite").mkdir()
    write(tmp_path / "suite" / "ghost.json", recording(agent_id="ghost", runner_id=unknown))

    code, report, err = _suite(tmp_path, config, capsys)

    assert code == 2
    error = _errors(report)["ghost.json"]
    assert f"runner {unknown!r} (named by the recording) is not one this config runs" in error
    assert f"configured runners: {', '.join(CONFIGURED_RUNNERS)}." in error
    assert "--runner RUNNER_ID" in error
    assert "Traceback" not in err


def test_an_oversized_or_deeply_nested_recording_is_refused_before_it_is_parsed_or_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, f"sqlite+aiosqlite:///{(tmp_path / 'host.db').as_posix()}")
    suite = tmp_path / "suite"
    suite.mkdir()
    with (suite / "big.json").open("wb") as big:  # sparse: no disk space taken
        big.truncate(MAX_DOCUMENT_BYTES + 1)
    deep = recording()
    # Just past the bound, in a part only compared: the old reader parsed and replayed it.
    deep["results"] = [{"seq": 1, "type": "run.completed", "payload": {"data": _nested(MAX_DOCUMENT_DEPTH)}}]
    write(suite / "deep.json", deep)
    (suite / "deeper.json").write_text(
        json.dumps(recording()).replace('"calls": []', '"calls": ' + "[" * 100_000 + "]" * 100_000)
    )

    code, report, err = _suite(tmp_path, config, capsys)

    assert code == 2
    errors = _errors(report)
    assert errors["big.json"] == (
        f"{suite / 'big.json'}: {MAX_DOCUMENT_BYTES + 1} bytes; a recording holds at most "
        f"{MAX_DOCUMENT_BYTES} bytes (256 MiB)."
    )
    too_deep = f"arrays and objects nest more than {MAX_DOCUMENT_DEPTH} deep; a recording nests at most"
    assert too_deep in errors["deep.json"]
    assert too_deep in errors["deeper.json"]
    assert "Traceback" not in err
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert (root.get("tests"), root.get("errors")) == ("3", "3")


def _nested(depth: int) -> Any:
    """A value that, inside `results[0].payload.data`, makes the document `depth + 1` deep."""
    value: Any = 1
    for _ in range(depth - 3):  # the document, results, the result and payload are the first 4
        value = [value]
    return value


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_recording_that_never_ends_is_refused_without_reading_it(tmp_path: Path) -> None:
    """A FIFO (waits for a writer forever) and a link to /dev/zero (endless, size 0): refused by file
    type, in a child process whose memory is capped, so the old reader failed instead of exhausting
    the machine."""
    config = write_config(tmp_path, f"sqlite+aiosqlite:///{(tmp_path / 'host.db').as_posix()}")
    suite = tmp_path / "suite"
    suite.mkdir()
    os.mkfifo(suite / "fifo.json")
    (suite / "zero.json").symlink_to("/dev/zero")
    script = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_DATA, (1 << 31, 1 << 31))
        from mcphost.cli import main
        sys.exit(main(["replay", "--suite", {str(suite)!r}, "--json", "--config", {str(config)!r}]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = _errors(json.loads(done.stdout))
    for name in ("fifo.json", "zero.json"):
        assert errors[name] == (
            f"{suite / name}: not a regular file (a folder, FIFO, socket or device); a recording is a "
            "file written by `mcphost record export RUN_ID -o FILE`."
        )


def test_a_suite_with_one_crafted_recording_reports_it_and_still_replays_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, f"sqlite+aiosqlite:///{(tmp_path / 'host.db').as_posix()}")
    program, marker = marker_program(tmp_path)
    suite = tmp_path / "suite"
    suite.mkdir()
    crafted = recording(agent_id="coder", runner_id=CLAUDE)
    crafted["context"]["config"] = {"cli_path": str(program), "data_dir": str(tmp_path / "harness")}
    write(suite / "a-crafted.json", crafted)
    write(suite / "b-tea.json", recording())

    code, report, err = _suite(tmp_path, config, capsys)

    assert not marker.exists(), marker.read_text()
    assert code == 2
    assert list(_errors(report)) == ["a-crafted.json"]
    replayed = report["recordings"][1]
    assert replayed["file"] == "b-tea.json"
    assert replayed["runner_id"] == "plugin:mcphost/memo/default"
    assert replayed["replay_run_id"].startswith("run_")
    assert "Traceback" not in err
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert (root.get("tests"), root.get("errors")) == ("2", "1")
    error = root.find("testcase[@name='a-crafted']/error")
    assert error is not None
    assert "context.config holds a runner config" in (error.get("message") or "")
    assert root.find("testcase[@name='b-tea']/error") is None


def test_the_replay_context_takes_config_access_and_trace_from_the_replay_and_no_harness_session() -> None:
    document = recording(agent_id="coder", runner_id=CLAUDE)
    document["context"]["state"] = {
        "conversation": {
            "external.session_id": "abc",
            "external.working_directory": "/home/someone/.mcphost/harness/runs/run_1",
            "topic": "tea",
        }
    }
    document["context"]["runtime"]["traceparent"] = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    book = ReplayBook(RecordingDocument.model_validate(document))
    fresh = AgentRunContext.model_validate(
        {
            **document["context"],
            "run_id": "run_replay",
            "config": {"cli_path": "/usr/local/bin/claude"},
            "context": {"mcp": {"url": "http://127.0.0.1:1/mcp/run_replay"}},
            "state": {},
            "runtime": {"host_version": "1", "trace_id": "f" * 32, "deadline_at": 5.0},
        }
    )

    ctx = book.context(fresh)
    # A recorded run's model endpoints are another host's (or a crafted file's): the replay's own or none.
    crafted = {"anthropic": "http://attacker.example/a", "openai": "http://attacker.example/o"}
    document["context"]["context"] = {"models": crafted}
    assert ReplayBook(RecordingDocument.model_validate(document)).context(fresh).context.models is None
    replay_models = {"anthropic": "http://127.0.0.1:1/runs/run_replay/models/anthropic", "openai": "http://o"}
    fresh_with_models = fresh.model_copy(
        update={
            "context": fresh.context.model_copy(
                update={"models": ModelEndpoints.model_validate(replay_models)}
            )
        }
    )
    models = ReplayBook(RecordingDocument.model_validate(document)).context(fresh_with_models).context.models
    assert models is not None
    assert models.anthropic == replay_models["anthropic"]

    assert ctx.run_id == "run_replay"
    assert ctx.config == {"cli_path": "/usr/local/bin/claude"}
    assert ctx.context.mcp == fresh.context.mcp
    assert ctx.state.conversation == {"topic": "tea"}
    assert (ctx.runtime.trace_id, ctx.runtime.traceparent, ctx.runtime.deadline_at) == ("f" * 32, None, 5.0)
    assert ctx.input.text == "I like green tea"  # the recorded data stays


def test_a_recorded_only_agent_runs_under_the_local_deadline_not_the_recorded_one(tmp_path: Path) -> None:
    """A recording cannot hold a replay (a CI job) for the day its `timeout_s` asks for."""
    config = write_config(tmp_path, f"sqlite+aiosqlite:///{(tmp_path / 'host.db').as_posix()}")
    entry: JSONObject = {"id": "ghost", "runner": MEMO, "timeout_s": 24 * 3600}
    document = RecordingDocument.model_validate(recording(agent_id="ghost", agent=entry))
    agent, runner, _ = _replay_agent(document, load_settings(config), None)
    assert (agent.id, runner, agent.timeout_s, agent.config) == ("ghost", MEMO, None, {})
