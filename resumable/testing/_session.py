"""``TestSession``: a whole session run in memory, as workers would run it.

Each step's outcome commits in one go (state, cursor, status, shared
documents, children, lock releases and requests) or not at all; a failed
step is retried by its policy, its delay skipped, with its recorded calls
replayed; when it fails for good the saga undoes the completed calls that
named a compensation, newest first, and the session ends ``failed``. A
session and the children it spawns share one ``World``: the clock, shared
documents and locks; children of agents the test names run here too.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from resumable._internal.redaction import DEFAULT_KEYS
from resumable.agent import Agent
from resumable.coordination.shared import check_name
from resumable.errors import (
    InvalidArgumentError,
    PermanentError,
    ReplayDivergedError,
    SessionStateError,
)
from resumable.models.status import SagaOutcome, SessionStatus
from resumable.testing import _wakes
from resumable.testing._records import Records, ToolCallRecord
from resumable.testing._steps import StepResult, begin, call_step, finish
from resumable.testing._stubs import MISSING, LoopRunningError, Stubs, invoke, resolve
from resumable.testing._values import parse_time, stored
from resumable.testing._world import World
from resumable.waits import Callback, Wait, Wake, check_seconds
from resumable.waits import check_name as check_topic


class TestSession:
    """A whole session, run in memory: steps, waits, wake-ups, retries, sagas.

    ``run_until_wait()`` runs steps until the session waits and returns the
    ``Wait`` (``run_next()`` runs one step); ``signal(topic, payload)`` and
    ``deliver(callback, payload)`` deliver what the web process would;
    ``advance(seconds)`` moves the clock, firing timers, poll checks,
    deadlines and retries on the way; ``run_until_done()`` runs to the end,
    skipping time whenever the session waits only for it, and returns the
    result. A step that keeps failing ends
    the session ``failed`` after its saga, and its exception is raised from
    ``run_until_*``. Children of `agents` run here too, sharing the clock,
    shared documents and locks; children of other agents wait to be ended
    by the test (``session.children[0].complete(...)``).
    """

    __test__ = False  # not a pytest test class, though its name starts with Test

    def __init__(
        self,
        agent: Agent,
        input: Any = None,
        *,
        tools: Stubs | None = None,
        checks: Stubs | None = None,
        compensations: Stubs | None = None,
        agents: Iterable[Agent] = (),
        shared: Mapping[str, Any] | None = None,
        session_id: uuid.UUID | None = None,
        version: int | None = None,
        now: datetime | None = None,
        redact_keys: tuple[str, ...] = DEFAULT_KEYS,
        max_steps: int = 1000,
    ) -> None:
        agent.start_step  # noqa: B018 - an agent without steps is refused here
        world = World(now or datetime.now(UTC), redact_keys)
        world.agents = {a.name: a for a in (*agents, agent)}
        world.max_steps = max_steps
        for name, value in (shared or {}).items():
            world.shared[check_name(name)] = stored(value, f"shared document {name!r}")
        stubs = (dict(tools or {}), dict(checks or {}), dict(compensations or {}))
        self._setup(agent, input, world, session_id or uuid.uuid4(), version, None, stubs)

    @classmethod
    def _at(
        cls,
        agent: Agent,
        input: Any,
        world: World,
        session_id: uuid.UUID,
        version: int | None,
        tools: Stubs,
        records: Records,
    ) -> TestSession:
        """A session for ``run_step``: its records are the test's to keep."""
        session = cls.__new__(cls)
        session._setup(agent, input, world, session_id, version, None, (dict(tools), {}, {}))
        session._records = records
        return session

    def _setup(
        self,
        agent: Agent,
        input: Any,
        world: World,
        session_id: uuid.UUID,
        version: int | None,
        parent: TestSession | None,
        stubs: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
    ) -> None:
        self.agent, self.session_id, self.parent = agent, session_id, parent
        self.input = stored(input, "input")
        #: The agent version the session started on (``ctx.version``, ``ctx.patched``).
        self.version = agent.version if version is None else version
        self.status = SessionStatus.PENDING
        #: The step that runs next (where the session is).
        self.step: str | None = agent.start_step if agent.step_names else None
        self.seq, self.attempts = 0, 0
        self.state: dict[str, Any] = {}
        self.result: Any = None
        #: The exception the session failed (or was blocked) with.
        self.error: BaseException | None = None
        #: The wait the session is suspended on, and the wake its next step sees.
        self.wait: Wait | None = None
        self.wake: Wake | None = None
        self.history: list[StepResult] = []  # each committed step, oldest first
        self.calls: list[ToolCallRecord] = []  # every ctx.tool call, replays included
        self.events: list[Any] = []  # what its steps emitted (event-sourced agents)
        self.failures: list[BaseException] = []  # each failed attempt's exception
        self.children: list[TestSession] = []
        self.compensated: list[ToolCallRecord] = []  # the calls its saga undid, in order
        #: How its saga ended, once it failed for good.
        self.saga: SagaOutcome | None = None
        self._world = world
        self._stubs, self._checks, self._compensations = stubs
        self._records = Records()
        self._spec: dict[str, Any] | None = None  # the wait, as stored
        self._wake_at: datetime | None = None  # its next timer, poll check, deadline or retry
        self._deliveries: list[_wakes.Delivery] = []
        self._epoch = 1  # the run (lease epoch): a new one after each wake-up or retry
        world.sessions[session_id] = self

    def __repr__(self) -> str:
        where = f" at {self.step!r}" if self.step else ""
        return f"<TestSession {self.agent.name} {self.status.value}{where}>"

    @property
    def now(self) -> datetime:
        """The test's clock: it moves only when time is skipped."""
        return self._world.now

    @property
    def shared(self) -> dict[str, Any]:
        """The shared documents as committed now."""
        return copy.deepcopy(self._world.shared)

    @property
    def callbacks(self) -> list[Callback]:
        """Every callback the session's steps created, oldest first."""
        return [row.callback for row in self._records.callbacks.values()]

    # -- driving ----------------------------------------------------------------------

    def run_next(self) -> StepResult:
        """Run the next step only (after its retry delay, if it is retrying);
        what it did. A step that fails raises its exception, the session then
        retrying or failed, as a worker would leave it."""
        if self.status is SessionStatus.RETRYING:
            assert self._wake_at is not None
            self._world.run_clock_to(self._wake_at)
        if not self._runnable():
            raise SessionStateError(f"{self!r} has no step to run now; {_wakes.stuck(self)}")
        failures = len(self.failures)
        self._run_one()
        if len(self.failures) > failures:
            raise self.failures[-1]
        return self.history[-1]

    def run_until_wait(self) -> Wait:
        """Run steps until the session waits; the ``Wait`` it waits on."""
        ran = 0
        while self.status in (SessionStatus.PENDING, SessionStatus.RETRYING):
            if self.status is SessionStatus.RETRYING:
                assert self._wake_at is not None
                self._world.run_clock_to(self._wake_at)
                continue
            if not self._runnable():
                raise AssertionError(_wakes.stuck(self))
            ran = self._world.counted(ran)
            self._run_one()
        if self.status is SessionStatus.SUSPENDED:
            assert self.wait is not None
            return self.wait
        self._raise_failure()
        raise AssertionError(f"{self!r} finished instead of waiting, with result {self.result!r}")

    def run_until_done(self) -> Any:
        """Run the session (and its children here) to its end, skipping time
        whenever nothing else can happen; its result. Raises when it waits
        for a signal or callback the test has not delivered."""
        ran = 0
        while not self.status.is_terminal:
            self._raise_failure()
            ran = self._world.counted(ran)
            runnable = self if self._runnable() else self._world.runnable()
            if runnable is not None:
                runnable._run_one()
                continue
            due = self._world.next_due()
            if due is None:
                raise AssertionError(_wakes.stuck(self))
            self._world.run_clock_to(due)
        self._raise_failure()
        return self.result

    def signal(self, topic: str, payload: Any = None) -> None:
        """Deliver signal `topic`, as ``POST /v1/sessions/{id}/signals/{topic}``
        does: kept until a wait names it, then consumed once."""
        check_topic(topic, "a signal topic")
        _wakes.deliver(self, "signal", topic, None, payload)

    def deliver(self, callback: Callback | str, payload: Any = None) -> None:
        """POST `payload` to a callback of this session: the ``Callback``, its
        URL, its token or the topic of an open one."""
        row = _wakes.find_callback(self, callback)
        if not row.open:
            raise SessionStateError(
                f"callback {row.callback.topic!r} is closed: the wait it was made for is "
                "over (the web process answers 409)"
            )
        _wakes.deliver(self, "callback", row.callback.topic, row.callback.token, payload)

    def advance(self, seconds: float | timedelta | None = None) -> None:
        """Move the clock on by `seconds` (None: to the next timer, poll check,
        deadline or retry here), firing what falls due on the way."""
        if seconds is None:
            due = self._world.next_due()
            if due is None:
                raise AssertionError("nothing here waits for time; " + _wakes.stuck(self))
            self._world.run_clock_to(due)
            return
        skip = check_seconds(seconds)
        assert skip is not None
        self._world.run_clock_to(self._world.now + timedelta(seconds=skip))

    def child(self, session_id: uuid.UUID | str) -> TestSession:
        """A child session this one spawned, by id."""
        for child in self.children:
            if str(child.session_id) == str(session_id):
                return child
        raise InvalidArgumentError(f"{self!r} spawned no child {session_id}")

    def complete(self, result: Any = None) -> None:
        """End this session with `result`, running none of its steps (a child
        whose agent the test does not run)."""
        self._end(SessionStatus.COMPLETED, result=stored(result, "result"))

    def fail(self, error: BaseException | str = "failed") -> None:
        """End this session failed, running none of its steps."""
        self._end(
            SessionStatus.FAILED, error=PermanentError(error) if isinstance(error, str) else error
        )

    # -- one step, committed or failed --------------------------------------------------------

    def _runnable(self) -> bool:
        return self.status is SessionStatus.PENDING and bool(self.agent.step_names)

    def _run_one(self) -> None:
        running = begin(self)
        try:
            step = finish(self, running, call_step(self.agent, running))
        except ReplayDivergedError as exc:  # a worker parks the session for an operator
            self.status, self.error = SessionStatus.BLOCKED, exc
            raise
        except (KeyboardInterrupt, LoopRunningError):
            raise
        except BaseException as exc:  # a step's SystemExit is its failure, too
            self._failed(exc)
            return
        self._commit(step)

    def _commit(self, step: StepResult) -> None:
        world, decision = self._world, step.decision
        world.shared.update(step.shared_updates)
        self.seq, self.state, self.step = step.seq, step.state, decision.next_step
        self.wake, self.attempts = None, 0
        self.history.append(step)
        self.events.extend(step.events)
        self.children += [
            self._spawn(child.session_id, child.agent, child.input) for child in step.spawned
        ]
        for name in step.released:
            world.release(self.session_id, name)
        lock = (decision.wait or {}).get("lock")
        if decision.done:
            self._end(SessionStatus.COMPLETED, result=step.result)
        elif decision.wait is not None:
            assert isinstance(step.outcome, Wait)
            self.status, self.wait = SessionStatus.SUSPENDED, step.outcome
            self._spec, self._wake_at = decision.wait, parse_time(decision.wait["wake_at"])
            if lock is not None:
                world.request(self.session_id, lock["name"], lock["permits"])
        # After the commit: grants it made possible, children already done,
        # a delivery that arrived before the session suspended.
        for name in [*step.released, *([lock["name"]] if lock else [])]:
            world.grant(name)
        _wakes.check_children(self)
        _wakes.wake_from_deliveries(self)

    def _spawn(self, session_id: uuid.UUID, agent_name: str, input: Any) -> TestSession:
        agent = self._world.agents.get(agent_name) or Agent(agent_name)  # not run here
        child = TestSession.__new__(TestSession)
        stubs = (self._stubs, self._checks, self._compensations)
        child._setup(agent, input, self._world, session_id, None, self, stubs)
        return child

    def _failed(self, exc: BaseException) -> None:
        self.attempts += 1
        self.failures.append(exc)
        policy = self.agent.policy(self.step)
        if policy.should_retry(exc, self.attempts):
            delay = replace(policy, jitter=False).delay(self.attempts, exc)  # the longest
            self.status = SessionStatus.RETRYING
            self._wake_at = self._world.now + timedelta(seconds=delay)
            return
        self._compensate(policy.compensation_attempts, policy.is_transient)
        self._end(SessionStatus.FAILED, error=exc)

    def _compensate(self, attempts: int, transient: Callable[[BaseException], bool]) -> None:
        """The saga: undo the completed calls that named a compensation, newest
        first, each until it succeeds, fails permanently or has no attempts left
        (then the saga stops there, the older calls left for an operator)."""
        calls = self._records.calls.values()
        pending = sorted(
            (c for c in calls if c.status == "completed" and c.compensate),
            key=lambda c: (c.seq, c.index),
            reverse=True,
        )
        self.saga = SagaOutcome.COMPLETED if pending else SagaOutcome.NONE
        for call in pending:
            assert call.compensate is not None
            stub = self._compensations.get(call.compensate, MISSING)
            fn = self.agent.get_compensation(call.compensate) if stub is MISSING else stub
            args = (copy.deepcopy(call.request), copy.deepcopy(call.response))
            for attempt in range(1, attempts + 1):
                try:
                    resolve(invoke(fn, args, {}, key=f"{call.key}:compensate"))
                    break
                except (KeyboardInterrupt, LoopRunningError):
                    raise
                except Exception as exc:
                    if attempt == attempts or not transient(exc):
                        self.saga = SagaOutcome.FAILED
                        return
            self.compensated.append(call.record())

    def _end(
        self, status: SessionStatus, *, result: Any = None, error: BaseException | None = None
    ) -> None:
        if self.status.is_terminal:
            raise SessionStateError(f"{self!r} has finished already")
        self.status, self.result, self.error = status, result, error
        self.wait, self._spec, self._wake_at = None, None, None
        self._world.let_go(self.session_id)
        if self.parent is not None:
            _wakes.check_children(self.parent)

    def _raise_failure(self) -> None:
        if self.status in (SessionStatus.FAILED, SessionStatus.BLOCKED) and self.error:
            raise self.error
