"""A fake LLM API that answers every request after a fixed delay, for
``benchmarks/inflight.py``: an asyncio server, so hundreds of requests wait
at once on one thread (a thread-per-request fake would measure itself).

``POST`` anything: after ``--delay`` seconds the answer is a small
chat-completion-shaped JSON object. HTTP/1.1 keep-alive; just enough HTTP
for the benchmark's clients (Content-Length bodies, no chunked requests).
Prints ``listening on PORT`` when ready; ``GET /count`` answers how many
completions it served and the most it held at once since the last ``/count``.
"""

from __future__ import annotations

import argparse
import asyncio
import json

_ANSWER = json.dumps(
    {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }
).encode()


class SlowLLM:
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.served = 0
        self.in_flight = 0
        self.peak_in_flight = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *lines = head.decode("latin-1").split("\r\n")
                length = 0
                for line in lines:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                if length:
                    await reader.readexactly(length)
                if request_line.startswith("GET /count"):
                    body = json.dumps(
                        {"served": self.served, "peak_in_flight": self.peak_in_flight}
                    ).encode()
                    self.peak_in_flight = self.in_flight  # a new phase measures its own
                else:
                    self.in_flight += 1
                    self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                    try:
                        await asyncio.sleep(self.delay)
                    finally:
                        self.in_flight -= 1
                    self.served += 1
                    body = _ANSWER
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def serve(port: int, delay: float) -> None:
    llm = SlowLLM(delay)
    server = await asyncio.start_server(llm.handle, "127.0.0.1", port, backlog=4096)
    print(f"listening on {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=1.0)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.delay))


if __name__ == "__main__":
    main()
