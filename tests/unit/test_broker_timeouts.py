"""Every Redis connection a process opens has a deadline (README, REDIS_URL):
5 s by default, so a stalled Redis fails a command instead of hanging it (a
callback's receiver enqueues while it holds the session row), and a timeout
given in the URL wins. The pool connects lazily: nothing here needs a server."""

from __future__ import annotations

import pytest

from resumable.broker.redis import REDIS_TIMEOUT_SECONDS, build_broker
from resumable.settings import Settings


def _timeouts(redis_url: str) -> tuple[object, object]:
    broker = build_broker(Settings(), redis_url)
    try:
        options = broker.client.connection_pool.connection_kwargs
        return options.get("socket_timeout"), options.get("socket_connect_timeout")
    finally:
        broker.close()


def test_commands_and_connects_time_out_after_5_s_by_default() -> None:
    assert REDIS_TIMEOUT_SECONDS == 5.0
    assert _timeouts("redis://127.0.0.1:6379/0") == (5.0, 5.0)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("socket_timeout=1.5", (1.5, 5.0)),
        ("socket_connect_timeout=0.25", (5.0, 0.25)),
        ("socket_timeout=30&socket_connect_timeout=2", (30.0, 2.0)),
    ],
)
def test_a_timeout_in_the_url_wins(query: str, expected: tuple[float, float]) -> None:
    assert _timeouts(f"redis://127.0.0.1:6379/0?{query}") == expected
