"""The demo's timeline: the session's audit log, in words, interleaved with
what the outside world and the demo itself saw.

The audit log (``Client.events``) is the product's own account: every run,
step commit, suspension, delivery and recovery. Some facts never reach it by
design: a duplicate delivery changes nothing, so it is answered and not
recorded; a SIGKILL leaves no trace but the lease that later expires. Those
come from the demo's own observations, marked with who saw them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from resumable.demo.shop import ShopEvent
from resumable.schemas import Event


@dataclass(frozen=True)
class Row:
    """One line of the timeline."""

    at: datetime
    source: str  # "session" for the audit log; else who observed it
    what: str
    detail: str = ""
    style: str = ""


def _worker(owner: object, workers: Mapping[int, str]) -> str:
    """'host:pid:thread' → 'worker 1 (pid 123)'."""
    parts = str(owner or "").split(":")
    pid = int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None
    name = workers.get(pid or -1, "a worker")
    return f"{name} (pid {pid})" if pid else name


def _waiting_for(wait: Mapping[str, Any]) -> str:
    parts: list[str] = []
    if wait.get("callbacks"):
        parts.append("a POST to its callback URL")
    parts += [f"signal {topic!r}" for topic in wait.get("signals", [])]
    if poll := wait.get("poll"):
        parts.append(f"poll {poll['check']} every {poll['every']:g} s")
    if wait.get("timer_at"):
        parts.append("a timer")
    return ", ".join(parts) or "a deadline"


def describe(event: Event, workers: Mapping[int, str]) -> Row:
    """The audit event as a timeline row."""
    p: dict[str, Any] = event.payload or {}
    kind, step, seq = event.type, event.step or "", event.seq
    what, detail, style = kind.replace("_", " "), "", ""
    if kind == "session_created":
        detail = f"agent {p.get('agent')}"
    elif kind == "run_started":
        what = f"{_worker(p.get('worker'), workers)} claims it"
        detail = f"lease epoch {p.get('epoch')}"
    elif kind == "lease_recovered":
        what = f"{_worker(p.get('worker'), workers)} recovers it from checkpoint {seq}"
        previous = _worker(p.get("previous_owner"), workers)
        detail = f"{previous}'s lease expired; epoch {p.get('epoch')}"
        style = "bold green"
    elif kind == "step_completed":
        what = f"step {step} committed (checkpoint {seq})"
        made, replayed = p.get("tool_calls", 0), p.get("tool_calls_replayed", 0)
        calls = [f"{made} tool call{'s' * (made != 1)} made"] if made else []
        calls += [f"{replayed} answered from the record, not repeated"] if replayed else []
        detail = ", ".join(calls + ([f"woken by {p['woken_by']}"] if p.get("woken_by") else []))
        style = "yellow" if replayed else ""
    elif kind == "suspended":
        what, detail = f"suspended before {step}: no worker held", _waiting_for(p)
        style = "cyan"
    elif kind == "callback_received":
        what, detail = "approval callback stored", f"webhook-id {p.get('dedupe_key')}"
    elif kind == "resumed":
        what = f"resumed by {p.get('by')}"
        style = "cyan"
    elif kind == "session_completed":
        what, style = "session completed", "bold green"
    return Row(event.at, "session", what, detail, style)


def from_shop(event: ShopEvent) -> Row:
    """What the outside world saw, dimmed: it is context, not the session's record."""
    return Row(event.at, event.source, event.what, event.detail, "dim")


def describe_all(events: Iterable[Event], workers: Mapping[int, str]) -> list[Row]:
    """Every event as a row; a claim made only to run a poll check says so
    (a check that finds nothing re-suspends without an event of its own)."""
    rows: list[Row] = []
    polling: str | None = None
    for event in events:
        row = describe(event, workers)
        if event.type == "suspended":
            polling = (event.payload.get("poll") or {}).get("check")
        elif event.type == "run_started" and polling:
            worker = _worker(event.payload.get("worker"), workers)
            row = Row(row.at, row.source, f"{worker} runs check {polling}", "", "dim")
        elif event.type in ("resumed", "step_completed"):
            polling = None
        rows.append(row)
    return rows


def render(rows: Iterable[Row], title: str) -> Table:
    """A table of `rows` in time order, times relative to the first."""
    ordered = sorted(rows, key=lambda r: r.at)
    table = Table(
        "time", "who", "what happened", title=title, title_justify="left", box=box.SIMPLE_HEAD
    )
    if not ordered:
        return table
    t0 = ordered[0].at
    for row in ordered:
        what = Text(row.what, style=row.style)
        if row.detail:
            what.append(f" · {row.detail}", style="dim")
        table.add_row(f"+{(row.at - t0).total_seconds():.2f}s", row.source, what)
    return table
