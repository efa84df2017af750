"""Which database errors under a step's own records are ours, not the step's
(resumable/queue/failing.py): a lost connection only, found inside a task
group too."""

from __future__ import annotations

import psycopg

from resumable.queue.failing import RecordsUnavailable, connection_lost, records_unavailable_in


def test_only_a_lost_connection_is_a_loss_of_records() -> None:
    assert connection_lost(psycopg.errors.AdminShutdown())  # the server ended the session
    assert connection_lost(psycopg.OperationalError("server closed the connection"))
    assert connection_lost(psycopg.errors.ConnectionFailure())
    # Answered the same on a replay: the step's failure, under its policy.
    assert not connection_lost(psycopg.errors.QueryCanceled())  # a statement timeout
    assert not connection_lost(psycopg.errors.DiskFull())
    assert not connection_lost(ValueError("not a database error"))
    lost = RecordsUnavailable("lost")
    assert records_unavailable_in(lost) is lost
    group = BaseExceptionGroup("calls", [ValueError("x"), BaseExceptionGroup("inner", [lost])])
    assert records_unavailable_in(group) is lost
    assert records_unavailable_in(BaseExceptionGroup("calls", [ValueError("x")])) is None
