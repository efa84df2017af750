"""The package's exceptions, rooted in one class so callers can catch them all.

A subclass's docstring is its default message. Control flow that is not a
failure (a lost lease) has its own type and is never logged as an error. The
one exception outside the root is ``StepTimeoutError``: an interrupt raised
into a running step, so it must not be an ``Exception`` a step could catch.
"""

from __future__ import annotations

# What a process says of a database it can reach that has no resumable tables.
NO_SCHEMA_MESSAGE = "the database has no resumable tables yet: run `resumable db upgrade`"


class ResumableError(Exception):
    """An error raised by resumable."""

    code = "resumable_error"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        super().__init__(self.message)


class ConfigurationError(ResumableError):
    """The configuration is invalid."""

    code = "configuration_error"


class EmbeddedServiceError(ResumableError):
    """An embedded PostgreSQL or Redis server could not be started or stopped."""

    code = "embedded_service_error"


class UnknownAgentError(ResumableError):
    """No agent is registered under this name."""

    code = "unknown_agent"


class UnknownStepError(ResumableError):
    """The agent has no step with this name."""

    code = "unknown_step"


class AgentDefinitionError(ResumableError):
    """The agent is defined incorrectly."""

    code = "agent_definition_error"


class NotSerializableError(ResumableError):
    """A value that must be stored is not JSON-serializable."""

    code = "not_serializable"


class InvalidArgumentError(ResumableError, ValueError):
    """An argument of a Python API call that it cannot take (a malformed value,
    text PostgreSQL cannot store, a limit out of range); nothing was done."""

    code = "invalid_argument"


class InvalidStepResultError(ResumableError):
    """A step returned something that is neither a next step nor a completion."""

    code = "invalid_step_result"


class SessionNotFoundError(ResumableError):
    """No session has this id."""

    code = "session_not_found"


class IdempotencyConflictError(ResumableError):
    """The idempotency key was already used for a different request."""

    code = "idempotency_conflict"


class LeaseLostError(ResumableError):
    """Another worker took over this session; this worker must stop touching it.

    Not a failure of the session: it is how fencing tells a stale worker
    (paused, partitioned, or handling a duplicate message) to back off.
    """

    code = "lease_lost"


class TransientError(ResumableError):
    """A failure that may pass if the step is tried again later (a timeout, a
    rate limit, a dependency briefly down). ``retry_after`` (seconds), when the
    failure says how long to wait (HTTP 429/503 Retry-After), is honoured as
    the delay before the next attempt."""

    code = "transient_error"

    def __init__(self, message: str | None = None, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimited(TransientError):  # noqa: N818 (reads as what the provider said)
    """The provider refused a call for its rate (HTTP 429). Raised by a tool
    called with ``rate_limit=``, it holds that limit back for ``retry_after``
    seconds (the provider's Retry-After; at least one spacing when it gave
    none) for every worker, and the call is made again when its turn comes,
    without counting an attempt. Raised elsewhere, it is a ``TransientError``."""

    code = "rate_limited"


class PermanentError(ResumableError):
    """A failure that trying again cannot fix: the session fails at once, runs
    its compensations and goes to the dead-letter queue."""

    code = "permanent_error"


class StepTimeoutError(BaseException):
    """The step ran longer than its time limit.

    Raised inside the step's own thread when its limit passes. Like dramatiq's
    ``Interrupt`` it derives from ``BaseException``, not ``Exception``: a step's
    ``except Exception:`` cannot swallow it, and the worker handles it as a
    failed attempt (transient: retried unless the policy lists it as permanent).
    """

    code = "step_timeout"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or "the step ran longer than its time limit"
        super().__init__(self.message)


class UnknownCheckError(ResumableError):
    """The agent has no poll check with this name."""

    code = "unknown_check"


class WaitDefinitionError(ResumableError):
    """A step asked to wait in a way that cannot work."""

    code = "invalid_wait"


class SessionExistsError(ResumableError):
    """A session with this id already exists."""

    code = "session_exists"


class SessionStateError(ResumableError):
    """The session is not in a state that allows this."""

    code = "invalid_session_state"


class ConfirmationRequiredError(SessionStateError):
    """Accepting a blocked session's new tool calls would make a call again
    whose recorded effect stays in effect: the acceptance must name the
    recorded calls it supersedes (their idempotency keys, as its preview
    lists them). Nothing was changed. ``preview`` is that preview."""

    code = "confirmation_required"

    def __init__(self, message: str | None = None, *, preview: object = None) -> None:
        super().__init__(message)
        self.preview = preview


class InvalidCursorError(InvalidArgumentError):
    """The pagination cursor is not one this API handed out."""

    code = "invalid_cursor"


class DeadLetterNotFoundError(ResumableError):
    """No dead letter has this id."""

    code = "dead_letter_not_found"


class DeadLetterStateError(ResumableError):
    """The dead letter is not open (already retried or discarded), or cannot be retried."""

    code = "invalid_dead_letter_state"


class InvalidPatchError(InvalidArgumentError):
    """The operator's request is invalid (a state patch that does not apply, a missing reason)."""

    code = "invalid_request"


class InvalidDrainError(ResumableError):
    """The drain's parameters are out of bounds."""

    code = "invalid_drain"


class ScheduleDefinitionError(InvalidArgumentError):
    """The schedule's definition is invalid (its cron, interval, time zone or policies)."""

    code = "invalid_schedule"


class ScheduleNotFoundError(ResumableError):
    """No schedule has this name."""

    code = "schedule_not_found"


class ScheduleExistsError(ResumableError):
    """A schedule with this name already exists with another definition."""

    code = "schedule_exists"


class CheckpointNotFoundError(ResumableError):
    """The session has no such checkpoint."""

    code = "checkpoint_not_found"


class ReducerNotLoadedError(ResumableError):
    """An event-sourced agent's state between snapshots is its reducer folded
    over the events, and this process did not load the agent's module: the
    checkpoint exists, but cannot be rebuilt here."""

    code = "reducer_not_loaded"


class UnstorableArgumentError(NotSerializableError, InvalidArgumentError):
    """A value given to the Python API (an input, a payload) that JSON or
    PostgreSQL cannot hold: both a value that cannot be stored and a bad argument."""

    code = "not_serializable"


# An id or position that is not well formed names nothing: it is both not
# found (HTTP 404, as the API answers for such a path) and an invalid
# argument (what README promises a malformed id raises), so either is caught.


class MalformedSessionIdError(SessionNotFoundError, InvalidArgumentError):
    """Text that is not a UUID, where a session id was expected."""

    code = "session_not_found"


class MalformedDeadLetterIdError(DeadLetterNotFoundError, InvalidArgumentError):
    """Something other than an integer, where a dead letter id was expected."""

    code = "dead_letter_not_found"


class MalformedCheckpointError(CheckpointNotFoundError, InvalidArgumentError):
    """Something other than a step number, where a checkpoint's seq was expected."""

    code = "checkpoint_not_found"


class ReplayDivergedError(BaseException):
    """The code asked for something other than what the session recorded.

    Raised when a replayed tool call names another tool or other arguments at
    a recorded position, or when a session needs a step, poll check or
    compensation the deployed code does not have. Like ``StepTimeoutError`` it
    derives from ``BaseException`` so a step's ``except Exception:`` cannot
    swallow it: the worker parks the session as ``blocked`` for an operator
    (no outcome committed, no compensation, nothing called).
    """

    code = "replay_diverged"

    def __init__(self, reason: dict[str, object]) -> None:
        self.reason = reason
        self.message = str(reason.get("message") or "replay diverged from the record")
        super().__init__(self.message)
