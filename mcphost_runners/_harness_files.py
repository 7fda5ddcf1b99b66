"""The external harness projection (PROTOCOL §9) and the only way harness runners write files.

Owns `agent-context.json` (schema `mcphost.external_harness_context.v1`), `CONTEXT.md`, granted skills
as `SKILL.md` files, and `write_private`, which every file a harness runner writes goes through
(the MCP config included). Does not own where the working folder is (`harness.py`).

Invariants:
- Every path is normalized and checked against a root before anything is written: a path that resolves
  outside its root (`..`, an absolute name, a symlink pointing away) raises `OutsideRootError` and
  nothing is written. The last component is opened with `O_NOFOLLOW`.
- Files are created with mode 0600 and folders with 0700; an existing file is truncated and its mode
  forced back to 0600.
- The projection carries no secret: `context.mcp` is reduced to the URL, the bridge command and the
  protocol versions — the run token (the `Authorization` header, the bridge's environment) never lands in
  these files.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from mcphost.protocol import AgentRunContext, JSONObject, ProjectedSkill, SkillInfo

CONTEXT_SCHEMA = "mcphost.external_harness_context.v1"
CONTEXT_JSON = "agent-context.json"
CONTEXT_MD = "CONTEXT.md"
_SKILL_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


class OutsideRootError(ValueError):
    """A path that would leave the folder it must stay in."""


def inside(root: Path, *parts: str) -> Path:
    """`root / parts`, normalized; raises `OutsideRootError` when it resolves outside `root`."""
    base = root.resolve()
    target = base.joinpath(*parts).resolve()
    if target != base and not target.is_relative_to(base):
        raise OutsideRootError(f"{'/'.join(parts)!r} resolves to {str(target)!r}, outside {str(base)!r}")
    return target


def make_private_dir(path: Path) -> Path:
    """Create `path` (and parents) with mode 0700 for the new folders; returns it resolved."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path.resolve()


def write_private(root: Path, relative: str, data: str | bytes) -> Path:
    """Write `data` to `root/relative` with mode 0600, refusing any path outside `root`."""
    target = inside(root, relative)
    make_private_dir(target.parent)
    payload = data.encode() if isinstance(data, str) else data
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return target


def remove_quietly(path: Path) -> None:
    with suppress(OSError):
        path.unlink()


# -- the projection -------------------------------------------------------------------------------------


def context_document(ctx: AgentRunContext) -> JSONObject:
    """The content of `agent-context.json`: the run's context without the run token."""
    context = ctx.context.model_dump(mode="json")
    mcp = ctx.context.mcp
    context["mcp"] = (
        {
            "url": mcp.url,
            "bridge": {"command": list(mcp.bridge.command)},
            "protocol_versions": list(mcp.protocol_versions),
            "server_name": "mcphost",
        }
        if mcp is not None
        else None
    )
    return {
        "schema": CONTEXT_SCHEMA,
        "run_id": ctx.run_id,
        "event": ctx.event.model_dump(mode="json"),
        "actor": ctx.actor.model_dump(mode="json") if ctx.actor else None,
        "subject": ctx.subject.model_dump(mode="json") if ctx.subject else None,
        "input": ctx.input.model_dump(mode="json"),
        "delivery": ctx.delivery.model_dump(mode="json"),
        "resources": ctx.resources.model_dump(mode="json"),
        "context": context,
        "state": ctx.state.model_dump(mode="json"),
        "runtime": ctx.runtime.model_dump(mode="json"),
    }


def _block(value: object) -> str:
    return "```json\n" + json.dumps(value, indent=2, ensure_ascii=False) + "\n```"


def context_markdown(ctx: AgentRunContext) -> str:
    """`CONTEXT.md`: the same facts as `agent-context.json`, written for a person or a model to read."""
    event, apis = ctx.event, ctx.context.available_apis
    lines = [
        "# mcphost run context",
        "",
        f"This folder belongs to run `{ctx.run_id}`. The same facts, machine-readable, are in "
        f"`{CONTEXT_JSON}` (schema `{CONTEXT_SCHEMA}`).",
        "",
        "## Event",
        "",
        f"- type: `{event.event_type}` from `{event.source}` (event id `{event.event_id}`)",
    ]
    if ctx.conversation is not None:
        thread = f", thread `{ctx.conversation.thread_id}`" if ctx.conversation.thread_id else ""
        lines.append(f"- conversation: `{ctx.conversation.conversation_id}`{thread}")
    if ctx.actor is not None:
        name = f" ({ctx.actor.actor_name})" if ctx.actor.actor_name else ""
        lines.append(f"- actor: {ctx.actor.actor_type} `{ctx.actor.actor_id}`{name}")
    if ctx.subject is not None:
        lines.append(f"- subject: {ctx.subject.subject_type} `{ctx.subject.subject_id}`")
    if event.data:
        lines += ["", "Event data:", "", _block(event.data)]
    lines += ["", "## Input", ""]
    lines.append(ctx.input.text if ctx.input.text else "(no text)")
    media = [c for c in ctx.input.contents if c.type != "text"]
    for item in [*media, *ctx.input.attachments]:
        lines.append(f"- attachment `{item.artifact_id}` ({item.mime_type}): read it with `artifacts_read`")
    lines += [
        "",
        "## Where the facts are",
        "",
        "The conversation's history, events, artifacts, state and knowledge are not copied here. Read "
        "them through the tools of the `mcphost` MCP server (in Claude Code they are named "
        "`mcp__mcphost__<tool>`).",
        "",
    ]
    available = [name for name, on in apis.model_dump().items() if on]
    lines.append(f"- available: {', '.join(available) if available else 'none'}")
    if ctx.context.latest_cursor:
        lines.append(
            f"- newest transcript item (this input): cursor `{ctx.context.latest_cursor}`; "
            "`history_page` with `before_cursor` set to it returns earlier items"
        )
    lines.append(f"- earlier history exists: {'yes' if ctx.context.has_history_before else 'no'}")
    resources = ctx.resources
    if resources.tools:
        lines += ["", "Host tools:"] + [f"- `{t.name}`: {t.description}" for t in resources.tools]
    if resources.knowledge_bases:
        lines += ["", "Knowledge bases (use `knowledge_retrieve`):"] + [
            f"- `{kb.kb_id}` {kb.name}: {kb.description}" for kb in resources.knowledge_bases
        ]
    if resources.skills:
        lines += ["", "Skills:"] + [f"- `{s.skill_name}`: {s.description}" for s in resources.skills]
    if resources.storage.areas:
        lines += ["", f"Storage areas: {', '.join(resources.storage.areas)}"]
    state = ctx.state.model_dump(mode="json")
    if any(state.values()):
        lines += ["", "## State snapshot", "", _block(state)]
    delivery = ctx.delivery
    lines += [
        "",
        "## Reply",
        "",
        f"Your final answer is delivered to `{delivery.surface}`"
        + (f" (at most {delivery.max_message_size} characters)." if delivery.max_message_size else "."),
        f"The run must end before epoch second {ctx.runtime.deadline_at:.0f}.",
        "",
    ]
    return "\n".join(lines)


def skill_markdown(skill: SkillInfo) -> str:
    description = " ".join(skill.description.split()) or skill.display_name
    return "\n".join(
        [
            "---",
            f"name: {json.dumps(skill_folder_name(skill))}",
            f"description: {json.dumps(description, ensure_ascii=False)}",
            "---",
            "",
            f"# {skill.display_name}",
            "",
            skill.description,
            "",
            "The full instructions of this skill are served by the `mcphost` MCP server "
            "(its `instructions` prompt).",
            "",
        ]
    )


def skill_folder_name(skill: SkillInfo) -> str:
    """A folder-safe form of the skill's name (never `.`/`..`, never a path)."""
    name = _SKILL_NAME.sub("-", skill.skill_name).strip(".-") or "skill"
    return name[:64]


def write_projection(
    ctx: AgentRunContext,
    root: Path,
    folder: str = ".",
    *,
    skills_folder: str = ".claude/skills",
    skills: Sequence[ProjectedSkill] = (),
) -> list[Path]:
    """Write `agent-context.json`, `CONTEXT.md` and the granted skills under `root`; returns the paths.

    `folder` is where the two context files go and `skills_folder` where each skill gets its folder,
    both relative to `root` and both kept inside it: a skill with files (`skills`, the run's projection)
    gets them as they are in its folder on the host (executables 0700), any other a generated `SKILL.md`.
    """
    written = [
        write_private(
            root,
            f"{folder}/{CONTEXT_JSON}",
            json.dumps(context_document(ctx), indent=2, ensure_ascii=False) + "\n",
        ),
        write_private(root, f"{folder}/{CONTEXT_MD}", context_markdown(ctx)),
    ]
    projected = {skill.skill_id: skill for skill in skills}
    for skill in ctx.resources.skills:
        name = skill_folder_name(skill)
        found = projected.get(skill.skill_name)
        if found is None:
            written.append(write_private(root, f"{skills_folder}/{name}/SKILL.md", skill_markdown(skill)))
            continue
        for file in found.files:
            path = write_private(root, f"{skills_folder}/{name}/{file.path}", file.content())
            if file.executable:
                path.chmod(0o700)
            written.append(path)
    return written
