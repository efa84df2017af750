"""Agents and the workers that serve them.

``agents`` is the catalog of every agent a worker ever announced (its steps
and checks), so a web process without agent code can validate names.
``workers`` says which processes are alive now and which agents each loads:
a heartbeat keeps a row alive, and a row past ``expires_at`` is a dead (or
paused) process whose sessions may be claimed before their leases expire.
Each statement's typed function follows the statements.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from resumable.models import rows

REGISTER_AGENT = """
INSERT INTO agents (name, steps, checks, updated_at)
VALUES (%(name)s, %(steps)s::jsonb, %(checks)s::jsonb, now())
ON CONFLICT (name) DO UPDATE SET steps = EXCLUDED.steps, checks = EXCLUDED.checks,
                                 updated_at = now()
"""

# Whether a worker announced this agent (a web process without agent code checks
# names against it).
AGENT_KNOWN = "SELECT 1 FROM agents WHERE name = %s"

# Every agent a worker announced (the console's filter offers them).
AGENT_NAMES = "SELECT name FROM agents"


# -- live workers ----------------------------------------------------------------------

# A worker's id is the prefix of the lease owners it writes (host:pid:thread);
# this is how a claim finds the worker behind a lease.
WORKER_OF_LEASE_OWNER = "regexp_replace({owner}, ':[^:]*$', '')"

# Whether a live worker loads the agent named by the SQL expression {agent}.
AGENT_SERVED = "EXISTS (SELECT 1 FROM workers w WHERE w.expires_at > now() AND w.agents ? {agent})"

# Whether a live worker serves the session's own version (in a statement over
# `sessions`).
VERSION_SERVED = """EXISTS (SELECT 1 FROM workers w WHERE w.expires_at > now()
                      AND (w.versions ->> sessions.agent)::int = sessions.agent_version)"""

# Whether a live worker can run the session (in a statement over `sessions`):
# it serves its version, migrates it, or (for a session that never ran a
# step) serves its agent at that version or a newer one.
SERVED_ELSEWHERE = """EXISTS (SELECT 1 FROM workers w WHERE w.expires_at > now() AND (
    (w.versions ->> sessions.agent)::int = sessions.agent_version
    OR w.takes_over ? (sessions.agent || '@' || sessions.agent_version)
    OR (sessions.cursor IS NULL
        AND (w.versions ->> sessions.agent)::int >= sessions.agent_version)))"""

ANNOUNCE_WORKER = """
INSERT INTO workers (id, agents, started_at, heartbeat_at, expires_at)
VALUES (%(id)s, %(agents)s::jsonb, now(), now(), now() + make_interval(secs => %(ttl)s))
ON CONFLICT (id) DO UPDATE SET agents = EXCLUDED.agents, started_at = now(),
    heartbeat_at = now(), expires_at = EXCLUDED.expires_at, reaped_at = NULL
"""

# The version of each agent a worker loads ({"refund": 3}) and the older
# versions it migrates (["refund@2"]), written right after ANNOUNCE_WORKER.
ANNOUNCE_VERSIONS = """
UPDATE workers SET versions = %(versions)s::jsonb, takes_over = %(takes_over)s::jsonb,
                   fingerprints = %(fingerprints)s::jsonb
WHERE id = %(id)s
"""

# Live workers other than %(id)s that load one of these unversioned agents
# from other code than this worker (a fingerprint other than its own).
OTHER_CODE = """
SELECT w.id AS worker, f.agent, w.fingerprints ->> f.agent AS fingerprint
FROM jsonb_each_text(%(fingerprints)s::jsonb) AS f(agent, mine)
JOIN workers w ON w.expires_at > now() AND w.id <> %(id)s AND w.problem IS NULL
WHERE f.agent = ANY(%(unversioned)s)
  AND w.fingerprints ? f.agent AND w.fingerprints ->> f.agent <> f.mine
ORDER BY f.agent, w.id
"""

# Record a version of an agent in the catalog; answers the fingerprint that
# version had before (NULL: first announced now), so a worker can say when
# changed code kept its version number.
REGISTER_AGENT_VERSION = """
WITH prev AS (
    SELECT fingerprint FROM agent_versions WHERE agent = %(agent)s AND version = %(version)s
), up AS (
    INSERT INTO agent_versions (agent, version, fingerprint, steps, checks, compensations,
                                takes_over)
    VALUES (%(agent)s, %(version)s, %(fingerprint)s, %(steps)s::jsonb, %(checks)s::jsonb,
            %(compensations)s::jsonb, %(takes_over)s::jsonb)
    ON CONFLICT (agent, version) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, steps = EXCLUDED.steps, checks = EXCLUDED.checks,
        compensations = EXCLUDED.compensations, takes_over = EXCLUDED.takes_over,
        last_announced_at = now()
)
SELECT (SELECT fingerprint FROM prev) AS previous
"""

# No row back: the row is gone (a reconciler's cleanup, a wiped table): announce again.
WORKER_HEARTBEAT = """
UPDATE workers SET heartbeat_at = now(), expires_at = now() + make_interval(secs => %(ttl)s),
                   reaped_at = NULL, problem = %(problem)s
WHERE id = %(id)s
RETURNING id
"""

# A worker that stops cleanly has handed every session back.
RETIRE_WORKER = "DELETE FROM workers WHERE id = %(id)s"

# A worker that stopped because it could not do its job (a vital thread died,
# see queue/vitals.py) has handed its sessions back too; its row stays, dead,
# with the problem, for operators (/readyz, /metrics) until forgotten.
RETIRE_UNHEALTHY_WORKER = """
UPDATE workers SET problem = %(problem)s, heartbeat_at = now(), expires_at = now()
WHERE id = %(id)s
"""

# Live workers, and workers that said in the last %(seconds)s s that they
# could not do their job (alive still, handing back, or exited since).
WORKER_HEALTH = """
SELECT count(*) FILTER (WHERE expires_at > now() AND problem IS NULL) AS live,
       count(*) FILTER (WHERE problem IS NOT NULL
                          AND heartbeat_at > now() - make_interval(secs => %(seconds)s))
           AS unhealthy,
       max(problem) FILTER (WHERE problem IS NOT NULL
                              AND heartbeat_at > now() - make_interval(secs => %(seconds)s))
           AS problem
FROM workers
"""

# Rows of workers dead for long: nothing refers to them any more.
FORGET_DEAD_WORKERS = "DELETE FROM workers WHERE expires_at < now() - interval '1 hour'"

# Of these agents, the ones no live worker other than %(id)s loads, whether
# announced before or never (a new agent's sessions, started before its
# workers were deployed): their sessions were skipped, their messages dropped.
UNSERVED_AGENTS = """
SELECT u.name FROM unnest(%(agents)s::text[]) AS u(name)
WHERE NOT EXISTS (SELECT 1 FROM workers w
                  WHERE w.expires_at > now() AND w.id <> %(id)s AND w.agents ? u.name)
"""


# Of these `agent@version` labels (the versions a starting worker runs or
# migrates), the ones announced before that no live worker other than %(id)s
# serves or migrates: their sessions' messages were passed over and dropped.
UNSERVED_VERSIONS = """
SELECT split_part(u.label, '@', 1) AS name FROM unnest(%(labels)s::text[]) AS u(label)
WHERE EXISTS (SELECT 1 FROM agent_versions a WHERE a.agent || '@' || a.version = u.label)
  AND NOT EXISTS (SELECT 1 FROM workers w
                  WHERE w.expires_at > now() AND w.id <> %(id)s
                    AND (w.takes_over ? u.label
                         OR EXISTS (SELECT 1 FROM jsonb_each_text(w.versions) AS v
                                    WHERE v.key || '@' || v.value = u.label)))
"""


@dataclass(frozen=True)
class UnservedAgent:
    """A row of UNSERVED_SESSIONS_BY_AGENT."""

    agent: str
    sessions: int


# Sessions waiting for a worker that can run them (none alive now: none
# loads their agent, serves their version or migrates it), by agent.
UNSERVED_SESSIONS_BY_AGENT = f"""
SELECT agent, count(*)::int AS sessions FROM sessions
WHERE status IN ('pending', 'retrying', 'running', 'compensating')
  AND NOT {SERVED_ELSEWHERE}
GROUP BY agent ORDER BY agent
"""


# Every worker row (live, or dead for less than an hour), with the sessions
# it runs now: the console's workers page.
WORKERS = f"""
SELECT w.id, w.agents, w.versions, w.takes_over, w.fingerprints, w.started_at, w.heartbeat_at,
       w.expires_at > now() AS live, w.problem,
       (SELECT count(*)::int FROM sessions s
        WHERE s.status IN ('running', 'compensating')
          AND {WORKER_OF_LEASE_OWNER.format(owner="s.lease_owner")} = w.id) AS running
FROM workers w
ORDER BY w.expires_at > now() DESC, w.started_at DESC
LIMIT %(limit)s
"""


# -- the typed functions ------------------------------------------------------------


def register_agent(
    conn: psycopg.Connection[Any], name: str, *, steps: list[str], checks: list[str]
) -> None:
    params = {"name": name, "steps": json.dumps(steps), "checks": json.dumps(checks)}
    rows.run(conn, REGISTER_AGENT, params)


def agent_known(conn: psycopg.Connection[Any], name: str) -> bool:
    """Whether a worker announced the agent."""
    return rows.found(conn, AGENT_KNOWN, (name,))


def agent_names(conn: psycopg.Connection[Any]) -> list[str]:
    """Every agent a worker announced, sorted by code point."""
    return sorted(str(name) for name in rows.values(conn, AGENT_NAMES))


def register_agent_version(
    conn: psycopg.Connection[Any],
    agent: str,
    version: int,
    *,
    fingerprint: str,
    steps: list[str],
    checks: list[str],
    compensations: list[str],
    takes_over: list[int],
) -> str | None:
    """Record the version in the catalog; the fingerprint it had before
    (None: first announced now)."""
    previous = rows.value(
        conn,
        REGISTER_AGENT_VERSION,
        {
            "agent": agent,
            "version": version,
            "fingerprint": fingerprint,
            "steps": json.dumps(steps),
            "checks": json.dumps(checks),
            "compensations": json.dumps(compensations),
            "takes_over": json.dumps(takes_over),
        },
    )
    return None if previous is None else str(previous)


def announce_worker(
    conn: psycopg.Connection[Any],
    worker_id: str,
    *,
    agents: list[str],
    ttl: float,
    versions: dict[str, int],
    takes_over: list[str],
    fingerprints: dict[str, str] | None = None,
) -> None:
    """Write the worker's row (ANNOUNCE_WORKER, then ANNOUNCE_VERSIONS)."""
    rows.run(conn, ANNOUNCE_WORKER, {"id": worker_id, "agents": json.dumps(agents), "ttl": ttl})
    rows.run(
        conn,
        ANNOUNCE_VERSIONS,
        {
            "id": worker_id,
            "versions": json.dumps(versions),
            "takes_over": json.dumps(takes_over),
            "fingerprints": json.dumps(fingerprints or {}),
        },
    )


@dataclass(frozen=True)
class OtherCode:
    """A row of OTHER_CODE: a live worker loading `agent` from other code."""

    worker: str
    agent: str
    fingerprint: str


def other_code(
    conn: psycopg.Connection[Any],
    worker_id: str,
    fingerprints: dict[str, str],
    unversioned: list[str],
) -> list[OtherCode]:
    """Live workers other than this one whose code for one of the
    `unversioned` agents differs from this worker's `fingerprints`."""
    params = {"id": worker_id, "fingerprints": json.dumps(fingerprints), "unversioned": unversioned}
    return rows.every(conn, OtherCode, OTHER_CODE, params)


def worker_heartbeat(
    conn: psycopg.Connection[Any], worker_id: str, *, ttl: float, problem: str | None
) -> bool:
    """Keep the worker's row alive; False if it is gone (announce again)."""
    return rows.found(conn, WORKER_HEARTBEAT, {"id": worker_id, "ttl": ttl, "problem": problem})


def retire_worker(conn: psycopg.Connection[Any], worker_id: str, problem: str | None) -> None:
    """Remove the worker's row (a clean stop), or leave it dead with its
    `problem` (a stop because it could not do its job)."""
    if problem is None:
        rows.run(conn, RETIRE_WORKER, {"id": worker_id})
    else:
        rows.run(conn, RETIRE_UNHEALTHY_WORKER, {"id": worker_id, "problem": problem})


@dataclass(frozen=True)
class WorkerCounts:
    """A row of WORKER_HEALTH."""

    live: int
    unhealthy: int
    problem: str | None


def worker_health(conn: psycopg.Connection[Any], *, seconds: float) -> WorkerCounts:
    """Live workers, and those that said in the last `seconds` s that they
    could not do their job."""
    counts = rows.one(conn, WorkerCounts, WORKER_HEALTH, {"seconds": seconds})
    assert counts is not None  # an aggregate answers one row
    return counts


def forget_dead_workers(conn: psycopg.Connection[Any]) -> None:
    rows.run(conn, FORGET_DEAD_WORKERS)


def unserved_agents(conn: psycopg.Connection[Any], worker_id: str, agents: list[str]) -> list[str]:
    """Of `agents`, those no live worker other than this one loads."""
    names = rows.values(conn, UNSERVED_AGENTS, {"id": worker_id, "agents": agents})
    return [str(name) for name in names]


def unserved_versions(
    conn: psycopg.Connection[Any], worker_id: str, labels: list[str]
) -> list[str]:
    """The agents of the `agent@version` labels announced before that no
    live worker other than this one serves or migrates."""
    names = rows.values(conn, UNSERVED_VERSIONS, {"id": worker_id, "labels": labels})
    return [str(name) for name in names]


@dataclass(frozen=True)
class WorkerSummary:
    """A row of WORKERS."""

    id: str
    agents: list[str]
    versions: dict[str, int]
    takes_over: list[str]
    fingerprints: dict[str, str]
    started_at: datetime
    heartbeat_at: datetime
    live: bool
    problem: str | None
    running: int


def workers(conn: psycopg.Connection[Any], *, limit: int) -> list[WorkerSummary]:
    """Live workers first (newest first), then those gone in the last hour."""
    return rows.every(conn, WorkerSummary, WORKERS, {"limit": limit})


def unserved_sessions_by_agent(conn: psycopg.Connection[Any]) -> list[UnservedAgent]:
    return rows.every(conn, UnservedAgent, UNSERVED_SESSIONS_BY_AGENT)
