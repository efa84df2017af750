"""The deployment's machines: which hosts there are, how they are linked, and
processes started on one of them.

A database host (PostgreSQL), a broker host (valkey), two worker hosts, a web
host and a scheduler host. There is no firewall on this machine (neither
``nft`` nor ``iptables``), so a cut by port is not possible: the broker has a
host of its own, and a worker can be cut from the broker alone by taking that
one link down. Every host but the servers is linked to both servers and to
the outside world; the servers to the outside world too (the harness's own
connections), and never to each other (they do not talk).
"""

from __future__ import annotations

import socket
import socketserver
from collections.abc import Mapping, Sequence
from pathlib import Path

from resumable.dev.fake_server import FakeServer
from resumable.dev.processes import Deployment
from tests.multihost.network import OUTSIDE, OUTSIDE_ADDRESS, Host

DB = Host("db", "10.251.0.1")
BROKER = Host("mq", "10.251.0.2")
WORKER_1 = Host("w1", "10.251.0.11")
WORKER_2 = Host("w2", "10.251.0.12")
WEB = Host("web", "10.251.0.13")
SCHEDULER = Host("sch", "10.251.0.14")
HOSTS = (DB, BROKER, WORKER_1, WORKER_2, WEB, SCHEDULER)
CLIENTS = (WORKER_1, WORKER_2, WEB, SCHEDULER)
LINKS = [
    *((client.name, server.name) for client in CLIENTS for server in (DB, BROKER)),
    *((host.name, OUTSIDE) for host in HOSTS),
]


class HostDeployment(Deployment):
    """A ``Deployment`` whose processes run on `host` (``ip netns exec``),
    logging under ``log_dir/<host>``."""

    def __init__(
        self, host: Host, env: Mapping[str, str], log_dir: Path, *, cwd: Path, grace_seconds: float
    ) -> None:
        (log_dir / host.name).mkdir(parents=True, exist_ok=True)
        super().__init__(env, log_dir / host.name, cwd=cwd, grace_seconds=grace_seconds)
        self.host = host

    def command(self, args: Sequence[str]) -> list[str]:
        """``Deployment``'s command, run on this host. ``ip netns exec`` execs
        the command (no process in between), so the child's pid and process
        group are the command's own, as ``Deployment`` expects."""
        return self.host.command(*super().command(args))

    def label(self, name: str) -> str:
        return f"{name}@{self.host.name}"


def serve_outside(fake: FakeServer) -> None:
    """Move `fake`, before it serves, from 127.0.0.1 (``FakeServer`` binds
    only there, which no other host reaches) to the outside world's address.

    ``socketserver``'s own bind, not ``HTTPServer``'s: that one looks the
    address up in DNS (``getfqdn``), which for this address can only time out."""
    server = fake.server
    server.socket.close()
    server.socket = socket.socket(server.address_family, server.socket_type)
    server.server_address = (OUTSIDE_ADDRESS, 0)
    socketserver.TCPServer.server_bind(server)
    server.server_activate()
    fake.url = f"http://{OUTSIDE_ADDRESS}:{server.server_address[1]}"
