"""The worker's hooks for tracing, metrics and log context, one call each.

The runner and tool calls call these; each does nothing measurable when
tracing and worker metrics are off (a check of two module globals), so the
step loop pays for what is configured only. The logic lives in
``resumable/tracing.py`` and ``worker_metrics.py``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from prometheus_client import Histogram

from resumable import tracing
from resumable._internal.logs import set_log_field
from resumable.models import wait_ops
from resumable.models.database import Database
from resumable.models.step_queries import ClaimedSession
from resumable.queue import worker_metrics
from resumable.queue.rate_turns import WaitForRate
from resumable.waits import Wake

logger = logging.getLogger(__name__)


def observe_run(db: Database, claim: ClaimedSession) -> contextlib.AbstractContextManager[Any]:
    """Around one run of a claimed session: its span (``resumable.resume``
    after a wait, else ``resumable.run``) and the resume latency."""
    wake = claim.wake or {}
    metrics = worker_metrics.served.metrics
    if metrics is not None and wake.get("delivery_id") is not None:
        if claim.waited is not None:  # measured by the claim, on the database's clock
            metrics.resume_latency.labels(claim.agent, str(wake["kind"])).observe(
                max(0.0, claim.waited)
            )
        else:  # woken by a release whose wake did not record when it was stored
            _observe_resume_latency(db, claim, metrics.resume_latency, wake["delivery_id"])
    if not tracing.enabled():
        return contextlib.nullcontext()
    attributes: dict[str, Any] = {
        "resumable.agent": claim.agent,
        "resumable.epoch": claim.epoch,
        "resumable.attempt": claim.attempts + 1,
        "resumable.status": str(claim.status),
    }
    if claim.cursor is not None:
        attributes["resumable.step"] = claim.cursor
    if wake.get("kind"):
        attributes["resumable.wake.kind"] = str(wake["kind"])
    name = "resumable.resume" if wake else "resumable.run"
    return tracing.session_span(db, claim.session_id, name, attributes)


def _observe_resume_latency(
    db: Database, claim: ClaimedSession, histogram: Histogram, delivery_id: int
) -> None:
    """Delivery stored → this run starting. A run after a crash mid-step sees
    the same wake again and is measured again (it did wait that long)."""
    try:
        with db.connection() as conn:
            age = wait_ops.delivery_age(conn, delivery_id)
    except Exception as exc:  # a metric never fails the run it measures
        logger.warning("resume latency not read: %s", exc, extra={"action": "metrics_degraded"})
        return
    if age is not None:
        histogram.labels(claim.agent, age.kind).observe(max(0.0, age.seconds))


_NOTHING = contextlib.nullcontext()


def observe_step(
    claim: ClaimedSession, step: str, seq: int, attempts: int, wake: Wake | None
) -> contextlib.AbstractContextManager[None]:
    """Around one step: names it on every log line, times it, spans it."""
    set_log_field("step", step)
    if worker_metrics.served.metrics is None and not tracing.enabled():
        return _NOTHING  # the step loop's common case: a shared no-op
    return _observed_step(claim, step, seq, attempts, wake)


@contextlib.contextmanager
def _observed_step(
    claim: ClaimedSession, step: str, seq: int, attempts: int, wake: Wake | None
) -> Iterator[None]:
    metrics = worker_metrics.served.metrics
    attributes: dict[str, Any] = {
        "resumable.session.id": str(claim.session_id),
        "resumable.agent": claim.agent,
        "resumable.step": step,
        "resumable.step.seq": seq,
        "resumable.attempt": attempts + 1,
        "resumable.epoch": claim.epoch,
    }
    if wake is not None:
        attributes["resumable.wake.kind"] = wake.kind
    started = time.perf_counter()
    outcome = "error"
    try:
        with tracing.child_span(f"resumable.step {step}", attributes):
            yield
        outcome = "ok"
    except WaitForRate:
        outcome = "rate_limited"  # not an error: it runs again at its turn
        raise
    finally:
        if metrics is not None:
            metrics.step_seconds.labels(claim.agent, step, outcome).observe(
                time.perf_counter() - started
            )


def observed_tool_call(
    tool: str, key: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """Call a tool's function inside its span, timed (the cache's replays are not calls)."""
    if worker_metrics.served.metrics is None and not tracing.enabled():
        return fn(*args, **kwargs)
    with _tool_observed(tool, key):
        return fn(*args, **kwargs)


async def observed_async_tool_call(
    tool: str, key: str, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
) -> Any:
    """``observed_tool_call`` for an async tool, awaited in its span."""
    if worker_metrics.served.metrics is None and not tracing.enabled():
        return await fn(*args, **kwargs)
    with _tool_observed(tool, key):
        return await fn(*args, **kwargs)


@contextlib.contextmanager
def _tool_observed(tool: str, key: str) -> Iterator[None]:
    """One tool call's span, duration and failure count (sync or async alike)."""
    metrics = worker_metrics.served.metrics
    started = time.perf_counter()
    outcome = "error"
    try:
        with tracing.child_span(
            f"resumable.tool {tool}",
            {"resumable.tool": tool, "resumable.tool.idempotency_key": key},
        ):
            yield
        outcome = "ok"
    except Exception as exc:
        if metrics is not None:
            metrics.tool_failures.labels(tool, type(exc).__name__).inc()
        raise
    finally:
        if metrics is not None:
            metrics.tool_seconds.labels(tool, outcome).observe(time.perf_counter() - started)


def observe_divergence(agent: str) -> None:
    if worker_metrics.served.metrics is not None:
        worker_metrics.served.metrics.divergences.labels(agent).inc()
