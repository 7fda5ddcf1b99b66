"""`skill://` resources on a real facts server: a granted skill whose folder broke after the host started
is left out of resources/list with one warning naming it and its folder, however often clients list,
and the run's other skills are still listed."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from mcphost.config import SkillConfig
from mcphost.projection import Projector
from mcphost.protocol import SkillInfo
from mcphost.stores import Stores
from tests.mcphost.facts._helpers import MODERN, connect, serve_facts
from tests.mcphost.hostkit import host_settings

SKILLS_LOGGER = "mcphost.facts._skills"


def _skill(root: Path, name: str) -> Path:
    folder = root / "skills" / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: The {name} skill.\n---\n# {name}\n")
    return folder


async def test_a_skill_folder_broken_after_start_is_warned_about_once_and_the_others_still_listed(
    stores: Stores, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    healthy, broken = _skill(tmp_path, "healthy"), _skill(tmp_path, "broken")
    settings = host_settings("sqlite+aiosqlite:///unused.db", tmp_path / "data").model_copy(
        update={
            "skills": {
                "healthy": SkillConfig(description="Healthy.", path=healthy),
                "broken": SkillConfig(description="Broken.", path=broken),
            }
        }
    )
    projector = Projector(settings)
    projector.check()  # both folders read at start
    shutil.rmtree(broken)
    caplog.set_level(logging.WARNING, logger=SKILLS_LOGGER)
    granted = [SkillInfo(skill_name=name, display_name=name) for name in ("broken", "healthy")]
    async with serve_facts(stores, skills=projector) as served:
        run = await served.start_run()
        ctx = served.contexts[run.run_id]
        served.contexts[run.run_id] = ctx.model_copy(
            update={"resources": ctx.resources.model_copy(update={"skills": granted})}
        )
        async with connect(served, run, mode=MODERN) as client:
            listings = [
                [
                    str(r.uri)
                    for r in (await client.list_resources()).resources
                    if str(r.uri).startswith("skill:")
                ]
                for _ in range(2)
            ]
    assert listings == [["skill://healthy/SKILL.md"]] * 2
    warnings = [r for r in caplog.records if r.name == SKILLS_LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "'broken'" in warnings[0].getMessage()
    assert repr(str(broken)) in warnings[0].getMessage()
