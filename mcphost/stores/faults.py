"""Storage faults in words an operator can act on: why a database or `data_dir` cannot be opened, and
which `OSError`s mean a full disk.

Owns `open_failure` (the one-line reason `open_stores` gives when the host cannot start on its storage)
and `is_disk_full`. Does not own opening anything (`engine.py`, `open_stores`) nor how errors become exit
codes or HTTP statuses (`mcphost.cli`, `mcphost.app`).

Invariants:
- A message names the database URL with its password hidden, says what failed and what to do, and is one
  line: no driver text beyond its first line, no SQL, no traceback.
- Driver errors are found anywhere in the chain (`__cause__`, `__context__`, SQLAlchemy's `orig`), so the
  reason is the same whether the engine raised the driver's error or a `StorageUnavailableError` around
  it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from mcphost.errors import ConfigError

DISK_FULL_ERRNOS: frozenset[int] = frozenset({errno.ENOSPC, errno.EDQUOT})
_ENV_HINT = "database_url (or MCPHOST_DATABASE_URL)"


def is_disk_full(exc: BaseException) -> bool:
    """True when `exc` (or an error it wraps) is a write that found no room left (ENOSPC, EDQUOT)."""
    return any(isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS for e in _chain(exc))


def redacted_url(url: str) -> str:
    """`url` with its password shown as `***`."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # a URL SQLAlchemy cannot parse has no password it knows of
        return url


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        orig = getattr(current, "orig", None)
        for nxt in (orig, current.__cause__, current.__context__):
            if isinstance(nxt, BaseException):
                todo.append(nxt)


def first_line(exc: BaseException) -> str:
    """The first line of `exc`'s message (its type name when it has none), at most 200 characters."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _os_reason(exc: OSError) -> str:
    reason = exc.strerror or first_line(exc)
    if exc.errno == errno.ENOTDIR:
        reason = "a regular file is in the way (not a directory)"
    elif exc.errno == errno.EEXIST:
        reason = "it exists and is not a directory"
    where = exc.filename if exc.filename is not None else None
    return f"{reason}: {where}" if where else reason


def writable(path: Path) -> bool:
    """Whether this process may write `path` and its file system is mounted read-write (False when
    either cannot be told)."""
    try:
        return os.access(path, os.W_OK) and not os.statvfs(path).f_flag & os.ST_RDONLY
    except OSError:
        return False


def _read_only(database_url: str) -> bool:
    """True when a SQLite file exists and it, or the file system holding it, cannot be written."""
    name = make_url(database_url).database
    if not name or name == ":memory:":
        return False
    path = Path(name)
    return path.exists() and not writable(path)


def open_failure(exc: BaseException, *, database_url: str, data_dir: Path, stage: str) -> ConfigError | None:
    """The one-line reason the host cannot start on this storage, or None when `exc` is not a storage fault.

    `stage` is "data_dir" while creating the data directory, "database" while opening and migrating.
    """
    url = redacted_url(database_url)
    chain = list(_chain(exc))
    names = {type(e).__name__ for e in chain}
    texts = " | ".join(first_line(e) for e in chain).lower()
    oserror = next((e for e in chain if isinstance(e, OSError)), None)
    if stage == "data_dir":
        if oserror is None:
            return None
        return ConfigError(
            f"Cannot use data_dir {str(data_dir)!r}: {_os_reason(oserror)}. Point [host] data_dir (or "
            "MCPHOST_DATA_DIR) at a directory mcphost can create and write."
        )
    sqlite = make_url(database_url).get_backend_name() == "sqlite"
    if sqlite:
        if "readonly database" in texts or "read-only file system" in texts or _read_only(database_url):
            reason = "the file or its file system is read-only"
        elif "unable to open database file" in texts:
            reason = "unable to open or create the file (is its folder writable, on a writable file system?)"
        elif "database is locked" in texts:
            return ConfigError(
                f"Cannot open the SQLite database {url}: another process kept it locked past the busy "
                "timeout. Stop the other process (`fuser` on the file names it), or set "
                f"{_ENV_HINT} to another file."
            )
        elif "disk i/o error" in texts or "database disk image is malformed" in texts:
            reason = f"the file is damaged or unreadable ({first_line(chain[-1])})"
        elif oserror is not None:
            reason = _os_reason(oserror)
        elif any(n in names for n in ("OperationalError", "DatabaseError", "DBAPIError")):
            reason = first_line(chain[-1])
        else:
            return None
        return ConfigError(
            f"Cannot open the SQLite database {url}: {reason}. Make the file and its folder writable by "
            f"the user running mcphost, or set {_ENV_HINT} to another file."
        )
    parsed = make_url(database_url)
    where = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
    if "InvalidCatalogNameError" in names:
        return ConfigError(
            f"The PostgreSQL database {parsed.database!r} does not exist ({url}): create it (createdb -h "
            f"{parsed.host or 'localhost'} -p {parsed.port or 5432}"
            + (f" -U {parsed.username}" if parsed.username else "")
            + f" {parsed.database}) or fix {_ENV_HINT}."
        )
    if names & {"InvalidPasswordError", "InvalidAuthorizationSpecificationError"}:
        return ConfigError(
            f"PostgreSQL at {where} refused the login ({url}): {first_line(chain[-1])}. Check the user "
            f"and password in {_ENV_HINT}."
        )
    if "ReadOnlySQLTransactionError" in names or "read-only transaction" in texts:
        return ConfigError(
            f"The PostgreSQL database {url} is read-only (a standby, or default_transaction_read_only): "
            f"point {_ENV_HINT} at the writable primary."
        )
    if oserror is not None or "ConnectionDoesNotExistError" in names or "connection" in texts:
        reason = _os_reason(oserror) if oserror is not None else first_line(chain[-1])
        return ConfigError(
            f"Cannot connect to PostgreSQL at {where} ({url}): {reason}. Start the server, or fix the host "
            f"and port in {_ENV_HINT}."
        )
    if any(n in names for n in ("OperationalError", "DatabaseError", "DBAPIError", "InterfaceError")):
        return ConfigError(
            f"Cannot open the PostgreSQL database {url}: {first_line(chain[-1])}. Check {_ENV_HINT} and "
            "that the database is reachable and writable."
        )
    return None
