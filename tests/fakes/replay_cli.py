"""A stand-in harness CLI that replays a recorded native stream, for conversion and failure tests.

Driven by environment variables (the runner passes the agent's `environment` through):
- `REPLAY_FILE`: the recorded lines to print on stdout (optional); `REPLAY_RESUME_FILE` replaces it when
  the command line resumes a session (`--resume` or `resume`);
- `REPLAY_BEFORE` / `REPLAY_AFTER_LINE` + `REPLAY_INSERT`: extra raw lines (JSON list of strings) to print
  before everything, or after line N of the recording;
- `REPLAY_STDERR`: text for stderr; `REPLAY_EXIT`: the exit status (default 0);
- `REPLAY_HANG=1`: start a grandchild that sleeps, then sleep forever instead of exiting;
- `REPLAY_ARGV`: a file to write this process's argv, environment, folder and pid into (JSON).

`write_wrapper` makes an executable shell script running this file with this test's Python, usable as
a runner's `cli_path`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def write_wrapper(folder: Path, name: str = "replay-cli") -> Path:
    wrapper = folder / name
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def main() -> int:
    env = os.environ
    if env.get("REPLAY_ARGV"):
        started = {"argv": sys.argv, "env": dict(env), "cwd": os.getcwd(), "pid": os.getpid()}
        Path(env["REPLAY_ARGV"]).write_text(json.dumps(started))
    out = sys.stdout
    for line in json.loads(env.get("REPLAY_BEFORE", "[]")):
        out.write(line + "\n")
    after = int(env.get("REPLAY_AFTER_LINE", "-1"))
    inserted = json.loads(env.get("REPLAY_INSERT", "[]"))
    recording = env.get("REPLAY_FILE")
    if env.get("REPLAY_RESUME_FILE") and ("--resume" in sys.argv or "resume" in sys.argv):
        recording = env["REPLAY_RESUME_FILE"]
    if recording:
        for number, line in enumerate(Path(recording).read_text().splitlines(), 1):
            out.write(line + "\n")
            if number == after:
                for extra in inserted:
                    out.write(extra + "\n")
    out.flush()
    if env.get("REPLAY_STDERR"):
        sys.stderr.write(env["REPLAY_STDERR"] + "\n")
        sys.stderr.flush()
    if env.get("REPLAY_HANG") == "1":
        subprocess.Popen(["sleep", "300"])  # a grandchild that must not outlive the run
        time.sleep(300)
    return int(env.get("REPLAY_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main())
