"""Reading what a run is projected (`mcphost/projection.py`): skill folders read only from inside
themselves and bounded, secrets from the host's environment or a file with precise errors that never
show a value, workspaces mapped per runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcphost.config import RuntimeConfig, SecretConfig, Settings, SkillConfig
from mcphost.errors import ConfigError, NotFoundError
from mcphost.models import AgentConfig
from mcphost.projection import ProjectionError, Projector, read_secret, read_skill, read_skill_file
from mcphost.protocol import MAX_SKILL_BYTES, MAX_SKILL_FILES, check_skill_path


def folder_with(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "skill"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\ndescription: d\n---\n")
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_a_link_out_of_the_skill_folder_is_refused_and_stops_the_host(tmp_path: Path) -> None:
    folder = folder_with(tmp_path)
    (tmp_path / "secret.txt").write_text("outside")
    (folder / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ProjectionError, match=r"'leak\.txt' is a link out of the skill folder"):
        read_skill("s", folder)
    settings = Settings(skills={"s": SkillConfig(path=folder, description="d")})
    with pytest.raises(ConfigError, match=r"skills\.s\.path: Skill 's': 'leak\.txt' is a link out"):
        Projector(settings).check()


def test_a_link_inside_the_folder_is_read_and_a_linked_folder_is_not_followed(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, **{"a.txt": "A"})
    (folder / "b.txt").symlink_to(folder / "a.txt")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.txt").write_text("X")
    (folder / "sub").symlink_to(tmp_path / "elsewhere")
    assert [f.path for f in read_skill("s", folder).files] == ["SKILL.md", "a.txt", "b.txt"]
    assert read_skill_file("s", folder, "b.txt") == b"A"
    with pytest.raises(NotFoundError):
        read_skill_file("s", folder, "sub/x.txt")


def test_skill_folders_are_bounded(tmp_path: Path) -> None:
    many = folder_with(tmp_path)
    for index in range(MAX_SKILL_FILES):
        (many / f"f{index}.txt").write_text("x")
    with pytest.raises(ProjectionError, match=f"more than {MAX_SKILL_FILES} files"):
        read_skill("s", many)
    big = tmp_path / "big"
    big.mkdir()
    (big / "SKILL.md").write_text("x" * (MAX_SKILL_BYTES + 1))
    with pytest.raises(ProjectionError, match=f"more than {MAX_SKILL_BYTES} bytes"):
        read_skill("s", big)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ProjectionError, match=r"has no SKILL\.md"):
        read_skill("s", empty)


@pytest.mark.parametrize(
    "path", ["../x", "a/../b", "./a", "/etc/passwd", "a\\b", "a\x00b", "", "a/" * 200 + "b", "a//b", "a\nb"]
)
def test_unsafe_skill_paths_are_refused_before_the_file_system(path: str) -> None:
    with pytest.raises(ValueError, match="skill file path"):
        check_skill_path(path)


def test_secret_errors_name_the_source_never_the_value(tmp_path: Path) -> None:
    with pytest.raises(ProjectionError, match="environment variable 'GH' is not set"):
        read_secret("gh", SecretConfig(env="GH"), {})
    assert read_secret("gh", SecretConfig(env="GH"), {"GH": "v1"}) == "v1"
    with pytest.raises(ProjectionError, match="cannot be read"):
        read_secret("gh", SecretConfig(file=tmp_path / "missing"), {})
    nul = tmp_path / "nul"
    nul.write_bytes(b"top\x00hidden-value")
    with pytest.raises(ProjectionError) as info:
        read_secret("gh", SecretConfig(file=nul), {})
    assert "NUL" in info.value.message
    assert "hidden-value" not in info.value.message
    ok = tmp_path / "ok"
    ok.write_text("value\n")
    assert read_secret("gh", SecretConfig(file=ok), {}) == "value"


def test_a_remote_workspace_is_the_claiming_runtimes_folder(tmp_path: Path) -> None:
    agent = AgentConfig.model_validate(
        {"id": "a", "runner": "plugin:x/y/z", "workspace": "repo-a", "runtime": {"labels": {"pool": "a"}}}
    )
    settings = Settings(runtimes={"r1": RuntimeConfig(workspaces={"repo-a": "/srv/a"})}, agents=[agent])
    projector = Projector(settings)
    projected = projector.remote(agent, "r1")
    assert projected is not None
    assert projected.workspace == "/srv/a"
    assert projector.workspaces_of("r1") == frozenset({"repo-a"})
    assert projector.workspaces_of("r2") == frozenset()
    with pytest.raises(ProjectionError, match=r"not mapped for runtime 'r2'; add it to \[runtimes\.r2\]"):
        projector.remote(agent, "r2")


def test_an_agent_projects_only_what_it_is_given_and_projects_says_so_first(tmp_path: Path) -> None:
    # `projects` is asked before a run hops off the loop to read files: it must be True whenever `local`
    # would project something, and False only when `local` is None.
    (tmp_path / "ws").mkdir()
    skill = folder_with(tmp_path)
    settings = Settings(
        workspaces={"ws": tmp_path / "ws"},
        secrets={"gh": SecretConfig(env="GH")},
        skills={"with-folder": SkillConfig(path=skill), "without": SkillConfig(description="d")},
    )
    projector = Projector(settings, environ={"GH": "v1"})
    cases = {
        "nothing": {},
        "a skill without a folder": {"resources": {"skills": ["without"]}},
        "a workspace": {"workspace": "ws"},
        "a secret": {"secrets": ["gh"]},
        "a skill with a folder": {"resources": {"skills": ["with-folder"]}},
    }
    seen = {}
    for name, extra in cases.items():
        agent = AgentConfig.model_validate({"id": "a", "runner": "plugin:x/y/z", **extra})
        seen[name] = (projector.projects(agent), projector.local(agent) is not None)
    assert seen == {
        "nothing": (False, False),
        "a skill without a folder": (False, False),
        "a workspace": (True, True),
        "a secret": (True, True),
        "a skill with a folder": (True, True),
    }
