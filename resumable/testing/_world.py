"""What the sessions of one test share: the clock, shared documents and locks.

The rules are ``resumable/coordination``'s: a step reads a shared document as
committed and queues pure update functions, applied again at its commit; a
lock is requested in the commit that suspends the session and granted in
FIFO order, each grant with the next fencing token, and a new run of the
holder gets a new, larger one; locks are taken in ascending name order; a
finished session lets go of everything it held. Time moves only when a test
skips it: ``run_clock_to`` fires what falls due on the way, in order.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from resumable._internal import serialization
from resumable._internal.redaction import Redactor
from resumable.agent import Agent
from resumable.coordination.children import Spawns
from resumable.coordination.shared import CoordinationError, SharedUpdateError, check_name
from resumable.errors import InvalidArgumentError
from resumable.testing import _wakes
from resumable.testing._values import stored
from resumable.waits import Wake

if TYPE_CHECKING:
    from resumable.testing._session import TestSession

Update = Callable[[Any], Any]


@dataclass
class Grant:
    token: int
    epoch: int | None = None  # the run of the holder that claimed the token


@dataclass
class LockRow:
    permits: int  # fixed by the first request
    fence: int = 0  # the last token handed out
    holders: dict[uuid.UUID, Grant] = field(default_factory=dict)
    waiting: list[uuid.UUID] = field(default_factory=list)


class World:
    """The clock, shared documents and locks of one test's sessions."""

    def __init__(self, now: datetime, redact_keys: tuple[str, ...]) -> None:
        if not isinstance(now, datetime) or now.tzinfo is None:
            raise InvalidArgumentError("now must be a timezone-aware datetime")
        self.now = now
        self.redactor = Redactor(redact_keys)
        #: Agents whose children run here, by name.
        self.agents: dict[str, Agent] = {}
        self.max_steps = 1000
        self.sessions: dict[uuid.UUID, TestSession] = {}
        self.shared: dict[str, Any] = {}
        self.locks: dict[str, LockRow] = {}
        self._deliveries = 0

    def delivery_id(self) -> int:
        self._deliveries += 1
        return self._deliveries

    def counted(self, ran: int) -> int:
        """One more step (or wake-up) of a drive, refused past ``max_steps``."""
        if ran >= self.max_steps:
            raise AssertionError(
                f"{ran} steps and wake-ups went by without the session waiting or finishing: "
                "a loop, or a poll check that never answers? (TestSession(max_steps=...))"
            )
        return ran + 1

    def runnable(self) -> TestSession | None:
        return next((s for s in self.sessions.values() if s._runnable()), None)

    def next_due(self) -> datetime | None:
        """When the next timer, poll check, deadline or retry falls due."""
        times = [s._wake_at for s in self.sessions.values() if s._wake_at is not None]
        return max(min(times), self.now) if times else None

    def run_clock_to(self, target: datetime) -> None:
        """Time passes up to `target`: what falls due on the way fires, in order."""
        while True:
            due = [s for s in self.sessions.values() if s._wake_at and s._wake_at <= target]
            if not due:
                break
            first = min(due, key=lambda s: s._wake_at or target)
            self.now = max(self.now, first._wake_at or target)
            _wakes.fire_due(first)
        self.now = max(self.now, target)

    # -- shared documents -----------------------------------------------------------------

    def shared_after(self, pending: dict[str, list[Update]]) -> dict[str, Any]:
        """Each updated document as the commit leaves it (the functions applied
        again, to the value committed now)."""
        updated = {}
        for name in sorted(pending):
            value = copy.deepcopy(self.shared.get(name))
            try:
                for fn in pending[name]:
                    value = fn(value)
                updated[name] = stored(value, f"shared document {name!r}")
            except Exception as exc:
                raise SharedUpdateError(
                    f"updating shared document {name!r} at commit failed: {exc!r}"
                ) from exc
        return updated

    # -- locks ----------------------------------------------------------------------------

    def check_locks(
        self, session_id: uuid.UUID, releases: list[str], request: dict[str, Any] | None
    ) -> None:
        """What a commit's lock writes refuse (then the step fails, nothing commits)."""
        held = {name for name, row in self.locks.items() if session_id in row.holders}
        for name in releases:
            if name not in held:
                raise CoordinationError(f"this session does not hold lock {name!r}")
        if request is not None:
            after = sorted(name for name in held - set(releases) if name >= request["name"])
            if after:
                raise CoordinationError(
                    f"cannot acquire lock {request['name']!r} while holding {after[0]!r}: "
                    "acquire locks in ascending name order (release first, or take them in order)"
                )

    def fence(self, session_id: uuid.UUID, epoch: int, name: str) -> int:
        check_name(name, "lock")
        row = self.locks.get(name)
        grant = row.holders.get(session_id) if row is not None else None
        if row is None or grant is None:
            raise CoordinationError(f"this session does not hold lock {name!r}")
        if grant.epoch not in (None, epoch):  # a new run of the holder: a larger token
            row.fence += 1
            grant.token = row.fence
        grant.epoch = epoch
        return grant.token

    def hold(self, session_id: uuid.UUID, name: str, token: int) -> None:
        """A test's given: the session holds `name` with fencing token `token`."""
        self.locks[check_name(name, "lock")] = LockRow(1, token, {session_id: Grant(token)})

    def release(self, session_id: uuid.UUID, name: str) -> None:
        self.locks[name].holders.pop(session_id, None)

    def request(self, session_id: uuid.UUID, name: str, permits: int) -> None:
        self.locks.setdefault(name, LockRow(permits)).waiting.append(session_id)

    def grant(self, name: str) -> None:
        """Free permits go to the oldest requests still waiting for this lock."""
        row = self.locks.get(name)
        if row is None:
            return
        row.waiting = [i for i in row.waiting if _wakes.waits_for_lock(self.sessions[i], name)]
        while row.waiting and len(row.holders) < row.permits:
            session = self.sessions[row.waiting.pop(0)]
            row.fence += 1
            row.holders[session.session_id] = Grant(row.fence)
            _wakes.wake(session, Wake("lock", name, {"name": name, "token": row.fence}))

    def leave_queues(self, session_id: uuid.UUID) -> None:
        for row in self.locks.values():
            if session_id in row.waiting:
                row.waiting.remove(session_id)

    def let_go(self, session_id: uuid.UUID) -> None:
        """A finished session lets go of every lock it held or waited for."""
        self.leave_queues(session_id)
        for name, row in list(self.locks.items()):
            if row.holders.pop(session_id, None) is not None:
                self.grant(name)


class SharedDocuments:
    """``SharedDocuments`` in memory (``coordination/shared.py``'s rules)."""

    def __init__(self, world: World) -> None:
        self._world = world
        #: Update functions per document, in call order; applied at commit.
        self.pending: dict[str, list[Update]] = {}

    def get(self, name: str, default: Any = None) -> Any:
        check_name(name)
        value = copy.deepcopy(self._world.shared.get(name))
        for fn in self.pending.get(name, ()):
            value = fn(value)
        return default if value is None else value

    def update(self, name: str, fn: Update) -> Any:
        check_name(name)
        if not callable(fn):
            raise CoordinationError("update_shared needs a function of the current value")
        preview = fn(self.get(name))  # fails inside the step, where errors belong
        serialization.dumps(preview, f"shared document {name!r}")
        self.pending.setdefault(name, []).append(fn)
        return preview


class Coordination:
    """A ``StepCoordinator`` in memory, for one run of one step; the session's
    commit applies what it gathered."""

    def __init__(self, world: World, session_id: uuid.UUID, epoch: int, seq: int) -> None:
        self._world, self._session_id, self._epoch = world, session_id, epoch
        self.shared = SharedDocuments(world)
        # The worker's own: the same checks, the same child ids.
        self.spawns = Spawns(session_id, seq)
        #: Locks this step releases at its commit.
        self.releases: list[str] = []

    def fence(self, name: str) -> int:
        return self._world.fence(self._session_id, self._epoch, name)

    def release(self, name: str) -> None:
        check_name(name, "lock")
        if name not in self.releases:
            self.releases.append(name)
