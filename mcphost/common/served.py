"""Where a running `mcphost serve` is reached: the record it leaves in its data directory, and URLs.

Owns `SERVING_FILE` (written by `mcphost.serving`, read by the HTTP clients of the CLI) and the mapping
of a listen address to the URL a local client uses. Imports only the standard library, so `mcphost send`
and `mcphost cancel --url` find the server without importing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SERVING_FILE = "serving.json"
"""Written into `data_dir` by a running `mcphost serve`: `{"url": <its public URL>, "pid": <its pid>}`."""


def split_listen(listen: str) -> tuple[str, int] | None:
    """`HOST:PORT` (IPv6 in brackets) → (host, port); None when it is not of that form."""
    host, sep, port = listen.rpartition(":")
    host = host.strip()
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        return None
    return host.removeprefix("[").removesuffix("]"), int(port)


def local_url(host: str, port: int) -> str:
    """The base URL a client on this machine uses for HOST:PORT (wildcard addresses become loopback)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def served_url(data_dir: Path) -> str | None:
    """The public URL recorded by a `mcphost serve` that is still running on `data_dir`, if any."""
    try:
        record = json.loads((data_dir / SERVING_FILE).read_text())
        url, pid = record["url"], record["pid"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not _alive(pid):
        return None
    return url


def advertised_url(data_dir: Path, public_url: str | None, listen: str) -> str:
    """Where clients reach a `mcphost serve` on `data_dir`: the URL a running one recorded (`SERVING_FILE`;
    it follows `--listen`), else `public_url`, else `listen` (`[host]` settings, validated on load)."""
    served = served_url(data_dir)
    if served is not None:
        return served
    if public_url is not None:
        return public_url
    parsed = split_listen(listen)
    if parsed is None:
        raise ValueError(f"listen address {listen!r} is not HOST:PORT")
    return local_url(*parsed)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    except OverflowError:
        return False
    return True
