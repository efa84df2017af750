"""A rate-limited call waits for its turn: in place when it is near, else by
letting the worker go.

A tool call made with ``rate_limit=`` asks the shared limiter
(``broker/rate_limiter.py``) for a turn before it runs. A turn within the
limit's ``wait_in_place`` is reserved, and the step sleeps until it (a sync
step on its thread, an async one at its ``await``, holding only its
coroutine). A turn further off raises ``WaitForRate``: the step stops there,
its earlier calls already recorded, and the run ends with the session
``retrying`` at the moment the turn would come, with no attempt counted
(``runner.py``). When it runs again, the step replays its recorded calls and
asks for a turn afresh. A limiter that cannot be reached is waited out the
same way, so a Redis restart costs a session time, never an attempt.

``WaitForRate`` is a ``BaseException``: an agent's ``except Exception`` around
its call must not swallow it, as it must not swallow a lease lost.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import redis

from resumable.errors import RateLimited
from resumable.limits import RateLimit

if TYPE_CHECKING:
    from resumable.broker.rate_limiter import RateLimiter, Turn

logger = logging.getLogger(__name__)

#: How long a session waits when the limiter cannot be reached (seconds).
UNREACHABLE_WAIT_SECONDS = 5.0


class WaitForRate(BaseException):
    """The call's turn is too far off to wait for in place: the session
    lets its worker go for `seconds`."""

    def __init__(self, limit: str, seconds: float, why: str) -> None:
        super().__init__(f"waiting {seconds:.3f} s for a turn of rate limit {limit!r} ({why})")
        self.limit = limit
        self.seconds = seconds
        self.why = why


def held_back_for(limit: RateLimit, refusal: RateLimited) -> float:
    """How long a provider's refusal holds the limit back: its Retry-After,
    or one spacing (at least a second) when it gave none."""
    after = refusal.retry_after
    if after is not None and after > 0:
        return min(float(after), 86_400.0)
    return max(limit.interval, 1.0)


class RateTurns:
    """The turns of one step's rate-limited calls."""

    def __init__(self, limiter: RateLimiter | None) -> None:
        self._limiter = limiter

    def wait(self, limit: RateLimit) -> None:
        """Block this thread until the call's turn (or raise ``WaitForRate``)."""
        delay = self._reserve(limit)
        if delay > 0:
            time.sleep(delay)

    def ask(self, limit: RateLimit) -> Turn | None:
        """The limiter's answer for `limit` (None: it could not be reached)."""
        if self._limiter is None:
            return None
        try:
            return self._limiter.turn(limit, limit.wait_in_place)
        except redis.RedisError as exc:
            logger.warning(
                "rate limiter unreachable for %r (%s); the session waits %.0f s",
                limit.name,
                exc,
                UNREACHABLE_WAIT_SECONDS,
                extra={"action": "rate_limiter_unreachable"},
            )
            return None

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

    def charge(self, limit: RateLimit, result: object) -> None:
        """The call returned: its reported cost (tokens) is paid off by later calls."""
        if self._limiter is None or limit.tokens is None:
            return
        try:
            cost = limit.call_cost(result)
        except Exception:  # the user's cost function: a bad one must not fail the call
            logger.exception("cost function of rate limit %r failed", limit.name)
            return
        try:
            self._limiter.charge(limit, cost)
        except redis.RedisError as exc:  # the call is done: its cost is lost, not the call
            logger.warning("could not charge rate limit %r (%s)", limit.name, exc)

    def _reserve(self, limit: RateLimit) -> float:
        return self.delay_for(limit, self.ask(limit))

    @staticmethod
    def delay_for(limit: RateLimit, turn: Turn | None) -> float:
        """Seconds to sleep in place before the call (or ``WaitForRate``)."""
        if turn is None:
            raise WaitForRate(limit.name, UNREACHABLE_WAIT_SECONDS, "limiter unreachable")
        if not turn.granted:
            raise WaitForRate(
                limit.name, turn.wait, "its turn is further off than it waits in place"
            )
        return turn.wait
