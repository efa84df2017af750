"""`resumable demo` as a user runs it: a real subprocess, here sharing the test
servers so its claims can be checked against the database it wrote."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from resumable._internal.procfs import pid_alive
from resumable.client import Client
from resumable.dev.processes import spawn
from resumable.models.database import Database
from resumable.settings import Settings
from tests.conftest import ROOT, broker_env


def _run_demo(settings: Settings, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DATABASE_URL": settings.database_url or "",
        "REDIS_URL": settings.redis_url or "",
        **broker_env(settings),
        "RESUMABLE_HOME": str(home),
        "COLUMNS": "200",  # one line per claim, so the output can be parsed
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, "-m", "resumable.cli", "demo"]
    demo = spawn("demo", command, env=env, cwd=ROOT, log=home / "demo.log")
    try:
        returncode = demo.popen.wait(timeout=90)
    except subprocess.TimeoutExpired:
        demo.stop(grace_seconds=30)  # the demo stops its own processes on SIGTERM
        returncode = demo.popen.wait(timeout=10)
    return subprocess.CompletedProcess(command, returncode, demo.output(), "")


def _scalar(db: Database, sql: str, *params: object) -> object:
    with db.connection() as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return next(iter(row.values()))


def test_demo_refunds_exactly_once_across_a_sigkill(
    settings: Settings, db: Database, client: Client, tmp_path: Path
) -> None:
    done = _run_demo(settings, tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "✘" not in out
    assert "every claim holds" in out
    assert "answered [202, 200], stored 1x, resumed the session 1x" in out
    assert "the card was refunded exactly once: 1 refund issued, 1 refund request received" in out
    assert "SIGKILL worker 1" in out
    took = re.search(r"every claim holds in ([\d.]+) s", out)
    assert took is not None
    assert float(took.group(1)) < 60

    # The database it used tells the same story.
    [session] = client.list_sessions(agent="demo-refund")
    assert session.status == "completed"
    assert session.result == {"refunded": True, "refund_id": "re_0001", "settled": True}
    events = [e.type for e in client.events(session.session_id)]
    assert events.count("lease_recovered") == 1
    assert events.count("step_completed") == 4
    assert events.count("callback_received") == 1
    assert [c.seq for c in client.checkpoints(session.session_id)] == [1, 2, 3, 4]
    refunds = _scalar(
        db,
        "SELECT count(*) FROM tool_execution_cache WHERE session_id = %s AND tool = 'refund'",
        session.session_id,
    )
    assert refunds == 1
    assert (
        _scalar(db, "SELECT count(*) FROM deliveries WHERE session_id = %s", session.session_id)
        == 1
    )
    [ping] = client.list_sessions(agent="demo-ping")
    assert ping.status == "completed"

    # Every process it started (web, scheduler, two workers) is gone.
    pids = {int(p) for p in re.findall(r"\(pid (\d+)", out)}
    assert len(pids) >= 4
    assert not [pid for pid in pids if pid_alive(pid)]


def test_demo_refuses_a_database_where_other_sessions_are_unfinished(
    settings: Settings, client: Client, tmp_path: Path
) -> None:
    # Its scheduler and workers would pick this session up and fail it.
    other = client.start("five")
    done = _run_demo(settings, tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "1 unfinished sessions of other agents (five)" in out
    assert "DEMO FAILED" in out
    after = client.session_row(other)
    assert (after.status, after.step_seq, after.lease_epoch) == ("pending", 0, 0)
    assert client.list_sessions(agent="demo-refund") == []
