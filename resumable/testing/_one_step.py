"""``run_step``: one step of an agent, tested on its own.

The step runs in a session built for it (its state, wake, sequence number,
shared documents and held locks as the test gives them), and its outcome is
checked but committed nowhere. A rerun builds that session again over the
same records: a worker that crashed before the step's commit finds the
world as it was, but for what it committed at once (tool calls, callbacks,
fencing tokens).
"""

from __future__ import annotations

import copy
import itertools
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from resumable._internal.redaction import DEFAULT_KEYS
from resumable.agent import Agent
from resumable.coordination.shared import check_name
from resumable.errors import InvalidArgumentError
from resumable.testing._records import Records
from resumable.testing._session import TestSession
from resumable.testing._steps import StepResult, begin, call_step, finish
from resumable.testing._stubs import Stubs
from resumable.testing._values import json_object, stored
from resumable.testing._world import World
from resumable.waits import Wake


def run_step(
    agent: Agent,
    step: str,
    *,
    input: Any = None,
    state: Mapping[str, Any] | None = None,
    wake: Wake | None = None,
    tools: Stubs | None = None,
    seq: int = 1,
    session_id: uuid.UUID | None = None,
    version: int | None = None,
    shared: Mapping[str, Any] | None = None,
    locks: Mapping[str, int] | None = None,
    now: datetime | None = None,
    redact_keys: tuple[str, ...] = DEFAULT_KEYS,
) -> StepResult:
    """Run step `step` of `agent` once, in memory, and return what it did.

    `wake` is what ``ctx.wake`` shows (``Wake("signal", "approval", {...})``);
    `seq` the step's number in the session (1: its first); `version` the one
    the session started on (``ctx.patched``); `shared` the shared documents
    as committed; `locks` the locks the session holds, with their fencing
    tokens. The step's own exception is raised as it is.
    """
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise InvalidArgumentError(f"seq is a step's number, 1 or more, not {seq!r}")
    agent.get_step(step)  # an unknown step is the test's mistake, said at once
    records, sid = Records(), session_id or uuid.uuid4()
    given_state = json_object(state)
    given_shared = {
        check_name(name): stored(value, f"shared document {name!r}")
        for name, value in (shared or {}).items()
    }
    world = World(now or datetime.now(UTC), redact_keys)
    world.shared = given_shared
    for name, token in (locks or {}).items():
        world.hold(sid, name, token)
    runs = itertools.count(1)

    def run(stubs: Stubs | None) -> StepResult:
        # Nothing a step does is committed here (the shared documents stay as
        # given); what a worker commits at once carries over to a rerun: the
        # calls, the callbacks, and the fencing tokens a run claimed (a rerun
        # is a new run: its ctx.fence gets a new, larger token).
        chosen = tools if stubs is None else stubs
        session = TestSession._at(agent, input, world, sid, version, chosen or {}, records)
        session.step, session.seq, session.wake = step, seq - 1, wake
        session.state, session._epoch = copy.deepcopy(given_state), next(runs)
        running = begin(session)
        return replace(finish(session, running, call_step(agent, running)), _rerun=run)

    return run(None)
