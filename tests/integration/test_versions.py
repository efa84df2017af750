"""Agent versions on real workers (DESIGN.md invariant 8): a session runs only
on workers that serve the version it started on, or on a newer version that
migrates it (``@agent.migrate``), in the claim's transaction; renamed steps
keep their old names as aliases; a replay that makes fewer calls than it
recorded is parked; a starting worker names the versions it cannot serve.

Agents: tests/deploy_agents_v1.py (`trip`, unversioned), v4 (`trip` version 2:
`pay` renamed `charge`, state migrated from version 0), v5 (`trip` whose
`book` no longer books); tests/deploy_agents_roll_v1.py / _v2.py (`roll`
versions 1 and 2, no migration between them).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.models.database import Database
from resumable.services.inbox import Inbox
from tests.conftest import LocalDeployment, run_cli, wait_until
from tests.fake_api import FakeAPI
from tests.integration.test_console_routes import log_in

V1, V4, V5 = "tests.deploy_agents_v1", "tests.deploy_agents_v4", "tests.deploy_agents_v5"
V6 = "tests.deploy_agents_v6"
ROLL1, ROLL2 = "tests.deploy_agents_roll_v1", "tests.deploy_agents_roll_v2"
NOT_HAVE = "which this worker does not have"


def _session(db: Database, session_id: uuid.UUID) -> dict[str, Any]:
    with db.connection() as conn:
        row = conn.execute("SELECT * FROM sessions WHERE id = %s", (session_id,)).fetchone()
    assert row is not None
    return dict(row)


def _status(db: Database, session_id: uuid.UUID) -> str:
    return str(_session(db, session_id)["status"])


def _wait_status(db: Database, session_id: uuid.UUID, status: str, timeout: float = 30.0) -> None:
    try:
        wait_until(
            lambda: _status(db, session_id) == status,
            timeout=timeout,
            what=f"{session_id} {status}",
        )
    except AssertionError as exc:
        row = _session(db, session_id)
        seen = {key: row[key] for key in ("status", "cursor", "lease_owner", "lease_expires_at")}
        raise AssertionError(f"{exc}; the session is {seen}") from None


def _events(db: Database, session_id: uuid.UUID, *kinds: str) -> list[dict[str, Any]]:
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT * FROM audit_events WHERE session_id = %s AND event_type = ANY(%s) ORDER BY id",
            (session_id, list(kinds)),
        ).fetchall()
    return [dict(row) for row in rows]


def _signal(client: Client, db: Database, session_id: uuid.UUID) -> None:
    Inbox(client.settings, db, client.broker).signal(session_id, "go", None, None, "test")


def test_a_renamed_step_with_an_alias_and_a_state_migration_completes_waiting_sessions(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    v1 = deployment.worker(V1)
    with FakeAPI() as api:
        old = [client.start("trip", {"api": api.url}) for _ in range(3)]
        for sid in old:
            _wait_status(db, sid, "suspended")
            assert _session(db, sid)["cursor"] == "pay"
        v1.stop()

        # Version 2 has no `pay` step but `charge` keeps it as an alias, and it
        # migrates version 0: nothing to warn about.
        v2 = deployment.worker(V4)
        assert NOT_HAVE not in v2.output()
        assert "no live worker serves" not in v2.output()
        new = client.start("trip", {"api": api.url})
        _wait_status(db, new, "suspended")
        for sid in [*old, new]:
            _signal(client, db, sid)
        for sid in [*old, new]:
            _wait_status(db, sid, "completed")

        for sid in old:
            row = _session(db, sid)
            assert (row["agent_version"], row["started_version"]) == (2, 0)
            assert row["state"] == {"booking": {"nights": 2}}
            # Started before the patch: the old path (dollars), for its whole life.
            assert row["result"] == {"paid": True, "currency": "USD", "started_on": 0}
            [migrated] = _events(db, sid, "session_migrated")
            assert migrated["payload"]["from_version"] == 0
            assert migrated["payload"]["to_version"] == 2
            assert migrated["payload"]["from_step"] == "pay"
            assert migrated["step"] == "charge"  # renamed through the alias
        fresh = _session(db, new)
        assert (fresh["agent_version"], fresh["started_version"]) == (2, 2)
        assert fresh["result"] == {"paid": True, "currency": "EUR", "started_on": 2}
        assert _events(db, new, "session_migrated") == []

        # Every effect once: four hotels, four charges, nothing undone.
        assert max(api.calls.values()) == 1
        paths = [path for path, _ in api.order]
        assert (paths.count("/book"), paths.count("/charge"), paths.count("/undo")) == (4, 4, 0)
        charges = [body for path, body in api.order if path == "/charge"]
        assert all(body["nights"] == 2 for body in charges)
        with db.connection() as conn:
            assert conn.execute("SELECT count(*) AS n FROM dead_letters").fetchone() == {"n": 0}
            catalog = conn.execute(
                "SELECT version, steps, takes_over FROM agent_versions WHERE agent = 'trip'"
                " ORDER BY version"
            ).fetchall()
        assert [(row["version"], row["takes_over"]) for row in catalog] == [(0, []), (2, [0])]
        assert catalog[1]["steps"] == ["book", "charge"]


def test_a_failing_migration_parks_the_session_untouched_until_a_fixed_one_takes_it(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    v1 = deployment.worker(V1)
    with FakeAPI() as api:
        sid = client.start("trip", {"api": api.url})
        _wait_status(db, sid, "suspended")
        before = _session(db, sid)
        v1.stop()
        broken = deployment.worker(V6)
        _signal(client, db, sid)
        _wait_status(db, sid, "blocked")
        row = _session(db, sid)
        assert row["blocked_reason"]["kind"] == "migration_failed"
        assert "KeyError" in row["blocked_reason"]["message"]
        # Parked in the claim's transaction, nothing migrated: the session kept
        # its version, state and cursor; nothing was undone or called.
        assert (row["agent_version"], row["state"], row["cursor"]) == (
            0,
            before["state"],
            "pay",
        )
        assert _events(db, sid, "session_migrated") == []
        assert [path for path, _ in api.order] == ["/book"]
        refused = run_cli(client.settings, "sessions", "accept", str(sid), "--reason", "x")
        assert refused.returncode != 0 and "no new behaviour to accept" in refused.stderr

        broken.stop()
        deployment.worker(V4)  # the fixed migration
        done = run_cli(client.settings, "sessions", "resume", str(sid), "--reason", "fixed")
        assert done.returncode == 0, done.stderr
        _wait_status(db, sid, "completed")
        assert _session(db, sid)["agent_version"] == 2
        assert [path for path, _ in api.order] == ["/book", "/charge"]


def test_a_replay_that_makes_fewer_calls_than_recorded_is_blocked_then_accepted(
    client: Client, db: Database, deployment: LocalDeployment, tmp_path: Path
) -> None:
    # A killed worker's message comes back from dramatiq only when its
    # heartbeat lapses; the reconciler is what guarantees the session is
    # claimed again (a redelivery that came while the dead worker's lease
    # still stood is dropped as a duplicate), as in any deployment.
    deployment.scheduler()
    (tmp_path / "hold").touch()
    v1 = deployment.worker(V1)
    with FakeAPI() as api:
        sid = client.start("trip", {"api": api.url, "gate_dir": str(tmp_path)})
        wait_until((tmp_path / "entered-book-1").exists, what="the hotel booked, step held")
        deployment.kill(v1)  # SIGKILL mid-step: the booking is recorded, the step is not
        deployment.worker(V5)  # `book` no longer books
        _wait_status(db, sid, "blocked")
        reason = _session(db, sid)["blocked_reason"]
        assert reason["kind"] == "tool_calls_missing"
        assert (reason["step"], reason["call_index"]) == ("book", 0)
        assert reason["recorded"]["tool"] == "hotel"
        assert api.total_calls() == 1
        with db.connection() as conn:
            checkpoints = conn.execute(
                "SELECT count(*) AS n FROM checkpoints WHERE session_id = %s", (sid,)
            ).fetchone()
        assert checkpoints == {"n": 0}  # the replayed step's outcome was not committed

        accept = ["accept", str(sid), "--reason", "no hotel now", "--by", "ops"]
        done = run_cli(client.settings, "sessions", *accept)
        assert done.returncode == 0, done.stderr
        _wait_status(db, sid, "suspended")
        _signal(client, db, sid)
        _wait_status(db, sid, "completed")
        assert api.total_calls() == 1  # nothing called again
        [accepted] = _events(db, sid, "divergence_accepted")
        assert [call["tool"] for call in accepted["payload"]["superseded"]] == ["hotel"]


def test_rolling_deploy_runs_each_session_only_on_workers_of_its_version(
    client: Client, db: Database, deployment: LocalDeployment, tmp_path: Path
) -> None:
    deployment.scheduler()  # reconciles the sessions of killed workers
    pids: dict[int, set[int]] = {1: set(), 2: set()}

    def worker(version: int) -> Any:
        process = deployment.worker(ROLL1 if version == 1 else ROLL2)
        pids[version].add(process.pid)
        return process

    with FakeAPI() as api:
        old_worker = worker(1)
        old = [client.start("roll", {"api": api.url, "gate_dir": str(tmp_path)}) for _ in range(3)]
        for sid in old:
            _wait_status(db, sid, "suspended")
        new_worker = worker(2)  # from now on new sessions start on version 2
        new = [client.start("roll", {"api": api.url, "gate_dir": str(tmp_path)}) for _ in range(3)]
        for sid in new:
            _wait_status(db, sid, "suspended")
        assert "no live worker serves" not in new_worker.output()

        # Both versions in flight, held mid-step; SIGKILL a worker of each.
        (tmp_path / "hold").touch()
        for sid in [*old, new[0]]:
            _signal(client, db, sid)
        wait_until(
            lambda: (
                len(list(tmp_path.glob("entered-finish-v1-*"))) >= 1
                and len(list(tmp_path.glob("entered-finish-v2-*"))) >= 1
            ),
            what="steps of both versions in flight",
        )
        deployment.kill(old_worker)
        deployment.kill(new_worker)
        (tmp_path / "hold").unlink()
        # Only version 2 is back at first: the version 1 sessions wait for theirs.
        worker(2)
        for sid in new[1:]:
            _signal(client, db, sid)
        for sid in new:
            _wait_status(db, sid, "completed")
        assert all(_status(db, sid) != "completed" for sid in old)
        worker(1)
        for sid in old:
            _wait_status(db, sid, "completed")

    for version, sessions in ((1, old), (2, new)):
        for sid in sessions:
            row = _session(db, sid)
            assert (row["agent_version"], row["started_version"]) == (version, version)
            assert row["result"] == {"version": version}
            claims = _events(db, sid, "run_started", "lease_recovered", "retry_started")
            owners = {int(event["payload"]["worker"].split(":")[1]) for event in claims}
            assert owners and owners <= pids[version], (sid, owners, pids)
    marks = [(body["session"], body["what"], body["version"]) for _, body in api.order]
    assert len(marks) == len(set(marks)) == 12  # start and finish of six sessions, once each
    assert {(s, v) for s, _, v in marks} == {(str(s), 1) for s in old} | {(str(s), 2) for s in new}
    assert max(api.calls.values()) == 1


def test_the_start_up_warning_names_a_version_only_when_no_live_worker_serves_it(
    client: Client, db: Database, deployment: LocalDeployment, tmp_path: Path
) -> None:
    with FakeAPI() as api:
        v1 = deployment.worker(ROLL1)
        sids = [client.start("roll", {"api": api.url, "gate_dir": str(tmp_path)}) for _ in range(2)]
        for sid in sids:
            _wait_status(db, sid, "suspended")
        line = (
            "2 sessions of roll@1 wait for a worker of that version, which this worker is not "
            "(it runs roll@2 and migrates no older version); no live worker serves them"
        )
        # A version 1 worker is alive: it drains them, no warning.
        beside = deployment.worker(ROLL2)
        assert line not in beside.output()
        assert NOT_HAVE not in beside.output()
        v1.stop()
        alone = deployment.worker(ROLL2)
        wait_until(lambda: line in alone.output(), what="the version warning")
        # Their messages are not claimed by version 2: they stay suspended.
        for sid in sids:
            _signal(client, db, sid)
        wait_until(lambda: all(_status(db, sid) == "pending" for sid in sids), what="woken")
        listed = run_cli(client.settings, "sessions", "list", "--unserved", "--json")
        assert listed.returncode == 0, listed.stderr
        unserved = {row["session_id"] for row in json.loads(listed.stdout)["items"]}
        assert unserved == {str(sid) for sid in sids}
        assert all(_status(db, sid) == "pending" for sid in sids)  # not run by version 2
        # The version 1 worker comes back and finishes them.
        back = deployment.worker(ROLL1)
        assert line not in back.output() and NOT_HAVE not in back.output()
        # Each message lands on any of the three workers; a version 2 worker
        # passes it on a second later, so reaching the one version 1 worker
        # is a random walk (the whole test took 10-40 s over 16 runs, before
        # and after the resume change alike; CI timed out once at 30 s).
        for sid in sids:
            _wait_status(db, sid, "completed", timeout=60.0)
        assert all(_session(db, sid)["agent_version"] == 1 for sid in sids)


def test_live_workers_running_other_code_for_an_unversioned_agent_are_said_and_recorded(
    client: Client, deployment: LocalDeployment, app: Starlette
) -> None:
    """Issue 41: an old and a new worker served one unversioned agent for
    minutes, each session alternating between the two codes, and nothing
    said so. The second build's worker warns at start, naming the other
    worker; each run's `run_started` event records the code that ran it."""
    first = deployment.worker("tests.drift_agents_a")
    session = client.start("drift", {})
    wait_until(lambda: client.get(session).status == "suspended", what="waiting for go")
    second = deployment.worker("tests.drift_agents_b")
    wait_until(
        lambda: "is unversioned and live worker" in second.output(), what="the warning at start"
    )
    warning = next(
        line for line in second.output().splitlines() if "is unversioned and live worker" in line
    )
    assert "'drift'" in warning and "give the agent a version" in warning
    assert "is unversioned and live worker" not in first.output()  # it started alone
    with TestClient(app, follow_redirects=False) as console:
        log_in(console)
        workers = console.get("/ui/workers").text
        assert 'id="differing"' in workers and "drift" in workers
        assert workers.count("code-differs") == 2  # each live worker's code, marked

        first.stop()  # the session goes on, on the other build
        client.signal(session, "go", {})
        wait_until(lambda: client.get(session).status == "completed", what="completed")
        codes = [e.payload.get("code") for e in client.events(session) if e.type == "run_started"]
        assert len(codes) == 2 and all(codes) and codes[0] != codes[1], codes
        assert client.get(session).result == {"done": True, "build": "b"}
        page = console.get(f"/ui/sessions/{session}").text
        assert 'id="code-changed"' in page and "2 different builds" in page
        assert 'id="differing"' not in console.get("/ui/workers").text  # one build is left
