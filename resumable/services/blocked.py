"""The operator's way out of a ``blocked`` session: resume, accept, fail.

A session is blocked when replay diverged from its record (see
``resumable/queue/parking.py``). Shared by the command line and the HTTP API;
each action is an audit event on the session with who and why, and an action
on a session that is not blocked is refused and changes nothing.

- **resume**: after deploying code that matches the record again; the session
  runs its step again (and is blocked again if it still diverges).
- **accept**: the new behaviour is right; the recorded calls of the diverged
  step from the divergence point on are superseded (kept and audited, no longer
  replayed), and the step runs with the calls it now makes (also when it now
  makes fewer calls than recorded: ``tool_calls_missing``). Their effects stay
  in the outside world: ``preview_accept`` says which calls run again (with
  their new arguments and keys) and which recorded effects stay, and an
  accept that makes a call again is refused (``ConfirmationRequiredError``)
  unless its ``confirm`` names every superseded call by idempotency key.
- **fail**: the session fails as after a permanent error: its saga runs (only
  now), then it is dead-lettered.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import psycopg

from resumable._internal import call_keys, serialization
from resumable._internal.call_keys import args_hash, idempotency_key
from resumable.broker.messages import enqueue_after_commit
from resumable.errors import (
    ConfirmationRequiredError,
    NotSerializableError,
    SessionNotFoundError,
    SessionStateError,
)
from resumable.models import blocked_queries, session_queries
from resumable.models.blocked_queries import RecordedCall
from resumable.models.database import Database
from resumable.models.status import ToolCallStatus
from resumable.schemas import AcceptPreview, ArgumentChange, NewCall, SupersededEffect
from resumable.settings import Settings

if TYPE_CHECKING:
    import dramatiq

logger = logging.getLogger(__name__)

Action = Literal["resume", "accept", "fail"]

#: The blocks an accept takes: the step's new calls are the new behaviour.
ACCEPTABLE = ("tool_call_diverged", "tool_calls_missing")
#: Argument changes listed per call; a recorded result is cut to this many characters.
MAX_CHANGES = 50
MAX_RESULT_CHARS = 200
_MAX_VALUE_CHARS = 80


@dataclass(frozen=True)
class BlockedOutcome:
    """What an operator's action did."""

    session_id: uuid.UUID
    action: Action
    status: str
    blocked: dict[str, Any]
    superseded: list[dict[str, Any]]


class BlockedSessions:
    def __init__(self, settings: Settings, db: Database, broker: dramatiq.Broker) -> None:
        self.settings = settings
        self.db = db
        self.broker = broker

    def reason(self, session_id: uuid.UUID) -> dict[str, Any]:
        """Why the session is blocked; refused when it is not."""
        with self.db.connection() as conn:
            row = blocked_queries.blocked_reason(conn, session_id)
        if row is None:
            raise SessionNotFoundError(f"no session {session_id}")
        if row.status != "blocked":
            raise SessionStateError(f"session {session_id} is {row.status}, not blocked")
        return row.blocked_reason or {}

    def resume(self, session_id: uuid.UUID, *, actor: str, reason: str | None) -> BlockedOutcome:
        blocked = self.reason(session_id)
        return self._reopen(session_id, "resume", "blocked_resumed", blocked, [], actor, reason)

    def preview_accept(self, session_id: uuid.UUID) -> AcceptPreview:
        """What `accept` would do, changing nothing: the recorded calls it
        supersedes (their effects stay), the calls that run again with their
        new arguments and keys, and what to pass as its `confirm`.

        The key of the call that runs again is derived as the worker derives
        it (session, step, position, tool and the canonical arguments), so it
        is known in advance when the block recorded the new arguments whole;
        when some were redacted (a secret-looking key) it is not: the key is
        derived from the unredacted values, which are stored nowhere, so the
        preview says "a new key". Either way it is the key the step's call
        gets only if the step asks for the same call when it runs again.
        Refused, as `accept` is, for a session that is not blocked by a
        tool-call divergence."""
        with self.db.connection() as conn:
            _, preview = self._preview(conn, session_id, lock=False)
        return preview

    def accept(
        self,
        session_id: uuid.UUID,
        *,
        actor: str,
        reason: str | None,
        confirm: Iterable[str] | None = None,
    ) -> BlockedOutcome:
        """Supersede the diverged step's recorded calls and run it again.

        `confirm`: the idempotency keys of the recorded calls it supersedes,
        all of them and no other (``preview_accept().confirm``). Required when
        the accept makes a call again (``tool_call_diverged``): without it, or
        with other keys, ``ConfirmationRequiredError`` (carrying the preview)
        and nothing changes. Optional for ``tool_calls_missing`` (nothing
        runs again), but checked when given. Checked against the record in
        the transaction that supersedes it, with the session's row locked, so
        a confirmation names exactly what is superseded."""
        confirmed = None if confirm is None else _confirmation(confirm)
        with self.db.connection() as conn, conn.transaction():
            blocked, preview = self._preview(conn, session_id, lock=True)
            _check_confirmation(preview, confirmed)
            calls = blocked_queries.supersede_calls(
                conn,
                session_id,
                actor=actor,
                step_seq=blocked["step_seq"],
                call_index=blocked["call_index"],
            )
            superseded = [asdict(call) for call in calls]
            outcome = self._reopen(
                session_id, "accept", "divergence_accepted", blocked, superseded, actor, reason,
                conn=conn,
            )  # fmt: skip
        self._enqueue(session_id)
        return outcome

    def _preview(
        self, conn: psycopg.Connection[Any], session_id: uuid.UUID, *, lock: bool
    ) -> tuple[dict[str, Any], AcceptPreview]:
        row = blocked_queries.blocked_reason(conn, session_id, lock=lock)
        if row is None:
            raise SessionNotFoundError(f"no session {session_id}")
        if row.status != "blocked":
            raise SessionStateError(f"session {session_id} is {row.status}, not blocked")
        blocked = row.blocked_reason or {}
        if blocked.get("kind") not in ACCEPTABLE:
            raise SessionStateError(
                f"session {session_id} is blocked by a {blocked.get('kind', 'divergence')}: "
                "there is no new behaviour to accept; deploy the code it needs and resume "
                "it, or fail it"
            )
        recorded = blocked_queries.recorded_from(
            conn, session_id, step_seq=blocked["step_seq"], call_index=blocked["call_index"]
        )
        return blocked, accept_preview(session_id, blocked, recorded)

    def fail(self, session_id: uuid.UUID, *, actor: str, reason: str | None) -> BlockedOutcome:
        blocked = self.reason(session_id)
        error = {
            "code": "replay_diverged",
            "type": "ReplayDivergedError",
            "message": f"failed by {actor} while blocked: {blocked.get('message', '')}"
            + (f" ({reason})" if reason else ""),
            "step": blocked.get("step"),
            "blocked": blocked,
        }
        with self.db.connection() as conn:
            status = blocked_queries.fail(
                conn, session_id, actor=actor, reason=reason, blocked=blocked, error=error
            )
        if status is None:
            raise SessionStateError(f"session {session_id} is no longer blocked")
        self._enqueue(session_id)
        return BlockedOutcome(session_id, "fail", status, blocked, [])

    def _reopen(
        self,
        session_id: uuid.UUID,
        action: Action,
        event: str,
        blocked: dict[str, Any],
        superseded: list[dict[str, Any]],
        actor: str,
        reason: str | None,
        conn: psycopg.Connection[Any] | None = None,
    ) -> BlockedOutcome:
        def resume(on: psycopg.Connection[Any]) -> str | None:
            return blocked_queries.resume(
                on,
                session_id,
                event=event,
                actor=actor,
                reason=reason,
                blocked=blocked,
                superseded=superseded,
            )

        if conn is None:
            with self.db.connection() as own:
                status = resume(own)
        else:
            status = resume(conn)
        if status is None:
            raise SessionStateError(f"session {session_id} is no longer blocked")
        if conn is None:
            self._enqueue(session_id)
        return BlockedOutcome(session_id, action, status, blocked, superseded)

    def _enqueue(self, session_id: uuid.UUID) -> None:
        with self.db.connection() as conn:
            routes = session_queries.routes_of(conn, [session_id])
        enqueue_after_commit(self.broker, self.settings, routes, why="blocked session released")


# -- the preview ------------------------------------------------------------------------


def accept_preview(
    session_id: uuid.UUID, blocked: dict[str, Any], recorded: list[RecordedCall]
) -> AcceptPreview:
    """The preview of accepting `blocked` (the session's reason), given the
    live recorded calls it would supersede."""
    kind = blocked["kind"]
    step = str(blocked.get("step") or "")
    step_seq = int(blocked["step_seq"])
    at = int(blocked["call_index"])
    superseded = [_effect(call) for call in recorded]
    new_calls: list[NewCall] = []
    requested = blocked.get("requested")
    if kind == "tool_call_diverged" and isinstance(requested, dict):
        before = blocked.get("recorded") or {}
        new_calls.append(
            NewCall(
                call_index=at,
                tool=str(requested.get("tool")),
                request=requested.get("request"),
                idempotency_key=_new_key(session_id, step_seq, step, at, requested),
                replaces=str(before.get("idempotency_key")),
                changes=list(_changes(before.get("request"), requested.get("request"))),
            )
        )
    return AcceptPreview(
        session_id=session_id,
        kind=kind,
        step=step,
        seq=step_seq,
        call_index=at,
        new_calls=new_calls,
        superseded=superseded,
        confirmation_required=bool(new_calls and superseded),
        confirm=[effect.idempotency_key for effect in superseded],
        summary=_summary(blocked, new_calls, superseded),
    )


def _effect(call: RecordedCall) -> SupersededEffect:
    outcome = call.error if call.status == ToolCallStatus.FAILED and call.error else call.response
    return SupersededEffect(
        idempotency_key=call.idempotency_key,
        seq=call.step_seq,
        step=call.step,
        call_index=call.call_index,
        tool=call.tool,
        status=ToolCallStatus(call.status),
        request=call.request,
        result=None
        if outcome is None
        else _cut(call_keys.canonical_json(outcome), MAX_RESULT_CHARS),
        compensation=call.compensation,
    )


def _new_key(
    session_id: uuid.UUID, step_seq: int, step: str, call_index: int, requested: dict[str, Any]
) -> str | None:
    """The key the new call gets, when the block recorded its arguments whole
    (their hash is the hash of the unredacted arguments); None otherwise."""
    request = requested.get("request")
    if not isinstance(request, dict):
        return None
    try:
        canonical = serialization.canonical(request)
    except NotSerializableError:  # a stored value that no longer encodes: unknown
        return None
    if args_hash(canonical) != requested.get("args_hash"):
        return None  # some of its arguments were recorded redacted
    return idempotency_key(
        session_id, step_seq, step, call_index, str(requested["tool"]), canonical
    )


def _changes(recorded: Any, requested: Any) -> Iterator[ArgumentChange]:
    """How the arguments differ (``call_keys.argument_changes``), at most MAX_CHANGES."""
    found = call_keys.argument_changes(recorded, requested)
    for count, (path, change, before, after) in enumerate(found):
        if count == MAX_CHANGES:
            return
        yield ArgumentChange(path=path, change=change, recorded=before, requested=after)


def _summary(
    blocked: dict[str, Any], new_calls: list[NewCall], superseded: list[SupersededEffect]
) -> list[str]:
    lines: list[str] = []
    before = blocked.get("recorded") or {}
    for call in new_calls:
        where = f"call `{call.tool}` #{call.call_index}"
        if before.get("tool") != call.tool:
            lines.append(
                f"call #{call.call_index} of step '{blocked.get('step')}' is now "
                f"`{call.tool}`, recorded as `{before.get('tool')}`"
            )
        for change in call.changes:
            if change.change == "changed":
                lines.append(
                    f"argument `{change.path}` changed from {_shown(change.recorded)} to "
                    f"{_shown(change.requested)} in {where}"
                )
            elif change.change == "added":
                lines.append(
                    f"argument `{change.path}` added ({_shown(change.requested)}) in {where}"
                )
            else:
                lines.append(
                    f"argument `{change.path}` removed (was {_shown(change.recorded)}) in {where}"
                )
        if not call.changes and before.get("tool") == call.tool:
            lines.append(f"{where} differs from the record only in redacted arguments")
        key = (
            f"under the new key {call.idempotency_key}"
            if call.idempotency_key
            else "under a new key (derived from arguments recorded redacted, so known only "
            "when the step runs)"
        )
        lines.append(f"{where} runs again with its new arguments, {key}")
    first = blocked.get("call_index")
    for effect in superseded:
        name = f"recorded call `{effect.tool}` #{effect.call_index}"
        outcome = f"{effect.status.value}, key {effect.idempotency_key}"
        if new_calls and effect.call_index != first:
            lines.append(
                f"{name} ({outcome}) is superseded: its effect stays; if the step asks for "
                "it again with the same arguments it is made again under that key"
            )
        elif new_calls:
            lines.append(f"{name} ({outcome}) stays in effect: accepting does not undo it")
        else:
            lines.append(f"{name} ({outcome}) is superseded: nothing replaces it, its effect stays")
    return lines


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else call_keys.canonical_json(value)
    return f"`{_cut(text, _MAX_VALUE_CHARS)}`"


# -- the confirmation ---------------------------------------------------------------------


def _confirmation(confirm: Iterable[str]) -> frozenset[str]:
    if isinstance(confirm, str):  # a lone key would otherwise be read as its characters
        return frozenset([confirm])
    return frozenset(str(key) for key in confirm)


def _check_confirmation(preview: AcceptPreview, confirmed: frozenset[str] | None) -> None:
    """Refuse an accept whose confirmation does not name exactly the calls it
    supersedes (none given: refused only when a call runs again)."""
    expected = frozenset(preview.confirm)
    if confirmed is None and not preview.confirmation_required:
        return
    if confirmed == expected:
        return
    calls = ", ".join(
        f"`{effect.tool}` #{effect.call_index} ({effect.idempotency_key})"
        for effect in preview.superseded
    )
    if confirmed is None:
        again = ", ".join(f"`{call.tool}` #{call.call_index}" for call in preview.new_calls)
        message = (
            f"accepting session {preview.session_id} makes {again} again while the recorded "
            f"effects of {calls} stay; nothing was changed: confirm by naming the recorded "
            "calls (their idempotency keys) it supersedes"
        )
    else:
        missing = sorted(expected - confirmed)
        extra = sorted(confirmed - expected)
        parts = ([f"not named: {', '.join(missing)}"] if missing else []) + (
            [f"not superseded by this accept: {', '.join(extra)}"] if extra else []
        )
        message = (
            f"the confirmation does not name exactly the recorded calls accepting session "
            f"{preview.session_id} supersedes ({calls or 'none'}): {'; '.join(parts)}; "
            "nothing was changed"
        )
    raise ConfirmationRequiredError(message, preview=preview)
