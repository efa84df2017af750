"""A small OpenAI-compatible HTTP server for the OpenAI Agents SDK tests: it
answers ``POST /v1/chat/completions`` from a script, counts every request it
is sent (a model request repeated after a crash shows up here, by the turn
it asks for), and can hold one request until the test releases it, so a
test can SIGKILL a worker while that request is in flight."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from resumable.dev.fake_server import Reply, Request
from tests.fake_api import FakeAPI


def _tool_call(call_id: str, name: str, args: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def scripted_reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The refund script: look the order up, refund it (needs approval), then
    say what happened, quoting the refund tool's answer."""
    tool_results = [m for m in messages if m.get("role") == "tool"]
    if not tool_results:
        return {
            "role": "assistant",
            "tool_calls": [_tool_call("call_1", "lookup", '{"order": "o1"}')],
        }
    if len(tool_results) == 1:
        return {
            "role": "assistant",
            "tool_calls": [_tool_call("call_2", "refund", '{"order": "o1", "amount": 30}')],
        }
    return {"role": "assistant", "content": f"Done: {tool_results[-1].get('content')}"}


class FakeOpenAI(FakeAPI):
    """Chat completions from ``scripted_reply``; tool effects (``POST
    /effects``) counted by idempotency key, as ``FakeAPI`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.model_requests = 0
        #: Model requests by turn (how many tool results they carry).
        self.turns: Counter[int] = Counter()
        self.model_lock = threading.Lock()
        #: Hold the request with this number (1: the first) until ``release``.
        self.hold_at: int | None = None
        self.held = threading.Event()
        self.release = threading.Event()

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def close(self) -> None:
        self.release.set()
        super().close()

    def handle(self, request: Request) -> Reply:
        if not request.path.endswith("/chat/completions"):
            return super().handle(request)
        body = request.json()
        turn = sum(1 for m in body["messages"] if m.get("role") == "tool")
        with self.model_lock:
            self.model_requests += 1
            self.turns[turn] += 1
            n = self.model_requests
        if n == self.hold_at:
            self.held.set()
            self.release.wait(60)
        message = scripted_reply(body["messages"])
        return Reply(
            200,
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "fake"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        )
