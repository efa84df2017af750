"""Everything the session page shows, read in one place: the session, its
timeline, a window of checkpoints with the state at each and its diff to the
one before, its tool calls, what it waits for, its retries and dead letters.

States come from the history (``TimeTravel``), so they are redacted as stored;
the diff between two checkpoints is ``checkpoints.diff``, the RFC 6902 patch
the incremental strategy itself writes.
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from resumable.checkpoints import apply_patch, diff
from resumable.errors import ResumableError
from resumable.models import checkpoint_queries
from resumable.models.records import (
    AuditEventRecord,
    CallbackRecord,
    DeadLetterRecord,
    SessionRecord,
    ToolCallRecord,
)
from resumable.models.status import TERMINAL_STATUSES
from resumable.schemas import Session
from resumable.services.narration import doing_now
from resumable.services.time_travel import TimeTravel
from resumable.webhooks.console import queries
from resumable.webhooks.console.waterfall import SCALE, Bar, bars
from resumable.webhooks.state import WebState

# Checkpoints shown at once, and audit events.
CHECKPOINT_WINDOW = 20
EVENT_PAGE = 300
# Children listed on a parent's page (the sessions list pages through them all).
CHILDREN_SHOWN = 50
# The events of a claim, which record the code that ran the session.
RUN_EVENTS = ("run_started", "lease_recovered", "retry_started", "compensation_resumed")
# Events worth a second look on the Retries panel.
RETRY_EVENTS = ("retry", "failed", "dead_letter", "lease_recovered", "compensation")


@dataclass
class CheckpointView:
    seq: int
    step: str
    next_step: str | None
    kind: str
    bytes: int
    at: datetime
    # The RFC 6902 patch from the previous checkpoint's state (None: no previous one).
    diff: list[dict[str, Any]] | None = None
    # Why the state or diff cannot be shown (compacted, no reducer loaded).
    note: str | None = None


@dataclass
class CallbackView:
    url: str
    topic: str
    status: str


@dataclass
class WaitView:
    then: str | None
    since: str | None
    deadline: str | None
    timer_at: str | None
    poll: dict[str, Any] | None
    signals: list[str]
    callbacks: list[CallbackView]


@dataclass
class SessionView:
    row: SessionRecord
    events: list[AuditEventRecord]
    next_events_after: int | None
    checkpoints: list[CheckpointView]
    # The checkpoint whose whole state is shown, and that state (or why not).
    selected: int | None
    selected_state: Any
    selected_note: str | None
    earlier_at: int | None
    tool_calls: list[ToolCallRecord]
    wait: WaitView | None
    dead_letters: list[DeadLetterRecord]
    # What it is doing now, in one sentence (the page's header).
    now: str = ""
    children: list[Session] = field(default_factory=list)
    more_children: bool = False
    # The codes (agent fingerprints) its runs ran on, when more than one: an
    # unversioned agent whose live workers differ.
    codes: list[str] = field(default_factory=list)
    # Its steps, waits and tool calls on one time axis (SVG units of SCALE).
    bars: list[Bar] = field(default_factory=list)
    scale: int = SCALE
    retry_events: list[AuditEventRecord] = field(default_factory=list)

    @property
    def open_dead_letter(self) -> DeadLetterRecord | None:
        return next((d for d in self.dead_letters if d.status == "open"), None)

    @property
    def finished(self) -> bool:
        return self.row.status in TERMINAL_STATUSES

    @property
    def cancellable(self) -> bool:
        """Not finished, and not undoing what it did (``Client.cancel`` refuses that)."""
        return not self.finished and self.row.status != "compensating"


def _wait(state: WebState, row: SessionRecord) -> WaitView | None:
    if row.status != "suspended" or not row.wait:
        return None
    wait = row.wait
    tokens = [t for t in wait.get("callbacks", []) if isinstance(t, str)]
    rows: dict[str, CallbackRecord] = queries.callbacks(state.db, tokens)
    base = state.settings.public_url.rstrip("/")
    return WaitView(
        then=wait.get("then"),
        since=wait.get("since"),
        deadline=wait.get("deadline"),
        timer_at=wait.get("timer_at"),
        poll=wait.get("poll"),
        signals=[str(s) for s in wait.get("signals", [])],
        callbacks=[
            CallbackView(
                f"{base}/v1/callbacks/{token}",
                rows[token].topic if token in rows else "?",
                rows[token].status if token in rows else "unknown",
            )
            for token in tokens
        ],
    )


def _checkpoints(
    history: TimeTravel, row: SessionRecord, at: int | None
) -> tuple[list[CheckpointView], int | None, Any, str | None, int | None]:
    """A window of checkpoints ending at `at` (default: the latest), each with
    its diff to the previous one, and the whole state at `at`."""
    first_kept = row.compacted_to + 1
    last = row.step_seq if at is None else max(first_kept, min(at, row.step_seq))
    if last < first_kept:
        return [], None, None, None, None
    start = max(first_kept, last - CHECKPOINT_WINDOW + 1)
    folded = _window_in_one_read(history, row, start, first_kept, last)
    if folded is not None:
        return folded
    rows = history.checkpoints(row.id, after=start - 1, limit=last - start + 1)
    views: list[CheckpointView] = []
    # A session starts from an empty state; a compacted one from its oldest kept checkpoint.
    previous: Any = {}
    have_previous = start == 1
    if start > first_kept:
        with contextlib.suppress(ResumableError):
            previous, have_previous = history.state_at(row.id, start - 1).state, True
    selected_state: Any = None
    selected_note: str | None = None
    for item in rows:
        view = CheckpointView(
            int(item["seq"]),
            str(item["step"]),
            item["next_step"],
            str(item["kind"]),
            int(item["bytes"]),
            item["created_at"],
        )
        try:
            state = history.state_at(row.id, view.seq).state
        except ResumableError as exc:
            view.note = exc.message
            have_previous = False
        else:
            view.diff = diff(previous, state) if have_previous else None
            previous, have_previous = state, True
            if view.seq == last:
                selected_state = state
        if view.seq == last and view.note:
            selected_note = view.note
        views.append(view)
    selected = views[-1].seq if views else None
    earlier = start - 1 if start > first_kept else None
    return views, selected, selected_state, selected_note, earlier


def _window_in_one_read(
    history: TimeTravel, row: SessionRecord, start: int, first_kept: int, last: int
) -> tuple[list[CheckpointView], int | None, Any, str | None, int | None] | None:
    """The window of checkpoints `start`..`last` from one read of its chain,
    folded forward: a snapshot's diff computed, a delta's the patch its step
    wrote. None (the caller rebuilds each state on its own) when the chain
    holds event-sourced rows (they need the agent's reducer) or lacks a row."""
    with history.db.connection() as conn:
        chain = checkpoint_queries.chain_between(conn, row.id, max(start - 1, first_kept), last)
    if not chain or chain[0]["kind"] != "snapshot" or chain[-1]["seq"] != last:
        return None
    if any(item["kind"] not in ("snapshot", "delta") for item in chain):
        return None
    # A session starts from an empty state; a compacted one from its oldest kept checkpoint.
    state: Any = {}
    have_previous = start == 1
    views: list[CheckpointView] = []
    for item in chain:
        seq = int(item["seq"])
        # The fold changes `state` in place: what a change shows is copied
        # off it first, so a later step's patch cannot rewrite an earlier one.
        if item["kind"] == "snapshot":
            change = diff(state, item["state"]) if have_previous else None
            state = copy.deepcopy(item["state"])
        else:
            change = item["patch"] if have_previous else None
            state = apply_patch(state, copy.deepcopy(item["patch"]))
        have_previous = True
        if seq >= start:
            views.append(
                CheckpointView(
                    seq,
                    str(item["step"]),
                    item["next_step"],
                    str(item["kind"]),
                    int(item["bytes"]),
                    item["created_at"],
                    change,
                )
            )
    if [view.seq for view in views] != list(range(start, last + 1)):
        return None  # a gap in the history: the per-checkpoint path says which
    earlier = start - 1 if start > first_kept else None
    return views, last, state, None, earlier


def session_view(
    state: WebState, session_id: uuid.UUID, *, at: int | None, events_after: int
) -> SessionView:
    row = state.client.session_row(session_id)  # SessionNotFoundError for an unknown id
    events = queries.session_events(state.db, session_id, after=events_after, limit=EVENT_PAGE)
    history = TimeTravel(state.db, state.client.registry)
    checkpoints, selected, selected_state, selected_note, earlier = _checkpoints(history, row, at)
    view = SessionView(
        row=row,
        events=events,
        next_events_after=events[-1].id if len(events) == EVENT_PAGE else None,
        checkpoints=checkpoints,
        selected=selected,
        selected_state=selected_state,
        selected_note=selected_note,
        earlier_at=earlier,
        tool_calls=queries.tool_calls(state.db, session_id),
        wait=_wait(state, row),
        dead_letters=queries.dead_letters_of(state.db, session_id),
    )
    view.retry_events = [e for e in events if any(word in e.event_type for word in RETRY_EVENTS)]
    view.now = doing_now(
        Session.from_row(row, include_state=False),
        worker=row.lease_owner if row.status == "running" else None,
        retry_at=row.wake_at if row.status == "retrying" else None,
    )
    view.bars = bars(events, view.tool_calls, datetime.now(UTC))
    codes = [
        str(e.payload["code"])
        for e in events
        if e.event_type in RUN_EVENTS and isinstance(e.payload, dict) and e.payload.get("code")
    ]
    view.codes = list(dict.fromkeys(codes)) if len(set(codes)) > 1 else []
    children = state.client.page_sessions(parent=row.id, limit=CHILDREN_SHOWN)
    view.children, view.more_children = children.items, children.next_cursor is not None
    return view
