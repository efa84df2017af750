"""Time travel: a session's checkpoints, its state after any step, forks,
and compaction of long histories.

The history holds redacted states (see ``_internal/redaction.py``): a state read back
from it, or a fork started from it, has ``"[REDACTED]"`` where secrets were;
a fork that needs them gets them back through its state patch.

A fork reuses the tool results recorded before its fork point, as done. If
the source's saga compensated those calls, their effects were undone in the
world, and the fork would go on as if they still held: it is refused unless
the caller says ``allow_compensated`` (and the fork's audit event says how
many such results it reused).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from resumable.agent import AgentRegistry
from resumable.broker.messages import enqueue_after_commit
from resumable.checkpoints import EventSourced, Reducer, rebuild
from resumable.errors import (
    CheckpointNotFoundError,
    MalformedCheckpointError,
    ReducerNotLoadedError,
    SessionNotFoundError,
    SessionStateError,
)
from resumable.models import checkpoint_queries, session_queries
from resumable.models.checkpoint_queries import CompensatedCall
from resumable.models.database import Database
from resumable.services.state_patch import apply_state_patch
from resumable.settings import Settings

if TYPE_CHECKING:
    import dramatiq

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PastState:
    seq: int
    step: str
    next_step: str | None
    state: dict[str, Any]
    rows_read: int


class TimeTravel:
    """Reads and rewrites history; `registry` supplies event-sourced agents' reducers."""

    def __init__(self, db: Database, registry: AgentRegistry | None = None) -> None:
        self.db = db
        self.registry = registry

    def checkpoints(
        self, session_id: uuid.UUID, *, after: int = 0, limit: int = 100
    ) -> list[dict[str, Any]]:
        self._agent_of(session_id)
        with self.db.connection() as conn:
            return checkpoint_queries.list_checkpoints(conn, session_id, after=after, limit=limit)

    def state_at(self, session_id: uuid.UUID, seq: int) -> PastState:
        """The state right after step `seq`, rebuilt from the nearest snapshot."""
        if isinstance(seq, bool) or not isinstance(seq, int):
            self._agent_of(session_id)  # an unknown session is a different error
            raise MalformedCheckpointError(
                f"a checkpoint is a step number (an integer), not {str(seq)[:80]!r}"
            )
        if not 0 <= seq < 2**31:
            self._agent_of(session_id)
            raise CheckpointNotFoundError(f"session {session_id} has no checkpoint {seq!r}")
        with self.db.connection() as conn:
            rows = checkpoint_queries.chain_to(conn, session_id, seq)
        if not rows or rows[-1]["seq"] != seq:
            self._agent_of(session_id)  # an unknown session is a different error
            raise CheckpointNotFoundError(
                f"session {session_id} has no checkpoint {seq} (compacted, or not reached)"
            )
        needs_reducer = any(row["kind"] == "events" for row in rows)
        reducer = self._reducer(self._agent_of(session_id)) if needs_reducer else None
        state = rebuild(rows, reducer)
        last = rows[-1]
        next_step = None if last["next_step"] is None else str(last["next_step"])
        return PastState(seq, str(last["step"]), next_step, state, len(rows))

    def fork(
        self,
        session_id: uuid.UUID,
        at: int,
        *,
        actor: str,
        state_patch: list[dict[str, Any]] | None = None,
        new_id: uuid.UUID | None = None,
        broker: dramatiq.Broker | None = None,
        settings: Settings | None = None,
        allow_compensated: bool = False,
    ) -> uuid.UUID:
        """A new session that starts from checkpoint `at` of this one (optionally
        patched) and goes on from the step that came next. The original is not
        touched; the fork keeps its history up to `at` and its tool results.
        SessionStateError if a reused result was compensated (unless
        `allow_compensated`), SessionExistsError if `new_id` is taken."""
        past = self.state_at(session_id, at)
        if past.next_step is None:
            raise SessionStateError(
                f"checkpoint {at} finished session {session_id}; fork from an earlier one"
            )
        compensated = self.compensated_before(session_id, at)
        if compensated and not allow_compensated:
            first = compensated[0]
            raise SessionStateError(
                f"session {session_id} compensated {len(compensated)} tool call(s) made up to "
                f"checkpoint {at} (first: {first.tool} in step {first.step}, undone by "
                f"{first.compensation}); a fork would treat their undone effects as done. "
                "Fork from an earlier checkpoint, or pass allow_compensated to fork anyway"
            )
        state = past.state
        if state_patch:
            state = apply_state_patch(state, state_patch)
        fork_id = new_id or uuid.uuid4()
        with self.db.connection() as conn:
            forked = checkpoint_queries.fork(  # SessionExistsError if `fork_id` is taken
                conn,
                fork_id,
                source=session_id,
                seq=at,
                cursor=past.next_step,
                state=state,
                rebase=bool(state_patch),
                actor=actor,
                patch=state_patch,
                compensated=len(compensated),
            )
        if forked is None:
            raise SessionNotFoundError(f"no session {session_id}")
        if broker is not None and settings is not None:
            enqueue_after_commit(broker, settings, [forked], why="session forked")
        return fork_id

    def compensated_before(self, session_id: uuid.UUID, at: int) -> list[CompensatedCall]:
        """The tool results up to checkpoint `at` whose effects the saga undid."""
        with self.db.connection() as conn:
            return checkpoint_queries.compensated_before(conn, session_id, at)

    def compact(self, session_id: uuid.UUID, keep: int) -> int:
        """Keep the last `keep` checkpoints; the oldest kept one becomes a
        snapshot first, so every remaining checkpoint stays loadable."""
        agent = self._agent_of(session_id)
        with self.db.connection() as conn, conn.transaction():
            step_seq = checkpoint_queries.lock_for_compaction(conn, session_id)
            if step_seq is None:
                return 0  # a worker is committing a step; try next time
            cutoff = step_seq - keep + 1
            if cutoff <= 1:
                return 0
            rows = checkpoint_queries.chain_to(conn, session_id, cutoff)
            if not rows or rows[-1]["seq"] != cutoff:
                return 0
            if rows[-1]["kind"] != "snapshot":
                needs_reducer = any(row["kind"] == "events" for row in rows)
                state = rebuild(rows, self._reducer(agent) if needs_reducer else None)
                checkpoint_queries.rebase_row(conn, session_id, cutoff, state)
            return checkpoint_queries.drop_before(conn, session_id, cutoff)

    def _agent_of(self, session_id: uuid.UUID) -> str:
        with self.db.connection() as conn:
            agent = session_queries.agent_of(conn, session_id)
        if agent is None:
            raise SessionNotFoundError(f"no session {session_id}")
        return agent

    def _reducer(self, agent: str) -> Reducer:
        if self.registry is None or agent not in self.registry:
            raise ReducerNotLoadedError(
                f"agent {agent!r} is event-sourced: its state between snapshots is its"
                " reducer folded over the events, and this process has not loaded it;"
                " load the agent's module (RESUMABLE_AGENTS, --agents, or a Client's"
                " registry=)"
            )
        strategy = self.registry.get(agent).checkpoints
        if not isinstance(strategy, EventSourced):
            raise ReducerNotLoadedError(
                f"agent {agent!r} as loaded here is not event-sourced, but its history"
                " holds events: load the code that recorded them"
            )
        return strategy.reducer
