"""``POST /v1/callbacks/{token}``: external systems' callbacks."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from resumable.inbox import Receipt, Verdict
from resumable.webhooks.bodies import parse_json, require_json_content_type
from resumable.webhooks.errors import ApiError, error_response
from resumable.webhooks.state import web_state

_MAX_TOKEN_LENGTH = 128
# Idempotency keys and webhook ids are indexed; a btree row holds ~2,700 bytes.
MAX_IDEMPOTENCY_KEY_LENGTH = 256


def receipt_response(receipt: Receipt) -> Response:
    """202 accepted, 200 duplicate (with the original delivery), 404, 409."""
    if receipt.verdict is Verdict.ACCEPTED:
        return JSONResponse(receipt.as_json(), status_code=202)
    if receipt.verdict is Verdict.DUPLICATE:
        return JSONResponse(receipt.as_json(), status_code=200)
    if receipt.verdict is Verdict.UNKNOWN:
        return error_response(404, "not_found", receipt.message)
    if receipt.verdict is Verdict.REUSED:
        return error_response(409, "idempotency_key_reused", receipt.message)
    return error_response(409, "wait_closed", receipt.message)


def idempotency_key(request: Request, *names: str) -> str | None:
    """The first of these headers present, or None; 400 if it is empty or longer
    than ``MAX_IDEMPOTENCY_KEY_LENGTH`` (a key cut short could match another)."""
    for name in names:
        key = request.headers.get(name)
        if key is None:
            continue
        if not key.strip() or len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
            raise ApiError(
                400,
                "invalid_idempotency_key",
                f"{name} must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters",
            )
        return key
    return None


def dedupe_key(request: Request) -> str | None:
    return idempotency_key(request, "webhook-id", "idempotency-key")


async def receive_callback(request: Request) -> Response:
    """Deliver a callback to the session that created the token.
    ---
    summary: Receive an external system's callback
    description: >
      Signed per Standard Webhooks when a secret is configured. The delivery is
      committed before the answer; webhook-id (or Idempotency-Key) dedupes.
    parameters:
      - {name: token, in: path, required: true, schema: {type: string}}
    requestBody:
      content: {application/json: {schema: {}}}
    responses:
      202: {description: Accepted and stored}
      200: {description: Duplicate of a delivery already received}
      400: {description: "Empty, malformed or not UTF-8 body; bad webhook-id"}
      401: {description: Bad or missing signature}
      404: {description: Unknown token}
      409: {description: "The wait is closed; or webhook-id reused with another body"}
      413: {description: Body too large}
      415: {description: Not JSON}
    """
    state = web_state(request)
    token = request.path_params["token"]
    body = await request.body()
    state.verifier.verify(body, request.headers)
    key = dedupe_key(request)
    if not body.strip():
        raise ApiError(400, "malformed_json", "a callback needs a JSON body; this one is empty")
    require_json_content_type(request, body)
    payload = parse_json(body)
    if len(token) > _MAX_TOKEN_LENGTH:
        return error_response(404, "not_found", "no callback with this token")
    receipt = await run_in_threadpool(state.inbox.callback, token, payload, key)
    state.metrics.deliveries.labels("callback", receipt.verdict.value).inc()
    return receipt_response(receipt)


routes = [Route("/v1/callbacks/{token}", receive_callback, methods=["POST"])]
