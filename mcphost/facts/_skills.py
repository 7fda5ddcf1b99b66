"""Skill resources: `skill://<skill_id>/<file>` for every file of the run's granted skill folders.

Owns listing and reading them on the per-run MCP server. Does not own reading skill folders safely
(`mcphost/projection.py`) or which skills an agent is granted (its `resources.skills`, in the context).

Invariants:
- Only the run's granted skills (its context's `resources.skills`) are listed or read; another skill's
  URI is `unauthorized`, whether or not it exists.
- A URI is parsed before any file is touched: over `MAX_URI` characters, NUL, `.`/`..` segments or a
  backslash are `invalid_argument`; a link out of the skill folder is never followed (`projection.py`).
- A granted skill whose folder broke after the host started is left out of the listing, the others are
  still listed, and a warning naming the skill and its folder is logged once per breakage (the caller's
  `broken` set remembers it until the folder lists again), however often clients list.
"""

from __future__ import annotations

import base64
import logging
import mimetypes

import anyio
import mcp_types as types

from mcphost.errors import HostError
from mcphost.facts._call import Call
from mcphost.facts._results import ToolCallError
from mcphost.projection import Projector, read_skill_file, skill_files
from mcphost.protocol import check_skill_path

logger = logging.getLogger(__name__)

SKILL_URI_PREFIX = "skill://"
MAX_URI = 500


def _mime(path: str) -> str:
    if path.endswith(".md"):
        return "text/markdown"
    return mimetypes.guess_type(path)[0] or "application/octet-stream"


async def _granted(call: Call, skills: Projector) -> list[str]:
    """The run's granted skills that have a folder."""
    names = [s.skill_name for s in (await call.context()).resources.skills]
    return [name for name in names if skills.skill_folder(name) is not None]


async def list_resources(call: Call, skills: Projector, broken: set[str]) -> list[types.Resource]:
    """One resource per file of each granted skill folder.

    `broken` holds the skills already warned about as broken (the host's, shared across runs and calls);
    a skill is added when its folder first fails and removed when it lists again.
    """
    listed: list[types.Resource] = []
    for name in await _granted(call, skills):
        folder = skills.skill_folder(name)
        assert folder is not None  # `_granted`
        try:
            files = await anyio.to_thread.run_sync(skill_files, name, folder)
        except HostError as exc:  # a folder that broke after the host started: nothing of it is listed
            if name not in broken:
                broken.add(name)
                logger.warning(
                    "Skill %r is left out of resources/list: its folder %r broke after the host started "
                    "(%s) Restore the folder; it is listed again once it reads.",
                    name,
                    str(folder),
                    exc.message,
                )
            continue
        broken.discard(name)
        for relative, path, _ in files:
            listed.append(
                types.Resource(
                    uri=f"{SKILL_URI_PREFIX}{name}/{relative}",
                    name=f"{name}/{relative}",
                    title=f"Skill {name}: {relative}",
                    mime_type=_mime(relative),
                    size=path.stat().st_size,
                )
            )
    return listed


def _parse(uri: str) -> tuple[str, str]:
    if len(uri) > MAX_URI or "\x00" in uri:
        raise ToolCallError("invalid_argument", f"A skill URI is at most {MAX_URI} characters, without NUL.")
    skill_id, _, relative = uri.removeprefix(SKILL_URI_PREFIX).partition("/")
    try:
        check_skill_path(relative)
    except ValueError as exc:
        raise ToolCallError(
            "invalid_argument",
            f"{uri[:100]!r} is not skill://<skill>/<file>: {exc}.",
            details={"uri": uri[:100]},
        ) from None
    return skill_id, relative


async def read_resource(call: Call, skills: Projector, uri: str) -> types.ReadResourceResult:
    """One file of a granted skill: text when it is UTF-8, else a blob."""
    skill_id, relative = _parse(uri)
    if skill_id not in await _granted(call, skills):
        raise ToolCallError(
            "unauthorized",
            f"Skill {skill_id[:64]!r} is not granted to this run (or has no folder); resources/list shows "
            "the files of its skills.",
            details={"skill_id": skill_id[:64]},
        )
    folder = skills.skill_folder(skill_id)
    assert folder is not None  # `_granted`
    try:
        data = await anyio.to_thread.run_sync(read_skill_file, skill_id, folder, relative)
    except HostError as exc:
        raise ToolCallError("not_found", exc.message) from None
    mime = _mime(relative)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        blob = base64.b64encode(data).decode()
        return types.ReadResourceResult(
            contents=[types.BlobResourceContents(uri=uri, mime_type=mime, blob=blob)]
        )
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)])
