"""``POST /v1/callbacks/{token}``: external systems' callbacks."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from resumable import tracing
from resumable.services import arguments
from resumable.services.inbox import Receipt, Verdict
from resumable.webhooks import response_models
from resumable.webhooks.bodies import parse_json, require_json_content_type
from resumable.webhooks.database_calls import database_await, database_call
from resumable.webhooks.errors import ApiError, error_response
from resumable.webhooks.operations import IDEMPOTENCY_KEY, Answer, ApiRoute, Header, Operation
from resumable.webhooks.params import TOKEN
from resumable.webhooks.state import web_state

# Idempotency keys and webhook ids are indexed; a btree row holds ~2,700 bytes.
MAX_IDEMPOTENCY_KEY_LENGTH = arguments.MAX_IDEMPOTENCY_KEY_LENGTH

RECEIPT_ANSWERS = (
    Answer(202, "Accepted: committed, and will be consumed exactly once.", response_models.Receipt),
    Answer(
        200,
        "A duplicate of a delivery already received (same id, same body); nothing new stored.",
        response_models.Receipt,
    ),
)


def receipt_response(receipt: Receipt) -> Response:
    """202 accepted, 200 duplicate (with the original delivery), 404, 409."""
    if receipt.verdict in (Verdict.ACCEPTED, Verdict.DUPLICATE):
        assert receipt.session_id is not None
        body = response_models.Receipt(
            status=receipt.verdict.value,
            message=receipt.message,
            session_id=receipt.session_id,
            delivery_id=receipt.delivery_id,
        )
        status = 202 if receipt.verdict is Verdict.ACCEPTED else 200
        return Response(body.model_dump_json(), status, media_type="application/json")
    if receipt.verdict is Verdict.UNKNOWN:
        return error_response(404, "not_found", receipt.message)
    if receipt.verdict is Verdict.REUSED:
        return error_response(409, "idempotency_key_reused", receipt.message)
    return error_response(409, "wait_closed", receipt.message)


def idempotency_key(request: Request, *names: str) -> str | None:
    """The first of these headers present, or None; 400 if it is empty or longer
    than ``MAX_IDEMPOTENCY_KEY_LENGTH`` bytes (a key cut short could match
    another). Starlette reads header bytes as Latin-1, one character each, so
    the length is the bytes the client sent."""
    for name in names:
        key = request.headers.get(name)
        if key is None:
            continue
        if not key.strip() or len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
            raise ApiError(
                400,
                "invalid_idempotency_key",
                f"{name} must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} bytes",
            )
        return key
    return None


def dedupe_key(request: Request) -> str | None:
    return idempotency_key(request, "webhook-id", "idempotency-key")


_SIGNED = "Required when the server has a webhook secret (`RESUMABLE_WEBHOOK_SECRET`)."

CALLBACK = Operation(
    "POST",
    "/v1/callbacks/{token}",
    "receiveCallback",
    "Receive an external system's callback",
    "signals and callbacks",
    description="Signed per Standard Webhooks when the server has a secret (several "
    "secrets are accepted at once while one is rotated). The delivery is committed "
    "before the answer; `webhook-id` (or `Idempotency-Key`) dedupes. Public: the "
    "signature and the unguessable token are the credentials.",
    path_params=(TOKEN,),
    headers=(
        Header(
            "webhook-id",
            "The delivery's id: a redelivery with the same id and body is a duplicate. " + _SIGNED,
            IDEMPOTENCY_KEY.schema,
        ),
        Header(
            "webhook-timestamp",
            "Unix seconds; within five minutes of the server's clock. " + _SIGNED,
        ),
        Header(
            "webhook-signature",
            "Space-separated `v1,<base64 HMAC-SHA256>` signatures of "
            "`{webhook-id}.{webhook-timestamp}.{body}`. " + _SIGNED,
        ),
        IDEMPOTENCY_KEY,
    ),
    body=True,
    body_required=True,
    body_description="The callback's payload, any JSON value.",
    answers=(
        *RECEIPT_ANSWERS,
        Answer(
            400,
            "An empty body, or a `webhook-id`/`Idempotency-Key` that is empty or over 256 "
            "bytes (the single-use callback stays open).",
            codes=("malformed_json", "invalid_idempotency_key"),
        ),
        Answer(
            401,
            "A missing or wrong signature, or a timestamp over five minutes off.",
            codes=("invalid_signature",),
            headers=(Header("WWW-Authenticate", "The signature scheme.", required=True),),
        ),
        Answer(404, "No callback has this token.", codes=("not_found",)),
        Answer(
            409,
            "The wait is over (answered, timed out, cancelled), or the `webhook-id` was used "
            "with another body.",
            codes=("wait_closed", "idempotency_key_reused"),
        ),
    ),
)


async def receive_callback(request: Request) -> Response:
    state = web_state(request)
    body = await request.body()
    state.verifier.verify(body, request.headers)
    key = dedupe_key(request)
    if not body.strip():
        raise ApiError(400, "malformed_json", "a callback needs a JSON body; this one is empty")
    require_json_content_type(request, body)
    payload = parse_json(body)
    token = TOKEN(request)
    began_ns = time.time_ns()
    # On the event loop, not a thread (services/async_callbacks.py).
    receipt = await database_await(state.callbacks.callback(token, payload, key))
    state.metrics.deliveries.labels("callback", receipt.verdict.value).inc()
    if tracing.enabled():  # a database thread only when there is something to record
        await database_call(tracing.delivery_received, state.db, "callback", receipt, began_ns)
    return receipt_response(receipt)


routes: list[Route] = [ApiRoute(CALLBACK, receive_callback)]
