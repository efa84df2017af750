"""A fake OpenAI-compatible chat API, for trying the research agent without a
key and for testing it.

``POST {base}/chat/completions`` answers like OpenAI's Chat Completions API,
following a fixed script: the first turn asks for the ``fetch_url`` tool on a
page this server also serves (``GET /pages/{slug}``); after a tool result (the
page as JSON ``{"status", "text"}``, or as plain text) it writes a report; after
reviewer feedback it writes a revised one. It counts
every request, so a test can tell whether a recovered agent called it again.

``page_gate`` lets a test hold a page fetch in flight (to kill the worker in
the middle of a step); ``page_requested`` says a fetch has arrived.

Run it on its own with ``python examples/fake_llm.py --port 8765`` and point
the agent at it: ``OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=sk-fake``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from typing import Any

from resumable.dev.fake_server import FakeServer, Reply, Request

_PAGE = """A suspend-and-resume job queue keeps an agent's state in a database after
every step. When the agent waits for a human it holds no worker; when a worker
dies, another resumes the session from its last checkpoint, and side effects
recorded with an idempotency key are not repeated."""


def _tool_text(content: Any) -> str:
    """The page text in a tool result: the research agents send ``{"status",
    "text"}`` as JSON, the OpenAI Agents SDK example the page itself. (Reading
    every tool result as JSON raised on the SDK's plain text, and the server
    hung up without an answer: the SDK saw a connection error.)"""
    if isinstance(content, list):  # content parts
        content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    text = str(content or "")
    try:
        page = json.loads(text)
    except ValueError:
        return text
    return str(page.get("text", "")) if isinstance(page, dict) else text


class FakeLLM(FakeServer):
    """The fake API on ``127.0.0.1`` (port 0: a free one); ``base_url`` ends in ``/v1``."""

    def __init__(self, *, api_key: str | None = None, port: int = 0) -> None:
        super().__init__(port=port)
        self.api_key = api_key
        self.lock = threading.Lock()
        self.chat_requests: list[dict[str, Any]] = []
        self.authorizations: list[str] = []
        self.page_fetches = 0
        self.page_gate = threading.Event()
        self.page_gate.set()
        self.page_requested = threading.Event()
        self.base_url = f"{self.url}/v1"

    # -- what the tests look at -----------------------------------------------------

    @property
    def chat_calls(self) -> int:
        with self.lock:
            return len(self.chat_requests)

    # -- the script -----------------------------------------------------------------

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for a chat request."""
        messages: list[dict[str, Any]] = request.get("messages", [])
        last = messages[-1] if messages else {}
        seen_tool = any(m.get("role") == "tool" for m in messages)
        if last.get("role") == "tool":
            text = _tool_text(last.get("content"))
            first_line = text.splitlines()[0] if text else ""
            return {"role": "assistant", "content": f"Report: {first_line}"}
        if seen_tool:
            feedback = str(last.get("content", ""))
            return {"role": "assistant", "content": f"Revised report, after '{feedback}'."}
        n = len(self.chat_requests)
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {
                        "name": "fetch_url",
                        "arguments": json.dumps({"url": f"{self.url}/pages/durable-agents"}),
                    },
                }
            ],
        }

    def completion(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.chat_requests.append(request)
            n = len(self.chat_requests)
        message = self.reply(request)
        return {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }

    # -- HTTP -----------------------------------------------------------------------

    def handle(self, request: Request) -> Reply:
        if request.method == "POST" and request.path.rstrip("/") == "/v1/chat/completions":
            authorization = request.header("Authorization") or ""
            with self.lock:
                self.authorizations.append(authorization)
            if self.api_key and authorization != f"Bearer {self.api_key}":
                return Reply(401, {"error": {"message": "invalid api key"}})
            return Reply(200, self.completion(request.json()))
        if request.method == "GET" and request.path.startswith("/pages/"):
            with self.lock:
                self.page_fetches += 1
            self.page_requested.set()
            self.page_gate.wait(timeout=60)
            return Reply(200, _PAGE, content_type="text/plain")
        return Reply(404, {"error": {"message": "not found"}})

    def close(self) -> None:
        self.page_gate.set()  # a held page fetch would keep shutdown waiting
        super().close()


def main() -> None:
    parser = argparse.ArgumentParser(description="A fake OpenAI-compatible chat API.")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--api-key", default=None, help="Require this bearer token.")
    args = parser.parse_args()
    with FakeLLM(api_key=args.api_key, port=args.port) as fake:
        print(f"fake OpenAI-compatible API: OPENAI_BASE_URL={fake.base_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
