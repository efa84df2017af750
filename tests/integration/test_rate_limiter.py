"""The shared line of a rate limit in a real Redis (broker/rate_limiter.py):
turns spaced by the limit, reserved ahead for callers that wait in place,
refused beyond their wait; tokens paid after the call; a provider's refusal
holding everyone back; what the operators' view reads; an unreachable
limiter waited out rather than failed."""

from __future__ import annotations

import socket
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from resumable import RateLimit, RateLimited
from resumable.broker.rate_limiter import RateLimiter, usage
from resumable.queue.rate_turns import UNREACHABLE_WAIT_SECONDS, RateTurns, WaitForRate
from resumable.settings import Settings

NAMESPACE = "resumable"


@pytest.fixture
def limiter(redis_client: redis.Redis, settings: Settings) -> RateLimiter:
    return RateLimiter(redis_client, NAMESPACE, settings.queue_name)


def test_turns_are_reserved_one_spacing_apart_and_none_beyond_the_wait(
    limiter: RateLimiter,
) -> None:
    # A second apart (no ask here takes that long, however loaded the machine).
    limit = RateLimit("one", requests=1, per=1)
    turns = [limiter.turn(limit, max_wait=5) for _ in range(8)]
    first = turns[0].at
    # (Times on Redis's clock, whatever the time between two asks.)
    granted = [t for t in turns if t.granted]
    # 0, 1, ..., 5 s after the first: six turns within the five seconds; then none.
    assert len(granted) == 6
    assert turns[0].wait == 0
    assert [t.at - first for t in granted] == pytest.approx([float(i) for i in range(6)], abs=1e-5)
    # Those that cannot wait so long are told when to come back: one after
    # the other from where the reserved turns end, ...
    refused = turns[6:]
    assert not any(t.granted for t in refused)
    assert [t.at - first for t in refused] == pytest.approx([6.0, 7.0], abs=1e-5)
    # ... and took no turn: the next one is still 6 s after the first.
    assert limiter.turn(limit, max_wait=10).at - first == pytest.approx(6.0, abs=1e-5)


def test_a_burst_goes_at_once_then_the_spacing_holds(limiter: RateLimiter) -> None:
    limit = RateLimit("bursty", requests=3, per=3, burst=3)
    turns = [limiter.turn(limit, max_wait=5) for _ in range(5)]
    assert [t.wait for t in turns[:3]] == [0, 0, 0]
    assert [t.at - turns[0].at for t in turns[3:]] == pytest.approx([1.0, 2.0], abs=1e-5)


def test_tokens_are_reserved_at_the_start_and_corrected_by_the_report(
    limiter: RateLimiter,
) -> None:
    limit = RateLimit("tokens", tokens=1000, per=1, cost=lambda r: r, estimate=100)
    first = limiter.turn(limit, max_wait=5)  # reserves 100 tokens: 0.1 s of the line
    assert first.wait == 0 and first.reserved == 100
    second = limiter.turn(limit, max_wait=5)
    assert second.at - first.at == pytest.approx(0.1, abs=1e-5)
    limiter.charge(limit, 300, first.reserved)  # 200 more than reserved: 0.2 s owed
    third = limiter.turn(limit, max_wait=5)
    assert third.at - first.at == pytest.approx(0.4, abs=1e-5)
    limiter.charge(limit, 0, second.reserved)  # 100 fewer: given back
    assert limiter.turn(limit, max_wait=5).at - first.at == pytest.approx(0.4, abs=1e-5)


def test_without_an_estimate_the_average_report_is_reserved(limiter: RateLimiter) -> None:
    limit = RateLimit("average", tokens=1000, per=1, cost=lambda r: r)
    first = limiter.turn(limit, max_wait=5)
    assert first.reserved == 0  # nothing reported yet
    limiter.charge(limit, 50, first.reserved)
    assert limiter.turn(limit, max_wait=5).reserved == 50
    limiter.charge(limit, 100, 50)
    assert limiter.turn(limit, max_wait=5).reserved == pytest.approx(60)  # 0.8 x 50 + 0.2 x 100


def test_a_refusal_holds_every_caller_back_for_its_retry_after(
    limiter: RateLimiter, redis_client: redis.Redis, settings: Settings
) -> None:
    limit = RateLimit("held", requests=100, per=1)
    limiter.turn(limit, max_wait=1)
    turns = RateTurns(limiter)
    refused_at = _redis_now(limiter)
    turns.refused(limit, RateLimited("429", retry_after=2))
    other = RateLimiter(redis_client, NAMESPACE, settings.queue_name)  # another worker
    held = other.turn(limit, max_wait=5).at - refused_at
    assert 2.0 <= held <= 2.0 + _redis_now(limiter) - refused_at
    # Too far for its wait in place: the caller's session lets its worker go.
    with pytest.raises(WaitForRate) as waited:
        RateTurns(other).wait(RateLimit("held", requests=100, per=1), max_wait=0.5)
    assert waited.value.limit == "held" and waited.value.seconds > 1.5
    [line] = usage(redis_client, NAMESPACE, settings.queue_name)
    assert (line.name, line.description, line.refused) == ("held", "100 requests per 1 s", 1)
    assert 0 < line.held_for <= 2.0
    assert line.granted == 2  # the refusal's reservation is not among them


def test_the_view_lists_limits_in_use_and_forgets_expired_ones(
    limiter: RateLimiter, redis_client: redis.Redis, settings: Settings
) -> None:
    short = RateLimit("short", requests=1000, per=0.2)
    long = RateLimit("long", requests=1, per=30)
    limiter.turn(short, max_wait=1)
    limiter.turn(long, max_wait=1)
    limiter.turn(long, max_wait=60)
    lines = usage(redis_client, NAMESPACE, settings.queue_name)
    assert [line.name for line in lines] == ["long", "short"]  # the furthest next turn first
    assert lines[0].queued == 1 and 50 < lines[0].next_free_in <= 60
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # "short" expires a period after its last turn
        if [line.name for line in usage(redis_client, NAMESPACE, settings.queue_name)] == ["long"]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the idle limit was not forgotten")
    assert redis_client.smembers(f"{NAMESPACE}:{settings.queue_name}:rate-limits") == {b"long"}


def test_an_unreachable_limiter_is_waited_out_not_failed() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = redis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    turns = RateTurns(RateLimiter(dead, NAMESPACE, "q"))
    limit = RateLimit("llm", requests=1)
    with pytest.raises(WaitForRate) as waited:
        turns.wait(limit, max_wait=10)
    assert waited.value.seconds == UNREACHABLE_WAIT_SECONDS
    with pytest.raises(WaitForRate):
        turns.refused(limit, RateLimited("429"))
    turns.charge(RateLimit("t", tokens=5, cost=lambda r: 5), "answer")  # lost, not raised


def test_a_huge_cost_owes_one_period_at_most(limiter: RateLimiter) -> None:
    limit = RateLimit("huge", tokens=10, per=2, cost=lambda r: r)
    limiter.turn(limit, max_wait=1)
    charged_at = _redis_now(limiter)
    limiter.charge(limit, 1e306)
    owed = limiter.turn(limit, max_wait=5).at - charged_at
    assert 2.0 <= owed <= 2.0 + _redis_now(limiter) - charged_at
    turns = RateTurns(limiter)
    turns.charge(RateLimit("bad", tokens=10, cost=lambda r: 1 / 0), "answer")  # logged, not raised


def _redis_now(limiter: RateLimiter) -> float:
    """Redis's clock (the limiter's), in seconds since the epoch."""
    seconds, micros = limiter._client.time()
    return float(seconds) + float(micros) / 1e6
