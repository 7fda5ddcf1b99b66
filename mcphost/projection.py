"""Building a run's projection (`protocol/projection.py`): the secrets its agent names, its workspace
folder and its granted skills' files, for a local plugin (`runner/run`) or a runtime's claim.

Owns reading secrets (the host's environment or a file), mapping a workspace name to a folder (this
host's `[workspaces]`, or the claiming runtime's `[runtimes.<name>] workspaces`) and reading skill
folders safely, for a projection and for the `skill://` MCP resources (`facts/_skills.py`). Does not own
what a runner does with a projection (`mcphost_runners/`) or where one travels.

Invariants:
- A projection is built when it is delivered and never stored, logged or put in a context; an error
  names the secret, workspace or skill and what to fix, never a secret's value.
- A skill file is read only from inside its folder: a path with `..`, NUL or a backslash is refused
  before the file system is asked, and a symbolic link (or a link in its path) that leads out of the
  folder is refused; a skill folder has at most `MAX_SKILL_FILES` files of `MAX_SKILL_BYTES` together.
"""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from mcphost.config import SecretConfig, Settings
from mcphost.errors import ConfigError, HostError, NotFoundError
from mcphost.models import AgentConfig
from mcphost.protocol import (
    MAX_PROJECTED_SKILL_BYTES,
    MAX_SKILL_BYTES,
    MAX_SKILL_FILES,
    SKILL_FILE,
    ProjectedSkill,
    RunProjection,
    SkillFile,
    check_skill_path,
)

MAX_SECRET_BYTES = 64 * 1024
SKIPPED_FOLDERS = frozenset({".git"})
"""Folders of a skill folder that are not projected."""


class ProjectionError(HostError):
    """Raised when a run's secret, workspace or skill folder cannot be projected (unset, unreadable,
    unmapped or too large); the run fails with the message."""

    code = "runtime_error"
    status = 500


def _inside(root: Path, path: Path) -> bool:
    return path == root or root in path.parents


def skill_files(skill_id: str, folder: Path) -> list[tuple[str, Path, bool]]:
    """The files of a skill folder as (relative path, file, executable), `SKILL.md` first.

    Raises:
        ProjectionError: the folder is missing, has no `SKILL.md`, too many files, or a link out of it.
    """
    try:
        root = folder.resolve(strict=True)
    except OSError as exc:
        raise ProjectionError(
            f"Skill {skill_id!r}: its folder {str(folder)!r} cannot be read: {exc}."
        ) from None
    found: list[tuple[str, Path, bool]] = []
    for current, dirs, files in os.walk(root, followlinks=False):
        here = Path(current)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS and not (here / d).is_symlink())
        for name in sorted(files):
            path = here / name
            relative = path.relative_to(root).as_posix()
            try:
                check_skill_path(relative)
                target = path.resolve(strict=True)
                mode = target.stat().st_mode
            except (ValueError, OSError) as exc:
                raise ProjectionError(
                    f"Skill {skill_id!r}: file {relative[:200]!r} cannot be projected ({exc})."
                ) from None
            if not _inside(root, target):
                raise ProjectionError(
                    f"Skill {skill_id!r}: {relative!r} is a link out of the skill folder {str(root)!r}; "
                    "copy the file into the folder instead."
                )
            if not stat.S_ISREG(mode):
                continue
            found.append((relative, target, bool(mode & stat.S_IXUSR)))
            if len(found) > MAX_SKILL_FILES:
                raise ProjectionError(
                    f"Skill {skill_id!r}: its folder {str(root)!r} has more than {MAX_SKILL_FILES} files."
                )
    if not any(relative == SKILL_FILE for relative, _, _ in found):
        raise ProjectionError(f"Skill {skill_id!r}: its folder {str(root)!r} has no {SKILL_FILE}.")
    found.sort(key=lambda item: (item[0] != SKILL_FILE, item[0]))
    return found


def read_skill(skill_id: str, folder: Path) -> ProjectedSkill:
    """Every file of the skill folder, bounded (`MAX_SKILL_BYTES`)."""
    files: list[SkillFile] = []
    total = 0
    for relative, path, executable in skill_files(skill_id, folder):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ProjectionError(f"Skill {skill_id!r}: {relative!r} cannot be read: {exc}.") from None
        total += len(data)
        if total > MAX_SKILL_BYTES:
            raise ProjectionError(
                f"Skill {skill_id!r}: its files hold more than {MAX_SKILL_BYTES} bytes; keep large data "
                "out of skill folders."
            )
        encoded = base64.b64encode(data).decode()
        files.append(SkillFile(path=relative, data=encoded, executable=executable))
    return ProjectedSkill(skill_id=skill_id, files=files)


def read_skill_file(skill_id: str, folder: Path, relative: str) -> bytes:
    """One file of a skill folder, for its `skill://` resource.

    Raises:
        NotFoundError: the path is not a safe relative path, or no such file is in the folder (a link out
            of it included: the message does not say what is outside).
    """
    try:
        check_skill_path(relative)
    except ValueError as exc:
        raise NotFoundError(f"Skill {skill_id!r} has no file {relative[:100]!r}: {exc}.") from None
    listed = {path: target for path, target, _ in skill_files(skill_id, folder)}
    target = listed.get(relative)
    if target is None:
        raise NotFoundError(
            f"Skill {skill_id!r} has no file {relative[:100]!r}; resources/list shows its files."
        )
    try:
        data = target.read_bytes()
    except OSError as exc:
        raise NotFoundError(f"Skill {skill_id!r}: {relative!r} cannot be read: {exc}.") from None
    if len(data) > MAX_SKILL_BYTES:
        raise NotFoundError(f"Skill {skill_id!r}: {relative!r} is larger than {MAX_SKILL_BYTES} bytes.")
    return data


def read_secret(name: str, secret: SecretConfig, environ: Mapping[str, str]) -> str:
    """The secret's value (never logged). Raises ProjectionError naming where it was looked for."""
    if secret.env is not None:
        value = environ.get(secret.env)
        if value is None:
            raise ProjectionError(
                f"Secret {name!r}: the host's environment variable {secret.env!r} is not set; set it where "
                "the host starts."
            )
        return value
    assert secret.file is not None
    try:
        with secret.file.open("rb") as handle:
            raw = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise ProjectionError(
            f"Secret {name!r}: {str(secret.file)!r} cannot be read: {exc.strerror}."
        ) from None
    if len(raw) > MAX_SECRET_BYTES:
        raise ProjectionError(
            f"Secret {name!r}: {str(secret.file)!r} holds more than {MAX_SECRET_BYTES} bytes."
        )
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise ProjectionError(f"Secret {name!r}: {str(secret.file)!r} is not UTF-8 text.") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if "\x00" in text:
        raise ProjectionError(f"Secret {name!r}: {str(secret.file)!r} holds a NUL character.")
    return text


class Projector:
    """Builds projections from the host's settings (one per host, shared by the orchestrator, the
    runtime protocol's claims and the per-run MCP servers)."""

    def __init__(self, settings: Settings, environ: Mapping[str, str] | None = None) -> None:
        self._settings = settings
        self._environ = os.environ if environ is None else environ

    def check(self) -> None:
        """Read every skill folder once (at start): a bad one stops the host with a ConfigError."""
        for name, cfg in self._settings.skills.items():
            if cfg.path is not None:
                try:
                    read_skill(name, cfg.path)
                except ProjectionError as exc:
                    raise ConfigError(f"{self._settings.source}: skills.{name}.path: {exc.message}") from None

    def skill_folder(self, skill_id: str) -> Path | None:
        cfg = self._settings.skills.get(skill_id)
        return None if cfg is None else cfg.path

    def agent(self, agent_id: str) -> AgentConfig | None:
        return next((a for a in self._settings.agents if a.id == agent_id), None)

    def projects(self, agent: AgentConfig) -> bool:
        """Whether a run of `agent` may have a projection: a workspace, a secret or a skill with a folder.
        When not, `local` is None without reading anything, and the run skips its hop off the loop."""
        return (
            agent.workspace is not None
            or bool(agent.secrets)
            or any(self.skill_folder(name) is not None for name in agent.resources.skills)
        )

    def local(self, agent: AgentConfig) -> RunProjection | None:
        """The projection of a local run of `agent` (None: nothing to project)."""
        workspace = None
        if agent.workspace is not None:
            folder = self._settings.workspaces.get(agent.workspace)
            if folder is None or not folder.is_dir():
                shown = (
                    "is not in [workspaces]" if folder is None else f"maps to {str(folder)!r}, not a folder"
                )
                raise ProjectionError(
                    f"Workspace {agent.workspace!r} of agent {agent.id!r} {shown}; map it to an existing "
                    "folder under [workspaces]."
                )
            workspace = str(folder.resolve())
        return self._build(agent, workspace)

    def remote(self, agent: AgentConfig, runtime_name: str) -> RunProjection | None:
        """The projection of a run of `agent` claimed by the runtime named `runtime_name`."""
        workspace = None
        if agent.workspace is not None:
            mapped = self._settings.runtimes.get(runtime_name)
            folder = None if mapped is None else mapped.workspaces.get(agent.workspace)
            if folder is None:
                raise ProjectionError(
                    f"Workspace {agent.workspace!r} of agent {agent.id!r} is not mapped for runtime "
                    f"{runtime_name!r}; add it to [runtimes.{runtime_name}] workspaces."
                )
            workspace = folder
        return self._build(agent, workspace)

    def workspaces_of(self, runtime_name: str) -> frozenset[str]:
        """The workspace names the runtime named `runtime_name` has (it claims only runs needing those)."""
        mapped = self._settings.runtimes.get(runtime_name)
        return frozenset(mapped.workspaces) if mapped is not None else frozenset()

    def _build(self, agent: AgentConfig, workspace: str | None) -> RunProjection | None:
        env = {
            self._settings.secrets[name].variable_of(name): read_secret(
                name, self._settings.secrets[name], self._environ
            )
            for name in agent.secrets
        }
        skills = self.skills(agent.resources.skills)
        projection = RunProjection(
            env=env, workspace=workspace, workspace_name=agent.workspace, skills=skills
        )
        return None if projection.empty else projection

    def skills(self, names: Sequence[str]) -> list[ProjectedSkill]:
        """The files of the named skills that have a folder, at most `MAX_PROJECTED_SKILL_BYTES` in all."""
        out: list[ProjectedSkill] = []
        total = 0
        for name in names:
            folder = self.skill_folder(name)
            if folder is None:
                continue
            skill = read_skill(name, folder)
            total += sum(len(f.data) * 3 // 4 for f in skill.files)
            if total > MAX_PROJECTED_SKILL_BYTES:
                raise ProjectionError(
                    f"The skills granted to the run hold more than {MAX_PROJECTED_SKILL_BYTES} bytes of files "
                    f"(at skill {name!r}); grant fewer or smaller skills."
                )
            out.append(skill)
        return out
