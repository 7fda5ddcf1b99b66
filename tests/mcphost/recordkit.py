"""Test helpers for hostile recordings: a config with memo and the Claude Code harness, a recording
document written by hand, and a program that leaves a marker file when anything starts it.

The config's database is the test's (`database_url`); its plugins are memo and the Claude Code runner
(`python -m mcphost_runners.claude_code`, whose `cli_path` is the executable a crafted recording would point
elsewhere). The local agents are `memo` (memo) and `coder` (Claude Code, with a CLI that does not exist:
a replay of it can only start what the local config names)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from mcphost.models import AgentConfig, AgentEventEnvelope
from mcphost.protocol import JSONObject
from mcphost.recording import RECORDING_FORMAT, RecordingDocument

MEMO = "plugin:mcphost/memo/default"
CLAUDE = "plugin:mcphost/claude-code/default"
CONFIGURED_RUNNERS = (CLAUDE, MEMO)

_EVENT: JSONObject = {
    "event_id": "evt_hostile",
    "event_type": "message.received",
    "event_time": 1_700_000_000.0,
    "source": "api",
    "conversation": {"conversation_id": "rec", "bot_id": "memo"},
    "actor": {"actor_id": "u1"},
    "input": {"text": "I like green tea"},
}
_CONTEXT: JSONObject = {
    "run_id": "run_hostile",
    "trigger": {"type": "message.received", "source": "api", "timestamp": 1_700_000_000.0},
    "event": {
        "event_id": "evt_hostile",
        "event_type": "message.received",
        "event_time": 1_700_000_000.0,
        "source": "api",
    },
    "conversation": {"conversation_id": "rec", "bot_id": "memo"},
    "actor": {"actor_id": "u1"},
    "input": {"text": "I like green tea"},
    "context": {"conversation_id": "rec"},
    "runtime": {"host_version": "0", "trace_id": "t" * 32, "deadline_at": 1_700_000_300.0},
}


def write_config(folder: Path, database_url: str) -> Path:
    """`folder/mcphost.toml`: the test's database, memo and Claude Code, agents `memo` and `coder`."""
    path = folder / "mcphost.toml"
    path.write_text(
        f"""
[host]
database_url = {json.dumps(database_url)}
data_dir = {json.dumps((folder / "data").as_posix())}
bundled_plugins = false

[[plugins]]
command = ["python", "-m", "mcphost_runners.memo"]
name = "memo"

[[plugins]]
command = ["python", "-m", "mcphost_runners.claude_code"]
name = "claude-code"

[[agents]]
id = "memo"
runner = "{MEMO}"
match = {{ conversation_id = "rec" }}
state = {{ scopes = ["conversation"], write = true }}

[[agents]]
id = "coder"
runner = "{CLAUDE}"
match = {{ conversation_id = "code" }}
config = {{ cli_path = {json.dumps((folder / "no-such-cli").as_posix())}, data_dir = {json.dumps((folder / "harness").as_posix())} }}
"""
    )
    return path


def marker_program(folder: Path) -> tuple[Path, Path]:
    """An executable that writes `folder/EXECUTED` when anything starts it, and that marker's path."""
    marker = folder / "EXECUTED"
    program = folder / "evil.sh"
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> "{marker}"\nexit 1\n')
    program.chmod(0o755)
    return program, marker


def recording(
    *, agent_id: str = "memo", runner_id: str = MEMO, agent: JSONObject | None = None
) -> JSONObject:
    """A valid recording of one turn of `agent_id` (in conversation `rec`, or `code` for `coder`, so the
    local agent takes the event), written by hand: no calls, no results."""
    entry = agent if agent is not None else {"id": agent_id, "runner": runner_id}
    conversation = {"conversation_id": "code" if agent_id == "coder" else "rec", "bot_id": "memo"}
    document: JSONObject = {
        "format": RECORDING_FORMAT,
        "run_id": "run_hostile",
        "agent_id": agent_id,
        "runner_id": runner_id,
        "status": "completed",
        "exported_at": 1_700_000_400.0,
        "envelope": copy.deepcopy(_EVENT),
        "context": copy.deepcopy(_CONTEXT),
        "agent": entry,
        "calls": [],
        "results": [],
    }
    document["envelope"]["conversation"] = document["context"]["conversation"] = conversation
    # The hand-written parts stay valid as the models change: they parse here or the kit fails.
    AgentEventEnvelope.model_validate(document["envelope"])
    AgentConfig.model_validate(entry)
    RecordingDocument.model_validate(document)
    return document


def write(path: Path, document: JSONObject) -> Path:
    path.write_text(json.dumps(document))
    return path
