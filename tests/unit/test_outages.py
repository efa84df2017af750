"""The scheduler's outage guard on a controlled clock: one line down, probes
with capped exponential backoff (jobs skipped meanwhile), one line up."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import psycopg
import pytest
import redis

from resumable._internal.reachability import ServiceUnreachableError
from resumable.scheduler.outages import Dependency, Outages


class World:
    def __init__(self) -> None:
        self.now = 0.0
        self.up = False
        self.probes: list[float] = []
        self.runs: list[float] = []

    def clock(self) -> float:
        return self.now

    def probe(self) -> None:
        self.probes.append(self.now)
        if not self.up:
            raise ServiceUnreachableError("cannot connect", reason="Connection refused")

    def job(self) -> None:
        self.runs.append(self.now)
        if not self.up:
            raise psycopg.OperationalError("couldn't get a connection after 3.00 sec")


def _guarded(world: World) -> tuple[Outages, Callable[[], object]]:
    outages = Outages(
        [Dependency("database", "db:5432", world.probe)],
        first_delay=1.0,
        max_delay=5.0,
        clock=world.clock,
    )
    return outages, outages.guard(world.job)


def test_backoff_doubles_up_to_the_cap_and_each_change_is_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    outages, run = _guarded(world)
    with caplog.at_level(logging.DEBUG, logger="resumable.scheduler.outages"):
        for tick in range(0, 40):  # the scheduler calls the job every 0.5 s
            world.now = tick * 0.5
            if world.now == 15.0:
                world.up = True
            run()
    # The job failed once; while down it never ran; from the probe that found
    # the server up (at 17 s) it runs every tick.
    assert world.runs == [0.0] + [t * 0.5 for t in range(34, 40)]
    # The diagnosis at 0, then probes 1, 2, 4 and 5 (the cap) seconds apart.
    assert world.probes == [0.0, 1.0, 3.0, 7.0, 12.0, 17.0]
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert lines == [
        ("WARNING", "database unreachable at db:5432: Connection refused; retrying "
         "(backing off up to 5 s)"),
        ("INFO", "database reachable again at db:5432 (down 17.0 s)"),
    ]  # fmt: skip
    assert outages.down == []


def test_an_error_that_passes_is_one_line_and_no_outage(caplog: pytest.LogCaptureFixture) -> None:
    world = World()
    world.up = True

    def flaky() -> None:
        world.runs.append(world.now)
        if len(world.runs) == 1:
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    outages = Outages(
        [Dependency("database", "db:5432", world.probe)],
        first_delay=1.0,
        max_delay=5.0,
        clock=world.clock,
    )
    guarded = outages.guard(flaky)
    with caplog.at_level(logging.INFO, logger="resumable.scheduler.outages"):
        guarded()
        guarded()
    assert len(world.runs) == 2 and outages.down == []
    [line] = [r.getMessage() for r in caplog.records]
    assert (
        line
        == "flaky failed on a database error that passed: server closed the connection unexpectedly"
    )


def test_a_bug_is_not_an_outage() -> None:
    world = World()
    outages = Outages(
        [Dependency("database", "db:5432", world.probe)], first_delay=1.0, max_delay=5.0
    )

    def buggy() -> None:
        raise KeyError("oops")

    with pytest.raises(KeyError):
        outages.guard(buggy)()
    assert outages.down == [] and world.probes == []


def test_a_probe_that_fails_unexpectedly_counts_as_down_and_the_jobs_come_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A probe that raised anything but ServiceUnreachableError (a
    RecursionError out of the RabbitMQ probe, on CI) escaped and left the
    outage marked as being probed: no job ran again, ever."""
    world = World()
    probe_errors = [RecursionError("maximum recursion depth exceeded"), RuntimeError("odd")]

    def probe() -> None:
        world.probes.append(world.now)
        if probe_errors:
            raise probe_errors.pop(0)

    outages = Outages(
        [Dependency("redis", "mq:5672 (vhost '/')", probe, label="RabbitMQ")],
        first_delay=1.0,
        max_delay=5.0,
        clock=world.clock,
    )

    def job() -> None:
        world.runs.append(world.now)
        if probe_errors:
            raise redis.ConnectionError("Connection reset by peer")

    run = outages.guard(job)
    with caplog.at_level(logging.INFO, logger="resumable.scheduler.outages"):
        for tick in range(0, 12):
            world.now = tick * 0.5
            run()
    # Down at 0 (the first probe failed oddly), probed again at 1 (oddly
    # again), up at 3: the jobs run from then on.
    assert world.probes == [0.0, 1.0, 3.0]
    assert world.runs == [0.0] + [t * 0.5 for t in range(6, 12)]
    assert outages.down == []
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert lines == [
        "RabbitMQ unreachable at mq:5672 (vhost '/'): RecursionError: maximum recursion depth "
        "exceeded; retrying (backing off up to 5 s)",
        "RabbitMQ reachable again at mq:5672 (vhost '/') (down 3.0 s)",
    ]


def test_a_probe_that_never_answers_counts_as_down_and_starts_no_second_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A probe bounds its connect, not its SELECT 1: a server frozen after
    the handshake held it (and every job with it) until the connection
    died. Past its deadline the server counts as down; while that probe is
    stuck no other starts; once it returns, the next probe decides."""
    import threading

    world = World()
    frozen = threading.Event()
    started: list[float] = []

    def probe() -> None:
        started.append(world.now)
        if len(started) == 1:
            frozen.wait(10)  # the server froze after the handshake
            raise ServiceUnreachableError("cannot connect", reason="server closed the connection")

    outages = Outages(
        [Dependency("database", "db:5432", probe)],
        first_delay=1.0,
        max_delay=5.0,
        clock=world.clock,
        probe_deadline=0.2,
    )

    def job() -> None:
        world.runs.append(world.now)
        if len(world.runs) == 1:
            raise psycopg.OperationalError("consuming input failed")

    run = outages.guard(job)
    with caplog.at_level(logging.INFO, logger="resumable.scheduler.outages"):
        run()  # fails; the probe hangs past its deadline: down
        assert outages.down == ["database"]
        world.now = 1.0
        run()  # due again, but the first probe is still stuck: no second one
        assert started == [0.0] and outages.down == ["database"]
        frozen.set()  # the connection died at last
        deadline = time.monotonic() + 5
        while outages._unanswered["database"].is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        world.now = 3.0
        run()  # a new probe answers: up, and the job runs
    assert started == [0.0, 3.0]
    assert world.runs == [0.0, 3.0]
    assert outages.down == []
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert lines == [
        "database unreachable at db:5432: its probe did not answer within 0.2 s; retrying"
        " (backing off up to 5 s)",
        "database reachable again at db:5432 (down 3.0 s)",
    ]
