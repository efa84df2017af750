"""Making sure the demo's database is the demo's to use.

The demo runs its own workers and scheduler. A scheduler reconciles every
stranded session in the database, and a worker fails a session whose agent it
does not know; so against a database that real sessions live in, the demo
could take their work. It refuses such a database, and cancels unfinished
sessions left by an interrupted earlier demo so they cannot muddle this run.
"""

from __future__ import annotations

import uuid

from resumable.client import Client
from resumable.demo.deadline import DemoError
from resumable.models.database import Database
from resumable.models.status import TERMINAL_STATUSES

DEMO_AGENTS = ("demo-refund", "demo-ping")

_UNFINISHED = """
SELECT id, agent FROM sessions
WHERE status <> ALL(%(terminal)s)
ORDER BY created_at
"""


def claim_database(db: Database, client: Client) -> int:
    """Refuse a database with others' unfinished sessions; cancel stale demo
    sessions. Returns how many stale demo sessions were cancelled."""
    with db.connection() as conn:
        terminal = sorted(status.value for status in TERMINAL_STATUSES)
        rows = conn.execute(_UNFINISHED, {"terminal": terminal}).fetchall()
    foreign = [row for row in rows if row["agent"] not in DEMO_AGENTS]
    if foreign:
        agents = ", ".join(sorted({str(row["agent"]) for row in foreign})[:5])
        raise DemoError(
            f"this database has {len(foreign)} unfinished sessions of other agents "
            f"({agents}); the demo's scheduler and workers would pick them up. "
            "Point DATABASE_URL at a database of its own."
        )
    for row in rows:
        client.cancel(
            uuid.UUID(str(row["id"])),
            actor="resumable demo",
            reason="left unfinished by an interrupted demo run",
        )
    return len(rows)
