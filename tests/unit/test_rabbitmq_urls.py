"""How a RabbitMQ URL becomes pika's connection parameters and a location
that a log line may show."""

from __future__ import annotations

import pika

from resumable._internal.reachability import amqp_reason, rabbitmq_location
from resumable.broker.rabbitmq import AMQP_TIMEOUT_SECONDS, connection_parameters


def test_every_node_gets_timeouts_unless_its_url_names_them() -> None:
    first, second = connection_parameters(
        "amqp://u:pw@a:5672/%2F;amqp://u:pw@b:5673/v?socket_timeout=2"
    )
    assert (first.host, first.port, first.virtual_host) == ("a", 5672, "/")
    assert first.socket_timeout == first.stack_timeout == AMQP_TIMEOUT_SECONDS
    assert first.blocked_connection_timeout == AMQP_TIMEOUT_SECONDS
    # Unacknowledged data fails the socket: a send to a host cut off ends.
    assert first.tcp_options == {"TCP_USER_TIMEOUT": int(AMQP_TIMEOUT_SECONDS * 1000)}
    assert (second.host, second.port, second.virtual_host) == ("b", 5673, "v")
    assert second.socket_timeout == 2  # the URL's own
    assert second.blocked_connection_timeout == AMQP_TIMEOUT_SECONDS


def test_a_location_never_shows_the_password() -> None:
    assert rabbitmq_location("amqp://guest:s3cret@rabbit:5672/prod") == "rabbit:5672 (vhost 'prod')"
    assert rabbitmq_location("amqps://u:s3cret@rabbit/") == "rabbit:5671 (vhost '/')"
    assert "s3cret" not in rabbitmq_location("amqp://u:s3cret@a/%2F;amqp://u:s3cret@b/")
    assert rabbitmq_location("amqp://u:pw@h:port/") == "an unparsable URL"


def test_pika_s_wrapped_errors_read_as_their_cause() -> None:
    refused = pika.exceptions.AMQPConnectionError(ConnectionRefusedError(111, "Connection refused"))
    assert amqp_reason(refused) == "Connection refused"
    login = pika.exceptions.ProbableAuthenticationError(
        "ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - Login was refused'"
    )
    assert amqp_reason(login) == "ACCESS_REFUSED - Login was refused"
    closed = pika.exceptions.ChannelClosedByBroker(404, "NOT_FOUND - no queue 'q'")
    assert amqp_reason(closed) == "NOT_FOUND - no queue 'q'"


def test_a_send_that_failed_on_rabbitmq_is_told_in_its_words() -> None:
    from dramatiq.errors import ConnectionClosed

    from resumable._internal.reachability import reason

    refused = pika.exceptions.AMQPConnectionError(ConnectionRefusedError(111, "Connection refused"))
    assert reason(ConnectionClosed(refused)) == "Connection refused"  # type: ignore[no-untyped-call]
    assert reason(refused) == "Connection refused"


def test_a_connection_lost_mid_call_reads_as_the_socket_s_error() -> None:
    """Found by the fault matrix on CI: a StreamLostError (RabbitMQ reset the
    connection while it booted) recursed between ``reason`` and
    ``amqp_reason`` until a RecursionError, which escaped the scheduler's
    outage probe and left its jobs paused for good."""
    from dramatiq.errors import ConnectionClosed

    from resumable._internal.reachability import reason

    lost = pika.exceptions.StreamLostError(
        "Stream connection lost: ConnectionResetError(104, 'Connection reset by peer')"
    )
    assert amqp_reason(lost) == "Connection reset by peer"
    assert reason(lost) == "Connection reset by peer"
    assert reason(ConnectionClosed(lost)) == "Connection reset by peer"  # type: ignore[no-untyped-call]
    bare = pika.exceptions.StreamLostError("Stream connection lost")
    assert reason(ConnectionClosed(bare)) == "Stream connection lost"  # type: ignore[no-untyped-call]


def _pika_errors() -> list[BaseException]:
    """Every exception class pika defines, built with each shape of
    arguments its constructor takes: none, a text, a code and a text, a
    wrapped error, an empty text."""
    import inspect

    shapes: list[tuple[object, ...]] = [
        (),
        ("some text",),
        ("",),
        (320, "CONNECTION_FORCED - broker forced connection closure"),
        (pika.exceptions.AMQPConnectionError("inner text"),),
        (pika.exceptions.StreamLostError(""),),
    ]
    errors: list[BaseException] = []
    for _, cls in inspect.getmembers(pika.exceptions, inspect.isclass):
        if not issubclass(cls, BaseException):
            continue
        for args in shapes:
            try:
                errors.append(cls(*args))
            except TypeError:
                continue
    return errors


def test_every_pika_error_reads_as_one_line_of_text() -> None:
    from dramatiq.errors import ConnectionClosed

    from resumable._internal.reachability import reason

    errors = _pika_errors()
    assert len(errors) > 50
    for error in errors:
        for wrapped in (error, ConnectionClosed(error)):  # type: ignore[no-untyped-call]
            text = reason(wrapped)
            assert isinstance(text, str) and text and "\n" not in text, repr(wrapped)
