"""How much does the version-aware claim cost against the claim before versions?

Run from the repository root::

    .venv/bin/python benchmarks/claims.py [--claims N --rounds R]

One connection claims sessions one statement at a time, as a worker does when
a message arrives, with three statements interleaved claim by claim (so a
shared, noisy CPU slows all three alike):

- ``before``: ``CLAIM_LEASE`` as it was before agent versions (commit dff5b7a),
  kept verbatim below: the worker's agents as a text array;
- ``first``: today's ``CLAIM_LEASE`` on a session that never ran a step (the
  branch that also asks the live workers whether one serves a newer version);
- ``resumed``: today's ``CLAIM_LEASE`` on a session that ran before (its
  version must equal the worker's).

Each round creates fresh pending sessions (outside the timing), with a live
worker row and an agent in the catalog as in production. Prints the median
and mean latency per statement as the client sees it (dominated by the
commit's WAL flush) and, with ``pg_stat_statements``, the server's mean
execution time of the claim before and today (``first`` and ``resumed``
together), with the ratios against ``before``.

Then the claim on new connections (``--cold-connections`` of them per way, the
ways interleaved): the median latency of each of a connection's first
``--cold-claims`` claims, as a worker's pool connection pays them after a
start, a deploy or a recycled connection. Four ways: psycopg's default (the
first five executions are not prepared, so each is parsed and planned; then
PostgreSQL plans the prepared statement for its parameters five times more
before it may keep a generic plan), prepared at the first execution
(``prepare=True``), ``plan_cache_mode = force_generic_plan`` on the
connection, and both. What a connection's first claims cost beyond the
steady state is planning, which a short benchmark run (``steps.py``: 200
sessions over about 20 pooled connections) mostly measures.

``DATABASE_URL`` is used when set; otherwise an embedded server runs under
``--home`` (default ``.resumable/bench``). The tables are truncated: never
point this at a database you care about.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness, pg_counters
from resumable.models import step_queries

ROOT = Path(__file__).resolve().parent.parent

# CLAIM_LEASE before agent versions (commit dff5b7a), rendered.
CLAIM_BEFORE = """
WITH old AS (
    SELECT id, status, lease_owner, lease_epoch FROM sessions
    WHERE id = %(id)s AND (
    sessions.agent = ANY(%(agents)s)
    OR NOT EXISTS (SELECT 1 FROM agents a WHERE a.name = sessions.agent)
) AND (
    sessions.status = 'pending'
    OR (sessions.status = 'retrying' AND sessions.wake_at <= now())
    OR (sessions.status IN ('running', 'compensating')
        AND (sessions.lease_expires_at < now()
             OR EXISTS (SELECT 1 FROM workers w
                        WHERE w.id = regexp_replace(sessions.lease_owner, ':[^:]*$', '')
                          AND w.expires_at < now())))
    OR (sessions.status = 'compensating' AND sessions.lease_owner IS NULL
        AND (sessions.wake_at IS NULL OR sessions.wake_at <= now()))
)
    FOR UPDATE
), s AS (
    UPDATE sessions SET
        status = CASE WHEN old.status = 'compensating' THEN 'compensating' ELSE 'running' END,
        wake_at = NULL,
        lease_epoch = sessions.lease_epoch + 1,
        lease_owner = %(owner)s,
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
        step_started_at = now(),
        step_deadline = NULL,
        updated_at = now()
    FROM old
    WHERE sessions.id = old.id
    RETURNING sessions.id, sessions.agent, sessions.cursor, sessions.state, sessions.input,
              sessions.step_seq, sessions.lease_epoch, sessions.wait, sessions.wake,
              sessions.status, sessions.attempts, sessions.error, sessions.history_rebase,
              old.status AS previous_status, old.lease_owner AS previous_owner
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor,
           CASE WHEN previous_status = 'running' THEN 'lease_recovered'
                WHEN previous_status = 'compensating' THEN 'compensation_resumed'
                WHEN previous_status = 'retrying' THEN 'retry_started'
                ELSE 'run_started' END,
           jsonb_build_object('worker', %(owner)s, 'epoch', lease_epoch,
                              'previous_owner', previous_owner, 'attempt', attempts + 1)
    FROM s
)
SELECT id AS session_id, agent, cursor, state, input, step_seq, lease_epoch AS epoch, wait,
       wake, status, attempts, error, history_rebase
FROM s
"""

AGENT = "bench_claims"
OWNER = "bench:1:1"
COMMON = {"owner": OWNER, "lease_seconds": 30}
# Today's CLAIM_LEASE parameters, but the session's id: a worker of AGENT, version 1.
CLAIM_PARAMS = {
    **COMMON,
    "versions": json.dumps({AGENT: 1}),
    "starts": json.dumps({AGENT: {"step": "a", "limit": None}}),
}


def _sessions(conn: object, n: int, cursor: str | None) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(n)]
    conn.execute(  # type: ignore[attr-defined]
        "INSERT INTO sessions (id, agent, status, cursor, state, agent_version, started_version)"
        " SELECT unnest(%s::uuid[]), %s, 'pending', %s, '{}'::jsonb, 1, 1",
        (ids, AGENT, cursor),
    )
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=500, help="claims per statement per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--home", type=Path, default=ROOT / ".resumable" / "bench")
    parser.add_argument(
        "--cold-connections", type=int, default=20, help="new connections per way (0: skip)"
    )
    parser.add_argument("--cold-claims", type=int, default=12, help="claims per new connection")
    args = parser.parse_args(argv)
    if args.claims < 1 or args.rounds < 1 or args.cold_connections < 0 or args.cold_claims < 1:
        parser.error("--claims, --rounds, --cold-claims must be positive; --cold-connections >= 0")
    timings: dict[str, list[float]] = {"before": [], "first": [], "resumed": []}
    with harness.bench_services(args.home) as services:
        harness.reset_data(
            services.pg_url, services.redis_url, ["sessions", "workers", "agents"], ["sessions"]
        )
        stats = pg_counters.enable_pg_stat_statements(
            services.pg_url, services.home, services.own_database
        )
        pg_counters.reset_statements(services.pg_url, stats)
        with harness.connect(services.pg_url) as conn:
            conn.execute(
                "INSERT INTO agents (name, steps, checks) VALUES (%s, '[\"a\"]', '[]')", (AGENT,)
            )
            conn.execute(
                "INSERT INTO workers (id, agents, versions, expires_at)"
                " VALUES ('bench:1', %s::jsonb, %s::jsonb, now() + interval '1 hour')",
                (json.dumps([AGENT]), json.dumps({AGENT: 1})),
            )
            for _ in range(args.rounds):
                sets = {
                    "before": _sessions(conn, args.claims, "a"),
                    "first": _sessions(conn, args.claims, None),
                    "resumed": _sessions(conn, args.claims, "a"),
                }
                conn.execute("ANALYZE sessions")
                for i in range(args.claims):
                    for name, ids in sets.items():
                        statement = CLAIM_BEFORE if name == "before" else step_queries.CLAIM_LEASE
                        params = (
                            {"id": ids[i], "agents": [AGENT], **COMMON}
                            if name == "before"
                            else {"id": ids[i], **CLAIM_PARAMS}
                        )
                        started = time.perf_counter()
                        row = conn.execute(statement, params, prepare=True).fetchone()
                        timings[name].append(time.perf_counter() - started)
                        assert row is not None, f"{name}: nothing claimed"
        # pg_stat_statements keys statements by their parse tree (a comment
        # does not tell `first` from `resumed`): before, and today's claim.
        fragments = {
            "before": "SELECT id, status, lease_owner, lease_epoch FROM sessions",
            "today": "SELECT id, status, lease_owner, lease_epoch, lease_expires_at, cursor, agent",
        }
        server = {
            stmt.name: stmt.mean_ms
            for stmt in pg_counters.read_statements(services.pg_url, stats, fragments)
            if stmt.name in fragments
        }
        cold = cold_claims(services.pg_url, args.cold_connections, args.cold_claims)
    base = statistics.median(timings["before"])
    base_mean = statistics.mean(timings["before"])
    print(f"claims: {args.rounds} rounds x {args.claims} per statement, interleaved")
    print(
        f"{'statement':<10} {'median ms':>10} {'mean ms':>9} {'x before (median)':>18}"
        f" {'x before (mean)':>16}"
    )
    for name, values in timings.items():
        median, mean = statistics.median(values), statistics.mean(values)
        print(
            f"{name:<10} {median * 1000:>10.3f} {mean * 1000:>9.3f} {median / base:>18.3f}"
            f" {mean / base_mean:>16.3f}"
        )
    if "before" in server:
        print(f"server-side mean execution ({stats.method}):")
        for name in ("before", "today"):
            if name in server:
                ratio = server[name] / server["before"]
                print(f"{name:<10} {server[name]:>10.4f} ms {ratio:>8.3f}x before")
    else:
        print(f"no server-side times: {stats.note or stats.method}")
    if cold:
        print_cold(cold, args.cold_connections)
    return 0


# How a new connection may run its claims: (prepare at the first execution,
# force generic plans).
COLD_WAYS = {
    "default": (False, False),
    "prepared": (True, False),
    "generic": (False, True),
    "both": (True, True),
}


def cold_claims(pg_url: str, connections: int, claims: int) -> dict[str, list[list[float]]]:
    """Seconds of each new connection's first `claims` claims, per way."""
    if connections == 0:
        return {}
    timings: dict[str, list[list[float]]] = {way: [[] for _ in range(claims)] for way in COLD_WAYS}
    with harness.connect(pg_url) as setup:
        ids = iter(_sessions(setup, connections * len(COLD_WAYS) * claims, "a"))
        setup.execute("ANALYZE sessions")
    for _ in range(connections):
        for way, (prepare, generic) in COLD_WAYS.items():
            with harness.connect(pg_url) as conn:
                if generic:
                    conn.execute("SET plan_cache_mode = force_generic_plan")
                for index in range(claims):
                    started = time.perf_counter()
                    row = conn.execute(
                        step_queries.CLAIM_LEASE,
                        {**CLAIM_PARAMS, "id": next(ids)},
                        prepare=True if prepare else None,
                    ).fetchone()
                    timings[way][index].append(time.perf_counter() - started)
                    assert row is not None, f"{way}: nothing claimed"
    return timings


def print_cold(timings: dict[str, list[list[float]]], connections: int) -> None:
    claims = len(timings["default"])
    print(
        f"claims on new connections: {connections} per way, interleaved;"
        f" median ms of the connection's 1st to {claims}th claim, and their sum"
    )
    sums = {way: sum(statistics.median(v) for v in per) * 1000 for way, per in timings.items()}
    for way, per in timings.items():
        medians = " ".join(f"{statistics.median(v) * 1000:5.2f}" for v in per)
        print(f"{way:<10} {medians}  sum {sums[way]:6.2f} ({sums[way] / sums['default']:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
