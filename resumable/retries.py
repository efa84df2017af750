"""Retry policy: which failures are worth another attempt, and when.

Policies are set per agent and may be overridden per step. Failures are
classified in this order: the package's own definition errors (an unknown
step, unserializable state, ...) and ``PermanentError`` are permanent;
anything matching ``transient`` (by default every other exception) and a
step that ran past its ``time_limit`` are retried until ``max_attempts`` is
reached. A compensation that fails permanently is not tried again. Delays grow exponentially with
full jitter between ``min_delay`` and ``max_delay``; a failure that carries
a ``retry_after`` waits at least that long.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from resumable.errors import (
    AgentDefinitionError,
    InvalidStepResultError,
    NotSerializableError,
    PermanentError,
    StepTimeoutError,
    UnknownAgentError,
    UnknownCheckError,
    UnknownStepError,
    WaitDefinitionError,
)

# Mistakes in the agent's code or data: trying again changes nothing.
ALWAYS_PERMANENT: tuple[type[BaseException], ...] = (
    PermanentError,
    UnknownAgentError,
    UnknownStepError,
    UnknownCheckError,
    NotSerializableError,
    InvalidStepResultError,
    WaitDefinitionError,
    AgentDefinitionError,
)


#: The longest delay or time limit a policy takes (ten years): longer would
#: overflow the timestamp of the next attempt or the time limit's timer.
MAX_SECONDS = 10 * 365 * 86400


def _exception_types(name: str, value: object) -> tuple[type[BaseException], ...]:
    """`value` as a tuple of exception classes (one class alone is taken too),
    refused when the agent is defined rather than at its first failure."""
    types = (value,) if isinstance(value, type) else value
    if not isinstance(types, tuple | list | set | frozenset) or not all(
        isinstance(t, type) and issubclass(t, BaseException) for t in types
    ):
        raise AgentDefinitionError(f"{name} must be a tuple of exception classes, not {value!r}")
    return tuple(types)


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing step is retried."""

    max_attempts: int = 3
    min_delay: float = 1.0
    max_delay: float = 300.0
    transient: tuple[type[BaseException], ...] = (Exception,)
    permanent: tuple[type[BaseException], ...] = ()
    #: Seconds a single attempt of a step may run; None for no limit.
    time_limit: float | None = None
    #: Attempts for each saga compensation before the saga stops for an operator.
    compensation_attempts: int = 5
    jitter: bool = field(default=True, compare=False)

    def __post_init__(self) -> None:
        for name in ("transient", "permanent"):
            object.__setattr__(self, name, _exception_types(name, getattr(self, name)))
        for name in ("max_attempts", "compensation_attempts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise AgentDefinitionError(
                    f"{name} must be an integer of at least 1, not {value!r}"
                )
        for name in ("min_delay", "max_delay", "time_limit"):
            value = getattr(self, name)
            # A NaN or infinite limit was taken, then written into the claim's
            # JSON, which PostgreSQL refuses: every session of the agent
            # stayed pending without a word.
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value > MAX_SECONDS
            ):
                raise AgentDefinitionError(
                    f"{name} must be a finite number of seconds, at most {MAX_SECONDS:,} "
                    f"(ten years), not {value!r}"
                )
        if not 0 <= self.min_delay <= self.max_delay:
            raise AgentDefinitionError("need 0 <= min_delay <= max_delay")
        if self.time_limit is not None and self.time_limit <= 0:
            raise AgentDefinitionError("time_limit must be positive")

    def is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, ALWAYS_PERMANENT + self.permanent):
            return False
        # A time-out is an interrupt (a BaseException), not one of the step's
        # errors: worth another attempt unless listed as permanent.
        return isinstance(exc, (*self.transient, StepTimeoutError))

    def should_retry(self, exc: BaseException, attempts_made: int) -> bool:
        """Whether to try again after `attempts_made` attempts ended in `exc`."""
        return self.is_transient(exc) and attempts_made < self.max_attempts

    def delay(self, attempts_made: int, exc: BaseException | None = None) -> float:
        """Seconds before the next attempt: full jitter over an exponential cap,
        at least the failure's own retry_after."""
        cap = min(self.max_delay, self.min_delay * 2 ** max(attempts_made - 1, 0))
        chosen = random.uniform(self.min_delay, cap) if self.jitter else cap
        retry_after = getattr(exc, "retry_after", None)
        # A failure's own number (parsed from a Retry-After header, say): NaN
        # is ignored, and the wait is at most MAX_SECONDS, where a longer one
        # could not be written as the time of the next attempt.
        if isinstance(retry_after, int | float) and not isinstance(retry_after, bool):
            if retry_after >= MAX_SECONDS:
                chosen = float(MAX_SECONDS)
            elif not (isinstance(retry_after, float) and math.isnan(retry_after)):
                chosen = max(chosen, float(retry_after))
        return chosen


DEFAULT_POLICY = RetryPolicy()
