"""`mcphost explain`, run as a user does: bundled runners' manifests in process, a plugin's from the
started plugin; text for people, one JSON document with `--json`; bad input refused with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from mcphost.cli import EXIT_FAILED, EXIT_USAGE
from tests.examples.clikit import mcphost
from tests.mcphost.hostkit import MISBEHAVE

CONFIG = f"""
[host]
data_dir = "data"

[[plugins]]
name = "misbehave"
command = {json.dumps(MISBEHAVE)}

[[agents]]
id = "support"
runner = "plugin:mcphost/memo/default"
match = {{ bot_id = "support" }}
state = {{ scopes = ["conversation"], write = false }}

[[agents]]
id = "tester"
runner = "plugin:test/misbehave/default"
match = {{ bot_id = "tester" }}

[[agents]]
id = "careful"
runner = "plugin:mcphost/memo/default"
match = {{ bot_id = "careful" }}
approvals = {{ "state_*" = "ask" }}
"""


def write(tmp_path: Path, bot: str, **extra: object) -> Path:
    (tmp_path / "mcphost.toml").write_text(CONFIG, encoding="utf-8")
    event = {
        "event_type": "message.received",
        "conversation": {"conversation_id": "c1", "bot_id": bot},
        "input": {"text": "hi"},
        **extra,
    }
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event), encoding="utf-8")
    return path


async def test_json_is_one_document_naming_each_layer_and_the_allowed_path(tmp_path: Path) -> None:
    event = write(tmp_path, "support")
    code, out, err = await mcphost(
        "explain", "--event", str(event), "--json", "--tool", "state_get", "--tool", "state_set",
        "--tool", "events_page", "--state-scope", "actor", "--resource", "mcphost://run/context",
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    [line] = out.splitlines()
    answer = json.loads(line)
    assert (answer["agent"], answer["runner"]) == ("support", "plugin:mcphost/memo/default")
    assert {v["agent"]: v["binds"] for v in answer["binding"]["agents"]} == {
        "support": True,
        "tester": False,
        "careful": False,
    }
    checks = {c["target"]: (c["allowed"], c["layer"]) for c in answer["checks"]}
    assert checks == {
        "tool:state_get": (True, None),
        "tool:state_set": (False, "agent"),
        "tool:events_page": (False, "manifest"),
        "state:actor:read": (False, "agent"),
        "state:actor:write": (False, "agent"),
        "resource:mcphost://run/context": (True, None),
    }
    assert not (tmp_path / "data").exists()  # a bundled runner: nothing started, nothing opened


async def test_text_output_reads_top_to_bottom_with_the_fix(tmp_path: Path) -> None:
    event = write(tmp_path, "support")
    code, out, err = await mcphost("explain", "--event", str(event), "--tool", "state_set", cwd=tmp_path)
    assert code == 0, err
    assert out.startswith("Agent 'support' (runner plugin:mcphost/memo/default) takes this event:")
    assert "  not 'tester': match.bot_id = 'tester', and the event's bot_id is 'support'" in out
    assert "tool:state_set" in out
    assert "removed by the agent layer: state.write is false for agent 'support'" in out
    assert "to allow it, set state.write = true in the [[agents]] entry of 'support'" in out


async def test_a_tool_marked_ask_shows_approval_in_text_and_json(tmp_path: Path) -> None:
    event = write(tmp_path, "careful")
    code, out, err = await mcphost(
        "explain", "--event", str(event), "--tool", "state_set", "--tool", "history_page", cwd=tmp_path
    )
    assert code == 0, err
    assert (
        "  tool:state_set                   approval: each call waits for a person's decision: "
        "[agents.approvals] 'state_*' = \"ask\"\n"
    ) in out
    assert "  tool:history_page                allowed\n" in out
    code, out, err = await mcphost(
        "explain", "--event", str(event), "--json", "--tool", "state_set", cwd=tmp_path
    )
    assert code == 0, err
    [check] = json.loads(out)["checks"]
    assert (check["allowed"], check["approval"], check["layer"]) == (True, True, None)


async def test_an_event_no_agent_takes_exits_1_after_saying_why(tmp_path: Path) -> None:
    event = write(tmp_path, "nobody")
    code, out, err = await mcphost("explain", "--event", str(event), "--tool", "state_get", cwd=tmp_path)
    assert code == EXIT_FAILED, (out, err)
    assert out.startswith("No agent takes this event: No agent is bound to 'message.received'")
    assert "Traceback" not in err
    code, out, err = await mcphost("explain", "--event", str(event), "--json", cwd=tmp_path)
    assert code == EXIT_FAILED, (out, err)
    assert json.loads(out)["agent"] is None


async def test_a_plugin_runner_is_explained_from_its_started_plugin(tmp_path: Path) -> None:
    event = write(tmp_path, "tester", actor={"actor_id": "u1"})
    code, out, err = await mcphost(
        "explain", "--event", str(event), "--json", "--tool", "artifacts_create", "--tool", "history_page",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert code == 0, err
    answer = json.loads(out)
    assert answer["runner"] == "plugin:test/misbehave/default"
    assert [(c["allowed"], c["layer"]) for c in answer["checks"]] == [(True, None), (False, "manifest")]


async def test_bad_input_exits_2_with_the_reason(tmp_path: Path) -> None:
    event = write(tmp_path, "support")
    code, _, err = await mcphost("explain", "--event", str(tmp_path / "none.json"), cwd=tmp_path)
    assert (code, "cannot read the event file" in err) == (EXIT_USAGE, True)
    code, _, err = await mcphost("explain", "--event", str(event), "--tool", "nope", cwd=tmp_path)
    assert code != 0
    assert "there is no tool 'nope'" in err
    code, _, err = await mcphost("explain", "--event", str(event), "--state-scope", "planet", cwd=tmp_path)
    assert code == EXIT_USAGE
    assert "state_scopes" in err
    event.write_text('{"event_type": "message.received", "data": {"x": NaN}}', encoding="utf-8")
    code, _, err = await mcphost("explain", "--event", str(event), cwd=tmp_path)
    assert code == EXIT_USAGE
    assert "finite" in err or "NaN" in err, err
    assert "Traceback" not in err
