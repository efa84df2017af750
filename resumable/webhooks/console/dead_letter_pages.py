"""The dead-letter page and the bulk drain: a dry run first, then the real one.

The dry run is ``DeadLetters.drain(dry_run=True)``: the same rule book as the
real run (``dead_letters.refusal``), so the preview lists which dead letters
would be refused and why. The confirmation form carries the preview's filter
and the time it was made, so the real run never takes a dead letter that
failed after the operator looked.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from resumable.models import session_queries
from resumable.services.dead_letters import (
    COMPENSATIONS,
    MAX_RATE,
    MIN_RATE,
    Action,
    DeadLetterFilter,
    DeadLetters,
    DrainReport,
)
from resumable.webhooks.console import queries
from resumable.webhooks.console.drains import Progress
from resumable.webhooks.console.forms import Form, FormError, action_form
from resumable.webhooks.console.render import page
from resumable.webhooks.console.state import console_state, operator, web_state
from resumable.webhooks.database_calls import database_call
from resumable.webhooks.request_models import MAX_DRAIN_LIMIT
from resumable.webhooks.state import WebState

STATUSES = ("open", "retried", "discarded", "all")
PAGE_SIZE = 50
# The sessions a finished drain's page lists (with their status now).
TOUCHED_SHOWN = 500
# Groups of alike dead letters shown above the list, largest first.
GROUPS_SHOWN = 20
# Dead letters listed one by one in a dry run's result (all are counted).
PREVIEW_ROWS = 200
# The filter fields a drain carries from the list to the preview to the run.
FILTER_FIELDS = ("agent", "error_type", "step", "since", "until", "compensation", "ids")
# The most dead letters one selection names.
MAX_SELECTED = 1000


def _time(form: Form, name: str, label: str) -> datetime | None:
    text = form.text(name, label, max_length=64)
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
        # In UTC here, once: 0001-01-01T00:00+01:00 is before year 1 there,
        # which Python cannot hold (the preview page's time was a 500).
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except ValueError:
        raise FormError(f"{label} must be a time like 2026-11-26T08:30 (UTC)") from None
    except OverflowError:
        raise FormError(f"{label} must be a time from 0001-01-01 to 9999-12-31 (UTC)") from None


def _selection(form: Form) -> tuple[int, ...] | None:
    """The dead letters an operator ticked, as numbers ("12,15,19"); None: no selection."""
    text = form.text("ids", "The selection", max_length=MAX_SELECTED * 20)
    if text is None:
        return None
    try:
        numbers = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise FormError("The selection is dead letter numbers separated by commas") from None
    if not numbers or len(numbers) > MAX_SELECTED or not all(0 < n < 2**62 for n in numbers):
        raise FormError(f"Select from 1 to {MAX_SELECTED} dead letters")
    return numbers


def with_picks(request: Request) -> Form:
    """The query's fields, the ticked boxes (``pick``, one per dead letter)
    joined into one ``ids`` field as the filter reads it."""
    fields = dict(request.query_params)
    picks = request.query_params.getlist("pick")
    if picks:
        fields["ids"] = ",".join(picks)
    fields.pop("pick", None)
    return Form(fields)


def letter_filter(form: Form, *, status: str | None) -> DeadLetterFilter:
    compensation = form.text("compensation", "The compensation", max_length=20)
    if compensation is not None and compensation not in COMPENSATIONS:
        raise FormError(f"The compensation must be one of {', '.join(COMPENSATIONS)}")
    return DeadLetterFilter(
        status=status,
        ids=_selection(form),
        agent=form.text("agent", "The agent", max_length=200),
        error_type=form.text("error_type", "The error type", max_length=200),
        step=form.text("step", "The step", max_length=200),
        since=_time(form, "since", "Since"),
        until=_time(form, "until", "Until"),
        compensation=compensation,
    )


async def list_dead_letters(request: Request) -> Response:
    state = web_state(request)
    form = Form(dict(request.query_params))
    rows: list[Any] = []
    groups: list[Any] = []
    next_before = None
    error, code = None, 200
    try:
        status = form.text("status", "The status", max_length=20) or "open"
        if status not in STATUSES:
            raise FormError(f"The status must be one of {', '.join(STATUSES)}")
        where = letter_filter(form, status=None if status == "all" else status)
        before = form.integer("before", "before", 1, 2**62)
        letters = DeadLetters(state.settings, state.db, state.broker)
        rows, next_before = await database_call(
            lambda: letters.find(where, limit=PAGE_SIZE, before_id=before)
        )
        groups = await database_call(lambda: letters.groups(where, limit=GROUPS_SHOWN))
    except FormError as exc:
        error, code = exc.message, exc.status
    return page(
        request,
        "dead_letters.html",
        code,
        rows=rows,
        groups=groups,
        next_before=next_before,
        filters=form.fields,
        base={k: v for k, v in form.fields.items() if k != "before" and v},
        statuses=STATUSES,
        compensations=COMPENSATIONS,
        filter_fields=FILTER_FIELDS,
        max_limit=MAX_DRAIN_LIMIT,
        error=error,
    )


@dataclass(frozen=True)
class DrainRequest:
    action: Action
    reason: str | None
    limit: int
    rate: float | None
    where: DeadLetterFilter
    # The filter's fields as typed, to carry to the next form.
    fields: dict[str, str]


def drain_request(form: Form, *, cap_until: datetime | None = None) -> DrainRequest:
    """The drain a form asks for, validated as the API validates it."""
    typed = form.text("action", "The action", max_length=10)
    if typed not in ("retry", "discard"):
        raise FormError("The action must be retry or discard")
    action: Action = "retry" if typed == "retry" else "discard"
    reason = form.text("reason", "The reason")
    if action == "discard" and not reason:
        raise FormError("Discarding needs a reason")
    rate = form.number("rate", "The rate", MIN_RATE, MAX_RATE)
    where = letter_filter(form, status="open")
    # A selection drains what it names; a filter, 100 by default.
    limit = form.integer("limit", "The limit", 1, MAX_DRAIN_LIMIT) or len(where.ids or ()) or 100
    if cap_until is not None and (where.until is None or where.until > cap_until):
        where = DeadLetterFilter(**{**where.__dict__, "until": cap_until})
    fields = {k: form.raw(k) for k in FILTER_FIELDS if form.raw(k)}
    return DrainRequest(action, reason, limit, rate, where, fields)


def _run(
    state: WebState, request: DrainRequest, actor: str, dry_run: bool
) -> Callable[[Progress | None], DrainReport]:
    def run(progress: Progress | None = None) -> DrainReport:
        return DeadLetters(state.settings, state.db, state.broker).drain(
            request.action,
            request.where,
            actor=actor,
            reason=request.reason,
            dry_run=dry_run,
            limit=request.limit,
            rate=request.rate,
            progress=progress,
        )

    return run


async def preview_drain(request: Request) -> Response:
    """The dry run: what a drain with this filter would do, and what it would refuse."""
    state = web_state(request)
    form = with_picks(request)
    now = datetime.now(UTC)
    try:
        drain = drain_request(form, cap_until=now)
    except FormError as exc:
        return page(
            request, "drain_preview.html", exc.status, report=None, drain=None, error=exc.message
        )
    dry_run = _run(state, drain, operator(request).actor, True)
    report = await database_call(lambda: dry_run(None))
    shown = await database_call(queries.letters_by_id, state.db, report.matched[:PREVIEW_ROWS])
    return page(
        request,
        "drain_preview.html",
        report=report,
        letters=shown,
        drain=drain,
        until=drain.where.until.isoformat() if drain.where.until else now.isoformat(),
        filter_fields=FILTER_FIELDS,
    )


async def run_drain(request: Request) -> Response:
    console = console_state(request)
    form = await action_form(request)
    drain = drain_request(form)  # FormError: an error page, nothing drained
    if drain.where.until is None:
        raise FormError("Run a drain from its dry run (the confirmation carries its time)")
    actor = operator(request).actor
    description = ", ".join(f"{k}={v}" for k, v in drain.fields.items()) or "all open"
    job = console.drains.start(
        _run(console.web(), drain, actor, False),
        action=drain.action,
        actor=actor,
        description=description,
    )
    return RedirectResponse(f"/ui/drains/{job.id}", 303)


async def show_drain(request: Request) -> Response:
    job = console_state(request).drains.get(str(request.path_params["job_id"])[:100])
    if job is None:
        raise HTTPException(
            404,
            "no such drain on this web process (a drain's progress is kept by the process "
            "that runs it; its actions are in each session's audit log)",
        )
    touched: list[TouchedSession] = []
    if not job.running and job.report is not None:
        touched = await database_call(_touched, web_state(request), job.report)
    return page(
        request,
        "drain.html",
        job=job,
        touched=touched,
        failed_again=[t for t in touched if t.failed_again],
    )


@dataclass(frozen=True)
class TouchedSession:
    """A session a finished drain acted on (or refused), and where it is now."""

    dead_letter_id: int
    session_id: uuid.UUID
    outcome: str  # "retried", "discarded", or why it was refused
    status: str  # the session's status now

    @property
    def failed_again(self) -> bool:
        return self.outcome == "retried" and self.status == "failed"


def _touched(state: WebState, report: DrainReport) -> list[TouchedSession]:
    """The sessions of the drain's dead letters (the first TOUCHED_SHOWN), with
    their status now: a retried one that is `failed` again failed again."""
    ids = [*report.done, *report.failed][:TOUCHED_SHOWN]
    letters = {letter.id: letter for letter in queries.letters_by_id(state.db, ids)}
    with state.db.connection() as conn:
        now = session_queries.statuses(conn, [letter.session_id for letter in letters.values()])
    done = "retried" if report.action == "retry" else "discarded"
    return [
        TouchedSession(
            number,
            letters[number].session_id,
            done if number in report.done else str(report.failed.get(number, "")),
            now.get(letters[number].session_id, "gone"),
        )
        for number in ids
        if number in letters
    ]


routes = [
    Route("/ui/dead-letters", list_dead_letters, methods=["GET"]),
    Route("/ui/dead-letters/drain", preview_drain, methods=["GET"]),
    Route("/ui/dead-letters/drain", run_drain, methods=["POST"]),
    Route("/ui/drains/{job_id}", show_drain, methods=["GET"]),
]
