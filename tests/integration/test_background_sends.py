"""The web's senders (``broker/background_sends.py``): what a route hands
one goes out once, including what was still queued when the web process
shuts down, and a sender outlives a broker that stopped answering."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
import redis

from resumable.broker.background_sends import LoopSender, Sender, ThreadSender
from resumable.broker.redis import build_broker
from resumable.broker.send_gate import gate_of
from resumable.client import Client
from resumable.priorities import Routed
from resumable.settings import Settings
from tests.conftest import queued_messages, wait_until
from tests.relay import Relay, redis_target, redis_url_via

pytestmark = pytest.mark.redis_broker

Make = Callable[[Client, Settings, str], Sender]
SENDERS: dict[str, Make] = {
    "loop": lambda client, settings, url: LoopSender(client.broker, settings, url, why="test"),  # type: ignore[arg-type]
    "thread": lambda client, settings, url: ThreadSender(client.broker, settings, why="test"),
}


def _send_all(sender: Sender, refs: list[Routed], timeout: float) -> bool:
    async def run() -> bool:
        await sender.start()
        for ref in refs:
            sender.send(ref)
        return await sender.close(timeout)

    return asyncio.run(run())


@pytest.mark.parametrize("kind", sorted(SENDERS))
def test_every_queued_message_goes_out_once_before_close_returns(
    settings: Settings, client: Client, redis_client: redis.Redis, kind: str
) -> None:
    sender = SENDERS[kind](client, settings, settings.redis_url or "")
    sessions = [uuid.uuid4() for _ in range(1200)]  # more than one pipeline's worth
    assert _send_all(sender, [Routed(s, "normal") for s in sessions], timeout=30)
    sent = [message.args[0] for message in queued_messages(redis_client, settings)]
    assert sorted(sent) == sorted(str(s) for s in sessions)  # each once


def test_the_loop_sender_gives_up_on_a_stalled_redis_and_sends_again_once_it_answers(
    settings: Settings, client: Client, redis_client: redis.Redis
) -> None:
    """A Redis that takes commands and never answers: the send times out,
    the broker's gate shuts (later sends are not tried) and close() still
    returns; the sessions are the reconciler's. Once Redis answers and the
    gate opens, messages go out again."""
    relay = Relay(redis_target(settings.redis_url or "")).open()
    url = redis_url_via(settings.redis_url or "", relay)
    broker = build_broker(settings, url)
    try:
        relay.stall()
        lost = [Routed(uuid.uuid4(), "normal") for _ in range(3)]
        assert _send_all(LoopSender(broker, settings, url, why="test"), lost, timeout=30)
        assert queued_messages(redis_client, settings) == []
        assert gate_of(broker).shut_because() is not None
        relay.flow()
        wait_until(lambda: gate_of(broker).shut_because() is None, timeout=15, what="the gate")
        again = Routed(uuid.uuid4(), "normal")
        assert _send_all(LoopSender(broker, settings, url, why="test"), [again], timeout=30)
    finally:
        broker.close()
        relay.cut()
    sent = [message.args[0] for message in queued_messages(redis_client, settings)]
    # The stalled relay may deliver the lost sends late, once it flows:
    # duplicates at worst, for a claim to drop.
    assert str(again.session_id) in sent and len(sent) <= 1 + len(lost), sent
