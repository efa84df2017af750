"""Operator tools tell the truth: a dry run refuses what the real run refuses,
the saga's outcome is a filter, ids may be typed as prefixes, and sessions can
be cancelled and signalled from the command line, audited with who and why."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from resumable.client import Client
from resumable.errors import InvalidDrainError
from resumable.models.database import Database
from resumable.services.dead_letters import DeadLetterFilter, DeadLetters
from resumable.webhooks.response_models import DeadLetterDetail
from tests.conftest import ManagedProcess, run_cli, wait_until
from tests.fake_api import FakeAPI


def _cli(client: Client, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(client.settings, *args, timeout=60)


def _error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def _letters(db: Database) -> dict[str, list[int]]:
    """Open dead letters by saga outcome."""
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT id, compensation FROM dead_letters WHERE status = 'open' ORDER BY id"
        ).fetchall()
    found: dict[str, list[int]] = {}
    for row in rows:
        found.setdefault(str(row["compensation"]), []).append(int(str(row["id"])))
    return found


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as fake:
        yield fake


def test_dry_run_refuses_what_the_real_run_refuses_and_compensation_filters(
    client: Client,
    db: Database,
    api: FakeAPI,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    start_worker()
    for _ in range(3):
        client.start("fragile", {"flag": str(tmp_path / "flag")})
    for _ in range(2):
        client.start("saga", {"api": api.url})
    wait_until(lambda: client.count_by_status() == {"failed": 5}, what="five dead letters")
    letters = _letters(db)
    plain, compensated = letters["none"], letters["completed"]
    assert (len(plain), len(compensated)) == (3, 2)
    (tmp_path / "flag").touch()

    dry = _cli(client, "dlq", "drain", "--action", "retry", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would retry 3 dead letter(s): {', '.join(map(str, sorted(plain, reverse=True)))}" in (
        dry.stdout
    )
    assert "would refuse 2" in dry.stdout
    assert dry.stdout.count("its compensations ran (completed)") == 2
    as_json = json.loads(
        _cli(client, "dlq", "drain", "--action", "retry", "--dry-run", "--json").stdout
    )
    assert sorted(map(int, as_json["refused"])) == compensated
    assert as_json["done"] == [] and client.count_by_status() == {"failed": 5}

    listed = json.loads(_cli(client, "dlq", "list", "--compensation", "completed", "--json").stdout)
    assert sorted(d["dead_letter_id"] for d in listed["items"]) == compensated
    bogus = _cli(client, "dlq", "list", "--compensation", "partly")
    assert "'partly' is not one of 'none', 'completed', 'failed'" in _error_line(bogus)

    # A rate that would stall the drain is refused before anything is done,
    # here and over HTTP (which shares DeadLetters.drain).
    slow = _cli(client, "dlq", "drain", "--action", "discard", "--reason", "x", "--rate", "0.001")
    assert "'--rate'" in _error_line(slow) and slow.returncode == 2
    with pytest.raises(InvalidDrainError, match="rate must be between"):
        DeadLetters(client.settings, db, client.broker).drain(
            "discard", DeadLetterFilter(), actor="test", reason="x", rate=1e-300
        )
    assert client.count_by_status() == {"failed": 5} and len(_letters(db)["none"]) == 3

    # The real run refuses exactly what the dry run said it would.
    real = _cli(client, "dlq", "drain", "--action", "retry", "--json")
    report = json.loads(real.stdout)
    assert real.returncode == 1
    assert "2 dead letter(s) could not be drained" in _error_line(real)
    assert sorted(report["done"]) == plain
    assert sorted(map(int, report["failed"])) == sorted(map(int, as_json["refused"]))
    wait_until(
        lambda: client.count_by_status() == {"completed": 3, "failed": 2}, what="retried sessions"
    )

    # Filtered on the saga's outcome, nothing is refused.
    only_plain = _cli(client, "dlq", "drain", "--action", "retry", "--compensation", "none")
    assert only_plain.returncode == 0, only_plain.stderr
    assert "retry: 0 done, 0 failed" in only_plain.stdout


def test_show_takes_a_unique_id_prefix_and_lists_candidates_otherwise(
    client: Client, db: Database, tmp_path: Path, start_worker: Callable[..., ManagedProcess]
) -> None:
    twins = [uuid.UUID(f"abcdef01-0000-4000-8000-00000000000{n}") for n in (1, 2)]
    for session_id in twins:
        client.start("five", session_id=session_id)
    shown = _cli(client, "sessions", "show", "abcdef01-0000-4000-8000-000000000002")
    assert json.loads(shown.stdout)["session_id"] == str(twins[1])
    unique = _cli(client, "sessions", "show", "ABCDEF01000040008000000000000001")
    assert json.loads(unique.stdout)["session_id"] == str(twins[0])
    ambiguous = _error_line(_cli(client, "sessions", "show", "abcdef01"))
    assert "'abcdef01' matches several sessions" in ambiguous
    assert all(str(t) in ambiguous for t in twins) and "[ambiguous_id]" in ambiguous
    assert "no session 'ffff'" in _error_line(_cli(client, "sessions", "events", "ffff"))
    assert "is not a session id" in _error_line(_cli(client, "sessions", "show", "xyz!"))

    start_worker()
    failed = client.start("fragile", {"flag": str(tmp_path / "flag")})
    wait_until(lambda: client.get(failed).status == "failed", what="a dead letter")
    [dead_letter_id] = _letters(db)["none"]
    by_session = json.loads(_cli(client, "dlq", "show", str(failed)[:8]).stdout)
    by_number = json.loads(_cli(client, "dlq", "show", str(dead_letter_id)).stdout)
    assert by_session == by_number
    assert by_session["dead_letter"]["dead_letter_id"] == dead_letter_id
    # The same record as GET /v1/dead-letters/{dead_letter_id} and the Python client.
    detail = DeadLetterDetail.model_validate(by_session)
    assert detail.dead_letter == client.dead_letter(dead_letter_id)
    assert detail.session == client.get(failed)
    assert detail.events == client.events(failed, latest=20)
    assert "no dead letter '99999999'" in _error_line(_cli(client, "dlq", "show", "99999999"))


def test_cancel_and_signal_from_the_command_line_are_audited(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    waiting = client.start("signalled", {"topic": "approve"})
    doomed = client.start("signalled", {"topic": "never"})
    wait_until(
        lambda: {client.get(s).status for s in (waiting, doomed)} == {"suspended"},
        what="both sessions to wait",
    )

    bad_topic = _cli(client, "sessions", "signal", str(waiting), "no spaces")
    assert "TOPIC must be" in _error_line(bad_topic)
    bad_payload = _cli(client, "sessions", "signal", str(waiting), "approve", "--payload", "{x")
    assert "--payload is not valid JSON" in _error_line(bad_payload)

    sent = _cli(
        client, "sessions", "signal", str(waiting)[:13], "approve",
        "--payload", '{"ok": true}', "--by", "ops@example.com", "--idempotency-key", "s-1",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert "signal accepted" in sent.stdout
    again = _cli(
        client, "sessions", "signal", str(waiting), "approve",
        "--payload", '{"ok": true}', "--idempotency-key", "s-1",
    )  # fmt: skip
    assert again.returncode == 0 and "already received" in again.stdout
    reused = _cli(client, "sessions", "signal", str(waiting), "approve", "--idempotency-key", "s-1")
    assert reused.returncode == 1 and "different body" in _error_line(reused)
    wait_until(lambda: client.get(waiting).status == "completed", what="the signalled session")
    assert client.get(waiting).result == {
        "kind": "signal",
        "topic": "approve",
        "payload": {"ok": True},
    }
    [received] = [e for e in client.events(waiting) if e.type == "signal_received"]
    assert received.payload["by"] == "ops@example.com"

    no_reason = _cli(client, "sessions", "cancel", str(doomed))
    assert "Missing option '--reason'" in _error_line(no_reason)
    cancelled = _cli(
        client, "sessions", "cancel", str(doomed)[:8], "--reason", "customer left", "--by", "me"
    )
    assert cancelled.returncode == 0, cancelled.stderr
    assert client.get(doomed).status == "cancelled"
    [event] = [e for e in client.events(doomed) if e.type == "session_cancelled"]
    assert (event.payload["by"], event.payload["reason"]) == ("me", "customer left")
    twice = _cli(client, "sessions", "cancel", str(doomed), "--reason", "again")
    assert "is already cancelled" in _error_line(twice)
    late = _cli(client, "sessions", "signal", str(doomed), "approve")
    assert "it takes no more signals" in _error_line(late)


def test_fork_of_a_compensated_saga_needs_allow_compensated(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    with FakeAPI() as fake:
        session_id = client.start("saga", {"api": fake.url})
        wait_until(lambda: client.get(session_id).status == "failed", what="the saga")
    refused = _cli(client, "sessions", "fork", str(session_id), "--at", "2")
    assert refused.returncode == 1
    assert "compensated" in refused.stderr and "Traceback" not in refused.stderr
    assert client.count_by_status() == {"failed": 1}
    allowed = _cli(client, "sessions", "fork", str(session_id), "--at", "2", "--allow-compensated")
    assert allowed.returncode == 0, allowed.stderr
    fork_id = uuid.UUID(allowed.stdout.strip())
    [created] = [e for e in client.events(fork_id) if e.type == "session_created"]
    assert created.payload["compensated_calls_reused"] == 2


def test_dates_in_rfc_3339_and_rates_written_per_second_are_taken(client: Client) -> None:
    """`--since` takes the form the HTTP API's `since` takes (a Z or an
    offset), and `--rate` the `N/s` the README writes."""
    for since in ("2026-11-01", "2026-11-01T09:00:00", "2026-11-01T09:00:00Z",
                  "2026-11-01T09:00:00+05:30", "2026-11-01T09:00:00.250Z"):  # fmt: skip
        listed = _cli(client, "dlq", "list", "--since", since, "--json")
        assert listed.returncode == 0, (since, listed.stderr)
        assert json.loads(listed.stdout)["items"] == []
    for rate in ("5", "5/s", "0.5/s"):
        drained = _cli(client, "dlq", "drain", "--action", "retry", "--dry-run", "--rate", rate)
        assert drained.returncode == 0, (rate, drained.stderr)
    refused = _cli(client, "dlq", "drain", "--action", "retry", "--rate", "5/min")
    assert refused.returncode == 2 and "--rate" in refused.stderr


def test_a_time_without_an_offset_is_utc_whatever_the_database_timezone(
    client: Client, db: Database, tmp_path: Path, start_worker: Callable[..., ManagedProcess]
) -> None:
    """The console reads `2026-11-01T09:00:00` as UTC; so must the CLI, or
    the two would pick different dead letters from the same text. PGTZ puts
    the CLI's PostgreSQL session 14 hours ahead of UTC."""
    start_worker()
    client.start("fragile", {"flag": str(tmp_path / "flag")})
    wait_until(lambda: client.count_by_status() == {"failed": 1}, what="a dead letter")
    with db.connection() as conn:
        row = conn.execute("SELECT id, failed_at FROM dead_letters").fetchone()
    assert row is not None and isinstance(row["failed_at"], datetime)
    failed_at = row["failed_at"].astimezone(UTC)
    until = (failed_at + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    since = (failed_at - timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S")
    for option, text in (("--until", until), ("--since", since)):
        listed = run_cli(
            client.settings, "dlq", "list", option, text, "--json", PGTZ="Pacific/Kiritimati"
        )
        assert listed.returncode == 0, listed.stderr
        assert [item["dead_letter_id"] for item in json.loads(listed.stdout)["items"]] == [
            row["id"]
        ], option
    later = (failed_at + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    none = run_cli(client.settings, "dlq", "list", "--since", later, "--json", PGTZ="Etc/GMT+12")
    assert json.loads(none.stdout)["items"] == []


def test_the_tables_fit_80_columns_one_line_a_row_saying_what_each_session_does(
    client: Client, tmp_path: Path, start_worker: Callable[..., ManagedProcess]
) -> None:
    """Read through a pipe (80 columns to rich), the tables cut ids and
    headers to `sessi…` and `dead_…` and wrapped each error over five lines;
    `sessions list` said nothing of what a session waits for."""
    start_worker()
    waiting = client.start("signalled", {"topic": "approval", "timeout": 3600})
    failed = client.start("fragile", {"flag": str(tmp_path / "never")})
    wait_until(
        lambda: client.count_by_status() == {"suspended": 1, "failed": 1},
        what="one session waiting for its signal and one dead letter",
    )

    listed = _cli(client, "sessions", "list")
    assert listed.returncode == 0, listed.stderr
    assert max(map(len, listed.stdout.splitlines())) <= 80, listed.stdout
    # Wider, each row is one line (at 80 columns the sentence wraps in its cell).
    listed = run_cli(client.settings, "sessions", "list", COLUMNS="160")
    lines = listed.stdout.splitlines()
    [waits] = [line for line in lines if line.lstrip().startswith(str(waiting)[:8])]
    # A deadline past midnight is said with its date (the narration's rule).
    deadline = r"until (\d{4}-\d\d-\d\d )?\d\d:\d\d UTC \(in 5\d min\)"
    assert re.search(r"waiting for signal `approval`, " + deadline, waits)
    [fails] = [line for line in lines if line.lstrip().startswith(str(failed)[:8])]
    assert "failed just now: PermanentError: the flag is not set" in fails or (
        "s ago: PermanentError" in fails
    ), listed.stdout
    # The prefix the table shows is what every command takes.
    shown = _cli(client, "sessions", "show", str(waiting)[:8])
    assert json.loads(shown.stdout)["session_id"] == str(waiting)
    full = _cli(client, "sessions", "list", "--full-ids")
    assert str(waiting) in full.stdout

    letters = _cli(client, "dlq", "list")
    assert letters.returncode == 0, letters.stderr
    rows = [line for line in letters.stdout.splitlines() if str(failed)[:8] in line]
    assert len(rows) == 1, letters.stdout  # one line, the error cut to fit
    assert max(map(len, letters.stdout.splitlines())) <= 80, letters.stdout
    assert "PermanentError: the" in rows[0]
