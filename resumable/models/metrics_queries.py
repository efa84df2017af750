"""What a /metrics scrape counts in PostgreSQL, and the triggers that keep
finished and resting sessions counted.

A scrape must cost the same at a thousand sessions and at a million, so it
never reads finished sessions: the active ones (pending, running, retrying,
compensating) are counted from the partial index ``ix_sessions_active``, and
the finished ones are read from ``finished_session_counts``, kept by
triggers. A session enters a terminal status once, so the triggers cost one
small upsert per session (not per step); retention's deletes count down once
per statement and agent.

Nor does it read the sessions at rest (suspended or blocked): agents waiting
on people pile them up by the hundred thousand, and counting them from an
index took a scrape from 1.8 to 28 ms at 200,000 (migration 0023). They are
read from ``resting_session_counts``, kept the same way: one upsert when a
session comes to rest and one when it leaves (two per resume, none per step).

Each agent and status has up to ``FINISHED_COUNT_SHARDS`` rows, and a
transaction adds to the one of its connection (backend pid modulo the shard
count; a scrape sums them). With one row, every finishing session of an agent
waited for the row lock of the one before it until that one committed, so
completions ran one commit at a time: a burst of 3,000 sessions finishing
together spent most of its time queued on that row. A pool's connections
start one after the other and have consecutive pids, so they rarely share a
shard, and one connection's transactions never wait for each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from resumable.models import rows
from resumable.models.alert_queries import HELD_FOR_PARENT
from resumable.models.status import TERMINAL_STATUSES, SessionStatus, sql_values

# In declaration order, as the migration and the partial index write it.
TERMINAL = sql_values(s for s in SessionStatus if s in TERMINAL_STATUSES)

# Where sessions wait, as long as they wait: counted by triggers, not rows.
RESTING = sql_values([SessionStatus.SUSPENDED, SessionStatus.BLOCKED])

FINISHED_COUNT_SHARDS = 64


def _count_rows_function(function: str, table: str, statuses: str) -> str:
    """A row trigger's function keeping `table` (agent, status, shard, n) for
    the sessions in `statuses`: one off the old row's count, one on the new
    row's, in this connection's shard (see the module's docstring)."""
    return f"""
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    mine smallint := mod(pg_backend_pid(), {FINISHED_COUNT_SHARDS});
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status IN ({statuses}) THEN
        INSERT INTO {table} AS f (agent, status, shard, n)
        VALUES (OLD.agent, OLD.status, mine, -1)
        ON CONFLICT (agent, status, shard) DO UPDATE SET n = f.n - 1;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.status IN ({statuses}) THEN
        INSERT INTO {table} AS f (agent, status, shard, n)
        VALUES (NEW.agent, NEW.status, mine, 1)
        ON CONFLICT (agent, status, shard) DO UPDATE SET n = f.n + 1;
    END IF;
    RETURN NULL;
END
$$
"""


def _count_deleted_function(function: str, table: str, statuses: str) -> str:
    """A statement trigger's function counting down `table` once per agent
    and status for the rows a DELETE removed (its transition table
    ``deleted``)."""
    return f"""
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {table} AS f (agent, status, shard, n)
    SELECT agent, status, mod(pg_backend_pid(), {FINISHED_COUNT_SHARDS}), -count(*)
    FROM deleted WHERE status IN ({statuses})
    GROUP BY agent, status
    ON CONFLICT (agent, status, shard) DO UPDATE SET n = f.n + excluded.n;
    RETURN NULL;
END
$$
"""


COUNT_FINISHED_FUNCTION = _count_rows_function(
    "resumable_count_finished", "finished_session_counts", TERMINAL
)

# The function as migration 0009 wrote it (one row per agent and status), for
# that migration and for 0014's downgrade.
UNSHARDED_COUNT_FINISHED_FUNCTION = f"""
CREATE OR REPLACE FUNCTION resumable_count_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status IN ({TERMINAL}) THEN
        INSERT INTO finished_session_counts AS f (agent, status, n)
        VALUES (OLD.agent, OLD.status, -1)
        ON CONFLICT (agent, status) DO UPDATE SET n = f.n - 1;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.status IN ({TERMINAL}) THEN
        INSERT INTO finished_session_counts AS f (agent, status, n)
        VALUES (NEW.agent, NEW.status, 1)
        ON CONFLICT (agent, status) DO UPDATE SET n = f.n + 1;
    END IF;
    RETURN NULL;
END
$$
"""

# The WHEN clauses are evaluated without calling the function, so a step
# commit that does not finish its session pays nearly nothing.
_INSERT_TRIGGER = f"""CREATE TRIGGER sessions_count_finished_insert AFTER INSERT ON sessions
    FOR EACH ROW WHEN (NEW.status IN ({TERMINAL})) EXECUTE FUNCTION resumable_count_finished()"""
_UPDATE_TRIGGER = f"""CREATE TRIGGER sessions_count_finished_update
    AFTER UPDATE OF status ON sessions
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       AND (OLD.status IN ({TERMINAL}) OR NEW.status IN ({TERMINAL})))
    EXECUTE FUNCTION resumable_count_finished()"""

# The triggers as migration 0009 created them: the delete one per row.
ROW_COUNT_FINISHED_TRIGGERS = (
    _INSERT_TRIGGER,
    _UPDATE_TRIGGER,
    f"""CREATE TRIGGER sessions_count_finished_delete AFTER DELETE ON sessions
    FOR EACH ROW WHEN (OLD.status IN ({TERMINAL})) EXECUTE FUNCTION resumable_count_finished()""",
)

# Retention deletes finished sessions by the batch (up to 100,000 a
# statement): counted down once per statement and agent (migration 0016). Per
# row, each upsert of the same counts row in one transaction walks every
# version of it the transaction wrote before, so a batch cost its size
# squared (16,000 sessions of one agent: 1.6 s; 64,000 now take 1.1 s).
COUNT_FINISHED_DELETED_FUNCTION = _count_deleted_function(
    "resumable_count_finished_deleted", "finished_session_counts", TERMINAL
)
STATEMENT_DELETE_TRIGGER = """CREATE TRIGGER sessions_count_finished_delete AFTER DELETE ON sessions
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION resumable_count_finished_deleted()"""

# The triggers now. Inserts and updates stay per row: a step's UPDATE would
# call a statement trigger at every commit (WHEN needs a row trigger), and a
# session is created by a statement of one row.
COUNT_FINISHED_TRIGGERS = (_INSERT_TRIGGER, _UPDATE_TRIGGER, STATEMENT_DELETE_TRIGGER)

# Sessions at rest (suspended, blocked), counted as finished ones are (see
# the module's docstring), in shards of their own. An agent's sessions change
# agent never, but a fork or an operator's fix could: the update trigger
# watches both columns.
COUNT_RESTING_FUNCTION = _count_rows_function(
    "resumable_count_resting", "resting_session_counts", RESTING
)

COUNT_RESTING_DELETED_FUNCTION = _count_deleted_function(
    "resumable_count_resting_deleted", "resting_session_counts", RESTING
)

COUNT_RESTING_TRIGGERS = (
    f"""CREATE TRIGGER sessions_count_resting_insert AFTER INSERT ON sessions
    FOR EACH ROW WHEN (NEW.status IN ({RESTING})) EXECUTE FUNCTION resumable_count_resting()""",
    f"""CREATE TRIGGER sessions_count_resting_update AFTER UPDATE OF status, agent ON sessions
    FOR EACH ROW WHEN ((OLD.status IS DISTINCT FROM NEW.status
                        OR OLD.agent IS DISTINCT FROM NEW.agent)
                       AND (OLD.status IN ({RESTING}) OR NEW.status IN ({RESTING})))
    EXECUTE FUNCTION resumable_count_resting()""",
    """CREATE TRIGGER sessions_count_resting_delete AFTER DELETE ON sessions
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION resumable_count_resting_deleted()""",
)

# The predicate of the partial index ``ix_sessions_active`` (migration 0023):
# sessions neither finished nor at rest, the few a scrape still counts.
ACTIVE_WHERE = f"status NOT IN ({TERMINAL},{RESTING})"

# Active sessions, from the partial index (its predicate, word for word).
ACTIVE_SESSIONS_BY_AGENT_AND_STATUS = f"""
SELECT agent, status, count(*) AS n FROM sessions
WHERE {ACTIVE_WHERE} GROUP BY agent, status
"""

RESTING_SESSIONS_BY_AGENT_AND_STATUS = """
SELECT agent, status, sum(n)::bigint AS n FROM resting_session_counts
GROUP BY agent, status HAVING sum(n) > 0
"""

FINISHED_SESSIONS_BY_AGENT_AND_STATUS = """
SELECT agent, status, sum(n)::bigint AS n FROM finished_session_counts
GROUP BY agent, status HAVING sum(n) > 0
"""

# Every session by agent and status without reading the finished or resting
# ones: the three counts above in one statement.
SESSIONS_BY_AGENT_AND_STATUS_KEPT = f"""
{ACTIVE_SESSIONS_BY_AGENT_AND_STATUS}
UNION ALL
{RESTING_SESSIONS_BY_AGENT_AND_STATUS}
UNION ALL
{FINISHED_SESSIONS_BY_AGENT_AND_STATUS}
"""

# The whole count as it was before migration 0009 (the benchmark's baseline).
SESSIONS_BY_AGENT_AND_STATUS = """
SELECT agent, status, count(*) AS n FROM sessions GROUP BY agent, status
"""

# Alerts held for a parent that will handle the failure are not undelivered
# (see ``alert_queries.TAKE_DUE_ALERTS``): a child's fellow children may run
# for hours before its parent is woken with it.
BACKLOG = f"""
SELECT (SELECT count(*) FROM dead_letters WHERE status = 'open') AS dead_letters,
       (SELECT count(*) FROM alerts a
          WHERE a.status = 'pending' AND NOT ({HELD_FOR_PARENT})) AS alerts,
       (SELECT coalesce(extract(epoch FROM now() - min(updated_at)), 0)
          FROM sessions WHERE status = 'pending' AND slot_wait_since IS NULL)
          AS oldest_pending,
       (SELECT count(*) FROM sessions
          WHERE status = 'suspended' AND wake_at < now() - make_interval(secs => %(grace)s))
          AS overdue
"""

OPEN_CONDITIONS = """
SELECT condition, count(*) AS n FROM session_conditions WHERE resolved_at IS NULL
GROUP BY condition
"""


# -- the typed functions ------------------------------------------------------------


@dataclass(frozen=True)
class SessionCount:
    """A row of LIVE_SESSIONS_BY_AGENT_AND_STATUS (and the other counts by
    agent and status)."""

    agent: str
    status: str
    n: int


def sessions_by_agent_and_status(conn: psycopg.Connection[Any]) -> list[SessionCount]:
    """Active sessions from the partial index, then the kept counts of the
    resting and the finished ones: one statement, so one snapshot (a session
    that moves between two separate reads would be counted twice or not at
    all) and one round trip."""
    return rows.every(conn, SessionCount, SESSIONS_BY_AGENT_AND_STATUS_KEPT)


@dataclass(frozen=True)
class ConditionCount:
    """A row of OPEN_CONDITIONS."""

    condition: str
    n: int


def open_conditions(conn: psycopg.Connection[Any]) -> list[ConditionCount]:
    return rows.every(conn, ConditionCount, OPEN_CONDITIONS)


@dataclass(frozen=True)
class Backlog:
    """The row of BACKLOG."""

    dead_letters: int
    alerts: int
    oldest_pending: float
    overdue: int

    def __post_init__(self) -> None:
        # extract() answers a numeric.
        object.__setattr__(self, "oldest_pending", float(self.oldest_pending))


def backlog(conn: psycopg.Connection[Any], *, grace: float) -> Backlog:
    """What waits: open dead letters, undelivered alerts, the oldest pending
    session's age, suspended sessions more than `grace` seconds overdue."""
    row = rows.one(conn, Backlog, BACKLOG, {"grace": grace})
    assert row is not None  # one row of subqueries
    return row
