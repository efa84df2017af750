"""The demo's script, act by act.

Each act does one thing to the running system (start processes, start the
session, approve it, kill a worker, ...), narrates it in a line, and records
what it saw in ``Observations``. Nothing here decides whether the demo
passed: ``proof.py`` does, from these observations, the database and the
shop's ledger.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from resumable.client import Client
from resumable.demo import gate
from resumable.demo.deadline import Deadline
from resumable.demo.shop import FakeShop
from resumable.demo.timeline import Row
from resumable.demo.webhook_sender import Delivery, WebhookSender
from resumable.dev.processes import Deployment, Process
from resumable.models.database import Database

AGENT_MODULES = ("resumable.demo.agent", "resumable.demo.ping")
ORDER_ID = "ord_1001"
APPROVER = "alice@shop.example"
# One worker process with one thread: a ping session running beside the suspended
# refund shows it holds none, and the worker SIGKILLed is the one running the step.
ONE_THREAD = {"RESUMABLE_WORKER_THREADS": "1", "RESUMABLE_WORKER_PROCESSES": "1"}

_REFUND_RECORDED = """
SELECT count(*) AS n FROM tool_execution_cache
WHERE session_id = %(id)s AND tool = 'refund' AND status = 'completed'
"""


@dataclass
class Observations:
    """What the demo saw, act by act."""

    session_id: uuid.UUID | None = None
    workers: dict[int, str] = field(default_factory=dict)  # pid -> "worker 1"
    notes: list[Row] = field(default_factory=list)
    approval_url: str = ""
    waiting_view: dict[str, Any] = field(default_factory=dict)  # GET /v1/sessions/{id}
    lease_owner_while_waiting: str | None = "unknown"
    ping_result: Any = None
    deliveries: list[Delivery] = field(default_factory=list)
    refund_recorded_at_kill: int = 0
    checkpoint_at_kill: int = -1
    killed_pid: int | None = None
    recovery_pid: int | None = None

    def note(
        self, source: str, what: str, detail: str = "", style: str = "", at: datetime | None = None
    ) -> None:
        self.notes.append(Row(at or datetime.now(UTC), source, what, detail, style))


@dataclass
class Story:
    """Runs the acts against a deployment; `seen` fills up as it goes."""

    console: Console
    client: Client
    db: Database
    shop: FakeShop
    deployment: Deployment
    clock: Deadline
    gate_dir: Path
    web_port: int
    api_token: str
    sender: WebhookSender
    seen: Observations = field(default_factory=Observations)

    def tell(self) -> Observations:
        self.start_processes()
        self.start_session()
        self.show_that_waiting_holds_no_worker()
        self.approve_twice()
        self.kill_worker_mid_step()
        self.recover_on_a_new_worker()
        return self.seen

    # -- acts ---------------------------------------------------------------------

    def start_processes(self) -> None:
        web = self.deployment.web(self.web_port)
        scheduler = self.deployment.scheduler()
        worker = self.deployment.worker(*AGENT_MODULES, name="worker 1", **ONE_THREAD)
        for child in (web, scheduler, worker):
            self.clock.wait_for(f"{child.name} to start", child.ready)
        self.seen.workers[worker.pid] = "worker 1"
        self._say(
            f"started [bold]resumable web[/] (pid {web.pid}), [bold]scheduler[/] "
            f"(pid {scheduler.pid}) and [bold]worker 1[/] (pid {worker.pid}, one thread)"
        )

    def start_session(self) -> None:
        gate.hold(self.gate_dir).touch()
        session_input = {
            "order_id": ORDER_ID,
            "api": self.shop.url,
            "settle_poll_seconds": 0.5,
            "approval_timeout": 600,
            "demo_gate": str(self.gate_dir),
        }
        session_id = self.client.start(
            "demo-refund", session_input, idempotency_key=f"demo-refund-{uuid.uuid4()}"
        )
        self.seen.session_id = session_id
        self._say(f"refund agent started for order {ORDER_ID}: session {session_id}")
        self.clock.wait_for(
            "the session to ask for approval", lambda: self._status() == "suspended"
        )
        session = self.client.get(session_id)
        assert session.state is not None
        self.seen.approval_url = str(session.state["approval_url"])
        self.seen.lease_owner_while_waiting = self.client.session_row(session_id).lease_owner
        self._say(f"it looked up the order and asks for approval at {self.seen.approval_url}")

    def show_that_waiting_holds_no_worker(self) -> None:
        answer = httpx.get(
            f"http://127.0.0.1:{self.web_port}/v1/sessions/{self.seen.session_id}",
            headers={"Authorization": f"Bearer {self.api_token}"},
            timeout=10,
        )
        answer.raise_for_status()
        self.seen.waiting_view = answer.json()
        ping_id = self.client.start("demo-ping")
        self.clock.wait_for(
            "a ping session on the free worker thread",
            lambda: self.client.get(ping_id).status == "completed",
            limit=10,
        )
        self.seen.ping_result = self.client.get(ping_id).result
        self.seen.note(
            "demo", "a ping session ran on worker 1's only thread", "the refund holds no worker"
        )
        status = self.seen.waiting_view.get("status")
        owner = self.seen.lease_owner_while_waiting or "none"
        self._say(
            f"GET /v1/sessions/{{id}}: status [cyan]{status}[/], lease owner: {owner}; "
            "meanwhile a ping session completed on worker 1's only thread"
        )

    def approve_twice(self) -> None:
        webhook_id = f"msg_{uuid.uuid4().hex}"
        payload = {"approved": True, "by": APPROVER}
        for attempt in ("approval POSTed", "same approval POSTed again (same webhook-id)"):
            delivery = self.sender.send(self.seen.approval_url, payload, webhook_id)
            self.seen.deliveries.append(delivery)
            verdict = delivery.answer.get("status", delivery.answer)
            self.seen.note(
                "approver",
                attempt,
                f"HTTP {delivery.status_code} {verdict}",
                style="magenta",
                at=delivery.at,
            )
            self._say(f"{attempt}, signed: [magenta]HTTP {delivery.status_code} {verdict}[/]")

    def kill_worker_mid_step(self) -> None:
        assert self.seen.session_id is not None
        self.clock.wait_for(
            "the refund step to issue the refund",
            gate.reached(self.gate_dir, "refund_issued").exists,
        )
        with self.db.connection() as conn:
            row = conn.execute(_REFUND_RECORDED, {"id": self.seen.session_id}).fetchone()
        self.seen.refund_recorded_at_kill = int(row["n"]) if row else 0  # type: ignore[call-overload]
        self.seen.checkpoint_at_kill = self.client.get(self.seen.session_id).seq
        victim = self._worker(1)
        self.deployment.kill(victim)
        gate.hold(self.gate_dir).unlink()
        self.seen.killed_pid = victim.pid
        self.seen.note(
            "demo",
            f"SIGKILL worker 1 (pid {victim.pid}) in the middle of issue_refund",
            "refund issued and recorded, step not committed",
            style="bold red",
        )
        self._say(
            f"[bold red]SIGKILL worker 1[/] in the middle of issue_refund: the refund is "
            f"issued and recorded, the last checkpoint is still #{self.seen.checkpoint_at_kill}"
        )

    def recover_on_a_new_worker(self) -> None:
        worker = self.deployment.worker(*AGENT_MODULES, name="worker 2", **ONE_THREAD)
        self.clock.wait_for("worker 2 to start", worker.ready)
        self.seen.workers[worker.pid] = "worker 2"
        self.seen.recovery_pid = worker.pid
        self.seen.note("demo", f"worker 2 started (pid {worker.pid})")
        self._say(f"started worker 2 (pid {worker.pid}); worker 1's lease expires in 2 s")
        self.clock.wait_for(
            "the session to finish",
            lambda: self._status() in {"completed", "failed", "cancelled"},
        )
        self._say(f"session {self._status()}")

    # -- helpers --------------------------------------------------------------------

    def _status(self) -> str:
        assert self.seen.session_id is not None
        return self.client.get(self.seen.session_id).status

    def _worker(self, number: int) -> Process:
        name = f"worker {number}"
        return next(c for c in self.deployment.children if c.name == name)

    def _say(self, text: str) -> None:
        elapsed = self.clock.seconds - self.clock.remaining()
        self.console.print(f"[dim]{elapsed:5.1f}s[/]  {text}", highlight=False)
