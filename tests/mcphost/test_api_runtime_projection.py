"""The claim answer's projection on a real host (both stores): a runtime gets the agent's secret, its
workspace folder as the host maps it for that runtime and the skill files, in the answer only (no row
holds the secret); a runtime without the workspace claims nothing; a run whose secret cannot be read
fails with the reason instead of reaching a runtime."""

from __future__ import annotations

import base64
from collections.abc import AsyncGenerator
from pathlib import Path

import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.config import RuntimeConfig, SecretConfig, SkillConfig
from mcphost.models import AgentConfig
from tests.e2e.httpkit import asgi_client
from tests.mcphost.hostkit import ECHO_RUNNER
from tests.mcphost.test_api_runtime import ADMIN_HEADERS, claim, runtime, settings_for, submit, wait_status
from tests.mcphost.test_projection_runs import SKILL_MD, every_row, skill_folder

SECRET_ENV = "MCPHOST_TEST_CLAIM_SECRET"
SECRET = "claim-s3cr3t-9f8e7d6c5b4a"


def remote(agent_id: str, **kw: object) -> AgentConfig:
    return AgentConfig.model_validate(
        {
            "id": agent_id,
            "runner": ECHO_RUNNER,
            "match": {"bot_id": agent_id},
            "runtime": {"labels": {"pool": "a"}},
        }
        | kw
    )


@pytest.fixture
async def host(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncGenerator[Host]:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    base = settings_for(database_url, tmp_path / "data")
    settings = base.model_copy(
        update={
            "agents": [
                remote("repo", secrets=["gh_token"], workspace="repo-a", resources={"skills": ["review"]}),
                remote("unset", secrets=["missing"], timeout_s=20),
            ],
            "secrets": {
                "gh_token": SecretConfig(env=SECRET_ENV),
                "missing": SecretConfig(env="MCPHOST_TEST_UNSET"),
            },
            "skills": {"review": SkillConfig(path=skill_folder(tmp_path), description="Review.")},
            "runtimes": {"a1": RuntimeConfig(workspaces={"repo-a": "/srv/repos/a"})},
        }
    )
    async with open_host(settings) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient]:
    async with asgi_client(host) as opened:
        yield opened


async def test_the_claim_answer_alone_carries_the_secret_workspace_and_skill_files(
    host: Host, client: httpx2.AsyncClient
) -> None:
    unmapped = await runtime(host, client, "a2", {"pool": "a"})
    mapped = await runtime(host, client, "a1", {"pool": "a"})
    run_id = await submit(client, "repo")
    assert (await claim(client, unmapped, wait_s=0.5))["run"] is None, "a2 has no workspace repo-a"
    assert SECRET not in await every_row(host.stores.db.engine)

    claimed = (await claim(client, mapped))["run"]
    assert claimed["run_id"] == run_id
    projection = claimed["projection"]
    assert projection["env"] == {"GH_TOKEN": SECRET}
    assert projection["workspace"] == "/srv/repos/a"
    assert projection["workspace_name"] == "repo-a"
    [skill] = projection["skills"]
    assert skill["skill_id"] == "review"
    assert [f["path"] for f in skill["files"]] == ["SKILL.md", "scripts/check.sh"]
    assert base64.b64decode(skill["files"][0]["data"]).decode() == SKILL_MD
    assert SECRET not in str(claimed["context"])
    assert SECRET not in await every_row(host.stores.db.engine)


async def test_a_run_whose_secret_cannot_be_read_fails_naming_it(
    host: Host, client: httpx2.AsyncClient
) -> None:
    token = await runtime(host, client, "a1", {"pool": "a"})
    run_id = await submit(client, "unset")
    assert (await claim(client, token, wait_s=1.0))["run"] is None
    run = await wait_status(client, run_id)
    assert run["status"] == "failed"
    assert "MCPHOST_TEST_UNSET" in run["error"]["message"]
    assert "is not set" in run["error"]["message"]
    shown = await client.get(f"/v1/runs/{run_id}", headers=ADMIN_HEADERS)
    assert shown.status_code == 200
