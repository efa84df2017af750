"""The partitions: the fault matrix's phases (``tests/faults/matrix.py``: a
batch of sessions, the fault, every session finished and checked, every
process probed), with a link taken down and brought back up as the fault,
and what each partition must show besides, checked from outside (the
database, the ledger, the callback sender, the processes' logs)."""

from __future__ import annotations

import argparse
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime

from benchmarks.harness import Services
from resumable.client import Client
from tests.faults.callbacks import CallbackSender
from tests.faults.fleet import Fleet, WorkerGroup, wait_for
from tests.faults.ledger import Ledger
from tests.faults.matrix import Matrix, PhaseResult, http_get
from tests.multihost.hosts import BROKER, DB, SCHEDULER, WEB, WORKER_1
from tests.multihost.network import Network
from tests.multihost.servers import BrokerHost

# How long after a partition heals every process must be consuming again.
CONSUMING_AGAIN_SECONDS = 30.0

PARTITIONS = [
    "baseline",
    "worker_cut",
    "worker_broker_cut",
    "web_broker_cut",
    "scheduler_cut",
    "short_cut",
]

# What a worker logs when it finds a lease of its own gone: the lease
# keeper's failed renewal, a step commit the fence refused, a tool call or
# callback the fence refused (``resumable/queue/lease.py``, ``runner.py``).
LEASE_LOST = re.compile(
    r"\[session=(?P<context>[^\]]*)\] (?:"
    r"(?P<keeper>lease on session (?P<sid>[0-9a-f-]{36}) \(epoch \d+\) was taken over)"
    r"|(?P<commit>step \S+ not committed: another worker owns the session)"
    r"|(?P<during>lease lost during step)"
    r")"
)


class Partitions(Matrix):
    """The fault matrix across hosts, its faults the partitions."""

    def __init__(
        self,
        args: argparse.Namespace,
        services: Services,
        broker: BrokerHost,
        fleet: Fleet,
        client: Client,
        ledger: Ledger,
        network: Network,
        sender: CallbackSender,
    ) -> None:
        super().__init__(args, services, broker, fleet, client, ledger)
        self.network = network
        self.sender = sender
        self.offsets: dict[int, int] = {}  # worker process group -> log length at phase start

    # -- a phase, with what it checks afterwards -------------------------------------------

    def run_phase(self, name: str, inject: Callable[[PhaseResult], None]) -> PhaseResult:
        self.offsets = {g.process.pid: len(g.process.output()) for g in self.fleet.workers}
        with self._observe() as conn:
            row = conn.execute("SELECT now()").fetchone()
        assert row is not None
        self.phase_began: datetime = row[0]
        result = super().run_phase(name, inject)
        after: Callable[[PhaseResult], None] | None = getattr(self, f"{name}_after", None)
        if after is not None:
            after(result)
        return result

    def probe(self, phase: str, result: PhaseResult) -> None:
        """The fault matrix's probe, again while a process has not come back
        yet, for at most ``CONSUMING_AGAIN_SECONDS``: a worker whose broker
        connection timed out comes back only after its reconnect backoff, and
        one probe batch may be done by the others before then. How long it
        took is noted; a process still not consuming after that fails."""
        began = time.monotonic()
        rounds = 0
        while True:
            rounds += 1
            attempt = PhaseResult(phase)
            super().probe(phase, attempt)
            if not attempt.not_consuming or time.monotonic() - began > CONSUMING_AGAIN_SECONDS:
                break
        result.not_consuming += attempt.not_consuming
        if rounds > 1:
            result.notes.append(
                f"every process consuming after {rounds} probe rounds"
                f" ({time.monotonic() - began:.1f} s)"
            )

    @property
    def cut_off(self) -> WorkerGroup:
        """The worker group on the worker host the worker partitions cut."""
        return next(g for g in self.fleet.workers if g.place.address == WORKER_1.address)

    def since_phase(self, group: WorkerGroup) -> str:
        return group.process.output()[self.offsets.get(group.process.pid, 0) :]

    def lease_lost_lines(self, group: WorkerGroup) -> list[tuple[str, str]]:
        """(session, kind) of each lease-lost line `group` logged in this phase."""
        found = []
        for match in LEASE_LOST.finditer(self.since_phase(group)):
            kind = next(k for k in ("keeper", "commit", "during") if match.group(k))
            found.append((match.group("sid") or match.group("context"), kind))
        return found

    def held_by(self, group: WorkerGroup) -> dict[uuid.UUID, int]:
        """Session -> epoch of each live lease a process of `group` holds
        (a lease owner is ``host:pid:thread``)."""
        pids = {str(pid) for pid in group.leaves()}
        with self._observe() as conn:
            rows = conn.execute(
                "SELECT id, lease_epoch, lease_owner FROM sessions WHERE status = 'running'"
                " AND lease_owner IS NOT NULL AND lease_expires_at > now()"
            ).fetchall()
        return {row[0]: int(row[1]) for row in rows if owner_pid(str(row[2])) in pids}

    def recovered(self) -> list[tuple[uuid.UUID, str]]:
        """(session, previous owner) of each lease another worker took over
        in this phase: a claim of a session still ``running`` under an
        expired (or dead worker's) lease writes ``lease_recovered``."""
        with self._observe() as conn:
            rows = conn.execute(
                "SELECT session_id, payload->>'previous_owner' FROM audit_events"
                " WHERE event_type = 'lease_recovered' AND created_at >= %s",
                (self.phase_began,),
            ).fetchall()
        return [(row[0], str(row[1])) for row in rows]

    def wait_holding(self, group: WorkerGroup) -> dict[uuid.UUID, int]:
        """The leases `group` holds, once it holds one."""
        held: dict[uuid.UUID, int] = {}

        def holding() -> bool:
            held.clear()
            held.update(self.held_by(group))
            return bool(held)

        wait_for(holding, 60, f"{group.process.name} to hold leases")
        return held

    def hold_cut(self, seconds: float, until: Callable[[], bool] = lambda: True) -> None:
        """Keep the partition for `seconds` (the fault's length, chosen), and
        then until `until()` (what it must have caused), at most a minute."""
        time.sleep(seconds)
        wait_for(until, 60, "what the partition must cause")

    @property
    def long_cut(self) -> float:
        """A partition longer than a lease, and than a broker timeout (5 s)."""
        return float(max(self.args.lease * 2.5, 6.0))

    # -- the partitions ------------------------------------------------------------------

    def baseline(self, result: PhaseResult) -> None:
        """No fault: the workload across the hosts, checked the same way."""
        result.notes.append("no partition")

    def worker_cut(self, result: PhaseResult) -> None:
        """A worker host cut from PostgreSQL and the broker while it holds
        leases, longer than the lease: another host takes over; back on the
        network, the cut-off worker's writes are refused by the fence, and it
        says so once per lease and goes on consuming (the probe)."""
        group = self.cut_off
        pids = {str(pid) for pid in group.leaves()}
        held = self.wait_holding(group)
        taken: set[uuid.UUID] = set()
        with self.network.partition(WORKER_1.name, DB.name, BROKER.name):
            result.notes.append(f"cut w1 from db and mq holding {len(held)} lease(s)")

            def took_over() -> bool:
                taken.update(sid for sid, was in self.recovered() if owner_pid(was) in pids)
                return bool(taken)

            try:
                self.hold_cut(self.long_cut, took_over)
            except TimeoutError:
                result.problems.append(f"no lease of the cut-off worker taken over: {held}")
        result.notes.append(f"{len(taken)} taken over by the other host")
        if not taken:
            return
        lost = {str(sid) for sid in taken}
        try:
            wait_for(
                lambda: any(sid in lost for sid, _ in self.lease_lost_lines(group)),
                60,
                "the cut-off worker to log that it lost a lease taken over",
            )
        except TimeoutError as exc:
            tail = self.since_phase(group)[-3000:]
            result.problems.append(f"{exc}; its log since the cut:\n{tail}")

    def worker_cut_after(self, result: PhaseResult) -> None:
        lines = self.lease_lost_lines(self.cut_off)
        kinds = Counter(kind for _, kind in lines)
        renewals = self.since_phase(self.cut_off).count("lease renewal failed")
        result.notes.append(
            "lease-lost lines: "
            + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
            + f"; renewal failures logged {renewals}"
        )
        for (sid, kind), times in Counter(lines).items():
            if times > 1:
                result.problems.append(
                    f"w1 logged its lost lease on {sid} ({kind}) {times} times;"
                    f" its audit trail:\n{self.audit_trail(sid)}"
                )

    def audit_trail(self, session_id: str) -> str:
        """A session's audit events, one per line (what a problem shows)."""
        with self._observe() as conn:
            rows = conn.execute(
                "SELECT created_at, seq, step, event_type, payload FROM audit_events"
                " WHERE session_id = %s ORDER BY id",
                (session_id,),
            ).fetchall()
        return "\n".join(
            f"    {row[0]:%H:%M:%S.%f} seq={row[1]} {row[2]} {row[3]} {row[4]}" for row in rows
        )

    def worker_broker_cut(self, result: PhaseResult) -> None:
        """A worker host cut from the broker only: it goes on committing
        the steps it holds (PostgreSQL is reachable), its wake-ups are
        redelivered to others or reconciled, and it consumes again after."""
        group = self.cut_off
        self.wait_holding(group)
        with self.network.partition(WORKER_1.name, BROKER.name):
            result.notes.append("cut w1 from mq")
            self.hold_cut(self.long_cut)

    def web_broker_cut(self, result: PhaseResult) -> None:
        """The web host cut from the broker: callbacks are still stored and
        answered within the sender's 5 s, and their sessions resume after the
        link returns (the reconciler enqueues what the web could not). One
        send may time out: the one whose wake-up finds the broker gone waits
        for the socket timeout (5 s); the web's next sends are not tried
        until a ping reaches the broker (``resumable/broker/send_gate.py``)."""
        sent, errors = len(self.sender.sent), self.sender.errors.copy()

        def tried() -> bool:
            return len(self.sender.sent) > sent or self.sender.errors != errors

        with self.network.partition(WEB.name, BROKER.name):
            result.notes.append("cut web from mq")
            readyz = http_get(f"{self.fleet.web_url}/readyz")
            self.hold_cut(self.long_cut, tried)
            answered = len(self.sender.sent) - sent
            failed = self.sender.errors - errors
        result.notes.append(
            f"{answered} callbacks answered during the cut, {failed.total()} sends failed;"
            f" web /readyz during the cut {readyz[0]}"
        )
        if failed.total() > 1 or answered == 0:
            result.problems.append(
                f"{failed.total()} callback sends failed while the web was cut from the broker: "
                + ", ".join(f"{what} x{n}" for what, n in failed.items())
                + f" (the sender waits 5 s for an answer); {answered} answered in time"
            )

    def scheduler_cut(self, result: PhaseResult) -> None:
        """The scheduler host cut off: timers wait, and are woken after."""
        with self.network.partition(SCHEDULER.name, DB.name, BROKER.name):
            result.notes.append("cut sch from db and mq")
            self.hold_cut(self.long_cut)

    def short_cut(self, result: PhaseResult) -> None:
        """A partition shorter than the lease: no takeover, nothing repeated."""
        group = self.cut_off
        held = self.wait_holding(group)
        seconds = self.args.lease / 4
        with self.network.partition(WORKER_1.name, DB.name, BROKER.name):
            time.sleep(seconds)
        result.notes.append(f"cut w1 from db and mq for {seconds:g} s holding {len(held)}")

    def short_cut_after(self, result: PhaseResult) -> None:
        for session, was in self.recovered():
            result.problems.append(f"lease on {session} taken over from {was}")
        for group in self.fleet.workers:
            for sid, kind in self.lease_lost_lines(group):
                result.problems.append(f"{group.process.name} lost a lease ({kind}) on {sid}")
        phase = {
            str(sid) for sid, (_, given) in self.sessions.items() if given["phase"] == "short_cut"
        }
        with self.ledger.lock:
            repeated = [
                f"{sid} {name} requested {n} times"
                for (sid, name), n in self.ledger.requests_per_call.items()
                if n > 1 and sid in phase
            ]
        result.problems += repeated[:5]
        result.notes.append(f"{len(repeated)} calls repeated")


def owner_pid(owner: str) -> str:
    """The process id in a lease owner, ``host:pid:thread``."""
    parts = owner.split(":")
    return parts[1] if len(parts) == 3 else ""
