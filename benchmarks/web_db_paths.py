"""A study: from the web process, which way to PostgreSQL costs less CPU a request?

Run from the repository root::

    .venv/bin/python benchmarks/web_db_paths.py [--requests 4000 --senders 8 --rounds 2]

Issue 38 asks whether the web process should reach PostgreSQL through an
async database path instead of a thread-pool hand-off per request. The
``commit_paths`` study (docs/performance.md, "Writing to PostgreSQL from an
event loop") answered it for a worker's event loop; this one asks it where
the loop also serves HTTP. A uvicorn process (as ``resumable web`` runs it:
uvloop and httptools when installed) serves one route, ``POST /t``, whose
transaction is shaped like a callback's: in one pipeline, a row locked, a
lookup, an insert and an update, committed; its answer read back. Two ways,
and the route without its transaction (``none``: the HTTP floor):

- ``thread``: the route hands the transaction to a thread with
  ``resumable.webhooks.database_calls.database_call`` (anyio's thread pool,
  a deadline) on a sync ``psycopg_pool.ConnectionPool``, in
  ``pipelined_transaction``, as the callback route does today;
- ``async``: the route runs it on the loop itself, on a psycopg
  ``AsyncConnectionPool``, in an async pipeline with the same statements.

``--senders`` threads of this process POST as fast as they are answered,
each on its own keep-alive connection. Reported per way and round: requests
a second, the latency's p50 and p99, and the CPU of the web process and of
the PostgreSQL backends per request. Rounds alternate the ways, so a
sitting's drift falls on both.

``DATABASE_URL`` is used when set; otherwise an embedded PostgreSQL runs
under ``--home``. The study's two tables are dropped when it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from benchmarks import harness
from benchmarks.harness.report import bench_parser, parse, percentile
from resumable._internal import procfs
from resumable.dev.processes import free_port
from resumable.models.database import pipelined_transaction

ROWS = 10_000
POOL = 8
WAYS = ("thread", "async", "none")

SETUP = f"""
CREATE TABLE IF NOT EXISTS web_paths_rows (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0,
                                           status text NOT NULL DEFAULT 'suspended');
CREATE TABLE IF NOT EXISTS web_paths_log (id bigserial PRIMARY KEY, row_id int, body jsonb,
                                          at timestamptz DEFAULT now());
TRUNCATE web_paths_rows, web_paths_log;
INSERT INTO web_paths_rows (id) SELECT g FROM generate_series(1, {ROWS}) g;
"""
TEARDOWN = "DROP TABLE IF EXISTS web_paths_rows, web_paths_log"

# A callback's shape: lock, look up, insert guarded by the lookup, update.
LOCK = "SELECT id FROM web_paths_rows WHERE id = %(id)s FOR NO KEY UPDATE"
LOOKUP = "SELECT n, status FROM web_paths_rows WHERE id = %(id)s"
INSERT = """INSERT INTO web_paths_log (row_id, body)
SELECT id, %(body)s::jsonb FROM web_paths_rows WHERE id = %(id)s AND status <> 'closed'
RETURNING id"""
UPDATE = "UPDATE web_paths_rows SET n = n + 1 WHERE id = %(id)s RETURNING n"


def _thread_app(url: str) -> Any:
    from psycopg_pool import ConnectionPool
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from resumable.webhooks.database_calls import database_call

    pool = ConnectionPool(url, min_size=POOL, max_size=POOL, kwargs={"autocommit": True})

    def work(params: dict[str, Any]) -> int:
        with pool.connection() as conn, pipelined_transaction(conn):
            conn.execute(LOCK, params)
            conn.execute(LOOKUP, params)
            inserted = conn.execute(INSERT, params).fetchone()
            conn.execute(UPDATE, params)
        return int(inserted[0]) if inserted else 0

    async def post(request: Request) -> JSONResponse:
        body = await request.body()
        params = {"id": json.loads(body)["id"], "body": body.decode()}
        return JSONResponse({"id": await database_call(work, params)}, status_code=202)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        pool.wait()
        yield
        pool.close()

    return Starlette(routes=[Route("/t", post, methods=["POST"])], lifespan=lifespan)


def _async_app(url: str) -> Any:
    from psycopg_pool import AsyncConnectionPool
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    pool = AsyncConnectionPool(
        url, min_size=POOL, max_size=POOL, kwargs={"autocommit": True}, open=False
    )

    async def work(params: dict[str, Any]) -> int:
        async with pool.connection() as conn, conn.pipeline():
            await conn.execute("BEGIN")
            await conn.execute(LOCK, params)
            await conn.execute(LOOKUP, params)
            cursor = await conn.execute(INSERT, params)
            inserted = await cursor.fetchone()
            await conn.execute(UPDATE, params)
            await conn.execute("COMMIT")
        return int(inserted[0]) if inserted else 0

    async def post(request: Request) -> JSONResponse:
        body = await request.body()
        params = {"id": json.loads(body)["id"], "body": body.decode()}
        return JSONResponse({"id": await work(params)}, status_code=202)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await pool.open(wait=True)
        yield
        await pool.close()

    return Starlette(routes=[Route("/t", post, methods=["POST"])], lifespan=lifespan)


def _bare_app() -> Any:
    """The same route without its transaction: the HTTP floor of the others."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def post(request: Request) -> JSONResponse:
        body = await request.body()
        return JSONResponse({"id": json.loads(body)["id"]}, status_code=202)

    return Starlette(routes=[Route("/t", post, methods=["POST"])])


def serve(way: str, url: str, port: int) -> None:
    """The web process of one way (run as a child of the study)."""
    import uvicorn

    apps: dict[str, Callable[[], Any]] = {
        "thread": lambda: _thread_app(url),
        "async": lambda: _async_app(url),
        "none": _bare_app,
    }
    app = apps[way]()
    uvicorn.run(app, host="127.0.0.1", port=port, log_config=None, access_log=False)


# -- the study -----------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """The process's CPU seconds; 0 once it is gone (a backend that exited)."""
    return procfs.cpu_seconds(pid) or 0.0


def backend_cpu(url: str, application: str) -> float:
    """CPU of the PostgreSQL backends serving the web process (by application_name)."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [application]
            )
        ]
    return sum(cpu_seconds(pid) for pid in pids)


def wait_serving(port: int, alive: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("the web process exited before it served")
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("POST", "/t", body=json.dumps({"id": 1}))
            if conn.getresponse().status == 202:
                conn.close()
                return
        time.sleep(0.05)
    raise RuntimeError(f"the web process did not serve within {timeout:g} s")


def send(port: int, requests: int, senders: int) -> tuple[float, list[float]]:
    """`requests` POSTs from `senders` keep-alive connections: seconds and latencies."""
    latencies: list[float] = []
    lock = threading.Lock()
    left = iter(range(requests))
    errors: list[BaseException] = []

    def sender() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        try:
            while True:
                with lock:
                    if next(left, None) is None:
                        break
                body = json.dumps({"id": random.randint(1, ROWS), "payload": "x" * 200})
                started = time.perf_counter()
                conn.request("POST", "/t", body=body)
                response = conn.getresponse()
                response.read()
                if response.status != 202:
                    raise RuntimeError(f"answered {response.status}")
                mine.append(time.perf_counter() - started)
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn.close()
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=sender) for _ in range(senders)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} senders failed; first: {errors[0]!r}")
    return time.perf_counter() - started, latencies


def one_round(args: argparse.Namespace, url: str, way: str, port: int) -> str:
    application = f"web_paths_{way}"
    env = {**os.environ, "PGAPPNAME": application}
    command = [sys.executable, __file__, "--serve", way, "--url", url, "--port", str(port)]
    child = subprocess.Popen(command, env=env)
    try:
        wait_serving(port, lambda: child.poll() is None)
        send(port, args.requests // 10, args.senders)  # warm: prepared statements, the pool
        web, server = cpu_seconds(child.pid), backend_cpu(url, application)
        seconds, latencies = send(port, args.requests, args.senders)
        web = cpu_seconds(child.pid) - web
        server = backend_cpu(url, application) - server
    finally:
        child.terminate()
        child.wait(timeout=30)
    n = len(latencies)
    p50, p99 = percentile(latencies, 0.50) * 1000, percentile(latencies, 0.99) * 1000
    return (
        f"  {way:6}  {n / seconds:7.0f} requests/s  p50 {p50:6.2f} ms"
        f"  p99 {p99:6.2f} ms  CPU per request: web"
        f" {web / n * 1000:.3f} ms, PostgreSQL {server / n * 1000:.3f} ms"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = bench_parser(__doc__, home="bench-web-paths", timeout=300)
    parser.add_argument("--requests", type=int, default=4000, help="requests per way and round")
    parser.add_argument("--senders", type=int, default=8, help="concurrent keep-alive senders")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each way once a round")
    parser.add_argument("--serve", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return parse(parser, argv, ("requests", "senders", "rounds"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.serve, args.url, args.port)
        return 0
    with harness.bench_services(args.home) as services:
        url = services.pg_url
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SETUP)
        try:
            print(
                f"{args.requests} POSTs per way and round from {args.senders} senders;"
                f" pools of {POOL}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
            )
            for number in range(args.rounds):
                print(f"round {number + 1}")
                for way in WAYS if number % 2 == 0 else WAYS[::-1]:
                    print(one_round(args, url, way, free_port()), flush=True)
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(TEARDOWN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
