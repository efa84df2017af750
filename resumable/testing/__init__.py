"""Unit-testing agents without servers: a real ``StepContext`` over records kept
in memory, under the worker's own rules.

What a worker adds to a step (tool-call records and their idempotency keys,
callback tokens, shared documents, fenced locks, child sessions, wake-ups,
retries and the saga) is kept here in dicts and checked as the worker checks
it (``Agent.interpret``, the same key derivation, the same serialization), so
a step that passes here does not fail on a worker for a reason this kit could
see. No thread, socket or sleep: time is skipped, and an async step runs on
an event loop of its own (``asyncio.run``), so drive the kit from a sync test.

- ``run_step(agent, "charge", input=..., state=..., tools={...})`` runs one
  step and returns what it did and asked for (``StepResult``);
  ``.rerun()`` runs it again as a worker does after a crash before the
  commit: the calls it recorded are replayed, not made again.
- ``TestSession(agent, input)`` runs a whole session: ``run_until_wait()``,
  then ``signal``, ``deliver`` or ``advance`` (the clock jumps), then
  ``run_until_done()``. A session and its children share one in-memory world
  (the clock, shared documents, locks).

Stubs (``tools=``, ``checks=``, ``compensations=``, by name) stand in for the
functions a step passes: a callable is called instead (with
``idempotency_key=`` and ``fencing_token=`` when it takes them), an exception
(or exception class) is raised, any other value is the result; ``answers(a,
b, ...)`` gives one per call. See docs/testing.md.
"""

from resumable.testing._one_step import run_step
from resumable.testing._records import ToolCallRecord
from resumable.testing._session import TestSession
from resumable.testing._steps import SpawnedChild, StepResult
from resumable.testing._stubs import answers

__all__ = [
    # Running steps and sessions
    "TestSession",
    "answers",
    "run_step",
    # What they report
    "SpawnedChild",
    "StepResult",
    "ToolCallRecord",
]
