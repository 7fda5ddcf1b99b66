"""The orchestrator's periods, bounds and limits, in one module.

Owns the numbers only. The modules of the package read them as attributes of this module when they use
them (`tuning.SWEEP_S`), so a test or a benchmark that sets one here changes it for every run.
"""

from __future__ import annotations

CANCEL_GRACE_S = 5.0
"""How long a cancelled runner has to stop by itself before its run is cut off."""
TERMINAL_DRAIN_S = 5.0
"""How long after a terminal result the host waits for the plugin's `runner/run` response."""
QUEUE_POLL_S = 0.25
"""Poll interval for runs waiting on another host's run of the same conversation, and for following
another host's run, while no wake-up connection listens (SQLite, or PostgreSQL while it reconnects)."""
NOTIFIED_RECHECK_S = 5.0
"""The same poll while this process listens for other processes' wake-ups (PostgreSQL `LISTEN`,
`stores/wakeups.py`): a safety net only, so a lost notification delays a waiter but never hangs it."""
LOCAL_RECHECK_S = 5.0
"""How long a reader of a run active on this process waits for its signal before looking again (a
safety net only: signals are not lost, and with many readers a short poll would cost real CPU)."""
CANCEL_POLL_S = 0.5
"""How often cancel requests other processes wrote for this process's runs are looked for (one query,
only while runs are active), while no wake-up connection listens; `NOTIFIED_RECHECK_S` while one does."""
TOOL_LISTS_KEPT = 256
"""Sets of allowed tools whose `tools/list` the orchestrator keeps built (`ContextBuilder.tools_of`)."""
STATIC_PARTS_KEPT = 256
"""Agent, manifest and grant shapes whose context `StaticParts` the orchestrator keeps built
(`ContextBuilder.static_of`)."""
MAX_BATCH = 512
"""How many results the pump hands the journal at most in one batch (one transaction)."""
RECENT_ENDS = 1024
"""How many of this process's latest run ends `wait` answers from memory (an end never changes)."""
RESULTS_PAGE = 1000
"""How many results `results()` reads from the store at a time."""
TERMINAL_RETRY_S = 6.0
"""How long a run's close keeps retrying its terminal write (result and status) before it leaves the
run to the sweeper."""
SWEEP_S = 5.0
"""How often the sweeper looks for runs this host owns but no longer executes (one indexed query)."""
CLOSING_BOUND_S = 5.0
"""How long a run's close waits for its `on_run_closing` callbacks before it records the end anyway."""
CLOSE_BOUND_S = CLOSING_BOUND_S + TERMINAL_RETRY_S + 10.0
"""The bound on a run's whole close: its `on_run_closing` callbacks, its terminal write, then the
`on_run_end` callbacks."""
READOPT_S = 2.0
"""How often a host looks for runs executing on runtimes whose host died, to follow them
(`hosts.readopt_remote`)."""
RUNNER_FIRST_TURNS = 3
"""At most this many loop turns an admission that started the only run executing here yields before it
answers, until the run's runner call has begun: two (the run's task, then the runner call's), one more
for a task spawned on the way."""
