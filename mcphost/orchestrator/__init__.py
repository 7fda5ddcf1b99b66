"""The run orchestrator, as a package: the state machine is `_core.py` (moved from `orchestrator.py`)."""

from __future__ import annotations

from mcphost.orchestrator._core import (
    CANCEL_GRACE_S,
    CANCEL_POLL_S,
    LOCAL_RECHECK_S,
    NOTIFIED_RECHECK_S,
    QUEUE_POLL_S,
    SWEEP_S,
    TERMINAL_RETRY_S,
    Admission,
    IngestVia,
    Orchestrator,
)

__all__ = [
    "CANCEL_GRACE_S",
    "CANCEL_POLL_S",
    "LOCAL_RECHECK_S",
    "NOTIFIED_RECHECK_S",
    "QUEUE_POLL_S",
    "SWEEP_S",
    "TERMINAL_RETRY_S",
    "Admission",
    "IngestVia",
    "Orchestrator",
]
