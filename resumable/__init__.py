"""resumable: a suspend-and-resume job queue for long-running AI agents."""

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
    ReducerNotLoadedError,
    ResumableError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStateError,
    StepTimeoutError,
    TransientError,
    UnknownAgentError,
    UnknownStepError,
    UnstorableArgumentError,
)
from resumable.models.status import SessionStatus
from resumable.retries import RetryPolicy
from resumable.schemas import (
    AcceptPreview,
    Checkpoint,
    CheckpointState,
    DeadLetter,
    Delivery,
    Event,
    Page,
    Session,
    ToolCall,
)
from resumable.settings import Settings, load_settings
from resumable.waits import Callback, Children, Lock, Poll, Signal, Timer, Wait, Wake

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
    "InvalidCursorError",
    "InvalidArgumentError",
    "InvalidPatchError",
    "InvalidStepResultError",
    "LeaseLostError",
    "NotSerializableError",
    "PermanentError",
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
