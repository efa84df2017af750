"""At start, say which waiting sessions this worker's code cannot run.

After a deploy that renamed or removed a step or a poll check, or changed an
agent's version, the sessions waiting at it would otherwise show the damage
only when they resume (they are parked as ``blocked`` then, see
``parking.py``) or never run at all (no live worker serves their version). A
starting worker counts its agents' pending, suspended and retrying sessions
by version, by the step they wait at and the check they poll, and logs one
warning line per thing it lacks, e.g.
``12 sessions of refund@3 wait at step 'book', which this worker does not have``.

A version this worker neither serves nor migrates gets a warning only when
no other live worker serves it either: during a rolling deploy the old
workers drain their own sessions, which is as it should be (logged at INFO).
It also records each agent version it serves in the ``agent_versions``
catalog, and warns when a version comes back with other step, check or
compensation names than it was announced with (changed code that kept its
version number: sessions of that version may meet code they never ran on).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from resumable.agent import Agent, version_label
from resumable.models import agent_queries, blocked_queries
from resumable.models.blocked_queries import LiveWorker
from resumable.models.database import Database

logger = logging.getLogger(__name__)


def announce_versions(db: Database, agents: Iterable[Agent]) -> list[str]:
    """Record each agent's version and fingerprint in the catalog; warn (and
    return the lines) when a version was announced before with other names."""
    lines = []
    with db.connection() as conn:
        for agent in agents:
            previous = agent_queries.register_agent_version(
                conn,
                agent.name,
                agent.version,
                fingerprint=agent.fingerprint,
                steps=sorted(agent.step_names),
                checks=sorted(agent.check_names),
                compensations=sorted(agent.compensation_names),
                takes_over=agent.takes_over,
            )
            if agent.version and previous is not None and previous != agent.fingerprint:
                lines.append(
                    f"{agent.label} was deployed before with other step, check or "
                    f"compensation names (fingerprint {previous}, now {agent.fingerprint}): "
                    "give changed code a new version number"
                )
    for line in lines:
        logger.warning(line, extra={"action": "version_reused"})
    return lines


def warn_of_other_code(db: Database, worker_id: str, agents: Iterable[Agent]) -> list[str]:
    """Warn (and return the lines) when a live worker loads one of these
    unversioned agents from other code: with no version to keep them apart,
    both take its sessions, and a session alternates between the two codes
    from one step to the next (each run's ``run_started`` event records the
    code that ran it). A numbered version keeps each session on its code."""
    mine = {agent.name: agent.fingerprint for agent in agents}
    unversioned = [agent.name for agent in agents if not agent.version]
    if not unversioned:
        return []
    with db.connection() as conn:
        others = agent_queries.other_code(conn, worker_id, mine, unversioned)
    lines = [
        f"agent {other.agent!r} is unversioned and live worker {other.worker} runs other code "
        f"for it (fingerprint {other.fingerprint}, here {mine[other.agent]}): its sessions will "
        "alternate between the two; give the agent a version (Agent(..., version=N)) or stop "
        "the old workers"
        for other in others
    ]
    for line in lines:
        logger.warning(line, extra={"action": "unversioned_code_differs"})
    return lines


def _served_elsewhere(workers: Iterable[LiveWorker]) -> set[str]:
    """The ``agent@version`` labels other live workers serve or migrate."""
    served: set[str] = set()
    for worker in workers:
        served.update(f"{name}@{version}" for name, version in (worker.versions or {}).items())
        served.update(worker.takes_over or [])
    return served


def unserved_positions(
    db: Database, agents: Iterable[Agent], worker_id: str | None = None
) -> list[str]:
    """One line per (agent version, step or check) that waiting sessions
    need and the given code lacks; empty when the code serves every waiting
    session (or another live worker serves the versions it does not)."""
    by_name = {agent.name: agent for agent in agents}
    if not by_name:
        return []
    with db.connection() as conn:
        rows = blocked_queries.waiting_positions(conn, list(by_name))
        others = blocked_queries.other_live_workers(conn, worker_id)
    elsewhere = _served_elsewhere(others)
    counts: dict[tuple[str, int, str, str], int] = {}

    def add(key: tuple[str, int, str, str], n: int) -> None:
        counts[key] = counts.get(key, 0) + n

    for row in rows:
        agent = by_name[row.agent]
        step, check = row.step, row.poll_check
        if step is None:
            continue  # never ran: it starts on the newest version deployed
        if row.version != agent.version and row.version not in agent.takes_over:
            served = f"{agent.name}@{row.version}" in elsewhere
            (add if not served else _drained)((agent.name, row.version, "version", ""), row.n)
            continue
        if not agent.has_step(step):
            add((agent.name, row.version, "step", str(step)), row.n)
        if check is not None and check not in agent.check_names:
            add((agent.name, row.version, "check", str(check)), row.n)
    lines = []
    for (name, version, kind, what), n in sorted(counts.items()):
        sessions = f"{n} session{'s' if n != 1 else ''} of {version_label(name, version)}"
        verb = "wait" if n != 1 else "waits"
        if kind == "version":
            runs = by_name[name].label
            lines.append(
                f"{sessions} {verb} for a worker of that version, which this worker is not "
                f"(it runs {runs} and migrates "
                f"{_versions(by_name[name].takes_over)}); no live worker serves them"
            )
        else:
            lines.append(f"{sessions} {verb} at {kind} {what!r}, which this worker does not have")
    return lines


def _drained(key: tuple[str, int, str, str], n: int) -> None:
    """Sessions of a version another live worker serves: it drains them."""
    name, version = key[0], key[1]
    logger.info(
        "%d session(s) of %s are left to the live workers that serve that version",
        n,
        version_label(name, version),
        extra={"action": "version_served_elsewhere"},
    )


def _versions(versions: list[int]) -> str:
    return ", ".join(f"version {v}" for v in versions) if versions else "no older version"


def warn_unserved_positions(
    db: Database, agents: Iterable[Agent], worker_id: str | None = None
) -> list[str]:
    """Log the lines of ``unserved_positions`` as warnings; return them."""
    lines = unserved_positions(db, agents, worker_id)
    for line in lines:
        logger.warning(line, extra={"action": "unserved_position"})
    return lines
