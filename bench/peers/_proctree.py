"""CPU time and memory of a server's process tree, read from `/proc` (Linux only; no psutil).

Owns what "host CPU per run" means in bench/peers: the user + system time of the server process and every
descendant alive when it is read (for mcphost that includes its echo plugin process; LangGraph runs its
graph in-process). Time is summed from `/proc/PID/stat` (fields utime and stime, in clock ticks of
`SC_CLK_TCK`, usually 10 ms: a measuring round spans hundreds of ticks). A descendant that exits between
two readings takes its time with it, so neither side may start and stop processes per run; neither does.
RSS is `VmRSS` from `/proc/PID/status`, summed over the tree.

PostgreSQL's own CPU (`postgres_cpu_s`) is the same sum over the server's backends connected to one
database, found by their process title (`postgres: … <user> <database> <client> <state>`), plus the
time of the backends that have exited: the postmaster's reaped-children time (`cutime`, `cstime`), into
which Linux adds each child's CPU when the postmaster waits for it. A pool closes the connections it
opened past its size when they come back (SQLAlchemy's overflow), so at c ≥ 8 backends come and go
within a round; without their time the figure under-counted, below zero when more exited than ran.
Reaped time is the whole server's: an exited backend of another database or an autovacuum worker
counts too, so the figure is meant for a server the benchmark has to itself. The server's shared
processes that stay (WAL writer, checkpointer) serve every database and are left out.
"""

from __future__ import annotations

import os
from pathlib import Path

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after its closing one.
    return raw[raw.rindex(")") + 2 :].split()


def tree(root: int) -> list[int]:
    """`root` and its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [root], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_s(root: int) -> float:
    """User + system CPU seconds of `root`'s tree so far."""
    total = 0
    for pid in tree(root):
        fields = _stat_fields(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total * TICK_S


def rss_kib(root: int) -> int:
    """Resident memory of `root`'s tree, KiB."""
    total = 0
    for pid in tree(root):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def postgres_cpu_s(database: str, *, reaped: bool = True) -> float:
    """User + system CPU seconds so far of the PostgreSQL backends connected to `database`, plus what the
    server's exited backends used (its postmaster's reaped-children time; `reaped=False` leaves it out:
    it cannot be told apart per database, so two databases measured side by side compare without it)."""
    total = 0
    postmasters: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if not title.startswith("postgres: "):
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None:
            continue
        postmasters.add(int(fields[1]))  # every server process is the postmaster's child
        if f" {database} " in title:
            total += int(fields[11]) + int(fields[12])  # utime, stime
    for pid in postmasters if reaped else ():
        fields = _stat_fields(pid)
        if fields is not None:
            total += int(fields[13]) + int(fields[14])  # cutime, cstime: children it has waited for
    return total * TICK_S
