"""What the host says about its upstream tool servers without connecting to one: their states and
status, host tool names, `${NAME}` expansion, failure lines and the gateway's error.

Owns the light half of the gateway, which the API, the command line and a host with no `[tools.*]`
import; `upstream.py` (the MCP client, which needs the `mcp` package) is imported only by a gateway
that has servers.

Invariants:
- Nothing here imports the `mcp` package (tests/mcphost/cli/test_startup.py runs a host without tool
  servers and checks it never loads).
- Host names are `<server>__<tool>` with characters outside `[A-Za-z0-9_-]` replaced by `_`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from mcphost.common.excgroups import first_leaf
from mcphost.errors import ConfigError, HostError

SEPARATOR = "__"
TOOLS_TTL_S = 300.0
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class UpstreamError(HostError):
    """Raised when an upstream server is unreachable, closed the connection, or answered something
    unusable (`runtime_error`, retryable)."""


class UpstreamState(StrEnum):
    IDLE = "idle"
    """Not connected yet: nothing has needed it."""
    CONNECTING = "connecting"
    READY = "ready"
    BACKOFF = "backoff"
    """The last connection failed or was lost; the next attempt waits until `retry_at`."""
    CLOSED = "closed"


class HostToolInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    """The host name, `<server>__<tool>`."""
    tool: str
    """The upstream's own name."""
    description: str | None


class ServerStatus(BaseModel):
    """What `mcphost tools` shows for one upstream server."""

    model_config = ConfigDict(frozen=True)

    server: str
    transport: str
    target: str
    """The command (without arguments) or the URL (without query)."""
    state: UpstreamState
    last_error: str | None
    connects: int
    tools: list[HostToolInfo]


def host_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{_UNSAFE.sub('_', tool)}"


def expand_env(value: str, environ: Mapping[str, str], *, where: str) -> str:
    """`value` with every `${NAME}` replaced from `environ`.

    Raises:
        ConfigError: a referenced variable is not set (the message names it, never a value).
    """

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        found = environ.get(name)
        if found is None:
            raise ConfigError(f"{where} references ${{{name}}}, which is not set in the host's environment.")
        return found

    return _ENV_REF.sub(sub, value)


def describe_failure(exc: BaseException) -> str:
    """A one-line reason for a failure, from the innermost exception of a group."""
    exc = first_leaf(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
