"""One step, run in memory: its context, and its outcome checked as a worker
checks it.

``finish`` makes every check a worker's step run and commit make (the return
value by ``Agent.interpret``, the state and result through the database's
JSON, a poll's check by name, replayed calls all made again, shared-document
updates applied again, lock releases and requests), and commits nothing, so
a failure it finds is the step's own, as on a worker.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from resumable._internal.logs import agent_logger
from resumable.agent import Agent, Complete, Decision, Next
from resumable.checkpoints import EventSourced
from resumable.context import StepContext
from resumable.errors import InvalidArgumentError, NotSerializableError
from resumable.testing._records import Callbacks, ToolCallRecord, ToolCalls
from resumable.testing._stubs import Stubs, resolve
from resumable.testing._values import stored
from resumable.testing._world import Coordination
from resumable.waits import Callback, Wait, Wake

if TYPE_CHECKING:
    from resumable.testing._session import TestSession


@dataclass(frozen=True)
class SpawnedChild:
    """A child session a step started with ``ctx.spawn``."""

    session_id: uuid.UUID
    agent: str
    input: Any


@dataclass(frozen=True)
class StepResult:
    """What one step did and asked for, checked as a worker checks it."""

    step: str
    seq: int
    #: What the step returned (a step name comes back as ``Next(name)``).
    outcome: Next | Complete | Wait
    #: The state it leaves, as the next step reads it back.
    state: dict[str, Any]
    #: ``Complete``'s result, as stored.
    result: Any
    wake: Wake | None
    calls: list[ToolCallRecord]
    events: list[Any]
    spawned: list[SpawnedChild]
    #: Each shared document this step updates, as its commit leaves it.
    shared_updates: dict[str, Any]
    released: list[str]
    callbacks: list[Callback]
    decision: Decision = field(repr=False, compare=False)
    _rerun: Callable[[Stubs | None], StepResult] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def next_step(self) -> str | None:
        """The step that runs next (after the wait, for a wait); None when complete."""
        return self.decision.next_step

    @property
    def completed(self) -> bool:
        return self.decision.done

    @property
    def wait(self) -> Wait | None:
        return self.outcome if isinstance(self.outcome, Wait) else None

    def rerun(self, *, tools: Stubs | None = None) -> StepResult:
        """The same step again, from the same state and wake, as a worker runs
        it after a crash before its commit: the calls this run recorded are
        replayed (not made again) and its callbacks keep their tokens.
        `tools`: other stubs for the rerun (by default, the same)."""
        if self._rerun is None:
            raise InvalidArgumentError("only a step run by run_step() can be rerun")
        return self._rerun(tools)


@dataclass(frozen=True)
class Running:
    """A step in flight and what it gathers."""

    ctx: StepContext
    tools: ToolCalls
    coordination: Coordination
    callbacks: Callbacks


def begin(session: TestSession) -> Running:
    """The context of the session's next step, over its in-memory records."""
    agent, world = session.agent, session._world
    assert session.step is not None
    seq = session.seq + 1
    tools = ToolCalls(
        session._records, session.session_id, seq, session.step, session._stubs,
        world.redactor, session.calls,
    )  # fmt: skip
    coordination = Coordination(world, session.session_id, session._epoch, seq)
    callbacks = Callbacks(session._records, session.session_id, seq)
    strategy = agent.checkpoints
    ctx = StepContext(
        session_id=session.session_id,
        agent=agent.name,
        step=session.step,
        seq=seq,
        input=copy.deepcopy(session.input),
        state=copy.deepcopy(session.state),  # as read from the row: a failed attempt leaves none
        tools=tools,
        callbacks=callbacks,
        wake=session.wake,
        logger=agent_logger(agent.name),
        has_compensation=agent.has_compensation,
        reducer=strategy.reducer if isinstance(strategy, EventSourced) else None,
        version=session.version,
        patches=agent.patches,
        coordination=coordination,
        is_async=agent.is_async_step(agent.resolve_step(session.step)),
        rate_limit=agent.rate_limit,
    )
    return Running(ctx, tools, coordination, callbacks)


def call_step(agent: Agent, running: Running) -> object:
    """What the step returns (an async one awaited on an event loop of its own)."""
    fn = agent.get_step(running.ctx.step)
    if not running.ctx.is_async:
        return fn(running.ctx)
    return resolve(fn(running.ctx))


def finish(session: TestSession, running: Running, outcome: object) -> StepResult:
    """The step's outcome, with every check its run and commit make."""
    ctx, world = running.ctx, session._world
    decision = session.agent.interpret(outcome, now=world.now)
    if not isinstance(ctx.state, dict):
        raise NotSerializableError("state must be a JSON object (a dict)")
    state = stored(ctx.state, "state")
    result = None if decision.result is None else stored(decision.result, "result")
    wait = decision.wait or {}
    if "poll" in wait:  # a worker would block the session when the check falls due
        session.agent.get_check(wait["poll"]["check"])
    running.tools.check_none_missing()
    updates = world.shared_after(running.coordination.shared.pending)
    world.check_locks(session.session_id, running.coordination.releases, wait.get("lock"))
    children = running.coordination.spawns.children
    return StepResult(
        step=ctx.step,
        seq=ctx.seq,
        outcome=Next(outcome) if isinstance(outcome, str) else outcome,  # type: ignore[arg-type]
        state=state,
        result=result,
        wake=ctx.wake,
        calls=running.tools.calls,
        events=list(ctx.events),
        spawned=[
            SpawnedChild(uuid.UUID(c["id"]), c["agent"], stored(c["input"], "input"))
            for c in children
        ],
        shared_updates=updates,
        released=list(running.coordination.releases),
        callbacks=list(running.callbacks.created),
        decision=decision,
    )
