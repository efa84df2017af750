"""What a session is doing, in words, for each status (``sessions list`` and
the console's session page say it this way)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from resumable.models.status import SessionStatus
from resumable.schemas import Session, SessionError, WaitingFor
from resumable.services.narration import doing_now, duration

NOW = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)


def _session(status: SessionStatus, **fields: Any) -> Session:
    base: dict[str, Any] = {
        "session_id": uuid.uuid4(),
        "agent": "support",
        "status": status,
        "step": "charge",
        "seq": 2,
        "attempts": 0,
        "input": {},
        "state": None,
        "result": None,
        "error": None,
        "waiting_for": None,
        "blocked_reason": None,
        "created_at": NOW - timedelta(hours=1),
        "updated_at": NOW - timedelta(seconds=3),
        "finished_at": None,
    }
    return Session(**{**base, **fields})


@pytest.mark.parametrize(
    ("session", "sentence"),
    [
        (_session(SessionStatus.RUNNING), "running `charge` for 3 s"),
        (_session(SessionStatus.PENDING), "queued for `charge`, 3 s so far"),
        (
            _session(
                SessionStatus.SUSPENDED,
                waiting_for=WaitingFor(
                    callbacks=0, signals=["approval"], deadline=NOW + timedelta(hours=4)
                ),
            ),
            "waiting for signal `approval`, until 14:00 UTC (in 4 h)",
        ),
        (
            _session(
                SessionStatus.SUSPENDED,
                waiting_for=WaitingFor(
                    callbacks=2, signals=[], timer_at=NOW + timedelta(days=2, minutes=5)
                ),
            ),
            "waiting for 2 callbacks or its timer at 2026-12-08 10:05 UTC (in 2 d)",
        ),
        (
            _session(
                SessionStatus.SUSPENDED,
                waiting_for=WaitingFor(callbacks=0, signals=[], poll="job_done"),
            ),
            "waiting for check `job_done` to pass",
        ),
        (
            _session(
                SessionStatus.RETRYING,
                attempts=2,
                error=SessionError(type="TimeoutError", message="read timed out"),
            ),
            "retrying `charge` (attempt 3) after TimeoutError",
        ),
        (
            _session(
                SessionStatus.BLOCKED,
                blocked_reason={"kind": "diverged", "message": "argument currency changed"},
            ),
            "blocked: argument currency changed",
        ),
        (
            _session(
                SessionStatus.FAILED,
                finished_at=NOW - timedelta(minutes=5),
                error=SessionError(type="PermanentError", message="card declined"),
            ),
            "failed 5 min ago: PermanentError: card declined",
        ),
        (
            _session(SessionStatus.COMPLETED, finished_at=NOW - timedelta(hours=2, minutes=30)),
            "completed 2 h 30 min ago",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else value.status,
)
def test_each_status_reads_as_one_sentence(session: Session, sentence: str) -> None:
    assert doing_now(session, NOW) == sentence


def test_the_worker_and_the_retry_time_are_said_where_known() -> None:
    running = doing_now(_session(SessionStatus.RUNNING), NOW, worker="host-1:4242")
    assert running == "running `charge` for 3 s on host-1:4242"
    retrying = _session(SessionStatus.RETRYING, attempts=0)
    said = doing_now(retrying, NOW, retry_at=NOW + timedelta(seconds=40))
    assert said == "retrying `charge` at 10:00 UTC (in 40 s) (attempt 1)"


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0.000186, "0.2 ms"),
        (0.0123, "12 ms"),
        (12.4, "12 s"),
        (185, "3 min"),
        (7200, "2 h"),
        (7500, "2 h 5 min"),
    ],
)
def test_durations_read_as_a_person_says_them(seconds: float, said: str) -> None:
    assert duration(seconds) == said


def test_a_parent_and_a_lock_holder_say_what_they_wait_for() -> None:
    parent = _session(
        SessionStatus.SUSPENDED, waiting_for=WaitingFor(callbacks=0, signals=[], children=2)
    )
    assert doing_now(parent, NOW) == "waiting for 2 of its children to finish"
    queued = _session(
        SessionStatus.SUSPENDED, waiting_for=WaitingFor(callbacks=0, signals=[], lock="ledger")
    )
    assert doing_now(queued, NOW) == "waiting for lock `ledger`"


def test_a_moment_to_come_reads_as_in_so_long() -> None:
    from resumable.services.narration import ago

    assert ago(NOW + timedelta(hours=2), NOW) == "in 2 h"
    assert ago(NOW - timedelta(seconds=0.4), NOW) == "just now"
