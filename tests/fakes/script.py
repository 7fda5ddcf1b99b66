"""What a scripted fake model sees and may answer: one vocabulary shared by every fake API.

A fake parses its wire format into a `ModelRequest` (the tools it offers, the tool results since the
last user turn, the user's text) and asks the test's `Script` for a `Reply`: text, a tool call, a hang
(the stream never ends) or an HTTP error. Tool names are the names the model sees, the same for both
harnesses: `mcp__mcphost__history_page` (Codex's namespace `mcp__mcphost` plus the tool's name).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

JSON = dict[str, Any]


@dataclass(frozen=True)
class Text:
    """Answer with this text and end the turn."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """Call one tool (by the name the model sees) with these arguments."""

    name: str
    arguments: JSON = field(default_factory=dict[str, Any])


@dataclass(frozen=True)
class Hang:
    """Start the response and never finish it (until the client goes away or the fake stops)."""


@dataclass(frozen=True)
class Fail:
    """Answer with an HTTP error."""

    status: int = 500
    message: str = "the fake model failed on purpose"


Reply = Text | ToolCall | Hang | Fail


@dataclass(frozen=True)
class ModelRequest:
    """One request to a fake model, parsed into what a script needs to decide."""

    path: str
    body: JSON
    headers: dict[str, str]
    offered_tools: tuple[str, ...]
    """Every tool the request offers the model, by the name the model would call."""
    tool_results: tuple[str, ...]
    """Outputs of the tool calls made since the last user message, oldest first (as text)."""
    user_text: str
    """The text of the last user message (all its text parts joined)."""

    @property
    def is_agent_turn(self) -> bool:
        """True for the harness's agent loop (it offers tools); side requests offer none."""
        return bool(self.offered_tools)


Script = Callable[[ModelRequest], Reply]


def calls_then_answers(calls: Sequence[ToolCall], answer: str = "The tools said: {results}") -> Script:
    """Call `calls` one after another (one per model turn), then answer with `answer`, where `{results}`
    is every tool output joined by ` | ` and `{result}` the last one. A side request gets a short text."""

    def script(request: ModelRequest) -> Reply:
        if not request.is_agent_turn:
            return Text("mcphost fake title")
        done = len(request.tool_results)
        if done < len(calls):
            return calls[done]
        results = request.tool_results
        return Text(answer.format(results=" | ".join(results), result=results[-1] if results else ""))

    return script


def always(reply: Reply) -> Script:
    """Answer every agent turn with `reply`; side requests get a short text."""

    def script(request: ModelRequest) -> Reply:
        return reply if request.is_agent_turn else Text("mcphost fake title")

    return script


def text_of(value: Any) -> str:
    """Tool output as text: strings as they are, content-block lists joined, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts: list[str] = []
        for block in cast(list[object], value):
            text = cast(dict[str, object], block).get("text") if isinstance(block, dict) else None
            if isinstance(text, str):
                parts.append(text)
            else:
                parts.append(json.dumps(block))
        return "\n".join(parts)
    return json.dumps(value)
