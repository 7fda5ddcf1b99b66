"""`configure_logging`: JSON lines with an ISO 8601 timestamp, trace ids inside spans, and the access log.

Each test configures the root logger as `mcphost --log-json` does, writes to a real stream, parses what
came out line by line, and puts the root logger back.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Generator
from datetime import UTC, datetime
from typing import Any, TextIO, cast

import httpx2
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import get_current_span

from mcphost import tracing
from mcphost.cli._common import configure_logging
from mcphost.serving import bind_socket, serve_http


@pytest.fixture
def stderr() -> Generator[io.StringIO]:
    """What the handler `configure` installs writes (pytest swaps `sys.stderr` per phase, so the stream is
    set on the handler itself)."""
    stream = io.StringIO()
    root = logging.getLogger()
    ours = logging.getLogger("mcphost")  # an in-process benchmark host sets it to WARNING for its process
    # A test fake's uvicorn.Config (its default log_config) gives uvicorn's loggers their own handlers and
    # stops them propagating; `mcphost serve` (log_config=None) leaves them as Python makes them.
    uvicorn = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.access")]
    saved = (
        root.handlers[:],
        root.level,
        ours.level,
        [(u.handlers[:], u.propagate, u.level) for u in uvicorn],
    )
    ours.setLevel(logging.NOTSET)
    for logger in uvicorn:
        logger.handlers[:], logger.propagate = [], True
    try:
        yield stream
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        ours.setLevel(saved[2])
        for logger, (handlers, propagate, level) in zip(uvicorn, saved[3], strict=True):
            logger.handlers[:], logger.propagate = handlers, propagate
            logger.setLevel(level)


def configure(level: str, stream: io.StringIO) -> None:
    configure_logging(level, json_logs=True)
    [handler] = logging.getLogger().handlers
    assert isinstance(handler, logging.StreamHandler)
    cast("logging.StreamHandler[TextIO]", handler).setStream(stream)


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_log_line_has_an_iso_timestamp_level_logger_message_and_the_run(stderr: io.StringIO) -> None:
    configure("info", stderr)
    before = datetime.now(UTC)
    logging.getLogger("mcphost.test").warning("run %s stalled", "run_1", extra={"run_id": "run_1"})
    [line] = json_lines(stderr)
    stamp = datetime.fromisoformat(line["timestamp"])
    assert line["timestamp"].endswith("Z")
    assert stamp.tzinfo is not None
    assert abs((stamp - before).total_seconds()) < 60
    assert abs(stamp.timestamp() - line["ts"]) < 0.002
    assert (line["level"], line["logger"], line["msg"], line["run_id"]) == (
        "warning",
        "mcphost.test",
        "run run_1 stalled",
        "run_1",
    )
    assert "trace_id" not in line  # tracing is off


def test_with_tracing_on_a_line_logged_in_a_span_carries_its_trace_and_span_ids(stderr: io.StringIO) -> None:
    configure("info", stderr)
    provider = TracerProvider()
    tracing.use(provider)
    try:
        with tracing.span("mcphost.test"):
            context = get_current_span().get_span_context()
            logging.getLogger("mcphost.test").info("inside")
        logging.getLogger("mcphost.test").info("outside")
    finally:
        tracing.use(None)
        provider.shutdown()
    inside, outside = json_lines(stderr)
    assert inside["trace_id"] == format(context.trace_id, "032x")
    assert inside["span_id"] == format(context.span_id, "016x")
    assert len(inside["trace_id"]) == 32
    assert "trace_id" not in outside
    assert "span_id" not in outside


async def test_serve_writes_one_json_access_line_per_request_at_the_default_level(
    stderr: io.StringIO,
) -> None:
    """The README: `mcphost serve` logs one access line per request, query secrets as `***`."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    configure("warning", stderr)  # the default `--log-level`
    sock = bind_socket("127.0.0.1", 0)
    with sock:
        async with serve_http(app, sock, access_log=True) as url, httpx2.AsyncClient() as http:
            assert (await http.get(f"{url}/healthz?token=SECRET")).status_code == 204
            assert (await http.post(f"{url}/v1/events")).status_code == 204
    access = [line for line in json_lines(stderr) if line["logger"] == "uvicorn.access"]
    assert [(line["method"], line["path"], line["status"]) for line in access] == [
        ("GET", "/healthz?token=***", 204),
        ("POST", "/v1/events", 204),
    ]
    assert all(line["client"].startswith("127.0.0.1:") and line["timestamp"] for line in access)
    assert "SECRET" not in stderr.getvalue()


async def test_at_level_error_serve_writes_no_access_lines(stderr: io.StringIO) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    configure("error", stderr)
    sock = bind_socket("127.0.0.1", 0)
    with sock:
        async with serve_http(app, sock, access_log=True) as url, httpx2.AsyncClient() as http:
            assert (await http.get(f"{url}/healthz")).status_code == 204
    assert [line for line in json_lines(stderr) if line["logger"] == "uvicorn.access"] == []
