"""`mcphost explain`: the binding and the grant an event would get, layer by layer, without running it.

Owns reading the event file, finding the bound runner's manifest and printing the explanation (readable
text, or with `--json` the one document `POST /v1/explain` answers) and the exit status: 0 when an agent
takes the event, 1 when none does (or more than one), so a script can test a config with it. Does not own the explanation
(`mcphost.explain`, on the real binding and grant code). A bundled runner's manifest is built in process
from its class (as `mcphost runners` does); any other runner's is read from its plugin, which is then
started (with the host's database, as `mcphost runners --check` does) and stopped again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from mcphost.bindings import Bindings
from mcphost.cli._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, dump, fail
from mcphost.cli._runners import bundled_manifests
from mcphost.common.validation import describe
from mcphost.config import Settings
from mcphost.errors import RunnerNotFoundError
from mcphost.explain import ExplainRequest, Explanation, explain
from mcphost.protocol import AgentRunnerManifest, unstorable

MAX_EVENT_FILE_BYTES = 4 * 1024 * 1024


def _request(args: argparse.Namespace) -> ExplainRequest | str:
    """The checked request, or what is wrong with the arguments."""
    path = Path(args.event)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_EVENT_FILE_BYTES + 1)
    except OSError as exc:
        return f"cannot read the event file {str(path)!r}: {exc.strerror or exc}"
    if len(raw) > MAX_EVENT_FILE_BYTES:
        return f"the event file {str(path)!r} is larger than {MAX_EVENT_FILE_BYTES} bytes"
    try:
        event = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return f"the event file {str(path)!r} is not JSON: {exc}"
    problem = unstorable(event)
    if problem is not None:
        return f"the event file {str(path)!r}: {problem.message('(event)')}"
    try:
        return ExplainRequest.model_validate(
            {
                "event": event,
                "tools": args.tools or [],
                "resources": args.resources or [],
                "state_scopes": args.state_scopes or [],
                "models": args.models or [],
            }
        )
    except ValidationError as exc:
        return describe(exc, root="(explain)")


async def cmd_explain(args: argparse.Namespace, settings: Settings) -> int:
    request = _request(args)
    if isinstance(request, str):
        return fail(request, EXIT_USAGE)
    bindings = Bindings(settings.agents, source=settings.source)
    targets = request.targets()
    static = bundled_manifests(settings)

    def manifest_of(runner_id: str) -> AgentRunnerManifest:
        found = static.get(runner_id)
        if found is None:
            raise RunnerNotFoundError(f"Runner {runner_id!r} is not a bundled one.")
        return found

    try:
        answer = explain(request.event, bindings, manifest_of, targets)
    except RunnerNotFoundError:
        answer = await _explain_started(settings, request, bindings, targets)
    if args.json:
        dump(answer.model_dump(mode="json"))
    else:
        sys.stdout.write(render(answer))
    return EXIT_OK if answer.agent is not None else EXIT_FAILED


async def _explain_started(
    settings: Settings, request: ExplainRequest, bindings: Bindings, targets: list[str]
) -> Explanation:
    """The explanation with every plugin started, for a runner only its plugin process can describe."""
    from mcphost.app import open_host

    async with open_host(settings) as host:
        registry = host.registry
        return explain(request.event, bindings, lambda runner_id: registry.get(runner_id).manifest, targets)


def render(answer: Explanation) -> str:
    """The explanation as text a person reads top to bottom."""
    lines: list[str] = []
    binding = answer.binding
    if answer.agent is None:
        lines.append(f"No agent takes this event: {binding.why}")
    else:
        lines.append(f"Agent {answer.agent!r} (runner {answer.runner}) takes this event: {binding.why}.")
    for verdict in binding.agents:
        if verdict.agent != answer.agent:
            lines.append(f"  not {verdict.agent!r}: {verdict.why}")
    if answer.layers is not None and answer.grant is not None:
        layers, grant = answer.layers, answer.grant
        lines.append("")
        lines.append("Layers (the grant is their cut):")
        lines.append(f"  manifest  {_compact(layers.manifest['permissions'])}")
        agent = {k: v for k, v in layers.agent.items() if k != "id"}
        lines.append(f"  agent     {_compact(agent)}")
        lines.append(f"  event     {_compact({k: v for k, v in layers.event.items() if v is not None})}")
        lines.append("")
        lines.append("Grant:")
        lines.append(f"  tools            {', '.join(grant.tools)}")
        lines.append(f"  host tools       {', '.join(grant.host_tool_globs) or 'none'}")
        lines.append(f"  state read       {', '.join(grant.state_read) or 'none'}")
        lines.append(f"  state write      {', '.join(grant.state_write) or 'none'}")
        lines.append(f"  storage          {', '.join(grant.storage_areas) or 'none'}")
        lines.append(f"  knowledge bases  {', '.join(grant.knowledge_bases) or 'none'}")
        lines.append(f"  actions          {', '.join(grant.actions) or 'none'}")
        calls = f" ({', '.join(grant.model_calls)})" if grant.models else ""
        lines.append(f"  models           {', '.join(grant.models) or 'none'}{calls}")
    if answer.checks:
        lines.append("")
        lines.append("Checks:")
        for found in answer.checks:
            if found.allowed and found.approval:
                lines.append(f"  {found.target:<32} approval: {found.reason}")
                continue
            if found.allowed:
                lines.append(f"  {found.target:<32} allowed")
                continue
            layer = f"removed by the {found.layer} layer" if found.layer else "refused"
            lines.append(f"  {found.target:<32} {layer}: {found.reason}")
            lines.append(f"  {'':<32} to allow it, {found.fix}")
    return "\n".join(lines) + "\n"


def _compact(value: object) -> str:
    return json.dumps(value, separators=(", ", ": "))
