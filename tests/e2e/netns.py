"""A private network for the runtime tests: a bridge in the root namespace carrying the host's address, and
one network namespace per runtime joined to it by a veth pair (`ip netns`, `ip link`; root only).

Addresses are in a free 10.231.N.0/24 (N chosen under a lock, so parallel test workers never share one):
the bridge is 10.231.N.1, where `mcphost serve` listens; the runtimes' namespaces are .2, .3, …  Nothing
leaves the machine: the bridge has no other port and nothing routes it. `cut` takes the root end of a
runtime's veth down, so the runtime's packets (and the host's to it) vanish silently, as on a cable pulled
out; `mend` brings it back. `close` deletes everything it made, and `sweep` what a killed test worker
left behind (names carry the worker's pid).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Generator
from functools import cache
from pathlib import Path

SUBNET = "10.231"
LOCK = Path("/tmp/mcphost-test-netns.lock")
_counter = itertools.count()


@cache
def unavailable() -> str | None:
    """Why this machine cannot make network namespaces (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"mhprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout


def _quiet(*args: str) -> None:
    subprocess.run(["ip", *args], capture_output=True, timeout=30, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep() -> None:
    """Delete the namespaces and links of test workers that are gone (named mh<pid>-…)."""
    owner = re.compile(r"^mh(\d+)-")
    for line in _ip("netns", "list").splitlines():
        name = line.split()[0] if line.split() else ""
        if (found := owner.match(name)) and not _alive(int(found.group(1))):
            _quiet("netns", "del", name)
    for line in _ip("-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if (found := owner.match(name)) and not _alive(int(found.group(1))):
            _quiet("link", "del", name)


class Network:
    """The bridge with the host's address, and a namespace per runtime name given."""

    def __init__(self, runtimes: tuple[str, ...]) -> None:
        self.prefix = f"mh{os.getpid()}-{next(_counter) % 1000}"
        self.bridge = f"{self.prefix}b"
        self.namespaces = {name: f"{self.prefix}-{name}" for name in runtimes}
        self.veths = {name: f"{self.prefix}v{index}" for index, name in enumerate(runtimes)}
        self.address = ""
        """The host's address on the bridge (set by `open`)."""

    def open(self) -> None:
        sweep()
        with LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = set(re.findall(rf"inet {re.escape(SUBNET)}\.(\d+)\.", _ip("-4", "-o", "addr", "show")))
            free = next(str(n) for n in range(1, 255) if str(n) not in used)
            net = f"{SUBNET}.{free}"
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{net}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        self.address = f"{net}.1"
        for index, (name, ns) in enumerate(self.namespaces.items()):
            veth = self.veths[name]
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{net}.{index + 2}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def exec(self, name: str) -> list[str]:
        """The command prefix that runs a program in runtime `name`'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[name]]

    def cut(self, name: str) -> None:
        _ip("link", "set", self.veths[name], "down")

    def mend(self, name: str) -> None:
        _ip("link", "set", self.veths[name], "up")

    def close(self) -> None:
        """Delete the namespaces (their veths go with them) and the bridge; never raises."""
        for ns in self.namespaces.values():
            _quiet("netns", "del", ns)
        for veth in self.veths.values():
            _quiet("link", "del", veth)
        _quiet("link", "del", self.bridge)


@contextlib.contextmanager
def network(runtimes: tuple[str, ...]) -> Generator[Network]:
    made = Network(runtimes)
    try:
        made.open()
        yield made
    finally:
        made.close()
