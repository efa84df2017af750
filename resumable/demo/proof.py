"""The demo's claims, each checked against evidence it did not make up.

Evidence comes from three places the demo does not control: PostgreSQL (the
session, its audit log, its deliveries and recorded tool calls), the shop's
ledger (what actually reached the outside world) and the receiver's HTTP
answers. The demo exits 0 only if every claim holds.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass

from rich.console import Console

from resumable.client import Client
from resumable.demo.shop import SETTLES_ON_CHECK, ShopLedger
from resumable.demo.story import Observations
from resumable.models.database import Database
from resumable.schemas import Event

TIME_LIMIT_SECONDS = 60.0
STEPS = ["look_up_order", "ask_approval", "issue_refund", "finish"]

_DELIVERIES = "SELECT count(*) AS n FROM deliveries WHERE session_id = %(id)s"
_TOOL_CALLS = """
SELECT tool, count(*) AS n FROM tool_execution_cache
WHERE session_id = %(id)s AND status = 'completed' GROUP BY tool
"""


@dataclass(frozen=True)
class Claim:
    text: str
    holds: bool


def _pid(owner: object) -> int | None:
    parts = str(owner or "").split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


def _count(db: Database, sql: str, session_id: uuid.UUID) -> list[dict[str, object]]:
    with db.connection() as conn:
        return conn.execute(sql, {"id": session_id}).fetchall()


def check(
    seen: Observations,
    client: Client,
    db: Database,
    ledger: ShopLedger,
    events: list[Event],
    elapsed: float,
) -> list[Claim]:
    """Every claim the demo makes, with whether it holds."""
    assert seen.session_id is not None
    session = client.get(seen.session_id)
    kinds = Counter(e.type for e in events)
    resumed_by = Counter(str(e.payload.get("by")) for e in events if e.type == "resumed")
    commits = [e for e in events if e.type == "step_completed"]
    recovered = [e for e in events if e.type == "lease_recovered"]
    refund_commit = next((e for e in commits if e.step == "issue_refund"), None)
    finish_commit = next((e for e in commits if e.step == "finish"), None)
    stored = int(_count(db, _DELIVERIES, seen.session_id)[0]["n"])  # type: ignore[call-overload]
    tools = {str(r["tool"]): r["n"] for r in _count(db, _TOOL_CALLS, seen.session_id)}
    codes = [d.status_code for d in seen.deliveries]
    refund_requests = sum(ledger.refund_requests.values())
    checks = max(ledger.status_checks.values(), default=0)
    ping_pid = (seen.ping_result or {}).get("worker_pid")
    worker_1 = next((pid for pid, name in seen.workers.items() if name == "worker 1"), None)

    return [
        Claim(
            f"the order was looked up once ({ledger.lookups} lookup request)",
            ledger.lookups == 1 and tools.get("look_up_order") == 1,
        ),
        Claim(
            "waiting for the human held no worker: suspended, no lease owner, and a ping "
            "ran on worker 1's only thread meanwhile",
            seen.waiting_view.get("status") == "suspended"
            and seen.lease_owner_while_waiting is None
            and ping_pid is not None
            and ping_pid == worker_1,
        ),
        Claim(
            f"the approval was delivered twice with one webhook-id: answered {codes}, "
            f"stored {stored}x, resumed the session {resumed_by['callback']}x",
            codes == [202, 200]
            and stored == 1
            and kinds["callback_received"] == 1
            and resumed_by["callback"] == 1,
        ),
        Claim(
            "worker 1 was SIGKILLed after the refund was recorded and before its step "
            f"committed (refund recorded: {seen.refund_recorded_at_kill}, last checkpoint "
            f"#{seen.checkpoint_at_kill})",
            seen.refund_recorded_at_kill == 1 and seen.checkpoint_at_kill == 2,
        ),
        Claim(
            "worker 2 recovered the session from its checkpoint; the refund call was "
            "answered from the record, not repeated",
            len(recovered) == 1
            and _pid(recovered[0].payload.get("worker")) == seen.recovery_pid
            and _pid(recovered[0].payload.get("previous_owner")) == seen.killed_pid
            and refund_commit is not None
            and refund_commit.payload.get("tool_calls") == 0
            and refund_commit.payload.get("tool_calls_replayed") == 1,
        ),
        Claim(
            f"settlement was awaited by polling: {checks} status checks, then resumed by the poll",
            checks == SETTLES_ON_CHECK
            and finish_commit is not None
            and finish_commit.payload.get("woken_by") == "poll",
        ),
        Claim(
            f"each step committed exactly once ({', '.join(e.step or '?' for e in commits)})",
            [e.step for e in commits] == STEPS and [e.seq for e in commits] == [1, 2, 3, 4],
        ),
        Claim(
            f"the card was refunded exactly once: {len(ledger.refunds)} refund issued, "
            f"{refund_requests} refund request received",
            len(ledger.refunds) == 1 and refund_requests == 1 and tools.get("refund") == 1,
        ),
        Claim(
            f"the session completed: {session.result}",
            session.status == "completed"
            and isinstance(session.result, dict)
            and session.result.get("refunded") is True
            and session.result.get("settled") is True,
        ),
        Claim(
            f"all in {elapsed:.1f} s (under a minute)",
            elapsed < TIME_LIMIT_SECONDS,
        ),
    ]


def show(console: Console, claims: list[Claim]) -> None:
    for claim in claims:
        mark = "[green]✔[/]" if claim.holds else "[red]✘[/]"
        console.print(f"{mark} {claim.text}", highlight=False)
