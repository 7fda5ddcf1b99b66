"""The `mcphost-bridge` command (also `python -m mcphost_bridge`): parse arguments, set up stderr logging, relay.

Owns the command line and the process's logging configuration, nothing else. Everything the command imports
is the standard library (`relay` and its helpers included), so a client's first message is answered as soon
as the interpreter is up (tests/bridge/test_main.py pins the modules loaded). stdout is the protocol channel:
apart from `--help`, nothing here writes to it. Every diagnostic goes to stderr, prefixed `mcphost-bridge:`,
with the token redacted should it ever appear in a message. Exit codes: 0 after stdin ends, 1 when the
endpoint refuses, is missing or cannot be reached (one line on stderr says which), 2 for bad arguments, 128+N
after signal N.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence

from mcphost_bridge.relay import DEFAULT_TOKEN_ENV, BridgeConfig, BridgeError, run_bridge

_PROG = "mcphost-bridge"
# RFC 9110 field-name token.
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")

_DESCRIPTION = """\
Relay MCP JSON-RPC between this process's stdio (newline-delimited JSON, as MCP stdio clients such as
Claude Code, Codex or an IDE speak it) and a Streamable HTTP MCP endpoint. Both protocol eras work: the
2025-11-25 handshake era (initialize, Mcp-Session-Id, a GET stream for server-initiated messages) and the
stateless 2026-07-28 era (per-request _meta envelope, Mcp-Method/Mcp-Name headers). Messages pass through
unchanged; stdout carries nothing but protocol."""

_EPILOG = f"""\
The bearer token is read from the environment, never from the command line: ${DEFAULT_TOKEN_ENV} unless
--token-env names another variable. It is sent as "Authorization: Bearer <token>" and never printed.

exit status: 0 when stdin ends (the session is deleted first), 1 when the endpoint refuses the token
(401/403), is not found (404) or cannot be reached, 2 for bad arguments, 128+N after signal N.

example:
  {DEFAULT_TOKEN_ENV}=... {_PROG} --url http://127.0.0.1:8765/runs/run_01J.../mcp"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and for `--help`)."""
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", required=True, help="the Streamable HTTP MCP endpoint (http:// or https://)")
    parser.add_argument(
        "--token-env",
        metavar="NAME",
        default=None,
        help=f"environment variable holding the bearer token (default: {DEFAULT_TOKEN_ENV}; when given, it must be set)",
    )
    parser.add_argument(
        "--header",
        metavar="K=V",
        action="append",
        default=[],
        help="extra HTTP header for every request; repeatable (do not put secrets here: argv is visible to others)",
    )
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=float,
        default=10.0,
        help="seconds to connect, and to wait for each step of shutting down (default: %(default)g)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details to stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bridge; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    url: str = args.url
    if not url.startswith(("http://", "https://")):
        parser.error(f"--url must be an http:// or https:// URL, got {url!r}")
    timeout: float = args.timeout
    if not timeout > 0:
        parser.error(f"--timeout must be a positive number of seconds, got {timeout:g}")
    headers: dict[str, str] = {}
    for item in args.header:
        name, sep, value = str(item).partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not _HEADER_NAME.fullmatch(name) or "\r" in value or "\n" in value:
            parser.error(f"--header expects K=V with an HTTP header name K, got {item!r}")
        headers[name] = value
    token_env: str = args.token_env or DEFAULT_TOKEN_ENV
    token = os.environ.get(token_env) or None
    if args.token_env is not None and token is None:
        parser.error(f"--token-env names {token_env!r}, but that environment variable is not set or empty")

    _configure_logging(verbose=args.verbose, secret=token)
    config = BridgeConfig(url=url, token=token, headers=headers, timeout=timeout, token_env=token_env)
    try:
        return run_bridge(config)
    except BridgeError as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr, flush=True)
        return 1


class _StderrFormatter(logging.Formatter):
    """One line per record (a traceback only when verbose), with the token redacted."""

    def __init__(self, *, verbose: bool, secret: str | None) -> None:
        super().__init__(f"{_PROG}: %(message)s")
        self._verbose = verbose
        self._secret = secret

    def format(self, record: logging.LogRecord) -> str:
        if not self._verbose and record.exc_info:
            error = record.exc_info[1]
            record = logging.makeLogRecord(record.__dict__)
            record.msg, record.args = f"{record.getMessage()}: {error}", None
            record.exc_info, record.exc_text = None, None
        text = super().format(record)
        return text.replace(self._secret, "***") if self._secret else text


def _configure_logging(*, verbose: bool, secret: str | None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StderrFormatter(verbose=verbose, secret=secret))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)


if __name__ == "__main__":
    raise SystemExit(main())
