"""The bodies of the runtime protocol (`/v1/runtime/...`, docs/protocol.md §12), host and daemon alike.

Owns what a runtime sends (inbound models: unknown fields, NaN and out-of-range values refused) and what
the host answers (outbound models: unknown fields ignored, so a newer host can add some). Does not own
the routes (`api/_runtime.py`), the queue (`stores/dispatch.py`) or the daemon (`daemon.py`).

Invariants:
- Every list and map a runtime sends has a bound (`MAX_*`), and a results batch at most
  `MAX_BATCH_RESULTS` results of at most `MAX_RESULT_BYTES` each: a body over `MAX_BODY_BYTES` is a 413
  before it is parsed.
- Results are numbered per claim (fence) from 1, contiguously: a batch says its first number.
- A run's output (the runner's stderr) is at most `MAX_OUTPUT_BYTES` of UTF-8 text, the newest part of
  it: what was cut before it is counted (`cut_bytes`, `cut_lines`), never silently lost.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from mcphost.models import check_labels
from mcphost.protocol import MAX_RESULT_BYTES, InboundModel, JSONObject, ProtocolModel, RunProjection

MAX_BATCH_RESULTS = 256
MAX_BODY_BYTES = 8 * 1024 * 1024
"""The largest body a runtime may send (a batch of results)."""
MAX_HELD = 1024
MAX_RUNNERS = 500
MAX_CLAIM_WAIT_S = 30.0
MAX_OUTPUT_BYTES = 1024 * 1024
"""The most output (UTF-8 bytes) a runtime keeps and posts per claim: the newest lines."""
RECONNECT_MAX_S = 5.0
"""A runtime that cannot reach its host tries again at least this often (back-off with jitter, capped):
a host that adopts the runs of one that died keeps their claims a few times this long for it."""
RUNTIME_PREFIX = "/v1/runtime/"
"""Every route of the runtime protocol is under this prefix, authenticated by a runtime token only."""


class Harness(InboundModel):
    """An external CLI a harness runner drives, as found on the runtime."""

    version: str | None = Field(default=None, max_length=200)
    logged_in: bool | None = None


class Capabilities(InboundModel):
    """What a runtime can run and where: reported at register, shown by `mcphost runtimes`."""

    runners: list[str] = Field(default_factory=list[str], max_length=MAX_RUNNERS)
    """The runner ids (`publisher/plugin/name`) its plugins accepted."""
    harnesses: dict[str, Harness] = Field(default_factory=dict[str, Harness], max_length=20)
    """`claude`, `codex`: versions found on the runtime (`version` null: not installed)."""
    os: str = Field(default="", max_length=200)
    python: str = Field(default="", max_length=50)
    version: str = Field(default="", max_length=50)
    """The mcphost version of the daemon."""

    @field_validator("runners")
    @classmethod
    def _runner_ids(cls, value: list[str]) -> list[str]:
        for runner in value:
            if not 1 <= len(runner) <= 200 or not runner.isprintable():
                raise ValueError("a runner id is 1-200 printable characters")
        return value


class RegisterBody(InboundModel):
    capabilities: Capabilities
    slots: int = Field(ge=1, le=256)
    """How many runs it executes at once."""
    labels: dict[str, str] = Field(default_factory=dict[str, str], max_length=32)
    """Labels it reports (`--labels`); the ones an operator gave with `runtimes add` win."""

    @field_validator("labels")
    @classmethod
    def _label_form(cls, value: dict[str, str]) -> dict[str, str]:
        return check_labels(value)


class Timing(ProtocolModel):
    lease_s: float
    """A claim lapses this long after the latest heartbeat that renewed it."""
    heartbeat_s: float
    """Heartbeat this often (a few per lease)."""


class RegisterAnswer(Timing):
    runtime_id: str
    name: str
    state: str
    labels: dict[str, str]


class HeldRef(InboundModel):
    run_id: str = Field(min_length=1, max_length=100)
    fence: int = Field(ge=1, le=2**31 - 1)


class HeartbeatBody(InboundModel):
    runs: list[HeldRef] = Field(default_factory=list[HeldRef], max_length=MAX_HELD)
    """The runs it executes now, each with the fence of its claim: their leases are renewed."""


class HeldAnswer(ProtocolModel):
    run_id: str
    fence: int
    cancel: str | None = None
    """Set once the run is to be cancelled, with the reason: send the runner its cancel."""


class HeartbeatAnswer(Timing):
    state: str
    runs: list[HeldAnswer]
    """The runs it still holds (lease renewed)."""
    lost: list[str]
    """Runs it named that it no longer holds: stop them and drop their results."""


class ClaimBody(InboundModel):
    wait_s: float = Field(default=10.0, ge=0, le=MAX_CLAIM_WAIT_S)
    """Wait up to this long for a run (a long poll); 0 answers at once."""


class ClaimedRun(ProtocolModel):
    run_id: str
    runner_id: str
    fence: int
    attempt: int
    lease_until: float
    deadline_at: float
    context: JSONObject
    """The run's `AgentRunContext`, its MCP token being this claim's (refused once the fence moves)."""
    projection: RunProjection | None = None
    """The agent's secrets (environment variables), workspace folder on this runtime and skill files:
    hand it to the runner beside the context (`runner/run`'s `projection`); never store or log it."""


class ClaimAnswer(ProtocolModel):
    run: ClaimedRun | None
    state: str
    """The runtime's state: `draining` claims nothing."""


class PostedItem(InboundModel):
    result: JSONObject
    """One `runner/result` object as the runner sent it (validated by the host as a local one is)."""
    dropped: bool = False
    """The runner's line was over the wire limit and not read: `result` holds only `run_id`."""
    nbytes: int | None = Field(default=None, ge=0, le=2**40)
    """For a dropped result: the size of the line that was not read."""


class ResultsBody(InboundModel):
    fence: int = Field(ge=1, le=2**31 - 1)
    first_seq: int = Field(ge=1, le=2**31 - 1)
    """The number of the first result in this batch (1 for the first of a claim)."""
    results: list[PostedItem] = Field(min_length=1, max_length=MAX_BATCH_RESULTS)
    end: Literal["completed", "failed"] | None = None
    """The runner's `runner/run` answer, when it came before this batch was sent and the batch holds
    its last results: the run's end in the same request (no separate `/end`)."""


class ResultsAnswer(ProtocolModel):
    accepted_through: int
    """Every result numbered up to this is stored (a retry of stored ones is accepted again)."""
    cancel: str | None = None


class EndBody(InboundModel):
    fence: int = Field(ge=1, le=2**31 - 1)
    status: Literal["completed", "failed"]
    """The runner's `runner/run` answer."""
    last_seq: int = Field(ge=0, le=2**31 - 1)
    """The number of its last result (0: none)."""


class OutputBody(InboundModel):
    fence: int = Field(ge=1, le=2**31 - 1)
    text: str
    """The newest output lines of the runner on this claim (its plugin's stderr while the run was
    active), at most `MAX_OUTPUT_BYTES` bytes of UTF-8 without NUL."""
    cut_bytes: int = Field(default=0, ge=0, le=2**53)
    """Bytes of older output dropped on the runtime to keep `text` within the bound."""
    cut_lines: int = Field(default=0, ge=0, le=2**53)

    @field_validator("text")
    @classmethod
    def _bounded(cls, value: str) -> str:
        size = len(value.encode(errors="surrogatepass"))
        if size > MAX_OUTPUT_BYTES:
            raise ValueError(
                f"the output is {size} bytes; at most {MAX_OUTPUT_BYTES} (send the newest part, counting "
                "the rest in cut_bytes)"
            )
        return value


class OutputAnswer(ProtocolModel):
    artifact_id: str
    """The run artifact that keeps it."""
    size: int


class EndAnswer(ProtocolModel):
    run_id: str
    accepted: bool = True


__all__ = [
    "MAX_BATCH_RESULTS",
    "MAX_BODY_BYTES",
    "MAX_OUTPUT_BYTES",
    "MAX_RESULT_BYTES",
    "RECONNECT_MAX_S",
    "RUNTIME_PREFIX",
    "Capabilities",
    "ClaimAnswer",
    "ClaimBody",
    "ClaimedRun",
    "EndAnswer",
    "EndBody",
    "Harness",
    "HeartbeatAnswer",
    "HeartbeatBody",
    "HeldAnswer",
    "HeldRef",
    "OutputAnswer",
    "OutputBody",
    "PostedItem",
    "RegisterAnswer",
    "RegisterBody",
    "ResultsAnswer",
    "ResultsBody",
    "Timing",
]
