"""The hosts of the multi-host harness: one network namespace each, joined by
point-to-point veth links, made here and removed here.

Each host has one address (``10.251.0.N``), put on every link it has, with
the host at the other end as its peer (``ip addr add A peer B``): a link is a
route to exactly one other host, and no host routes for another. So taking a
link down cuts exactly that pair and nothing else: a worker cut from the
database host still reaches the broker host and the outside world.

The outside world (this process: the ledger the agents write their effects
to, the callback sender, the observer's connections and the probes) is the
machine's own namespace, at ``10.251.0.254``, linked to every host; its links
are never cut.

A cut takes down the *server's* end of the link (the database or broker
host's). The client's end then loses its carrier but keeps its route, so
what the client sends is dropped silently and its connections hang, as
across a real partition, instead of failing at once with "network
unreachable" (which taking down its own end would give). Bringing the end up
again brings its route back; nothing in the client changes.

Everything made here is named ``rmh-...`` and addressed in ``10.251.0.0/24``;
``remove_leftovers`` deletes what an earlier run that crashed left with that
prefix (first stopping the processes still inside its namespaces: they were
started by that run).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

PREFIX = "rmh-"
OUTSIDE = "out"  # this machine's own namespace
OUTSIDE_ADDRESS = "10.251.0.254"


class NetworkError(RuntimeError):
    """An ``ip`` command failed: the harness cannot build its hosts."""


@dataclass(frozen=True)
class Host:
    """One machine of the deployment: a namespace and its one address."""

    name: str  # short: link names are ``rmh-<a>-<b>``, at most 15 characters
    address: str

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.name}"

    def command(self, *argv: str) -> list[str]:
        """`argv` as run on this host."""
        return ["ip", "netns", "exec", self.netns, *argv]


def ip(*argv: str, netns: str | None = None, check: bool = True) -> str:
    """Run ``ip`` (inside `netns` when given); its output."""
    command = ["ip", *(["-n", netns] if netns else []), *argv]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(command)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _end(a: str, b: str) -> str:
    """The name of `a`'s end of the link between `a` and `b`."""
    name = f"{PREFIX}{a}-{b}"
    assert len(name) <= 15, f"interface name {name!r} is too long"
    return name


class Network:
    """The hosts, the outside world and the links between them.

    ``with Network(hosts, links):`` builds them (after removing an earlier
    run's leftovers) and removes them on the way out, whatever happened."""

    def __init__(self, hosts: Sequence[Host], links: Sequence[tuple[str, str]]) -> None:
        self.hosts = {host.name: host for host in hosts}
        self.addresses = {OUTSIDE: OUTSIDE_ADDRESS} | {h.name: h.address for h in hosts}
        self.links = list(links)

    def _netns(self, name: str) -> str | None:
        return None if name == OUTSIDE else self.hosts[name].netns

    # -- building and removing ---------------------------------------------------------

    def build(self) -> None:
        remove_leftovers()
        for host in self.hosts.values():
            ip("netns", "add", host.netns)
            ip("link", "set", "lo", "up", netns=host.netns)
        for a, b in self.links:
            ip("link", "add", _end(a, b), "type", "veth", "peer", "name", _end(b, a))
            for here, there in ((a, b), (b, a)):
                netns = self._netns(here)
                if netns is not None:
                    ip("link", "set", _end(here, there), "netns", netns)
                address, peer = self.addresses[here], self.addresses[there]
                ip("addr", "add", address, "peer", peer, "dev", _end(here, there), netns=netns)
                ip("link", "set", _end(here, there), "up", netns=netns)
        for a, b in self.links:
            self.wait_link(a, b, up=True)
            self.pin_neighbours(a, b)

    def pin_neighbours(self, a: str, b: str) -> None:
        """Give each end of the link the other's MAC address for good.

        Otherwise, while the link is down, the client's ARP entry for the
        server goes stale and new connections fail at once (EHOSTUNREACH
        after an ARP timeout): a partition behind a switch or a router keeps
        its neighbour and drops packets silently, so connects hang until
        their timeout, and so they do here."""
        for here, there in ((a, b), (b, a)):
            show = ip("-o", "link", "show", _end(there, here), netns=self._netns(there))
            mac = show.split("link/ether ")[1].split()[0]
            address = self.addresses[there]
            ip(
                "neigh", "replace", address, "lladdr", mac, "dev", _end(here, there),
                "nud", "permanent", netns=self._netns(here),
            )  # fmt: skip

    def __enter__(self) -> Network:
        try:
            self.build()
        except BaseException:
            remove_leftovers()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        remove_leftovers()

    # -- partitions --------------------------------------------------------------------

    def cut(self, client: str, server: str) -> None:
        """Take `server`'s end of its link to `client` down (see the module's docstring)."""
        ip("link", "set", _end(server, client), "down", netns=self._netns(server))
        self.wait_link(client, server, up=False)

    def heal(self, client: str, server: str) -> None:
        ip("link", "set", _end(server, client), "up", netns=self._netns(server))
        self.wait_link(client, server, up=True)
        self.pin_neighbours(client, server)  # taking an end down flushed its own

    @contextlib.contextmanager
    def partition(self, client: str, *servers: str) -> Iterator[None]:
        """`client` cut from each of `servers` while the block runs; healed
        on the way out, also when the block fails."""
        try:
            for server in servers:
                self.cut(client, server)
            yield
        finally:
            for server in servers:
                self.heal(client, server)

    def carrier(self, a: str, b: str) -> bool:
        """Whether `a`'s end of the link to `b` has a carrier (both ends up)."""
        state = ip("-o", "link", "show", _end(a, b), netns=self._netns(a))
        return "LOWER_UP" in state and "NO-CARRIER" not in state

    def wait_link(self, a: str, b: str, *, up: bool, timeout: float = 10.0) -> None:
        """Until the link's client end sees the carrier come or go (the kernel
        brings a veth's carrier up a moment after the `ip` command)."""
        deadline = time.monotonic() + timeout
        while self.carrier(a, b) is not up:
            if time.monotonic() > deadline:
                raise NetworkError(f"link {a}-{b} not {'up' if up else 'down'} in {timeout:g} s")
            time.sleep(0.01)


def remove_leftovers() -> list[str]:
    """Delete every ``rmh-`` namespace (first killing the processes inside it,
    which only this harness starts there) and every ``rmh-`` link left in this
    namespace; what was removed."""
    removed: list[str] = []
    for line in ip("netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        if not name.startswith(PREFIX):
            continue
        _kill_inside(name)
        ip("netns", "del", name, check=False)
        removed.append(name)
    for line in ip("-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(PREFIX):
            ip("link", "del", name, check=False)
            removed.append(name)
    return removed


def _kill_inside(netns: str, timeout: float = 10.0) -> None:
    """SIGKILL the processes in `netns` and wait until they are gone (a
    process inside keeps a deleted namespace, and its addresses, alive)."""
    deadline = time.monotonic() + timeout
    while pids := [int(pid) for pid in ip("netns", "pids", netns, check=False).split()]:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise NetworkError(f"processes {pids} in {netns} did not die")
        time.sleep(0.05)
