"""A small OpenAI-compatible HTTP server for the OpenAI Agents SDK tests: it
answers ``POST /v1/chat/completions`` from a script, counts every request it
is sent (a model request repeated after a crash shows up here, by the turn
it asks for), and can hold one request until the test releases it, so a
test can SIGKILL a worker while that request is in flight."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
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


def media_reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The media script: ask for a video transcoded elsewhere (and, when the
    prompt says so, in the same turn, for a refund a human approves), then
    say what each call answered."""
    tool_results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
    if tool_results:
        return {"role": "assistant", "content": "Done: " + " | ".join(tool_results)}
    calls = [_tool_call("t1", "transcode", '{"video": "v1", "format": "webm"}')]
    prompt = " ".join(str(m.get("content")) for m in messages if m.get("role") == "user")
    if "refund" in prompt:
        calls.append(_tool_call("r1", "refund", '{"order": "o1", "amount": 10}'))
    return {"role": "assistant", "tool_calls": calls}


class FakeOpenAI(FakeAPI):
    """Chat completions from a script (``scripted_reply``); tool effects (``POST
    /effects``) counted by idempotency key, as ``FakeAPI`` does."""

    def __init__(
        self, script: Callable[[list[dict[str, Any]]], dict[str, Any]] = scripted_reply
    ) -> None:
        super().__init__()
        #: What the model answers, from the messages it is sent.
        self.script = script
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
        message = self.script(body["messages"])
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
