"""Agents and the workers that serve them.

``agents`` is the catalog of every agent a worker ever announced (its steps
and checks), so a web process without agent code can validate names.
``workers`` says which processes are alive now and which agents each loads:
a heartbeat keeps a row alive, and a row past ``expires_at`` is a dead (or
paused) process whose sessions may be claimed before their leases expire.
"""

from __future__ import annotations

from dataclasses import dataclass

REGISTER_AGENT = """
INSERT INTO agents (name, steps, checks, updated_at)
VALUES (%(name)s, %(steps)s::jsonb, %(checks)s::jsonb, now())
ON CONFLICT (name) DO UPDATE SET steps = EXCLUDED.steps, checks = EXCLUDED.checks,
                                 updated_at = now()
"""

# Whether a worker announced this agent (a web process without agent code checks
# names against it).
AGENT_KNOWN = "SELECT 1 FROM agents WHERE name = %s"


# -- live workers ----------------------------------------------------------------------

# A worker's id is the prefix of the lease owners it writes (host:pid:thread);
# this is how a claim finds the worker behind a lease.
WORKER_OF_LEASE_OWNER = "regexp_replace({owner}, ':[^:]*$', '')"

# Whether a live worker loads the agent named by the SQL expression {agent}.
AGENT_SERVED = "EXISTS (SELECT 1 FROM workers w WHERE w.expires_at > now() AND w.agents ? {agent})"

ANNOUNCE_WORKER = """
INSERT INTO workers (id, agents, started_at, heartbeat_at, expires_at)
VALUES (%(id)s, %(agents)s::jsonb, now(), now(), now() + make_interval(secs => %(ttl)s))
ON CONFLICT (id) DO UPDATE SET agents = EXCLUDED.agents, started_at = now(),
    heartbeat_at = now(), expires_at = EXCLUDED.expires_at, reaped_at = NULL
"""

# No row back: the row is gone (a reconciler's cleanup, a wiped table): announce again.
WORKER_HEARTBEAT = """
UPDATE workers SET heartbeat_at = now(), expires_at = now() + make_interval(secs => %(ttl)s),
                   reaped_at = NULL
WHERE id = %(id)s
RETURNING id
"""

# A worker that stops cleanly has handed every session back.
RETIRE_WORKER = "DELETE FROM workers WHERE id = %(id)s"

# Rows of workers dead for long: nothing refers to them any more.
FORGET_DEAD_WORKERS = "DELETE FROM workers WHERE expires_at < now() - interval '1 hour'"

# Of these agents, the ones a worker announced before but no live worker
# other than %(id)s loads: their sessions were skipped, their messages dropped.
# (An agent never announced had its messages wait in the queue instead.)
UNSERVED_AGENTS = """
SELECT u.name FROM unnest(%(agents)s::text[]) AS u(name)
WHERE EXISTS (SELECT 1 FROM agents a WHERE a.name = u.name)
  AND NOT EXISTS (SELECT 1 FROM workers w
                  WHERE w.expires_at > now() AND w.id <> %(id)s AND w.agents ? u.name)
"""


@dataclass(frozen=True)
class UnservedAgent:
    """A row of UNSERVED_SESSIONS_BY_AGENT."""

    agent: str
    sessions: int


# Sessions waiting for a worker that loads their agent (none alive now), by agent.
UNSERVED_SESSIONS_BY_AGENT = f"""
SELECT agent, count(*)::int AS sessions FROM sessions
WHERE status IN ('pending', 'retrying', 'running', 'compensating')
  AND NOT {AGENT_SERVED.format(agent="sessions.agent")}
GROUP BY agent ORDER BY agent
"""
