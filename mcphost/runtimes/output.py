"""A remote run's output on its runtime: the newest lines its runner wrote to stderr, bounded.

Owns `RunOutput`, the ring a runtime fills from its plugin's stderr while a run is active
(`PluginProcess.watch_output`) and posts once before the run's end (`runs/{run_id}/output`,
docs/protocol.md §12), where the host keeps it as an artifact of the run. Does not own sending it
(`daemon.py`) or storing it (`api/_runtime.py`).

Invariants:
- At most `MAX_OUTPUT_BYTES` of UTF-8 are kept: the oldest lines go first and are counted
  (`cut_bytes`, `cut_lines`), so what was cut is said, never silently lost. A single line longer than
  the bound keeps its end.
- Nothing the host would refuse is kept: NUL becomes U+FFFD (lines arrive decoded with replacement, so
  there are no lone surrogates).
"""

from __future__ import annotations

from collections import deque

from mcphost.runtimes.wire import MAX_OUTPUT_BYTES


class RunOutput:
    """The newest output lines of one run, at most `limit` bytes of UTF-8 (newlines counted)."""

    def __init__(self, limit: int = MAX_OUTPUT_BYTES) -> None:
        self.limit = limit
        self._lines: deque[tuple[str, int]] = deque()
        self.size = 0
        self.cut_bytes = 0
        self.cut_lines = 0

    def add(self, line: str) -> None:
        text = line.replace("\x00", "\ufffd")
        data = text.encode() + b"\n"
        if len(data) > self.limit:
            self.cut_bytes += len(data) - self.limit
            data = data[-self.limit :]
            text = data[:-1].decode(errors="ignore")
            data = text.encode() + b"\n"
        self._lines.append((text, len(data)))
        self.size += len(data)
        while self.size > self.limit:
            _, dropped = self._lines.popleft()
            self.size -= dropped
            self.cut_bytes += dropped
            self.cut_lines += 1

    @property
    def empty(self) -> bool:
        return not self._lines and not self.cut_lines

    def text(self) -> str:
        return "".join(f"{line}\n" for line, _ in self._lines)

    def body(self, fence: int) -> dict[str, object]:
        """The body of `runs/{run_id}/output` for the claim under `fence`."""
        return {"fence": fence, "text": self.text(), "cut_bytes": self.cut_bytes, "cut_lines": self.cut_lines}
