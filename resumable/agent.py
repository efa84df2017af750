"""Defining agents: an agent is a set of named steps.

A step is a function that takes a :class:`StepContext` and returns what comes
next: the name of the next step (or ``Next(name)``) or ``Complete(result)``.
Between steps everything the agent knows lives in ``ctx.state``, which is
committed to PostgreSQL after every step; so a step must keep nothing it
needs later in local variables or globals.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

from resumable.checkpoints import CheckpointStrategy, Snapshot
from resumable.errors import (
    AgentDefinitionError,
    UnknownAgentError,
    UnknownCheckError,
    UnknownStepError,
)
from resumable.retries import DEFAULT_POLICY, RetryPolicy

if TYPE_CHECKING:
    from resumable.context import StepContext


@dataclass(frozen=True)
class Next:
    """Go on with the named step."""

    step: str


@dataclass(frozen=True)
class Complete:
    """Finish the session with this (JSON-serializable) result."""

    result: Any = None


# A step returns a step name, Next(...), Complete(...) or a Wait; the runner
# validates it, so the static type stays loose enough for every form.
StepFunction: TypeAlias = Callable[["StepContext"], object]
# A poll check: given the Poll's arguments, a value when ready, else None.
CheckFunction: TypeAlias = Callable[[dict[str, Any]], Any]
# A saga compensation: (request, response, idempotency_key=...) -> anything.
CompensationFunction: TypeAlias = Callable[..., Any]
S = TypeVar("S", bound=StepFunction)
K = TypeVar("K", bound=CompensationFunction)
C = TypeVar("C", bound=CheckFunction)


class Agent:
    """A named agent made of steps; the first step registered runs first
    unless ``start`` names another."""

    def __init__(
        self,
        name: str,
        *,
        start: str | None = None,
        description: str = "",
        retry: RetryPolicy = DEFAULT_POLICY,
        checkpoints: CheckpointStrategy | None = None,
    ) -> None:
        if not name or not isinstance(name, str):
            raise AgentDefinitionError("an agent needs a non-empty string name")
        self.name = name
        self.description = description
        self._start = start
        self._steps: dict[str, StepFunction] = {}
        self._checks: dict[str, CheckFunction] = {}
        self._compensations: dict[str, CompensationFunction] = {}
        self._step_policies: dict[str, RetryPolicy] = {}
        #: Steps written as ``async def`` (recognised when registered; run on the event loop).
        self._async_steps: set[str] = set()
        self.retry = retry
        #: How each step's checkpoint row is stored (see resumable/checkpoints.py).
        self.checkpoints: CheckpointStrategy = checkpoints or Snapshot()

    @overload
    def step(
        self, func: S, /, *, name: str | None = None, retry: RetryPolicy | None = None
    ) -> S: ...

    @overload
    def step(
        self, func: None = None, /, *, name: str | None = None, retry: RetryPolicy | None = None
    ) -> Callable[[S], S]: ...

    def step(
        self,
        func: S | None = None,
        /,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> S | Callable[[S], S]:
        """Register a step, as ``@agent.step`` or ``@agent.step(name="...")``.

        Returns the function itself (or a decorator that does), so steps stay
        plain functions that tests can call directly.
        """

        def register(fn: S) -> S:
            step_name = name or fn.__name__
            if step_name in self._steps:
                raise AgentDefinitionError(
                    f"agent {self.name!r} already has a step named {step_name!r}"
                )
            self._steps[step_name] = fn
            if _is_async(fn, f"step {step_name!r} of agent {self.name!r}"):
                self._async_steps.add(step_name)
            if retry is not None:
                self._step_policies[step_name] = retry
            return fn

        return register(func) if func is not None else register

    @overload
    def check(self, func: C, /, *, name: str | None = None) -> C: ...

    @overload
    def check(self, func: None = None, /, *, name: str | None = None) -> Callable[[C], C]: ...

    def check(self, func: C | None = None, /, *, name: str | None = None) -> C | Callable[[C], C]:
        """Register a poll check, as ``@agent.check`` or ``@agent.check(name=...)``.

        Checks run on workers, each interval, until they return a value other
        than ``None``; keep them quick and free of side effects.
        """

        def register(fn: C) -> C:
            check_name = name or fn.__name__
            if check_name in self._checks:
                raise AgentDefinitionError(
                    f"agent {self.name!r} already has a check named {check_name!r}"
                )
            _is_async(fn, f"check {check_name!r} of agent {self.name!r}")
            self._checks[check_name] = fn
            return fn

        return register(func) if func is not None else register

    def compensation(self, func: K | None = None, /, *, name: str | None = None) -> Any:
        """Register a saga compensation, as ``@agent.compensation``.

        Name it in ``ctx.tool(..., compensate="name")``. If the session fails
        for good, it is called as ``fn(request, response, idempotency_key=...)``
        for each completed call that named it, newest first, once each.
        """

        def register(fn: K) -> K:
            key = name or fn.__name__
            if key in self._compensations:
                raise AgentDefinitionError(
                    f"agent {self.name!r} already has a compensation named {key!r}"
                )
            _is_async(fn, f"compensation {key!r} of agent {self.name!r}")
            self._compensations[key] = fn
            return fn

        return register(func) if func is not None else register

    def get_compensation(self, name: str) -> CompensationFunction:
        try:
            return self._compensations[name]
        except KeyError:
            raise AgentDefinitionError(
                f"agent {self.name!r} has no compensation {name!r}"
            ) from None

    def has_compensation(self, name: str) -> bool:
        return name in self._compensations

    def policy(self, step: str | None) -> RetryPolicy:
        """The retry policy of `step` (the agent's unless the step has its own)."""
        return self._step_policies.get(step or "", self.retry)

    def get_check(self, name: str) -> CheckFunction:
        try:
            return self._checks[name]
        except KeyError:
            raise UnknownCheckError(
                f"agent {self.name!r} has no check {name!r} (checks: {', '.join(self._checks)})"
            ) from None

    @property
    def check_names(self) -> list[str]:
        return list(self._checks)

    @property
    def start_step(self) -> str:
        if not self._steps:
            raise AgentDefinitionError(f"agent {self.name!r} has no steps")
        start = self._start or next(iter(self._steps))
        if start not in self._steps:
            raise AgentDefinitionError(f"agent {self.name!r} starts at unknown step {start!r}")
        return start

    @property
    def step_names(self) -> list[str]:
        return list(self._steps)

    def get_step(self, name: str) -> StepFunction:
        try:
            return self._steps[name]
        except KeyError:
            raise UnknownStepError(
                f"agent {self.name!r} has no step {name!r} (steps: {', '.join(self._steps)})"
            ) from None

    def is_async_step(self, name: str) -> bool:
        """Whether step `name` is an ``async def`` (awaited on the worker's event loop)."""
        return name in self._async_steps

    @property
    def has_async_steps(self) -> bool:
        return bool(self._async_steps)

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, steps={self.step_names!r})"


def _is_async(fn: Callable[..., Any], what: str) -> bool:
    """Whether `fn` is a coroutine function, told when it is registered (a
    step's kind decides where it runs: a thread, or the event loop). An async
    generator can be neither awaited nor called for a value: refused here."""
    if inspect.isasyncgenfunction(fn):
        raise AgentDefinitionError(
            f"{what} is an async generator; write it as `async def` returning a value"
        )
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    return inspect.iscoroutinefunction(fn) or (
        not inspect.isfunction(fn) and call is not None and inspect.iscoroutinefunction(call)
    )


class AgentRegistry:
    """The agents one process knows, by name. Built in an entry point from the
    configured modules and passed down, never a hidden global."""

    def __init__(self, agents: Iterable[Agent] = ()) -> None:
        self._agents: dict[str, Agent] = {}
        for agent in agents:
            self.add(agent)

    def add(self, agent: Agent) -> None:
        existing = self._agents.get(agent.name)
        if existing is not None and existing is not agent:
            raise AgentDefinitionError(f"two different agents are named {agent.name!r}")
        agent.start_step  # noqa: B018 - validates the definition early
        self._agents[agent.name] = agent

    def get(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            raise UnknownAgentError(f"unknown agent {name!r} (known: {known})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __iter__(self) -> Iterator[Agent]:
        return iter(self._agents.values())

    def __len__(self) -> int:
        return len(self._agents)

    @classmethod
    def from_modules(cls, modules: Iterable[str]) -> AgentRegistry:
        """Import each module (``pkg.mod`` or ``pkg.mod:attr``) and collect its agents."""
        registry = cls()
        for spec in modules:
            module_name, _, attr = spec.partition(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                raise AgentDefinitionError(
                    f"cannot import agent module {module_name!r}: {exc}"
                ) from exc
            if attr:
                value = getattr(module, attr, None)
                if not isinstance(value, Agent):
                    raise AgentDefinitionError(f"{spec!r} is not an Agent")
                registry.add(value)
                continue
            found = [value for value in vars(module).values() if isinstance(value, Agent)]
            if not found:
                raise AgentDefinitionError(f"module {module_name!r} defines no Agent")
            for agent in found:
                registry.add(agent)
        return registry
