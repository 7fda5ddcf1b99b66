"""What a host projects into one run besides its context (PROTOCOL §9): the secrets its agent names, as
environment variables, its workspace folder, and the files of its granted skills.

Owns the shape of `runner/run`'s `projection` and of a runtime claim's `projection` (§12), and the
bounds on skill files. Does not own reading secrets or skill folders (`mcphost/projection.py`) or writing
them into a harness folder (`mcphost_runners/_harness_files.py`).

Invariants:
- A projection travels only beside the context, never inside it: the context is stored, shown by
  `run_context` and exported with recordings; a projection is built for one delivery and never stored.
- A skill file's `path` is relative, `/`-separated, without `.`/`..` segments, NUL or a backslash, at most
  `MAX_SKILL_PATH` characters: a runner may join it under its skills folder as it is.
"""

from __future__ import annotations

import base64
import re

from pydantic import Field, field_validator

from mcphost.protocol._base import ProtocolModel

MAX_SKILL_FILES = 200
"""Files of one skill folder (`SKILL.md` included)."""
MAX_SKILL_BYTES = 1024 * 1024
"""Bytes of one skill's files together."""
MAX_PROJECTED_SKILL_BYTES = 2 * 1024 * 1024
"""Bytes of the files of every skill one run is granted (a `runner/run` line stays under 4 MiB)."""
MAX_SKILL_PATH = 300
MAX_SKILL_DEPTH = 8
SKILL_FILE = "SKILL.md"
"""The file every skill folder has: its front matter names and describes the skill."""
ENV_VARIABLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,199}$"
"""A projected environment variable's name."""

_SEGMENT = re.compile(r"^[^/\\\x00]{1,255}$")


def check_skill_path(path: str) -> str:
    """`path` when it is a safe relative skill file path (see the module's invariants), else ValueError."""
    if not 1 <= len(path) <= MAX_SKILL_PATH or not path.isprintable():
        raise ValueError(f"a skill file path is 1-{MAX_SKILL_PATH} printable characters")
    parts = path.split("/")
    if len(parts) > MAX_SKILL_DEPTH:
        raise ValueError(f"a skill file path has at most {MAX_SKILL_DEPTH} segments")
    for part in parts:
        if part in (".", "..") or not _SEGMENT.match(part):
            raise ValueError("a skill file path is relative, '/'-separated, without '.', '..', '\\' or NUL")
    return path


class SkillFile(ProtocolModel):
    """One file of a skill folder."""

    path: str
    """Relative to the skill's folder, `/`-separated (`SKILL.md`, `scripts/check.sh`)."""
    data: str
    """The file's bytes, base64."""
    executable: bool = False
    """The file is executable in the skill's folder (a script): written with mode 0700."""

    @field_validator("path")
    @classmethod
    def _path_form(cls, value: str) -> str:
        return check_skill_path(value)

    def content(self) -> bytes:
        return base64.b64decode(self.data, validate=True)


class ProjectedSkill(ProtocolModel):
    """A granted skill with a folder (`[skills.<id>] path`): its files, `SKILL.md` first."""

    skill_id: str
    files: list[SkillFile] = Field(max_length=MAX_SKILL_FILES)


class RunProjection(ProtocolModel):
    """What a runner puts around the run it executes (never part of `AgentRunContext`)."""

    env: dict[str, str] = Field(default_factory=dict[str, str])
    """Environment variables of the agent's secrets (`[secrets.<name>]`, by `variable`): a harness runner
    sets them in the environment of the CLI it starts for the run; never log them."""
    workspace: str | None = None
    """The absolute folder the run works in (the agent's `workspace`, as the host or runtime maps it):
    a harness runner's working folder (the CLI's cwd and project folder)."""
    workspace_name: str | None = None
    """The agent's `workspace` name, for messages."""
    skills: list[ProjectedSkill] = Field(default_factory=list[ProjectedSkill])
    """The files of the run's granted skills that have a folder; write each under the harness's skills
    folder (`.claude/skills/<skill_id>/`, Codex `.agents/skills/<skill_id>/`)."""

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not re.match(ENV_VARIABLE_PATTERN, name) or "\x00" in text:
                raise ValueError("an environment variable is a name such as GH_TOKEN and a value without NUL")
        return value

    @property
    def empty(self) -> bool:
        return not self.env and self.workspace is None and not self.skills
