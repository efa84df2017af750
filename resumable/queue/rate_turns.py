"""A rate-limited call waits for its turn: in place when it is near, else by
letting the worker go.

A tool call made with ``rate_limit=`` asks the shared limiter
(``broker/rate_limiter.py``) for a turn before it runs. A turn within the
limit's ``wait_in_place`` (and within the step's time limit) is reserved, and
the step sleeps until it (a sync step on its thread, an async one at its
``await``, holding only its coroutine). A turn further off raises
``WaitForRate``: the step stops there, its earlier calls already recorded,
and the run ends with the session ``retrying`` until a little before its
place in the line of those that went away (half of what it may wait in
place early), with no attempt counted (``runner.py``). When it runs again, the
step replays its recorded calls and asks for a turn afresh. A limiter that
cannot be reached is waited out the same way, so a Redis restart costs a
session time, never an attempt; so is the rest of a wait when the worker
starts to stop (its session is handed on, not held).

A call that slept until its turn asks, before it goes, whether a provider's
refusal came meanwhile: a refusal voids the turns reserved before it, and
the call takes a new one.

``WaitForRate`` is a ``BaseException``: an agent's ``except Exception`` around
its call must not swallow it, as it must not swallow a lease lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from resumable.errors import RateLimited
from resumable.limits import RateLimit
from resumable.queue.database_threads import on_database_thread
from resumable.retries import MAX_SECONDS

if TYPE_CHECKING:
    from resumable.broker.rate_limiter import RateLimiter, Turn

logger = logging.getLogger(__name__)

#: How long a session waits when the limiter cannot be reached (seconds).
UNREACHABLE_WAIT_SECONDS = 5.0
#: How often a wait in place looks whether the worker is stopping (seconds).
_STOP_CHECK_SECONDS = 0.5
#: Refusals of one call in one run after which the refusal is a failure like
#: any other (an attempt counted): a provider that refuses for good (a spent
#: quota answered with 429) must not keep a session going round for ever.
MAX_REFUSALS_PER_CALL = 10


class WaitForRate(BaseException):
    """The call's turn is too far off to wait for in place: the session
    lets its worker go for `seconds`."""

    def __init__(self, limit: str, seconds: float, why: str) -> None:
        seconds = min(max(seconds, 0.001), MAX_SECONDS)
        super().__init__(f"waiting {seconds:.3f} s for a turn of rate limit {limit!r} ({why})")
        self.limit = limit
        self.seconds = seconds
        self.why = why


def rate_wait_in(exc: BaseException) -> WaitForRate | None:
    """The wait `exc` stands for: itself, or, from an ``asyncio.TaskGroup``
    whose calls all stopped for a turn (or were cancelled by the one that
    did), the longest of their waits; None for a failure."""
    if isinstance(exc, WaitForRate):
        return exc
    if not isinstance(exc, BaseExceptionGroup):
        return None
    waits, rest = exc.split(WaitForRate)
    if waits is None or (rest is not None and rest.split(asyncio.CancelledError)[1] is not None):
        return None
    leaves = [w for w in _leaves(waits) if isinstance(w, WaitForRate)]
    return max(leaves, key=lambda w: w.seconds, default=None)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


def held_back_for(limit: RateLimit, refusal: RateLimited) -> float:
    """How long a provider's refusal holds the limit back: its Retry-After,
    or one spacing (at least a second) when it gave none."""
    after = refusal.retry_after
    if after is not None and after > 0:
        return min(float(after), 86_400.0)
    return max(limit.interval, 1.0)


class RateTurns:
    """The turns of rate-limited calls in one worker process."""

    def __init__(
        self, limiter: RateLimiter | None, stopping: Callable[[], bool] = lambda: False
    ) -> None:
        self._limiter = limiter
        self._stopping = stopping

    def wait(self, limit: RateLimit, max_wait: float) -> float:
        """Block this thread until the call's turn (or raise ``WaitForRate``);
        the tokens the turn reserved."""
        while True:
            turn = self.ask(limit, max_wait)
            delay = self.delay_for(limit, turn, max_wait)
            reserved = turn.reserved if turn is not None else 0.0
            if delay <= 0:
                return reserved
            deadline = time.monotonic() + delay
            while (left := deadline - time.monotonic()) > 0:
                self._stop_check(limit, left)
                time.sleep(min(left, _STOP_CHECK_SECONDS))
            if self.held_for(limit) <= 0:
                return reserved

    async def await_turn(
        self, limit: RateLimit, max_wait: float, on_granted: Callable[[], None] = lambda: None
    ) -> float:
        """The same for an async call: the limiter asked on a database
        thread, the sleep an ``await``; `on_granted` is told when the call
        holds a turn (before it sleeps until it)."""
        while True:
            turn = await on_database_thread(self.ask, limit, max_wait)
            delay = self.delay_for(limit, turn, max_wait)
            reserved = turn.reserved if turn is not None else 0.0
            on_granted()
            if delay <= 0:
                return reserved
            deadline = time.monotonic() + delay
            while (left := deadline - time.monotonic()) > 0:
                self._stop_check(limit, left)
                await asyncio.sleep(min(left, _STOP_CHECK_SECONDS))
            if await on_database_thread(self.held_for, limit) <= 0:
                return reserved

    def ask(self, limit: RateLimit, max_wait: float) -> Turn | None:
        """The limiter's answer for `limit` (None: it could not be reached)."""
        if self._limiter is None:
            return None
        try:
            return self._limiter.turn(limit, max_wait)
        except redis.RedisError as exc:
            logger.warning(
                "rate limiter unreachable for %r (%s); the session waits %.0f s",
                limit.name,
                exc,
                UNREACHABLE_WAIT_SECONDS,
                extra={"action": "rate_limiter_unreachable"},
            )
            return None

    def held_for(self, limit: RateLimit) -> float:
        """Seconds a refusal still holds `limit` back (0 when the limiter
        cannot be reached: the reserved turn stands)."""
        if self._limiter is None:
            return 0.0
        try:
            return self._limiter.held_for(limit)
        except redis.RedisError:
            return 0.0

    def refused(self, limit: RateLimit, refusal: RateLimited) -> None:
        """The provider refused a call: the limit holds back for every worker."""
        if self._limiter is None:
            return
        seconds = held_back_for(limit, refusal)
        logger.info(
            "rate limit %r refused by the provider; holding back %.3f s",
            limit.name,
            seconds,
            extra={"action": "rate_limit_refused"},
        )
        try:
            self._limiter.hold_back(limit, seconds)
        except redis.RedisError as exc:
            raise WaitForRate(limit.name, seconds, f"limiter unreachable: {exc}") from refusal

    def charge(self, limit: RateLimit, result: object, reserved: float = 0.0) -> None:
        """The call returned and is recorded: its reported cost (tokens)
        replaces the `reserved` estimate. Never raises: the call is done."""
        if self._limiter is None or limit.tokens is None:
            return
        try:
            self._limiter.charge(limit, limit.call_cost(result), reserved)
        except Exception:  # the user's cost function, or Redis: the cost is lost, not the call
            logger.exception("could not charge rate limit %r for a call", limit.name)

    def _stop_check(self, limit: RateLimit, left: float) -> None:
        if self._stopping():
            # The worker is stopping: the session waits out the rest without it.
            raise WaitForRate(limit.name, left, "the worker is stopping")

    @staticmethod
    def delay_for(limit: RateLimit, turn: Turn | None, max_wait: float) -> float:
        """Seconds to sleep in place before the call (or ``WaitForRate``)."""
        if turn is None:
            raise WaitForRate(limit.name, UNREACHABLE_WAIT_SECONDS, "limiter unreachable")
        if not turn.granted:
            # Back a little before its place: its replay and claim take time,
            # and the calls that wait in place meanwhile keep the line busy.
            back = turn.wait - max_wait / 2
            raise WaitForRate(limit.name, back, "its turn is further off than it waits in place")
        return turn.wait
