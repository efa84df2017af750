"""Where CPU time goes during a benchmark, and who waited for a CPU (Linux /proc).

On a small machine shared with other work, throughput moves with the load of
others; CPU seconds per step, split between the step issuers, PostgreSQL,
Valkey and the rest of the machine, move much less. The servers are measured
only when they run on this machine (the embedded ones do).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis

from benchmarks.harness.database import scalar
from resumable._internal import procfs


@dataclass(frozen=True)
class ServerPids:
    """The local servers' main processes (None: remote or not found)."""

    postmaster: int | None
    valkey: int | None

    @classmethod
    def find(cls, pg_url: str, redis_url: str) -> ServerPids:
        postmaster: int | None = None
        valkey: int | None = None
        try:
            checkpointer = scalar(
                pg_url, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"
            )
            postmaster = procfs.parent(int(checkpointer))
        except (ValueError, TypeError, psycopg.Error):
            pass
        client = redis.Redis.from_url(redis_url)
        try:
            pid = int(client.info("server")["process_id"])
            valkey = pid if procfs.pid_alive(pid) else None
        except (redis.RedisError, KeyError, ValueError):
            pass
        finally:
            client.close()
        return cls(postmaster, valkey)

    def all(self) -> list[int]:
        """The servers' processes with PostgreSQL's backends and helpers."""
        found = [pid for pid in (self.postmaster, self.valkey) if pid is not None]
        if self.postmaster is not None:
            found += procfs.children(self.postmaster)
        return found


@dataclass
class CpuSample:
    """CPU seconds: the step issuers (workers or raw clients), this process, the servers,
    and the whole machine (busy and total)."""

    clients: float
    bench: float
    postgres: float
    valkey: float
    machine_busy: float
    machine_total: float

    def since(self, before: CpuSample) -> CpuSample:
        return CpuSample(
            self.clients - before.clients,
            self.bench - before.bench,
            self.postgres - before.postgres,
            self.valkey - before.valkey,
            self.machine_busy - before.machine_busy,
            self.machine_total - before.machine_total,
        )

    @property
    def used(self) -> float:
        """What the run itself used: issuers, this process and the servers."""
        valkey = 0.0 if math.isnan(self.valkey) else self.valkey
        return self.clients + self.postgres + valkey + self.bench

    def describe(self, steps: int, who: str) -> str:
        def per_step(seconds: float) -> str:
            return f"{seconds / steps * 1e3:.3f}"

        others = self.machine_busy - self.used
        return (
            f"ms/step: {who} {per_step(self.clients)}, postgres {per_step(self.postgres)},"
            f" valkey {per_step(self.valkey)}, benchmark process {per_step(self.bench)},"
            f" everything else {per_step(others)}; machine busy"
            f" {self.machine_busy / self.machine_total:.0%} of {os.cpu_count()} CPUs"
        )


def tree_seconds(pid: int, *, reaped_children: bool = False) -> float | None:
    """CPU seconds of a process and its live children (with `reaped_children`,
    also of the children it has waited for); None if the process is gone."""
    own = procfs.cpu_seconds(pid, reaped_children=reaped_children)
    if own is None:
        return None
    return own + sum(procfs.cpu_seconds(child) or 0.0 for child in procfs.children(pid))


class CpuMeter:
    """Samples CPU seconds of given processes, the servers and the machine."""

    def __init__(self, servers: ServerPids) -> None:
        self.servers = servers

    @classmethod
    def find(cls, pg_url: str, redis_url: str) -> CpuMeter:
        return cls(ServerPids.find(pg_url, redis_url))

    def sample(self, pids: list[int]) -> CpuSample:
        nan = float("nan")
        try:
            clients = sum(procfs.cpu_seconds(pid) or 0.0 for pid in pids)
            cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        except (OSError, IndexError, ValueError):
            return CpuSample(nan, nan, nan, nan, nan, nan)
        tick = os.sysconf("SC_CLK_TCK")
        busy, total = (sum(cpu) - cpu[3] - cpu[4]) / tick, sum(cpu) / tick  # not idle/iowait
        times = os.times()
        return CpuSample(
            clients,
            times.user + times.system,
            self._postgres(),
            self._seconds(self.servers.valkey),
            busy,
            total,
        )

    def _postgres(self) -> float:
        """The postmaster with its reaped children, plus its live children."""
        postmaster = self.servers.postmaster
        if postmaster is None:
            return float("nan")
        # A child that exited meanwhile is counted in the postmaster's reaped time.
        total = tree_seconds(postmaster, reaped_children=True)
        return float("nan") if total is None else total

    def backends_seconds(self, pids: Sequence[int]) -> float:
        """CPU seconds of those of `pids` that are backends of the local
        postmaster (a remote server's backend pid names no process here)."""
        if self.servers.postmaster is None or not pids:
            return 0.0
        local = set(procfs.children(self.servers.postmaster))
        return sum(procfs.cpu_seconds(pid) or 0.0 for pid in pids if pid in local)

    @staticmethod
    def _seconds(pid: int | None) -> float:
        seconds = procfs.cpu_seconds(pid) if pid is not None else None
        return float("nan") if seconds is None else seconds


# -- who waited for a CPU ---------------------------------------------------------------


def _run_queue_ns(pid: int) -> int:
    """Nanoseconds the threads of `pid` have spent runnable but waiting for a CPU."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # the thread exited meanwhile
    return total


def _cpu_pressure_us() -> int | None:
    """Machine-wide microseconds in which some runnable task waited for a CPU (PSI)."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return int(line.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class Contention:
    """Who waited for a CPU: the machine (PSI) and some processes (run queues)."""

    at: float
    pressure_us: int | None
    waited_ns: dict[int, int]  # per process; a process new since `before` counts from 0

    @classmethod
    def sample(cls, pids: list[int]) -> Contention:
        waited: dict[int, int] = {}
        for pid in pids:
            try:
                waited[pid] = _run_queue_ns(pid)
            except OSError:
                continue
        return cls(time.monotonic(), _cpu_pressure_us(), waited)

    def describe(self, before: Contention, per: int, who: str, what: str) -> str:
        parts = []
        if self.pressure_us is not None and before.pressure_us is not None:
            share = (self.pressure_us - before.pressure_us) / 1e6 / (self.at - before.at)
            parts.append(f"some task waited for a CPU {share:.0%} of the time (PSI, machine-wide)")
        if self.waited_ns and per:
            total = sum(ns - before.waited_ns.get(pid, 0) for pid, ns in self.waited_ns.items())
            parts.append(f"{who} waited {total / 1e6 / per:.2f} ms per {what} in run queues")
        return "; ".join(parts) or "not measurable here (no /proc)"


@dataclass(frozen=True)
class GroupCpu:
    """CPU seconds so far of named groups of processes (each with its live
    children) and of the servers and this process: what a benchmark reports
    per resume or per step, by process."""

    seconds: dict[str, float]

    @classmethod
    def sample(
        cls,
        meter: CpuMeter,
        groups: dict[str, list[int]],
        own_backends: Sequence[int] = (),
    ) -> GroupCpu:
        """`own_backends`: the PostgreSQL backends of this process's own
        connections (its pollers), whose CPU is the benchmark's, not the
        deployment's: counted under "this process", not under "postgres"."""
        servers = meter.sample([])
        own = meter.backends_seconds(own_backends)
        return cls(
            {
                **{
                    name: sum(tree_seconds(pid) or 0.0 for pid in pids)
                    for name, pids in groups.items()
                },
                "postgres": servers.postgres - own,
                "valkey": servers.valkey,
                "this process": servers.bench + own,
            }
        )

    def deployment_ms(self, before: GroupCpu, count: int) -> float:
        """Milliseconds of CPU per one of `count`, every group but this process."""
        total = sum(self.seconds.values()) - sum(before.seconds.values())
        own = self.seconds["this process"] - before.seconds["this process"]
        return (total - own) / count * 1e3

    def describe(self, before: GroupCpu, count: int) -> str:
        """Milliseconds of CPU per one of `count` (resumes, steps), by group,
        since `before`; the total of the deployment (every group but this
        process: the benchmark's senders and pollers are not the system's
        cost) and of everything."""
        parts = [
            f"{name} {(seconds - before.seconds[name]) / count * 1e3:.2f}"
            for name, seconds in self.seconds.items()
        ]
        total = sum(self.seconds.values()) - sum(before.seconds.values())
        return (
            f"{', '.join(parts)}; the deployment {self.deployment_ms(before, count):.2f} ms"
            f" (all but this process), in all {total / count * 1e3:.2f} ms"
        )


class MeterWithServer(CpuMeter):
    """A meter that also counts one more server's CPU (a PgBouncer, a
    RabbitMQ node's VM) as one of the clients' processes, and keeps its
    share apart (``server_seconds``)."""

    def __init__(self, inner: CpuMeter, server_pid: int | None) -> None:
        super().__init__(inner.servers)
        self.server_pid = server_pid
        self.server_samples: list[float] = []

    def sample(self, pids: list[int]) -> CpuSample:
        if self.server_pid is None:
            return super().sample(pids)
        self.server_samples.append(procfs.cpu_seconds(self.server_pid) or 0.0)
        return super().sample([*pids, self.server_pid])

    def server_seconds(self) -> float:
        """The server's CPU between the last two samples (a run's timed part)."""
        if len(self.server_samples) < 2:
            return 0.0
        return self.server_samples[-1] - self.server_samples[-2]

    def parts_per_step(self, cpu: CpuSample, steps: int, server: str) -> dict[str, float]:
        """A run's CPU (`cpu`, its timed part) in ms a step by process: the
        server apart from the workers it was counted with, named `server`."""
        per_step = 1e3 / steps
        server_ms = self.server_seconds() * per_step
        return {
            "workers": cpu.clients * per_step - server_ms,
            server: server_ms,
            "postgres": cpu.postgres * per_step,
            "valkey": cpu.valkey * per_step,
            "benchmark": cpu.bench * per_step,
        }
