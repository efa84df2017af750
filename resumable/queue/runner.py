"""The step loop: claim a session's lease, run its steps, commit each outcome.

One message means "run this session for a while". The runner takes the lease
(bumping the fencing epoch), then loops: run the step with no transaction
open, validate what it returned, and commit state, cursor, status, checkpoint
and audit events in one epoch-checked statement. It stops when the session
completes or fails, when the epoch check says another worker took over, or
after a budget of steps or seconds, when it hands the session back to the
queue so one long session cannot starve the others.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from typing import Any

import dramatiq

from resumable import serialization
from resumable.agent import Agent, AgentRegistry, Complete, Next
from resumable.context import StepContext
from resumable.errors import (
    InvalidStepResultError,
    LeaseLostError,
    NotSerializableError,
    ResumableError,
    UnknownAgentError,
    UnknownStepError,
)
from resumable.logs import session_context
from resumable.models import queries
from resumable.models.database import Database
from resumable.queue.broker import enqueue_session
from resumable.queue.lease import LeaseKeeper
from resumable.settings import Settings
from resumable.tools import ToolCalls

logger = logging.getLogger(__name__)


@dataclass
class Claim:
    """What the lease claim returned: everything needed to run the next step."""

    session_id: uuid.UUID
    agent: str
    cursor: str | None
    state: dict[str, Any]
    input: Any
    step_seq: int
    epoch: int


class RunOutcome:
    """How one run of the loop ended (returned for tests and logs)."""

    NOT_CLAIMED = "not_claimed"
    COMPLETED = "completed"
    FAILED = "failed"
    YIELDED = "yielded"
    LEASE_LOST = "lease_lost"


def error_record(exc: BaseException, step: str | None) -> dict[str, Any]:
    code = exc.code if isinstance(exc, ResumableError) else "step_failed"
    return {
        "code": code,
        "type": type(exc).__name__,
        "message": str(exc),
        "step": step,
        "traceback": "".join(traceback.format_exception(exc)),
    }


class SessionRunner:
    """Runs sessions for one worker process; thread-safe (one call per message)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        broker: dramatiq.Broker,
        registry: AgentRegistry,
        keeper: LeaseKeeper,
    ) -> None:
        self.settings = settings
        self.db = db
        self.broker = broker
        self.registry = registry
        self.keeper = keeper
        self._owner_prefix = f"{socket.gethostname()}:{os.getpid()}"

    def _owner(self) -> str:
        return f"{self._owner_prefix}:{threading.get_ident()}"

    def claim(self, session_id: uuid.UUID) -> Claim | None:
        with self.db.connection() as conn:
            row = conn.execute(
                queries.CLAIM_LEASE,
                {
                    "id": session_id,
                    "owner": self._owner(),
                    "lease_seconds": self.settings.lease_seconds,
                },
            ).fetchone()
        if row is None:
            return None
        return Claim(
            session_id=session_id,
            agent=str(row["agent"]),
            cursor=row["cursor"],  # type: ignore[arg-type]
            state=row["state"],  # type: ignore[arg-type]
            input=row["input"],
            step_seq=int(row["step_seq"]),  # type: ignore[call-overload]
            epoch=int(row["lease_epoch"]),  # type: ignore[call-overload]
        )

    def run(self, session_id: uuid.UUID | str) -> str:
        """Run the session until it finishes, waits, loses its lease or uses its budget."""
        session_id = uuid.UUID(str(session_id))
        with session_context(session_id):
            claim = self.claim(session_id)
            if claim is None:
                # Finished, owned by a live worker, or unknown: a duplicate message.
                logger.debug("session not claimable; message ignored", extra={"action": "skip"})
                return RunOutcome.NOT_CLAIMED
            self.keeper.hold(session_id, claim.epoch)
            try:
                return self._loop(claim)
            finally:
                self.keeper.drop(session_id)

    def _loop(self, claim: Claim) -> str:
        try:
            agent = self.registry.get(claim.agent)
            cursor = claim.cursor or agent.start_step
        except (UnknownAgentError, ResumableError) as exc:
            return self._fail(claim, exc, claim.cursor)

        started = time.monotonic()
        steps_run = 0
        state = claim.state
        seq = claim.step_seq
        while True:
            try:
                step_fn = agent.get_step(cursor)
            except UnknownStepError as exc:
                return self._fail(claim, exc, cursor)
            tools = ToolCalls(self.db, claim.session_id, claim.epoch, seq + 1, cursor)
            ctx = StepContext(
                session_id=claim.session_id,
                agent=agent.name,
                step=cursor,
                seq=seq + 1,
                input=claim.input,
                state=state,
                tools=tools,
                logger=logger,
            )
            step_started = time.monotonic()
            try:
                outcome = step_fn(ctx)
                next_step, result, done = self._interpret(agent, outcome)
                encoded_state = serialization.dumps(ctx.state, "state")
                encoded_result = serialization.dumps(result, "result") if done else "null"
            except LeaseLostError:
                logger.info(
                    "lease lost during step %s; stopping", cursor, extra={"action": "lease_lost"}
                )
                return RunOutcome.LEASE_LOST
            except Exception as exc:
                return self._fail(claim, exc, cursor)
            if not isinstance(ctx.state, dict):
                return self._fail(
                    claim, NotSerializableError("state must be a JSON object (a dict)"), cursor
                )

            steps_run += 1
            elapsed = time.monotonic() - started
            out_of_budget = (
                steps_run >= self.settings.max_steps_per_run
                or elapsed >= self.settings.max_seconds_per_run
            )
            events: list[dict[str, Any]] = [
                {
                    "step": cursor,
                    "type": "step_completed",
                    "payload": {
                        "next": next_step,
                        "ms": round((time.monotonic() - step_started) * 1000, 3),
                        "tool_calls": tools.executed,
                        "tool_calls_replayed": tools.replayed,
                    },
                }
            ]
            if done:
                status = "completed"
                events.append({"step": cursor, "type": "session_completed", "payload": {}})
            elif out_of_budget:
                status = "pending"
                events.append(
                    {"step": next_step, "type": "run_yielded", "payload": {"steps": steps_run}}
                )
            else:
                status = "running"

            committed = self._commit(
                claim,
                step=cursor,
                cursor=None if done else next_step,
                status=status,
                state=encoded_state,
                result=encoded_result,
                events=events,
            )
            if committed is None:
                logger.warning(
                    "step %s not committed: another worker owns the session",
                    cursor,
                    extra={"action": "lease_lost"},
                )
                return RunOutcome.LEASE_LOST
            seq = committed
            if done:
                logger.info(
                    "session completed after step %s", cursor, extra={"action": "completed"}
                )
                return RunOutcome.COMPLETED
            if out_of_budget:
                enqueue_session(self.broker, self.settings, claim.session_id)
                return RunOutcome.YIELDED
            assert next_step is not None
            cursor = next_step
            state = ctx.state

    @staticmethod
    def _interpret(agent: Agent, outcome: object) -> tuple[str | None, Any, bool]:
        """(next step, result, done) from what a step returned."""
        if isinstance(outcome, Complete):
            return None, outcome.result, True
        if isinstance(outcome, str):
            outcome = Next(outcome)
        if isinstance(outcome, Next):
            agent.get_step(outcome.step)  # raises UnknownStepError
            return outcome.step, None, False
        raise InvalidStepResultError(
            "a step must return a step name, Next(...) or Complete(...), "
            f"got {type(outcome).__name__}"
        )

    def _commit(
        self,
        claim: Claim,
        *,
        step: str,
        cursor: str | None,
        status: str,
        state: str,
        result: str,
        events: list[dict[str, Any]],
    ) -> int | None:
        with self.db.connection() as conn:
            row = conn.execute(
                queries.COMMIT_STEP,
                {
                    "id": claim.session_id,
                    "epoch": claim.epoch,
                    "state": state,
                    "cursor": cursor,
                    "status": status,
                    "result": result,
                    "release": status != "running",
                    "lease_seconds": self.settings.lease_seconds,
                    "step": step,
                    "events": serialization.dumps(events, "audit events"),
                },
                prepare=True,
            ).fetchone()
        return None if row is None else int(row["step_seq"])  # type: ignore[call-overload]

    def _fail(self, claim: Claim, exc: BaseException, step: str | None) -> str:
        record = error_record(exc, step)
        logger.error(
            "session failed at step %s: %s: %s",
            step,
            record["type"],
            record["message"],
            extra={"action": "session_failed", "error_code": record["code"]},
        )
        with self.db.connection() as conn:
            row = conn.execute(
                queries.FAIL_SESSION,
                {
                    "id": claim.session_id,
                    "epoch": claim.epoch,
                    "error": serialization.dumps(record, "error"),
                    "step": step,
                },
            ).fetchone()
        return RunOutcome.FAILED if row is not None else RunOutcome.LEASE_LOST
