"""A TCP relay a test owns, to stage an outage of PostgreSQL or Redis.

The machine's servers are shared, so an outage is never staged by stopping
one: a process under test is pointed at 127.0.0.1:<relay port> instead, and
the relay forwards to the real server while it is open. ``cut()`` stops
listening and drops every relayed connection (what a crashed or partitioned
server looks like from the client); ``open()`` serves again on the same port.
``stall()`` keeps every connection open but forwards nothing, either way (a
hung server, or one behind a stalled proxy: connections are accepted and
statements never answered) until ``flow()``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url

from resumable.dev.processes import free_port

Target = str | tuple[str, int]  # a unix socket path, or a host and port


class Relay:
    """Forwards 127.0.0.1:`port` to `target` between ``open()`` and ``cut()``."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.port = free_port()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._flowing = threading.Event()
        self._flowing.set()

    def stall(self) -> None:
        """Forward nothing more (connections stay open) until ``flow()``."""
        self._flowing.clear()

    def flow(self) -> None:
        self._flowing.set()

    def open(self) -> Relay:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def cut(self) -> None:
        """Refuse new connections and drop the relayed ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            # shutdown() wakes the thread blocked in accept(); close() alone would not.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                downstream, _ = listener.accept()
            except OSError:
                return
            family = socket.AF_UNIX if isinstance(self.target, str) else socket.AF_INET
            upstream = socket.socket(family, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target)
            except OSError:
                downstream.close()
                upstream.close()
                continue
            with self._lock:
                self._sockets += [downstream, upstream]
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(
                    target=_pump, args=(source, sink, self._flowing), daemon=True
                ).start()


def _pump(source: socket.socket, sink: socket.socket, flowing: threading.Event) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            flowing.wait()  # held while the relay stalls
            sink.sendall(data)
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)


def database_target(database_url: str) -> Target:
    """Where the PostgreSQL server of `database_url` listens (socket or host and port)."""
    url = make_url(database_url)
    socket_dir = url.query.get("host")
    if isinstance(socket_dir, tuple):
        socket_dir = socket_dir[0]
    if url.host is None and socket_dir:
        return f"{socket_dir}/.s.PGSQL.{url.port or 5432}"
    return (url.host or "127.0.0.1", url.port or 5432)


def redis_target(redis_url: str) -> Target:
    if redis_url.startswith("unix://"):
        return redis_url.removeprefix("unix://").split("?", 1)[0]
    parts = urlsplit(redis_url)
    return (parts.hostname or "127.0.0.1", parts.port or 6379)


def database_url_via(database_url: str, relay: Relay) -> str:
    """`database_url`, reached through `relay`."""
    url = make_url(database_url)
    return url.set(host="127.0.0.1", port=relay.port, query={}).render_as_string(
        hide_password=False
    )


def redis_url_via(redis_url: str, relay: Relay) -> str:
    """`redis_url`'s database, reached through `relay`."""
    database = urlsplit(redis_url).path.lstrip("/") or "0"
    if redis_url.startswith("unix://"):
        query = urlsplit(redis_url).query
        database = dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("db", "0")
    return f"redis://127.0.0.1:{relay.port}/{database}"
