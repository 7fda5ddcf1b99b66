"""Projection on a real host (SQLite file and PostgreSQL): an agent's secrets reach only its own runs
(`runner/run`'s `projection`, never the plugin process's environment), and nowhere else — no database
row, log line, recording export or context; its skill folders are listed and read as `skill://`
resources by a real MCP client on the per-run server, only when granted, with traversal refused; its
local workspace is the projected working folder."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from mcphost.app import Host, open_host
from mcphost.config import PluginConfig, SecretConfig, Settings, SkillConfig
from mcphost.models import RunStatus
from mcphost.recording import export_recording
from mcphost.stores.tables import Base
from tests.e2e.httpkit import served
from tests.mcphost.hostkit import REPO, agent, host_settings, message, run_event

PROJECTION = [sys.executable, str(REPO / "tests" / "plugins" / "projection_probe.py")]
PROJECTION_RUNNER = "plugin:test/projection/default"
SECRET_ENV = "MCPHOST_TEST_PROJECTED_SECRET"
SKILL_MD = (
    "---\nname: review\ndescription: Review a change for bugs.\n---\n# Review\nRead scripts/check.sh.\n"
)
SCRIPT = "#!/bin/sh\necho checked\n"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def skill_folder(root: Path) -> Path:
    folder = root / "skills" / "review"
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL_MD)
    script = folder / "scripts" / "check.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    (root / "outside.txt").write_text("not a skill file")
    return folder


def projection_settings(database_url: str, tmp_path: Path, secret_file: Path) -> Settings:
    base = host_settings(database_url, tmp_path / "data")
    workspace = tmp_path / "repo-a"
    workspace.mkdir()
    return base.model_copy(
        update={
            "plugins": [*base.plugins, PluginConfig(command=PROJECTION, name="projection")],
            "agents": [
                *base.agents,
                agent(
                    "with",
                    PROJECTION_RUNNER,
                    secrets=["gh_token", "file_token"],
                    workspace="repo-a",
                    resources={"skills": ["review", "plain"]},
                    record=True,
                    timeout_s=60,
                ),
                agent(
                    "without", PROJECTION_RUNNER, resources={"skills": ["plain"]}, record=True, timeout_s=60
                ),
            ],
            "secrets": {
                "gh_token": SecretConfig(env=SECRET_ENV),
                "file_token": SecretConfig(file=secret_file, variable="FILE_TOKEN"),
            },
            "skills": {
                "review": SkillConfig(description="Review a change.", path=skill_folder(tmp_path)),
                "plain": SkillConfig(description="A skill without a folder."),
            },
            "workspaces": {"repo-a": workspace},
        }
    )


@pytest.fixture
async def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "s3cr3t-" + secrets.token_hex(16)
    monkeypatch.setenv(SECRET_ENV, value)
    return value


@pytest.fixture
async def host(database_url: str, tmp_path: Path, secret: str) -> AsyncGenerator[Host]:
    secret_file = tmp_path / "file-token"
    secret_file.write_text(secret[::-1] + "\n")
    async with open_host(projection_settings(database_url, tmp_path, secret_file)) as opened:
        yield opened


async def _report(host: Host, bot: str, asked: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    run = await run_event(host, message(json.dumps(asked), bot=bot, conversation=f"c-{bot}"))
    assert run.status is RunStatus.COMPLETED, run.error
    stored = [r async for r in host.orchestrator.results(run.run_id)]
    text = next(r.payload["data"]["message"]["content"] for r in stored if r.type == "message.completed")
    return run.run_id, json.loads(text)


async def every_row(engine: AsyncEngine) -> str:
    """Every row of every table of the store, as text."""
    dumped: list[str] = []
    async with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            rows = (await conn.execute(sa.select(table))).all()
            dumped += [repr(tuple(row)) for row in rows]
    return "\n".join(dumped)


async def test_a_secret_reaches_only_the_runs_of_agents_naming_it_and_is_stored_nowhere(
    host: Host, secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    asked = {"vars": ["GH_TOKEN", "FILE_TOKEN", SECRET_ENV]}
    async with served(host):
        with_id, granted = await _report(host, "with", asked)
        without_id, other = await _report(host, "without", asked)

    assert granted["env"] == {"GH_TOKEN": _sha(secret), "FILE_TOKEN": _sha(secret[::-1]), SECRET_ENV: None}
    assert granted["process_env"] == {"GH_TOKEN": False, "FILE_TOKEN": False, SECRET_ENV: False}
    assert other["env"] == {"GH_TOKEN": None, "FILE_TOKEN": None, SECRET_ENV: None}

    for value in (secret, secret[::-1]):
        assert value not in await every_row(host.stores.db.engine)
        assert value not in caplog.text
        for run_id in (with_id, without_id):
            assert value not in (await export_recording(host.stores, run_id)).model_dump_json()
            context = await host.orchestrator.context(run_id)
            assert context is None or value not in context.model_dump_json()


async def test_skill_folders_are_served_as_skill_resources_to_the_runs_granted_them(
    host: Host, tmp_path: Path
) -> None:
    reads = [
        "skill://review/SKILL.md",
        "skill://review/scripts/check.sh",
        "skill://review/../outside.txt",
        "skill://review/../../etc/passwd",
        "skill://review/%2e%2e/outside.txt",
        "skill://review/scripts/../SKILL.md",
        "skill://review/SKILL.md\x00.txt",
        "skill://review/" + "a/" * 300 + "x",
        "skill://review/missing.md",
        "skill://plain/SKILL.md",
        "skill://other/SKILL.md",
    ]
    async with served(host):
        _, granted = await _report(host, "with", {"reads": reads})
        _, other = await _report(host, "without", {"reads": reads[:2]})

    assert [u for u in granted["resources"] if u.startswith("skill://")] == [
        "skill://review/SKILL.md",
        "skill://review/scripts/check.sh",
    ]
    got = granted["reads"]
    assert got["skill://review/SKILL.md"] == {"text_sha256": _sha(SKILL_MD)}
    assert got["skill://review/scripts/check.sh"] == {"text_sha256": _sha(SCRIPT)}
    for attack in reads[2:8]:
        assert got[attack] == {"error": "invalid_argument"} or got[attack] == {"error": "not_found"}, attack
        assert "text_sha256" not in got[attack]
    assert got["skill://review/missing.md"] == {"error": "not_found"}
    assert got["skill://plain/SKILL.md"] == {"error": "unauthorized"}  # granted, but no folder
    assert got["skill://other/SKILL.md"] == {"error": "unauthorized"}
    assert not [u for u in other["resources"] if u.startswith("skill://")]
    assert other["reads"] == {
        "skill://review/SKILL.md": {"error": "unauthorized"},
        "skill://review/scripts/check.sh": {"error": "unauthorized"},
    }


async def test_a_local_run_works_in_its_workspace_with_its_skill_files(host: Host, tmp_path: Path) -> None:
    async with served(host):
        _, report = await _report(host, "with", {"harness": str(tmp_path / "harness-data")})
    assert report["workspace"] == str((tmp_path / "repo-a").resolve())
    assert report["harness_cwd"] == report["workspace"]
    assert report["skills"] == {"review": ["SKILL.md", "scripts/check.sh"]}
    assert report["harness_files"] == {
        "review/SKILL.md": {"sha256": _sha(SKILL_MD), "executable": False},
        "review/scripts/check.sh": {"sha256": _sha(SCRIPT), "executable": True},
        "plain/SKILL.md": report["harness_files"]["plain/SKILL.md"],  # generated from its description
    }
    assert (
        tmp_path / "repo-a" / ".claude" / "skills" / "review" / "scripts" / "check.sh"
    ).read_text() == SCRIPT
