"""The command line's start-up pause of the cyclic collector (`mcphost.common.gcstart`)."""

from __future__ import annotations

import subprocess
import sys

from mcphost.common import gcstart

_CHILD = """
import gc
from mcphost.common import gcstart
default = gc.get_threshold()
gcstart.resume()
assert gc.isenabled() and gc.get_freeze_count() == 0, "resume without pause does nothing"
assert gc.get_threshold() == default, "nor changes the thresholds"
gcstart.pause()
assert not gc.isenabled()
objects = [[i] for i in range(1000)]
gcstart.resume()
assert gc.isenabled(), "resume turns the collector back on"
assert gc.get_threshold() == (gcstart.GEN0_THRESHOLD, *default[1:]), gc.get_threshold()
frozen = gc.get_freeze_count()
assert frozen >= 1000, frozen
gcstart.resume()
assert gc.get_freeze_count() == frozen, "once"
gc.disable()
gcstart.pause()
gcstart.resume()
assert not gc.isenabled(), "a collector someone else turned off stays off"
print("ok")
"""


def test_resume_after_pause_freezes_the_start_up_once_and_turns_the_collector_back_on() -> None:
    # In a fresh interpreter: freezing this test process's heap would outlive the test.
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_without_pause_resume_leaves_the_collector_alone() -> None:
    import gc

    assert gc.isenabled()
    gcstart.resume()
    assert gc.isenabled()
