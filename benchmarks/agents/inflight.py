"""The agents of ``benchmarks/inflight.py``; the worker subprocess imports them.

Both run ``STEPS`` steps, each making one call to the slow fake LLM
(``benchmarks/agents/slow_llm.py``) through ``ctx.tool`` (as an agent should: the
answer is recorded, never paid for twice). ``bench_inflight_async`` awaits it
with an async HTTP client on the worker's event loop; ``bench_inflight_sync``
is the same agent with sync steps, one worker thread blocked per call.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any
from urllib.parse import urlsplit

from resumable import Agent, Complete, StepContext

ASYNC_AGENT = "bench_inflight_async"
SYNC_AGENT = "bench_inflight_sync"
STEPS = 3

inflight_async = Agent(ASYNC_AGENT, description="Benchmark agent: async LLM calls.")
inflight_sync = Agent(SYNC_AGENT, description="Benchmark agent: the same with sync steps.")

# The calls use bare HTTP/1.1, not httpx: httpcore's connection pool scans
# every pooled connection on each request, which with hundreds in flight costs
# more CPU than everything resumable does per step. Connections are kept
# alive and reused, as an SDK's client would (a TCP connect and close per
# call cost the worker and the fake LLM CPU the steps then waited for).
_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]
_idle: dict[tuple[int, str], list[_Connection]] = {}  # (loop, host:port): idle connections


async def acomplete(url: str, prompt: str) -> dict[str, Any]:
    parts = urlsplit(url)
    idle = _idle.setdefault((id(asyncio.get_running_loop()), parts.netloc), [])
    reader, writer = idle.pop() if idle else await _connect(parts.hostname, parts.port)
    try:
        writer.write(_request(parts.path, parts.netloc, prompt, keep_alive=True))
        head = await reader.readuntil(b"\r\n\r\n")
        body = await reader.readexactly(_content_length(head))
    except BaseException:
        writer.close()  # in an unknown state (a time limit, a reset): not reused
        raise
    idle.append((reader, writer))
    result: dict[str, Any] = json.loads(body)
    return result


async def _connect(host: str | None, port: int | None) -> _Connection:
    return await asyncio.open_connection(host, port)


def complete(url: str, prompt: str) -> dict[str, Any]:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=120) as sock:
        sock.sendall(_request(parts.path, parts.netloc, prompt))
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(65536)
        head, _, body = received.partition(b"\r\n\r\n")
        length = _content_length(head)
        while len(body) < length:
            body += sock.recv(65536)
    result: dict[str, Any] = json.loads(body)
    return result


def _request(path: str, host: str, prompt: str, keep_alive: bool = False) -> bytes:
    body = json.dumps({"messages": [{"role": "user", "content": prompt}]}).encode()
    connection = "keep-alive" if keep_alive else "close"
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: {connection}\r\n\r\n"
    ).encode() + body


def _content_length(head: bytes) -> int:
    for line in head.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return int(value)
    return 0


def _next(ctx: StepContext, n: int) -> str | Complete:
    ctx.state["n"] = n
    return Complete({"steps": n}) if n >= STEPS else f"step_{n}"


async def _async_step(ctx: StepContext) -> str | Complete:
    n = int(ctx.state.get("n", 0)) + 1
    await ctx.tool("llm", acomplete, ctx.input["llm"], f"step {n}")
    return _next(ctx, n)


def _sync_step(ctx: StepContext) -> str | Complete:
    n = int(ctx.state.get("n", 0)) + 1
    ctx.tool("llm", complete, ctx.input["llm"], f"step {n}")
    return _next(ctx, n)


for _n in range(STEPS):
    inflight_async.step(_async_step, name=f"step_{_n}")
    inflight_sync.step(_sync_step, name=f"step_{_n}")
