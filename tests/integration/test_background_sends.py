"""The web's sender thread (``broker/background_sends.py``): what a route
hands it goes out, once, including what was still queued when the web
process shuts down."""

from __future__ import annotations

import uuid

import pytest
import redis

from resumable.broker.background_sends import BackgroundSender
from resumable.client import Client
from resumable.priorities import Routed
from resumable.settings import Settings
from tests.conftest import queued_messages

pytestmark = pytest.mark.redis_broker


def test_every_queued_message_goes_out_once_before_close_returns(
    settings: Settings, client: Client, redis_client: redis.Redis
) -> None:
    sender = BackgroundSender(client.broker, settings, why="test")
    sessions = [uuid.uuid4() for _ in range(1200)]  # more than one pipeline's worth
    for session_id in sessions:
        sender.send(Routed(session_id, "normal"))
    assert sender.close(timeout=30), "the sender did not finish"
    sent = [message.args[0] for message in queued_messages(redis_client, settings)]
    assert sorted(sent) == sorted(str(s) for s in sessions)  # each once
