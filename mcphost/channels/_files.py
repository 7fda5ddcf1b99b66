"""Inbound files: the fetchers that give a channel's lazy artifacts their bytes on first read.

Owns turning an `Attachment.locator` into a byte stream: the adapter's `file_request` says where (and
with which token), one streamed GET brings the bytes, and a failure becomes an `ArtifactFetchError`
that says what the platform answered. Does not own the bound, storing or retrying (`ArtifactStore`
cuts the stream at the channel's `max_attachment_bytes`, records a failure and lets the next read try
again), nor which files an event carries (the adapters' `normalize`).

Invariants:
- Nothing is fetched when an event arrives; `channel_files` only registers one fetcher per channel on
  the artifact store for as long as the host runs.
- Every wait is bounded by the channel's `timeout_s` (connect, each read); a `Content-Length` past the
  bound is refused before a byte is read, and a platform that sends more than it declared is cut by
  the store at the bound.
- A 404/410 says the platform no longer has the file, a 401/403 that the token was refused (Slack: add
  the `files:read` scope), a 5xx or a timeout that the platform failed; none leaks the token or URL
  query (Telegram's file URL carries the token, so it is never in a message).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx2

from mcphost.channels._adapter import ChannelAdapter, ChannelSendError
from mcphost.errors import ArtifactFetchError, PayloadTooLargeError
from mcphost.protocol import JSONObject
from mcphost.stores import ArtifactStore, Fetcher

logger = logging.getLogger(__name__)
MAX_REDIRECTS = 3


def _failed(source: ChannelAdapter, why: str, **details: object) -> ArtifactFetchError:
    return ArtifactFetchError(
        f"The {source.platform} file of channel {source.channel_id!r} could not be fetched: {why}. Reading "
        "the artifact again tries again.",
        details={"channel": source.channel_id, **details},
    )


def fetcher(source: ChannelAdapter, http: httpx2.AsyncClient) -> Fetcher:
    """The fetcher of `source`'s files: its locator in, the file's bytes out as they arrive."""
    timeout = httpx2.Timeout(source.config.timeout_s)

    async def fetch(locator: JSONObject) -> AsyncIterator[bytes]:
        try:
            url, headers = await source.file_request(http, locator)
        except ChannelSendError as exc:
            raise _failed(source, str(exc), reason="locate") from None
        try:
            async with http.stream("GET", url, headers=headers, timeout=timeout) as response:
                status = response.status_code
                if status in (404, 410):
                    raise _failed(
                        source, f"HTTP {status}: the platform no longer has the file", status=status
                    )
                if status in (401, 403):
                    raise _failed(
                        source,
                        f"HTTP {status}: the platform refused the bot token (Slack needs the files:read scope)",
                        status=status,
                    )
                if status >= 300:
                    raise _failed(source, f"HTTP {status} from the platform", status=status)
                declared = response.headers.get("content-length", "")
                limit = source.config.max_attachment_bytes
                if declared.isdigit() and int(declared) > limit:
                    raise PayloadTooLargeError(
                        f"The file is {declared} bytes (Content-Length); the limit is {limit}.",
                        details={"max_bytes": limit},
                    )
                async for chunk in response.aiter_bytes():
                    yield chunk
        except httpx2.TimeoutException:
            raise _failed(
                source, f"no answer within {source.config.timeout_s:g} s", reason="timeout"
            ) from None
        except httpx2.HTTPError as exc:
            raise _failed(source, type(exc).__name__, reason="transport") from None

    return fetch


@asynccontextmanager
async def channel_files(
    channels: Mapping[str, ChannelAdapter], artifacts: ArtifactStore
) -> AsyncGenerator[None]:
    """Register every channel's fetcher on `artifacts` while the context is open (no HTTP client, and
    so no TLS context, without channels)."""
    if not channels:
        yield
        return
    async with httpx2.AsyncClient(follow_redirects=True, max_redirects=MAX_REDIRECTS) as http:
        for channel_id, source in channels.items():
            artifacts.fetchers[channel_id] = fetcher(source, http)
        try:
            yield
        finally:
            for channel_id in channels:
                artifacts.fetchers.pop(channel_id, None)
