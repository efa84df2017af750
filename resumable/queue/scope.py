"""What every run of one worker process shares, built once in its entry point.

``worker.build_runtime`` builds the database pool, the broker, the agent
registry, the lease keeper, the registry of runs in flight and the event
loop, and hands them down in one record: the runs (``runner.py``), their
drivers and the failure paths read them from it and keep no other reference
to each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import dramatiq

from resumable._internal.redaction import Redactor
from resumable.agent import AgentRegistry
from resumable.models.database import Database
from resumable.queue.event_loop import EventLoopThread
from resumable.queue.lease import LeaseKeeper
from resumable.queue.rate_turns import RateTurns
from resumable.queue.shutdown import Shutdown
from resumable.settings import Settings


@dataclass(frozen=True)
class WorkerScope:
    """The dependencies of every run of one worker process."""

    settings: Settings
    db: Database
    broker: dramatiq.Broker
    registry: AgentRegistry
    keeper: LeaseKeeper
    #: The stopping flag and the runs in flight.
    shutdown: Shutdown
    #: The worker's event loop (started on first use): async steps run on it,
    #: and a sync caller's async check or compensation is awaited on it.
    loop: EventLoopThread
    #: The keys redacted from checkpoints and error texts.
    redactor: Redactor
    #: The turns of rate-limited calls, from the limiter shared by every worker.
    turns: RateTurns
