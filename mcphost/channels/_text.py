"""Splitting a reply at a platform's message limit without breaking its code blocks.

Owns `split_text` only; each adapter passes its limit and how it measures a part (its escaping may
lengthen the text). Invariants: every part measures at most `limit`; a fenced code block cut by a split
is closed at the end of one part and opened again (with its language) at the start of the next, so each
part renders on its own; joining the parts, less the fences added, gives back the text's lines.
"""

from __future__ import annotations

from collections.abc import Callable

FENCE = "```"
Measure = Callable[[str], int]


def _fence_of(line: str) -> bool:
    return line.lstrip().startswith(FENCE)


def _cut(line: str, budget: int, measure: Measure) -> list[str]:
    """A line too long for one part, cut into pieces of at most `budget`, at a space when one is near."""
    pieces: list[str] = []
    while line:
        size, end = 0, 0
        while end < len(line) and size + measure(line[end]) <= budget:
            size += measure(line[end])
            end += 1
        end = max(end, 1)
        if end < len(line):
            space = line.rfind(" ", 0, end)
            if space > end // 2:
                end = space + 1
        pieces.append(line[:end])
        line = line[end:]
    return pieces


def split_text(text: str, limit: int, measure: Measure = len) -> list[str]:
    """`text` in parts of at most `limit` (by `measure`), split between lines where it can be.

    Raises:
        ValueError: `limit` leaves no room for a line besides a code fence's markers.
    """
    if not text.strip():
        return []
    if measure(text) <= limit:
        return [text]
    parts: list[str] = []
    current: list[str] = []
    opening: str | None = None  # the line that opened the fence `current` is inside, if any

    def cost(lines: list[str], fence: str | None) -> int:
        return measure("\n".join(lines + ([FENCE] if fence is not None else [])))

    def flush() -> None:
        nonlocal current
        if current and any(line.strip() for line in current if line != opening):
            parts.append("\n".join(current + ([FENCE] if opening is not None else [])))
        current = [opening] if opening is not None else []

    for raw in text.split("\n"):
        reserve = (
            (measure(opening or FENCE) + measure(FENCE) + 2) if opening is not None or _fence_of(raw) else 0
        )
        budget = limit - reserve - 1
        if budget < 1:
            raise ValueError(f"a limit of {limit} leaves no room for text inside a code block")
        for line in _cut(raw, budget, measure) if measure(raw) > budget else [raw]:
            toggles = _fence_of(line)
            after = (None if opening is not None else line) if toggles else opening
            if current and cost([*current, line], after) > limit:
                flush()
            current.append(line)
            opening = after
    if opening is not None:
        opening = None
        current.append(FENCE)
    flush()
    return parts
