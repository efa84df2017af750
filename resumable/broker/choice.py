"""Which broker carries the queue messages: Redis (the default, at
``REDIS_URL``) or RabbitMQ (``RESUMABLE_BROKER_URL=amqp://...``).

Both answer the same calls (``AnyBroker``): sending one message or many,
the priority lanes, a stopping worker's hand-back, the pulse its vital signs
watch, a ping, queue depths, and the reconciler's marker that says the
broker lost its messages. What carries them is the only difference the
rest of the code sees; PostgreSQL stays the truth either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from resumable._internal.reachability import (
    probe_rabbitmq,
    probe_redis,
    rabbitmq_location,
    redis_location,
)
from resumable.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Callable

    from resumable.broker.rabbitmq import RabbitBroker
    from resumable.broker.redis import WakingRedisBroker

#: A broker resumable's processes can use.
AnyBroker: TypeAlias = "WakingRedisBroker | RabbitBroker"


def build_broker(settings: Settings, redis_url: str) -> AnyBroker:
    """The broker the settings name: Redis at `redis_url`, unless
    RESUMABLE_BROKER_URL is an AMQP URL (then that Redis keeps only rate
    limits' turns)."""
    if settings.broker_url is not None:
        from resumable.broker.rabbitmq import build_rabbitmq_broker

        return build_rabbitmq_broker(settings, settings.broker_url, redis_url)
    from resumable.broker.redis import build_broker as build_redis_broker

    return build_redis_broker(settings, redis_url)


def broker_probe(settings: Settings, redis_url: str) -> tuple[str, str, Callable[[], None]]:
    """The broker's setting, its location and a probe that raises
    ServiceUnreachableError naming the setting (see ``reachability.py``)."""
    if settings.broker_url is not None:
        url = settings.broker_url
        return (
            "RESUMABLE_BROKER_URL",
            rabbitmq_location(url),
            lambda: probe_rabbitmq(url, "RESUMABLE_BROKER_URL"),
        )
    setting = "REDIS_URL" if settings.redis_url else "the embedded server"
    return setting, redis_location(redis_url), lambda: probe_redis(redis_url, setting)
