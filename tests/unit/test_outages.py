"""The scheduler's outage guard on a controlled clock: one line down, probes
with capped exponential backoff (jobs skipped meanwhile), one line up."""

from __future__ import annotations

import logging
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
