"""resumable: a suspend-and-resume job queue for long-running AI agents."""

from __future__ import annotations

from typing import TYPE_CHECKING

from resumable._internal import lazy_names

if TYPE_CHECKING:
    from resumable.agent import Agent, AgentRegistry, Complete, Next
    from resumable.async_client import AsyncClient
    from resumable.checkpoints import EventSourced, Incremental, Snapshot
    from resumable.client import Client
    from resumable.context import StepContext
    from resumable.coordination.records import SharedDocument, SharedVersion
    from resumable.coordination.shared import CoordinationError
    from resumable.errors import (
        AgentDefinitionError,
        CheckpointNotFoundError,
        ConfigurationError,
        ConfirmationRequiredError,
        DeadLetterNotFoundError,
        DeadLetterStateError,
        IdempotencyConflictError,
        InvalidArgumentError,
        InvalidCursorError,
        InvalidPatchError,
        InvalidStepResultError,
        LeaseLostError,
        NotSerializableError,
        PermanentError,
        RateLimited,
        ReducerNotLoadedError,
        ResumableError,
        ScheduleDefinitionError,
        ScheduleExistsError,
        ScheduleNotFoundError,
        SessionExistsError,
        SessionNotFoundError,
        SessionStateError,
        StepTimeoutError,
        TransientError,
        UnknownAgentError,
        UnknownStepError,
        UnstorableArgumentError,
    )
    from resumable.limits import Concurrency, RateLimit
    from resumable.models.status import SessionStatus
    from resumable.retries import RetryPolicy
    from resumable.schedules import Schedule
    from resumable.schemas import (
        AcceptPreview,
        Checkpoint,
        CheckpointState,
        DeadLetter,
        Delivery,
        Event,
        Page,
        ScheduleInfo,
        Session,
        ToolCall,
    )
    from resumable.settings import Settings, load_settings
    from resumable.waits import Callback, Children, Lock, Poll, Signal, Timer, Wait, Wake

# Where each public name lives. The package imports them on first use
# (PEP 562), so `resumable.cli` or `resumable.errors` do not pay for the
# clients, the broker and the models: a one-shot CLI command starts in a
# fraction of the time.
_HOMES: dict[str, str] = {
    "Agent": "resumable.agent",
    "AgentRegistry": "resumable.agent",
    "Complete": "resumable.agent",
    "Next": "resumable.agent",
    "AsyncClient": "resumable.async_client",
    "EventSourced": "resumable.checkpoints",
    "Incremental": "resumable.checkpoints",
    "Snapshot": "resumable.checkpoints",
    "Client": "resumable.client",
    "StepContext": "resumable.context",
    "SharedDocument": "resumable.coordination.records",
    "SharedVersion": "resumable.coordination.records",
    "CoordinationError": "resumable.coordination.shared",
    "AgentDefinitionError": "resumable.errors",
    "CheckpointNotFoundError": "resumable.errors",
    "ConfigurationError": "resumable.errors",
    "ConfirmationRequiredError": "resumable.errors",
    "DeadLetterNotFoundError": "resumable.errors",
    "DeadLetterStateError": "resumable.errors",
    "IdempotencyConflictError": "resumable.errors",
    "InvalidArgumentError": "resumable.errors",
    "InvalidCursorError": "resumable.errors",
    "InvalidPatchError": "resumable.errors",
    "InvalidStepResultError": "resumable.errors",
    "LeaseLostError": "resumable.errors",
    "NotSerializableError": "resumable.errors",
    "PermanentError": "resumable.errors",
    "ReducerNotLoadedError": "resumable.errors",
    "ResumableError": "resumable.errors",
    "ScheduleDefinitionError": "resumable.errors",
    "ScheduleExistsError": "resumable.errors",
    "ScheduleNotFoundError": "resumable.errors",
    "SessionExistsError": "resumable.errors",
    "SessionNotFoundError": "resumable.errors",
    "SessionStateError": "resumable.errors",
    "StepTimeoutError": "resumable.errors",
    "RateLimited": "resumable.errors",
    "TransientError": "resumable.errors",
    "UnknownAgentError": "resumable.errors",
    "UnknownStepError": "resumable.errors",
    "UnstorableArgumentError": "resumable.errors",
    "Concurrency": "resumable.limits",
    "RateLimit": "resumable.limits",
    "SessionStatus": "resumable.models.status",
    "RetryPolicy": "resumable.retries",
    "Schedule": "resumable.schedules",
    "AcceptPreview": "resumable.schemas",
    "Checkpoint": "resumable.schemas",
    "CheckpointState": "resumable.schemas",
    "DeadLetter": "resumable.schemas",
    "Delivery": "resumable.schemas",
    "Event": "resumable.schemas",
    "Page": "resumable.schemas",
    "ScheduleInfo": "resumable.schemas",
    "Session": "resumable.schemas",
    "ToolCall": "resumable.schemas",
    "Settings": "resumable.settings",
    "load_settings": "resumable.settings",
    "Callback": "resumable.waits",
    "Children": "resumable.waits",
    "Lock": "resumable.waits",
    "Poll": "resumable.waits",
    "Signal": "resumable.waits",
    "Timer": "resumable.waits",
    "Wait": "resumable.waits",
    "Wake": "resumable.waits",
}


__getattr__, __dir__ = lazy_names.resolver(__name__, _HOMES, globals())


__all__ = [
    # Defining agents
    "Agent",
    "AgentRegistry",
    "Complete",
    "Next",
    "StepContext",
    # Checkpoints and retries
    "EventSourced",
    "Incremental",
    "RetryPolicy",
    "Snapshot",
    # Waiting
    "Callback",
    "Children",
    "Lock",
    "Poll",
    "Signal",
    "Timer",
    "Wait",
    "Wake",
    # Starting them on a schedule, how many run at once, how fast they call
    "Schedule",
    "Concurrency",
    "RateLimit",
    # Running them
    "AsyncClient",
    "Client",
    "SessionStatus",
    "Settings",
    "load_settings",
    # What the clients return (resumable.schemas, shared with the HTTP API)
    "AcceptPreview",
    "Checkpoint",
    "CheckpointState",
    "DeadLetter",
    "Delivery",
    "Event",
    "Page",
    "ScheduleInfo",
    "Session",
    "ToolCall",
    "SharedDocument",
    "SharedVersion",
    # Errors
    "AgentDefinitionError",
    "CheckpointNotFoundError",
    "ConfirmationRequiredError",
    "CoordinationError",
    "ConfigurationError",
    "DeadLetterNotFoundError",
    "DeadLetterStateError",
    "IdempotencyConflictError",
    "ScheduleDefinitionError",
    "ScheduleExistsError",
    "ScheduleNotFoundError",
    "InvalidCursorError",
    "InvalidArgumentError",
    "InvalidPatchError",
    "InvalidStepResultError",
    "LeaseLostError",
    "NotSerializableError",
    "PermanentError",
    "RateLimited",
    "ReducerNotLoadedError",
    "ResumableError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionStateError",
    "StepTimeoutError",
    "TransientError",
    "UnknownAgentError",
    "UnknownStepError",
    "UnstorableArgumentError",
]
