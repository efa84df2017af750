"""At start, say which waiting sessions this worker's code cannot run.

After a deploy that renamed or removed a step or a poll check, the sessions
waiting at it would otherwise show the damage only when they resume (they
are parked as ``blocked`` then, see ``parking.py``). A starting worker counts
its agents' pending, suspended and retrying sessions by the step they wait
at and the check they poll, and logs one line per missing one, e.g.
``12 sessions of refund wait at step 'book', which this worker does not have``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from psycopg.rows import class_row

from resumable.agent import Agent
from resumable.models import blocked_queries
from resumable.models.blocked_queries import WaitingPosition
from resumable.models.database import Database

logger = logging.getLogger(__name__)


def unserved_positions(db: Database, agents: Iterable[Agent]) -> list[str]:
    """One line per (agent, step or check) that waiting sessions need and the
    given code lacks; empty when the code serves every waiting session."""
    by_name = {agent.name: agent for agent in agents}
    if not by_name:
        return []
    with db.connection() as conn:
        rows = (
            conn.cursor(row_factory=class_row(WaitingPosition))
            .execute(blocked_queries.WAITING_POSITIONS, {"agents": list(by_name)})
            .fetchall()
        )
    steps: dict[tuple[str, str, str], int] = {}
    for row in rows:
        agent = by_name[row.agent]
        step, check = row.step, row.poll_check
        if step is not None and step not in agent.step_names:
            key = (agent.name, "step", str(step))
            steps[key] = steps.get(key, 0) + row.n
        if check is not None and check not in agent.check_names:
            key = (agent.name, "check", str(check))
            steps[key] = steps.get(key, 0) + row.n
    return [
        f"{n} session{'s' if n != 1 else ''} of {name} wait{'' if n != 1 else 's'} "
        f"at {kind} {what!r}, which this worker does not have"
        for (name, kind, what), n in sorted(steps.items())
    ]


def warn_unserved_positions(db: Database, agents: Iterable[Agent]) -> list[str]:
    """Log the lines of ``unserved_positions`` as warnings; return them."""
    lines = unserved_positions(db, agents)
    for line in lines:
        logger.warning(line, extra={"action": "unserved_position"})
    return lines
