"""What a step is handed: its ``StepContext``, with the worker's parts behind it.

The agent API knows only protocols (``ToolCallRecorder``, ``CallbackMinter``
in ``context.py``); here a step's context gets the worker's implementations,
each fenced by the lease epoch the run claimed with: its tool calls
(``tool_calls.py``), its callbacks (``callbacks.py``) and its coordination
(shared documents and locks, ``coordination/step.py``), all at the step's
sequence number.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from resumable._internal.logs import agent_logger
from resumable._internal.redaction import Redactor
from resumable.agent import Agent
from resumable.checkpoints import EventSourced
from resumable.context import StepContext
from resumable.coordination.step import StepCoordination
from resumable.models.step_queries import ClaimedSession
from resumable.queue.callbacks import CallbackFactory
from resumable.queue.checkpoint_writer import CheckpointWriter
from resumable.queue.scope import WorkerScope
from resumable.queue.tool_calls import ToolCalls
from resumable.waits import Wake


def step_context(
    scope: WorkerScope,
    claim: ClaimedSession,
    agent: Agent,
    cursor: str,
    seq: int,
    state: dict[str, Any],
    wake: Wake | None,
    writer: CheckpointWriter,
    *,
    fresh: bool,
) -> StepContext:
    """The context of step `cursor`, the session's `seq`-th; `fresh`: no
    earlier run can have recorded calls of it."""
    session_id: uuid.UUID = claim.session_id
    time_limit = agent.policy(cursor).time_limit
    callbacks = CallbackFactory(scope.db, session_id, claim.epoch, seq, scope.settings.public_url)
    tools = ToolCalls(
        scope.db,
        session_id,
        claim.epoch,
        seq,
        cursor,
        writer.redact,
        lambda text: Redactor.scrub(text, writer.secrets),
        scope.turns,
        None if time_limit is None else time.monotonic() + time_limit,
        fresh=fresh,
    )
    return StepContext(
        session_id=session_id,
        agent=agent.name,
        step=cursor,
        seq=seq,
        input=claim.input,
        state=state,
        tools=tools,
        has_compensation=agent.has_compensation,
        callbacks=callbacks,
        wake=wake,
        logger=agent_logger(agent.name),
        reducer=agent.checkpoints.reducer if isinstance(agent.checkpoints, EventSourced) else None,
        version=claim.started_version,
        patches=agent.patches,
        coordination=StepCoordination(
            scope.db,
            session_id,
            claim.epoch,
            cursor,
            seq,
            idle_timeout=scope.settings.lease_seconds,
            coordinated=claim.coordinated,
            priority=claim.priority,
        ),
        is_async=agent.is_async_step(cursor),
        rate_limit=agent.rate_limit,
    )
