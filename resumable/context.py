"""What a step sees: the session's state, its input, and idempotent tool calls."""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

from resumable import serialization
from resumable.agent import Complete, Next
from resumable.checkpoints import Reducer
from resumable.errors import AgentDefinitionError
from resumable.queue.callbacks import CallbackFactory
from resumable.queue.tool_calls import ToolCalls
from resumable.waits import Callback, Poll, Signal, Timer, Wait, Wake

T = TypeVar("T")


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
        tools: ToolCalls,
        callbacks: CallbackFactory,
        wake: Wake | None,
        logger: logging.Logger,
        has_compensation: Callable[[str], bool],
        reducer: Reducer | None = None,
        is_async: bool = False,
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
        self._reducer = reducer
        #: Events emitted by this step (event-sourced agents).
        self.events: list[Any] = []
        #: The step is an ``async def`` (it may ``await ctx.tool(...)`` an async tool).
        self.is_async = is_async

    @property
    def tool_calls(self) -> ToolCalls:
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
        **kwargs: Any,
    ) -> T: ...

    def tool(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        compensate: str | None = None,
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
        """
        if compensate is not None and not self._has_compensation(compensate):
            raise AgentDefinitionError(f"agent {self.agent!r} has no compensation {compensate!r}")
        if inspect.iscoroutinefunction(fn):
            if not self.is_async:
                raise AgentDefinitionError(
                    f"tool {name!r} is async but step {self.step!r} is not: "
                    "declare the step `async def` and `await ctx.tool(...)`"
                )
            return self._tools.acall(name, fn, args, kwargs, compensate)
        return self._tools.call(name, fn, args, kwargs, compensate)

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
        *conditions: Callback | Signal | Timer | Poll,
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
