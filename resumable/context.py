"""What a step sees: the session's state, its input, and idempotent tool calls.

What the worker adds to a step (tool-call records, callback tokens,
coordination with other sessions) comes in through the protocols below, so
``resumable.testing`` can hand a step the same ``StepContext`` over in-memory
records; the rule that derives a call's idempotency key
(``resumable._internal.call_keys``, which an operator's preview of ``accept``
also uses) is re-exported here for both.
"""

from __future__ import annotations

import functools
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar, overload

from resumable._internal import call_keys, serialization
from resumable.agent import Complete, Next, checked_name
from resumable.checkpoints import Reducer
from resumable.coordination.step import StepCoordination
from resumable.errors import AgentDefinitionError
from resumable.limits import RateLimit
from resumable.waits import Callback, Children, Lock, Poll, Signal, Timer, Wait, Wake

T = TypeVar("T")

# The rule that derives a call's identity, for the worker and resumable.testing.
tool_request = call_keys.tool_request
idempotency_key = call_keys.idempotency_key


def accepts_idempotency_key(fn: Callable[..., Any]) -> bool:
    """Whether `fn` takes ``idempotency_key=`` (by name, or in ``**kwargs``)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "idempotency_key" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


class ToolCallRecorder(Protocol):
    """What runs a step's tool calls, once per logical call: the worker's
    records them in PostgreSQL (``queue/tool_calls.py``), ``resumable.testing``
    keeps them in memory."""

    def call(
        self,
        tool: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        compensate: str | None = None,
        rate_limit: RateLimit | None = None,
        *,
        side_effects: bool = True,
        defer_record: bool = False,
    ) -> Any: ...

    def acall(
        self,
        tool: str,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        compensate: str | None = None,
        rate_limit: RateLimit | None = None,
        *,
        side_effects: bool = True,
        defer_record: bool = False,
    ) -> Awaitable[Any]: ...


class CallbackMinter(Protocol):
    """What makes a step's single-use callback URLs (the worker's commits
    each token at once, ``queue/callbacks.py``)."""

    def create(self, topic: str, timeout: float | timedelta | None = None) -> Callback: ...


class SharedDocuments(Protocol):
    """A step's view of the shared documents: reads, and updates that commit
    with the step (``coordination/shared.py``)."""

    def get(self, name: str, default: Any = None) -> Any: ...

    def update(self, name: str, fn: Callable[[Any], Any]) -> Any: ...


class ChildSpawner(Protocol):
    """The children a step starts when it commits (``coordination/children.py``)."""

    def spawn(self, agent: str, input: Any) -> uuid.UUID: ...


class StepCoordinator(Protocol):
    """What a step asks of coordination between sessions: the worker's
    ``StepCoordination`` writes it in the step's commit, ``resumable.testing``
    keeps it in memory."""

    @property
    def shared(self) -> SharedDocuments: ...

    @property
    def spawns(self) -> ChildSpawner: ...

    def fence(self, name: str) -> int: ...

    def release(self, name: str) -> None: ...


class StepContext:
    """Handed to each step.

    ``state`` is the agent's working memory (a JSON-serializable dict; by
    convention with parts such as ``task``, ``memory``, ``plan``, ``progress``,
    ``context``, ``tool_results``, ``decisions``, ``conversation``). Mutate it
    in place or replace it; it is committed when the step returns.
    """

    def __init__(
        self,
        *,
        session_id: uuid.UUID,
        agent: str,
        step: str,
        seq: int,
        input: Any,
        state: dict[str, Any],
        tools: ToolCallRecorder,
        callbacks: CallbackMinter,
        wake: Wake | None,
        logger: logging.Logger,
        has_compensation: Callable[[str], bool],
        reducer: Reducer | None = None,
        version: int = 0,
        patches: dict[str, int] | None = None,
        coordination: StepCoordinator | None = None,
        is_async: bool = False,
        rate_limit: Callable[[str], RateLimit] | None = None,
    ) -> None:
        self.session_id = session_id
        self.agent = agent
        self.step = step
        self.seq = seq
        self.input = input
        self.state = state
        self.log = logger
        #: Why the session woke up, in the first step after a wait; else None.
        self.wake = wake
        self._tools = tools
        self._callbacks = callbacks
        self._has_compensation = has_compensation
        self._rate_limit = rate_limit
        self._reducer = reducer
        #: Events emitted by this step (event-sourced agents).
        self.events: list[Any] = []
        #: The agent version this session started on (0: unversioned). It
        #: stays the same when a newer version takes the session over, so a
        #: step can keep an old session on its old path.
        self.version = version
        self._patches = patches or {}
        #: Shared documents, locks and children: what this step reads and commits.
        self._coordinator = coordination
        #: The step is an ``async def`` (it may ``await ctx.tool(...)`` an async tool).
        self.is_async = is_async

    def patched(self, name: str) -> bool:
        """Whether this session started on code that has patch ``name``
        (declared as ``Agent(..., patches={name: version_it_appeared_in})``):
        new sessions take the new path, sessions that began before the patch
        keep the old one for their whole life, in the spirit of Temporal's
        ``patched()``. The answer never changes during a session."""
        try:
            since = self._patches[name]
        except KeyError:
            raise AgentDefinitionError(
                f"agent {self.agent!r} declares no patch {name!r}: add it to "
                "Agent(..., patches={...}) with the version that introduced it"
            ) from None
        return self.version >= since

    @property
    def coordination(self) -> StepCoordination | None:
        """The worker's coordination of this step, which its commit writes;
        None when the step runs elsewhere (``resumable.testing``)."""
        coordinator = self._coordinator
        return coordinator if isinstance(coordinator, StepCoordination) else None

    @property
    def tool_calls(self) -> ToolCallRecorder:
        """This step's tool calls (the runner reads their counts)."""
        return self._tools

    @overload
    def tool(
        self,
        name: str,
        fn: Callable[..., Coroutine[Any, Any, T]],
        /,
        *args: Any,
        compensate: str | None = None,
        fence: str | None = None,
        rate_limit: str | None = None,
        side_effects: bool = True,
        defer_record: bool = False,
        **kwargs: Any,
    ) -> Awaitable[T]: ...

    @overload
    def tool(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        compensate: str | None = None,
        fence: str | None = None,
        rate_limit: str | None = None,
        side_effects: bool = True,
        defer_record: bool = False,
        **kwargs: Any,
    ) -> T: ...

    def tool(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        compensate: str | None = None,
        fence: str | None = None,
        rate_limit: str | None = None,
        side_effects: bool = True,
        defer_record: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Run a side effect once per logical call and return its result.

        When ``fn`` is a coroutine function (``async def``), this returns an
        awaitable: ``await ctx.tool(...)`` inside an ``async def`` step. The
        sync form is unchanged (in an async step a sync tool runs inline, on
        the event loop: keep it quick, or wrap blocking work as async).

        ``fn`` is called with ``args``/``kwargs`` (which must be JSON-serializable)
        plus ``idempotency_key=`` when it accepts that keyword: pass it on to the
        external API. Its return value must be JSON-serializable; on a replay of
        this step the recorded value is returned and ``fn`` is not called.

        ``compensate`` names a compensation registered with
        ``@agent.compensation``: if the session later fails for good, it is
        called to undo this call (the saga pattern).

        ``fence`` names a lock this session holds: ``fn`` also gets
        ``fencing_token=`` (see ``ctx.fence``), for the external system to
        reject writes with a token lower than one it has seen.

        ``rate_limit`` names a ``RateLimit`` the agent declares: the call waits
        for its turn under that limit, shared by every worker (see
        ``resumable/limits.py``). A replayed call takes no turn.

        ``side_effects=False`` says the call changes nothing outside (a model
        request, a read): it is not claimed before it runs, and its answer is
        recorded with the step's next write (the next call's claim, or the
        step's commit) instead of writes of its own, so no effect can act on
        an answer a replay would not return (a step replayed after a crash
        claims such calls as any other, so the replay finds their records).
        A replay returns the recorded answer as for any call; a worker killed
        after the answer and before that write sends the call again (as a
        kill before any record would).
        It cannot have a ``compensate`` (there is nothing to undo).

        ``defer_record=True`` records a call's result the same way, with the
        step's next write, instead of a write of its own: for calls followed
        at once by another call or by the step's end (a framework's turn of
        tool calls). A kill before that write makes the call again, under the
        same idempotency key: pass the key on.
        """
        checked_name(name, "tool name")
        limit = None
        if rate_limit is not None:
            if self._rate_limit is None:
                raise AgentDefinitionError(f"agent {self.agent!r} declares no rate limits")
            limit = self._rate_limit(rate_limit)
        for option, value in (("side_effects", side_effects), ("defer_record", defer_record)):
            if not isinstance(value, bool):
                raise AgentDefinitionError(
                    f"tool {name!r}: {option} must be True or False, not {value!r}"
                )
        if compensate is not None and not side_effects:
            raise AgentDefinitionError(
                f"tool {name!r} has no side effects (side_effects=False): nothing to compensate"
            )
        if compensate is not None and not self._has_compensation(compensate):
            raise AgentDefinitionError(f"agent {self.agent!r} has no compensation {compensate!r}")
        is_async_tool = inspect.iscoroutinefunction(fn)
        if is_async_tool and not self.is_async:
            raise AgentDefinitionError(
                f"tool {name!r} is async but step {self.step!r} is not: "
                "declare the step `async def` and `await ctx.tool(...)`"
            )
        if fence is not None:
            # The token is not part of the call's identity (its idempotency key
            # and recorded arguments): a new run of the session passes a new one.
            fn = functools.partial(fn, fencing_token=self.fence(fence))
        if is_async_tool:
            return self._tools.acall(
                name, fn, args, kwargs, compensate, limit,
                side_effects=side_effects, defer_record=defer_record,
            )  # fmt: skip
        return self._tools.call(
            name, fn, args, kwargs, compensate, limit,
            side_effects=side_effects, defer_record=defer_record,
        )  # fmt: skip

    def emit(self, event: Any) -> None:
        """Record an immutable event and apply it to the state with the
        agent's reducer (event-sourced agents only). Change the state of an
        event-sourced agent only this way: the history keeps the events, and
        a past state is rebuilt by replaying them."""
        if self._reducer is None:
            raise AgentDefinitionError(
                f"agent {self.agent!r} is not event-sourced: pass "
                "checkpoints=EventSourced(reducer) to Agent() to use ctx.emit"
            )
        serialization.dumps(event, "event")
        self.state = self._reducer(self.state, event)
        self.events.append(event)

    def callback(
        self, topic: str = "callback", *, timeout: float | timedelta | None = None
    ) -> Callback:
        """Create a single-use callback URL for an external system to POST to.

        The token is committed at once, so a delivery that arrives before this
        step returns is kept and wakes the wait that names this callback.
        """
        return self._callbacks.create(topic, timeout)

    @staticmethod
    def wait(
        *conditions: Callback | Signal | Timer | Poll | Lock | Children,
        then: str,
        timeout: float | timedelta | None = None,
    ) -> Wait:
        """Suspend until the first condition fires (or `timeout` passes), then run `then`."""
        return Wait(conditions=conditions, then=then, timeout=timeout)

    @staticmethod
    def sleep(
        seconds: float | timedelta | None = None, *, until: datetime | None = None, then: str
    ) -> Wait:
        """A durable sleep: no worker is held while it lasts."""
        return Wait(conditions=(Timer(seconds=seconds, at=until),), then=then)

    @staticmethod
    def next(step: str) -> Next:
        """Go on with `step` after this one commits."""
        return Next(step)

    @staticmethod
    def complete(result: Any = None) -> Complete:
        """Finish the session with `result`."""
        return Complete(result)

    # Coordination between sessions (resumable/coordination).

    def _coordination(self) -> StepCoordinator:
        if self._coordinator is None:
            raise AgentDefinitionError(
                "coordination is available only inside a worker's step "
                "(or one run by resumable.testing)"
            )
        return self._coordinator

    def shared(self, name: str, default: Any = None) -> Any:
        """The shared JSON document `name` as committed now (`default` if it was
        never written), with this step's own pending updates applied. A read
        is not a lock: to change a document use ``update_shared``."""
        return self._coordination().shared.get(name, default)

    def update_shared(self, name: str, fn: Callable[[Any], Any]) -> Any:
        """Change the shared document `name` to ``fn(current)``, atomically, in
        the transaction that commits this step (or not at all, if the step
        fails or its lease is lost).

        ``fn`` gets the current value (None if never written) and returns the
        new one (JSON-serializable). It is applied again at commit, under a row
        lock, to the value current then, so concurrent updates never lose a
        write; it must therefore be pure and deterministic (``lambda n: (n or
        0) + 1``). Returns ``fn`` applied to the value this step sees now: a
        preview, which another session's commit may overtake.
        """
        return self._coordination().shared.update(name, fn)

    @staticmethod
    def lock(name: str, *, then: str, timeout: float | timedelta | None = None) -> Wait:
        """Suspend until this session holds the lock `name`, then run `then`
        (``ctx.wake.kind == "lock"``; ``"timeout"`` if `timeout` passed first).
        Waiters are served in FIFO order and hold no worker. The lock is held
        until ``ctx.release(name)`` commits or the session finishes (completes,
        fails, is cancelled or dead-lettered). Take several locks in ascending
        name order only."""
        return Wait(conditions=(Lock(name, 1, timeout),), then=then)

    @staticmethod
    def semaphore(
        name: str, permits: int, *, then: str, timeout: float | timedelta | None = None
    ) -> Wait:
        """Like ``lock``, but `permits` sessions may hold `name` at once (the
        first request's `permits` defines the semaphore)."""
        return Wait(conditions=(Lock(name, permits, timeout),), then=then)

    def fence(self, name: str) -> int:
        """The fencing token of the lock `name` this session holds: pass it to
        every write the lock protects, so the external system can reject a
        write with a lower token than it has seen (a paused worker's late
        write). Larger for each new holder, and for each new run (lease
        epoch) of the same holder."""
        return self._coordination().fence(name)

    def release(self, name: str) -> None:
        """Release the lock `name` when this step commits."""
        self._coordination().release(name)

    def spawn(self, agent: str, input: Any = None) -> uuid.UUID:
        """Start a child session of `agent` with `input` when this step commits;
        its id, at once. The id is derived from this session, step and the
        call's index, so a replay of this step starts no child twice. Wait for
        children with ``ctx.wait(Children(ids), then=...)``; cancelling this
        session cancels them."""
        return self._coordination().spawns.spawn(agent, input)
