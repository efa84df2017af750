"""Defining agents: an agent is a set of named steps.

A step is a function that takes a :class:`StepContext` and returns what comes
next: the name of the next step (or ``Next(name)``) or ``Complete(result)``.
Between steps everything the agent knows lives in ``ctx.state``, which is
committed to PostgreSQL after every step; so a step must keep nothing it
needs later in local variables or globals.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

from resumable._internal.serialization import unstorable_text
from resumable.checkpoints import CheckpointStrategy, EventSourced, Incremental, Snapshot
from resumable.errors import (
    AgentDefinitionError,
    InvalidStepResultError,
    ResumableError,
    ScheduleDefinitionError,
    UnknownAgentError,
    UnknownCheckError,
    UnknownStepError,
)
from resumable.limits import Concurrency, RateLimit
from resumable.retries import DEFAULT_POLICY, RetryPolicy
from resumable.schedules import CatchUp, Overlap, Schedule
from resumable.waits import Wait

if TYPE_CHECKING:
    from resumable.context import StepContext

# The longest agent, step, tool or topic name (the same bound the API checks).
MAX_NAME_LENGTH = 200


@dataclass(frozen=True)
class Next:
    """Go on with the named step."""

    step: str


@dataclass(frozen=True)
class Complete:
    """Finish the session with this (JSON-serializable) result."""

    result: Any = None


@dataclass(frozen=True)
class Decision:
    """A step's return value, validated: where to go next and how."""

    next_step: str | None
    result: Any = None
    done: bool = False
    #: The wait as stored on the session while it waits (``Wait.spec``).
    wait: dict[str, Any] | None = None


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
# A state migration: the state a session of an older version recorded -> the
# state this version's steps expect.
MigrationFunction: TypeAlias = Callable[[dict[str, Any]], dict[str, Any]]
M = TypeVar("M", bound=MigrationFunction)


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
        version: int | None = None,
        patches: Mapping[str, int] | None = None,
        concurrency: Concurrency | None = None,
        rate_limits: Iterable[RateLimit] = (),
    ) -> None:
        if not name or not isinstance(name, str):
            raise AgentDefinitionError("an agent needs a non-empty string name")
        checked_name(name, "agent name")
        #: The code version (0: unversioned). See ``resumable/versions.py``.
        self.version = _checked_version(name, version)
        #: Patch name -> the version that introduced it (``ctx.patched``).
        self.patches = _checked_patches(name, self.version, patches or {})
        self._aliases: dict[str, str] = {}
        self._migrations: dict[int, MigrationFunction] = {}
        self.name = name
        self.description = description
        self._start = start
        self._steps: dict[str, StepFunction] = {}
        self._checks: dict[str, CheckFunction] = {}
        self._compensations: dict[str, CompensationFunction] = {}
        self._step_policies: dict[str, RetryPolicy] = {}
        #: Steps written as ``async def`` (recognised when registered; run on the event loop).
        self._async_steps: set[str] = set()
        self.retry = _checked_policy(retry, f"agent {name!r}: retry")
        #: How each step's checkpoint row is stored (see resumable/checkpoints.py).
        self.checkpoints: CheckpointStrategy = _checked_strategy(name, checkpoints)
        self._schedules: list[Schedule] = []
        if concurrency is not None and not isinstance(concurrency, Concurrency):
            raise AgentDefinitionError(
                f"agent {name!r}: concurrency must be a Concurrency(limit=..., key=...)"
            )
        #: How many of its sessions run at once (``resumable/limits.py``); None: no limit.
        self.concurrency = concurrency
        #: Steps limited on their own (``step(..., concurrency=...)``).
        self._step_limits: dict[str, Concurrency] = {}
        #: Named limits its calls may take (``ctx.tool(..., rate_limit=name)``).
        self.rate_limits: dict[str, RateLimit] = _checked_rate_limits(name, rate_limits)

    def rate_limit(self, name: str) -> RateLimit:
        """The rate limit `name` this agent declares (a call naming another
        is a definition error, found at its first call)."""
        try:
            return self.rate_limits[name]
        except (KeyError, TypeError):
            declared = ", ".join(repr(n) for n in self.rate_limits) or "none"
            raise AgentDefinitionError(
                f"agent {self.name!r} declares no rate limit {name!r} (it declares "
                f"{declared}): add it to Agent(..., rate_limits=[RateLimit({name!r}, ...)])"
            ) from None

    @overload
    def step(
        self,
        func: S,
        /,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        aliases: Iterable[str] = (),
        concurrency: Concurrency | None = None,
    ) -> S: ...

    @overload
    def step(
        self,
        func: None = None,
        /,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        aliases: Iterable[str] = (),
        concurrency: Concurrency | None = None,
    ) -> Callable[[S], S]: ...

    def step(
        self,
        func: S | None = None,
        /,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        aliases: Iterable[str] = (),
        concurrency: Concurrency | None = None,
    ) -> S | Callable[[S], S]:
        """Register a step, as ``@agent.step`` or ``@agent.step(name="...")``.

        ``aliases`` are the names the step had before a rename: a session
        waiting at an old name runs this step (see ``resolve_step``).
        ``concurrency`` limits how many sessions run this step at once
        (``resumable/limits.py``); an agent limited as a whole takes none.
        Returns the function itself (or a decorator that does), so steps stay
        plain functions that tests can call directly.
        """

        if isinstance(aliases, str):  # aliases="old" would be three one-letter names
            raise AgentDefinitionError(
                f"agent {self.name!r}: aliases is a list of former step names, "
                f"not the string {aliases!r} (write aliases=[{aliases!r}])"
            )
        if retry is not None:
            _checked_policy(retry, f"agent {self.name!r}: a step's retry")
        if concurrency is not None:
            self._check_step_concurrency(concurrency)

        def register(fn: S) -> S:
            _require_function(fn, "a step", self.name)
            step_name = checked_name(fn.__name__ if name is None else name, "step name")
            if step_name in self._steps or step_name in self._aliases:
                raise AgentDefinitionError(
                    f"agent {self.name!r} already has a step named {step_name!r}"
                )
            for alias in aliases:
                checked_name(alias, "step alias")
                if alias in self._steps or alias in self._aliases or alias == step_name:
                    raise AgentDefinitionError(
                        f"agent {self.name!r}: alias {alias!r} of step {step_name!r} is "
                        "already a step or another step's alias"
                    )
                self._aliases[alias] = step_name
            self._steps[step_name] = fn
            if _is_async(fn, f"step {step_name!r} of agent {self.name!r}"):
                self._async_steps.add(step_name)
            if retry is not None:
                self._step_policies[step_name] = retry
            if concurrency is not None:
                if "*" in (step_name, *aliases):
                    raise AgentDefinitionError(
                        f"agent {self.name!r}: a step named '*' cannot have a limit of its own"
                        " ('*' stands for the agent's own limit)"
                    )
                self._step_limits[step_name] = concurrency
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
            _require_function(fn, "a check", self.name)
            check_name = checked_name(fn.__name__ if name is None else name, "check name")
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
            _require_function(fn, "a compensation", self.name)
            key = checked_name(fn.__name__ if name is None else name, "compensation name")
            if key in self._compensations:
                raise AgentDefinitionError(
                    f"agent {self.name!r} already has a compensation named {key!r}"
                )
            _is_async(fn, f"compensation {key!r} of agent {self.name!r}")
            self._compensations[key] = fn
            return fn

        return register(func) if func is not None else register

    def migrate(self, *, from_version: int) -> Callable[[M], M]:
        """Declare that this version takes over sessions of ``from_version``,
        as ``@agent.migrate(from_version=1)`` on ``fn(state) -> state``.

        When a worker of this version claims a waiting session of
        ``from_version`` (only when no live worker serves ``from_version``
        itself), ``fn`` turns its state into this version's, in the same
        transaction as the claim; the session then belongs to this version.
        ``fn`` must be pure (it may run again if the claim rolls back). An
        identity function declares old sessions compatible as they are.
        """
        if (
            isinstance(from_version, bool)
            or not isinstance(from_version, int)
            or not 0 <= from_version < self.version
        ):
            raise AgentDefinitionError(
                f"agent {self.name!r} (version {self.version}) can only migrate from an "
                f"older version (0 for unversioned sessions), not {from_version!r}"
            )

        def register(fn: M) -> M:
            if from_version in self._migrations:
                raise AgentDefinitionError(
                    f"agent {self.name!r} already migrates from version {from_version}"
                )
            self._migrations[from_version] = fn
            return fn

        return register

    def schedule(
        self,
        name: str,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str = "UTC",
        input: Any = None,
        catch_up: CatchUp = "skip",
        overlap: Overlap = "skip",
    ) -> Schedule:
        """Start a session of this agent with `input` on a cron expression (in
        `timezone`) or `every` so many seconds. Each worker that loads the
        agent records the schedule when it starts; the scheduler process
        starts its sessions, one per due time however many schedulers run.
        ``catch_up`` ("skip", "latest" or "all") says what due times missed
        while no scheduler ran do; ``overlap`` ("skip", "allow" or "queue")
        what a due time does while the schedule's last session is still live.
        See ``resumable/schedules.py``."""
        try:
            defined = Schedule(
                name=name,
                agent=self.name,
                cron=cron,
                every=every,
                timezone=timezone,
                input=input,
                catch_up=catch_up,
                overlap=overlap,
            )
        except ScheduleDefinitionError as exc:
            raise AgentDefinitionError(f"agent {self.name!r}: {exc.message}") from None
        if any(existing.name == name for existing in self._schedules):
            raise AgentDefinitionError(f"agent {self.name!r} already has a schedule named {name!r}")
        self._schedules.append(defined)
        return defined

    @property
    def schedules(self) -> list[Schedule]:
        """The schedules this agent's code defines (``schedule``)."""
        return list(self._schedules)

    def _check_step_concurrency(self, concurrency: object) -> None:
        if not isinstance(concurrency, Concurrency):
            raise AgentDefinitionError(
                f"agent {self.name!r}: a step's concurrency must be a"
                " Concurrency(limit=..., key=...)"
            )
        if self.concurrency is not None:
            raise AgentDefinitionError(
                f"agent {self.name!r} is limited as a whole (concurrency=...): its steps"
                " cannot have limits of their own"
            )

    def slot_scope(self, step: str | None) -> str | None:
        """What a run at `step` holds a concurrency slot for: ``""`` (the
        agent's limit, held for the whole run), the step's name (its own
        limit, held for that step only), or None (no slot)."""
        if self.concurrency is not None:
            return ""
        if step is None or not self._step_limits:
            return None
        resolved = self.resolve_step(step)
        return resolved if resolved in self._step_limits else None

    def limits_spec(self) -> dict[str, Any] | None:
        """The limits as a worker's claim reads them (``step_queries.SLOT_SPEC``):
        ``{"*": {"limit", "key"}}`` for the agent's, or ``{step: {"limit",
        "key", "step"}}`` for its steps' (under their aliases too); None: no
        limit."""
        if self.concurrency is not None:
            return {"*": self.concurrency.spec()}
        if not self._step_limits:
            return None
        steps: dict[str, Any] = {}
        for step, limit in self._step_limits.items():
            for name in [step, *(old for old, new in self._aliases.items() if new == step)]:
                steps[name] = {**limit.spec(), "step": step}
        return steps

    def step_concurrency(self, step: str) -> Concurrency | None:
        """The limit of `step` itself, if it has one."""
        return self._step_limits.get(self.resolve_step(step))

    @property
    def takes_over(self) -> list[int]:
        """The older versions whose sessions this version migrates."""
        return sorted(self._migrations)

    def migration(self, from_version: int) -> MigrationFunction:
        try:
            return self._migrations[from_version]
        except KeyError:
            raise AgentDefinitionError(
                f"agent {self.name!r} has no migration from version {from_version}"
            ) from None

    @property
    def label(self) -> str:
        """``name@version``, or just the name when unversioned."""
        return version_label(self.name, self.version)

    @property
    def fingerprint(self) -> str:
        """A hash of the names sessions record (steps and their aliases,
        checks, compensations): two builds of one version that differ here
        are different code under one version number."""
        names = {
            "steps": sorted(self._steps),
            "aliases": sorted(self._aliases.items()),
            "checks": sorted(self._checks),
            "compensations": sorted(self._compensations),
        }
        return hashlib.sha256(json.dumps(names, sort_keys=True).encode()).hexdigest()[:16]

    def resolve_step(self, name: str) -> str:
        """The step a recorded name means now: itself, or the step that has
        it as an alias. Unknown names come back unchanged."""
        return name if name in self._steps else self._aliases.get(name, name)

    def has_step(self, name: str) -> bool:
        return self.resolve_step(name) in self._steps

    @property
    def compensation_names(self) -> list[str]:
        return list(self._compensations)

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
        return self._step_policies.get(self.resolve_step(step or ""), self.retry)

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
            return self._steps[self.resolve_step(name)]
        except KeyError:
            raise UnknownStepError(
                f"agent {self.name!r} has no step {name!r} (steps: {', '.join(self._steps)})"
            ) from None

    def interpret(self, outcome: object, *, now: datetime | None = None) -> Decision:
        """What a step's return value asks for, or the step's own error: the
        one rule for a worker and for ``resumable.testing``, so a step that
        passes a unit test is not refused on a worker. `now`: when the wait
        begins (its timers and deadline count from it)."""
        if inspect.isawaitable(outcome):
            if inspect.iscoroutine(outcome):
                outcome.close()  # never awaited: closed, so Python does not warn about it
            raise InvalidStepResultError(
                "a step returned a coroutine (awaitable) instead of its next step: "
                "declare the step `async def` if it awaits, or return the value itself"
            )
        if isinstance(outcome, Complete):
            return Decision(next_step=None, result=outcome.result, done=True)
        if isinstance(outcome, str):
            outcome = Next(outcome)
        if isinstance(outcome, Next):
            self.get_step(outcome.step)  # raises UnknownStepError
            return Decision(next_step=outcome.step)
        if isinstance(outcome, Wait):
            self.get_step(outcome.then)
            return Decision(next_step=outcome.then, wait=outcome.spec(now))
        raise InvalidStepResultError(
            "a step must return a step name, Next(...), Complete(...) or a wait, "
            f"got {type(outcome).__name__}"
        )

    def is_async_step(self, name: str) -> bool:
        """Whether step `name` is an ``async def`` (awaited on the worker's event loop)."""
        return name in self._async_steps

    @property
    def has_async_steps(self) -> bool:
        return bool(self._async_steps)

    def __repr__(self) -> str:
        return f"Agent({self.label!r}, steps={self.step_names!r})"


def version_label(name: str, version: int) -> str:
    """How logs and warnings name an agent's version: ``refund@3``, or
    ``refund`` for unversioned code (version 0)."""
    return f"{name}@{version}" if version else name


#: Versions are stored as PostgreSQL ``integer``.
MAX_VERSION = 2**31 - 1


def checked_name(value: object, what: str) -> str:
    """A name an agent's code gives (the agent, a step, a check, a tool):
    text PostgreSQL can store, 1 to 200 characters, as ``Client.start`` and
    the HTTP API take a name (``arguments.text``). Refused when the code is
    loaded, not when a worker first writes it and fails as a bug."""
    if not isinstance(value, str) or not value:
        raise AgentDefinitionError(f"a {what} must be a non-empty string, not {value!r}")
    problem = unstorable_text(value)
    if problem:
        raise AgentDefinitionError(f"{what} {value[:40]!r} contains {problem}")
    if len(value) > MAX_NAME_LENGTH:
        raise AgentDefinitionError(
            f"{what} {value[:40]!r}... is {len(value)} characters; at most {MAX_NAME_LENGTH}"
        )
    return value


def _require_function(fn: object, what: str, agent: str) -> None:
    if not callable(fn):
        raise AgentDefinitionError(
            f"agent {agent!r}: {what} is a function (decorate it, or pass name=...), not {fn!r}"
        )


def _checked_version(name: str, version: int | None) -> int:
    if version is None:
        return 0
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise AgentDefinitionError(
            f"agent {name!r}: version must be a positive integer, at most {MAX_VERSION}"
            f" (newer code, higher number), not {version!r}"
        )
    return version


def _checked_policy(policy: object, what: str) -> RetryPolicy:
    if not isinstance(policy, RetryPolicy):
        raise AgentDefinitionError(f"{what} must be a RetryPolicy, not {policy!r}")
    return policy


def _checked_strategy(name: str, strategy: object) -> CheckpointStrategy:
    if strategy is None:
        return Snapshot()
    if not isinstance(strategy, Snapshot | Incremental | EventSourced):
        raise AgentDefinitionError(
            f"agent {name!r}: checkpoints must be Snapshot(), Incremental() or "
            f"EventSourced(reducer), not {strategy!r}"
        )
    return strategy


def _checked_patches(name: str, version: int, patches: object) -> dict[str, int]:
    if not isinstance(patches, Mapping):
        raise AgentDefinitionError(
            f"agent {name!r}: patches maps each patch name to the version that "
            f"introduced it, not {patches!r}"
        )
    checked: dict[str, int] = {}
    for patch, since in patches.items():
        if not isinstance(patch, str) or not patch:
            raise AgentDefinitionError(f"agent {name!r}: a patch needs a non-empty string name")
        checked_name(patch, f"agent {name!r}: patch name")
        if isinstance(since, bool) or not isinstance(since, int) or not 1 <= since <= version:
            raise AgentDefinitionError(
                f"agent {name!r}: patch {patch!r} must name the version that introduced "
                f"it (1..{version}), not {since!r}"
            )
        checked[patch] = since
    return checked


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


def _where(exc: BaseException) -> str:
    """Where a failed import failed, as " at FILE:LINE": the innermost frame
    outside importlib, or the offending line of a SyntaxError; "" if none."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" at {exc.filename}:{exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


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
        for schedule in agent.schedules:
            for other in self._agents.values():
                if other is not agent and any(s.name == schedule.name for s in other.schedules):
                    raise AgentDefinitionError(
                        f"agents {other.name!r} and {agent.name!r} both define a schedule "
                        f"named {schedule.name!r}: a schedule's name is unique"
                    )
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
            except (ImportError, ValueError, TypeError) as exc:
                # ValueError: an empty name; TypeError: a relative one ("../x").
                raise AgentDefinitionError(
                    f"cannot import agent module {module_name!r}: {exc}"
                ) from exc
            except ResumableError:
                raise  # an Agent(...) in it defined wrongly says so itself
            except Exception as exc:
                # The user's own module failed as it ran: say where, since
                # the traceback is not printed (it would read as our bug).
                raise AgentDefinitionError(
                    f"agent module {module_name!r} raised {type(exc).__name__} "
                    f"while importing{_where(exc)}: "
                    f"{exc.msg if isinstance(exc, SyntaxError) else exc}"
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


def _checked_rate_limits(agent: str, limits: object) -> dict[str, RateLimit]:
    if isinstance(limits, RateLimit):
        limits = (limits,)
    if isinstance(limits, str | bytes) or not isinstance(limits, Iterable):
        raise AgentDefinitionError(
            f"agent {agent!r}: rate_limits is a list of RateLimit(...), not {limits!r}"
        )
    by_name: dict[str, RateLimit] = {}
    for limit in limits:
        if not isinstance(limit, RateLimit):
            raise AgentDefinitionError(
                f"agent {agent!r}: rate_limits holds RateLimit(...) objects, not {limit!r}"
            )
        if limit.name in by_name:
            raise AgentDefinitionError(f"agent {agent!r} declares rate limit {limit.name!r} twice")
        by_name[limit.name] = limit
    return by_name
