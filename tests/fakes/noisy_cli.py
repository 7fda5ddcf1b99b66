"""Runs a real harness CLI and mixes garbage into its stdout: the malformed-stream-lines test.

`python noisy_cli.py <real cli> ARGS...` starts `<real cli> ARGS...` (same stdin, stderr, environment),
copies its stdout line by line, and after the first line writes `NOISE` (lines that are not JSON, cut off,
not objects, or events of types no runner has seen). It exits with the CLI's status.
`write_wrapper` makes an executable script usable as a runner's `cli_path`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NOISE = [
    "Warning: this line is not JSON at all",
    '{"type": "assistant", "message": {"content": [',
    '"just a string"',
    '{"type": "mcphost_never_seen_event", "detail": {"x": 1}}',
    "\x1b[31mcoloured garbage\x1b[0m",
]


def write_wrapper(folder: Path, real_cli: Path) -> Path:
    wrapper = folder / f"noisy-{real_cli.name}"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "{real_cli}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def main() -> int:
    child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
    assert child.stdout is not None
    out = sys.stdout.buffer
    for number, line in enumerate(child.stdout, 1):
        out.write(line)
        if number == 1:
            out.write("".join(n + "\n" for n in NOISE).encode())
        out.flush()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
