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
    limit = RateLimit("ten", requests=10, per=1)
    waits = [limiter.turn(limit, max_wait=0.5) for _ in range(8)]
    granted = [t for t in waits if t.granted]
    # 0, 0.1, ..., 0.5 s ahead: six turns within half a second; then none.
    assert len(granted) == 6
    for index, turn in enumerate(granted):
        assert turn.wait == pytest.approx(index * 0.1, abs=0.02)
    # Those that cannot wait so long are told when to come back: one after
    # the other from where the reserved turns end, ...
    refused = waits[6:]
    assert not any(t.granted for t in refused)
    assert [t.wait for t in refused] == pytest.approx([0.6, 0.7], abs=0.02)
    # ... and took no turn: the next one is still 0.6 s out.
    assert limiter.turn(limit, max_wait=1.0).wait == pytest.approx(0.6, abs=0.02)


def test_a_burst_goes_at_once_then_the_spacing_holds(limiter: RateLimiter) -> None:
    limit = RateLimit("bursty", requests=10, per=1, burst=3)
    waits = [limiter.turn(limit, max_wait=5).wait for _ in range(5)]
    assert waits[:3] == pytest.approx([0, 0, 0], abs=0.02)
    assert waits[3:] == pytest.approx([0.1, 0.2], abs=0.02)


def test_tokens_are_paid_after_the_call_and_delay_the_next(limiter: RateLimiter) -> None:
    limit = RateLimit("tokens", tokens=1000, per=1, cost=lambda r: r)
    assert limiter.turn(limit, max_wait=5).wait == pytest.approx(0, abs=0.02)
    limiter.charge(limit, 300)  # 0.3 s of the limit's second
    assert limiter.turn(limit, max_wait=5).wait == pytest.approx(0.3, abs=0.03)


def test_a_refusal_holds_every_caller_back_for_its_retry_after(
    limiter: RateLimiter, redis_client: redis.Redis, settings: Settings
) -> None:
    limit = RateLimit("held", requests=100, per=1)
    limiter.turn(limit, max_wait=1)
    turns = RateTurns(limiter)
    turns.refused(limit, RateLimited("429", retry_after=2))
    other = RateLimiter(redis_client, NAMESPACE, settings.queue_name)  # another worker
    assert other.turn(limit, max_wait=5).wait == pytest.approx(2.0, abs=0.05)
    # Too far for its wait in place: the caller's session lets its worker go.
    with pytest.raises(WaitForRate) as waited:
        RateTurns(other).wait(RateLimit("held", requests=100, per=1), max_wait=0.5)
    assert waited.value.limit == "held" and waited.value.seconds > 1.5
    [line] = usage(redis_client, NAMESPACE, settings.queue_name)
    assert (line.name, line.description, line.refused) == ("held", "100 requests per 1 s", 1)
    assert line.held_for == pytest.approx(2.0, abs=0.1)
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
    assert lines[0].queued == 1 and lines[0].next_free_in == pytest.approx(60, abs=0.5)
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
    limiter.charge(limit, 1e306)
    assert limiter.turn(limit, max_wait=5).wait == pytest.approx(2.0, abs=0.05)
    turns = RateTurns(limiter)
    turns.charge(RateLimit("bad", tokens=10, cost=lambda r: 1 / 0), "answer")  # logged, not raised
