"""The long-running processes (``worker``, ``web``, ``scheduler``) and the
commands that run them together (``dev``, ``demo``)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

import click

from resumable.agent import AgentRegistry
from resumable.cli.failures import console, fail
from resumable.cli.support import load_agents, optional_agents, process_urls
from resumable.settings import Settings


@click.command()
@click.option(
    "--agents", "agent_modules", multiple=True, help="Module defining agents (repeatable)."
)
@click.option("--threads", type=click.IntRange(1, 1024), default=None, help="Worker threads.")
@click.option(
    "--processes",
    type=click.IntRange(0, 256),
    default=None,
    help="Worker processes, each with --threads threads (default "
    "RESUMABLE_WORKER_PROCESSES; 0: one per CPU core).",
)
@click.pass_obj
def worker(
    settings: Settings,
    agent_modules: tuple[str, ...],
    threads: int | None,
    processes: int | None,
) -> None:
    """Run sessions from the queue until SIGTERM."""
    from resumable.queue import supervisor

    modules = list(agent_modules) or settings.agents
    if not modules:
        fail("no agent modules: pass --agents MODULE or set RESUMABLE_AGENTS")
    if threads:
        settings = settings.model_copy(update={"worker_threads": threads})
    registry = load_agents(modules)  # in the parent too: a bad module fails here, once
    count = settings.worker_processes if processes is None else processes
    count = count or supervisor.default_processes()
    _check_metrics_ports(settings, count)
    if count > 1:
        sys.exit(_supervise(settings, registry, count))
    from resumable.queue.worker import build_runtime, run_worker
    from resumable.queue.worker_metrics import serve as serve_worker_metrics

    _serve_metrics(settings, serve_worker_metrics)
    with process_urls(settings, check=True) as urls:
        runtime = build_runtime(settings, urls.database_url, urls.redis_url, registry)
        status = run_worker(runtime)
    sys.exit(status)


def _serve_metrics(settings: Settings, serve: Callable[[int, str], object]) -> None:
    try:
        serve(settings.worker_metrics_port, settings.worker_metrics_host)
    except OSError as exc:  # taken since it was checked
        where = _metrics_address(settings, settings.worker_metrics_port)
        fail(f"cannot serve worker metrics on {where}: {exc.strerror or exc}")


def _supervise(settings: Settings, registry: AgentRegistry, count: int) -> int:
    """`count` single-process workers forked from this one (``supervisor.py``)
    once everything they run is imported, on the servers this process found
    or started."""
    from resumable._internal.startup_heap import freeze_startup_heap
    from resumable.queue.supervisor import Supervisor
    from resumable.queue.worker import build_runtime, run_worker
    from resumable.queue.worker_metrics import serve as serve_worker_metrics

    with process_urls(settings, check=True) as urls:

        def child_main(slot: int, ready: Callable[[], None]) -> int:
            port = settings.worker_metrics_port
            mine = settings.model_copy(update={"worker_metrics_port": port + slot if port else 0})
            _serve_metrics(mine, serve_worker_metrics)
            runtime = build_runtime(mine, urls.database_url, urls.redis_url, registry)
            return run_worker(runtime, ready=ready, slot=f"{slot} of {count}")

        # What every child would build again is built once, here, and shared.
        freeze_startup_heap()
        return Supervisor(child_main, count, describe=f"{settings.worker_threads} threads").run()


@click.command()
@click.option("--host", default=None, help="Bind address (default RESUMABLE_WEB_HOST).")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=None, help="Port (default RESUMABLE_WEB_PORT)."
)
@click.pass_obj
def web(settings: Settings, host: str | None, port: int | None) -> None:
    """Serve the HTTP API, callbacks and signals with uvicorn."""
    import uvicorn

    from resumable._internal.startup_heap import freeze_startup_heap
    from resumable.webhooks.app import create_app
    from resumable.webhooks.database_calls import exit_past_abandoned_calls

    registry = optional_agents(settings.agents)
    host = host or settings.web_host
    port = port if port is not None else settings.web_port
    where = f"{host}:{port} (--host/--port, RESUMABLE_WEB_HOST/RESUMABLE_WEB_PORT)"
    _check_can_listen(host, port, where, "listen on")
    # uvicorn re-raises the signal that stopped it once it has shut down; turn
    # that into an exit that unwinds the `with`, so embedded servers are released.
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda _signum, _frame: sys.exit(0))
    try:
        with process_urls(settings) as urls:
            app = create_app(settings, urls.database_url, urls.redis_url, registry)
            freeze_startup_heap()  # the app is built: its start-up heap stays put
            uvicorn.run(
                app,
                host=host,
                port=port,
                log_config=None,
                access_log=False,
            )
    finally:
        exit_past_abandoned_calls()


def _metrics_address(settings: Settings, port: int) -> str:
    host = settings.worker_metrics_host
    return f"{host}:{port} (RESUMABLE_WORKER_METRICS_HOST/RESUMABLE_WORKER_METRICS_PORT)"


def _check_metrics_ports(settings: Settings, count: int) -> None:
    """Every worker process's metrics port (the next one up per process), bound
    once before any starts: prometheus_client's own error names neither the
    address nor the setting, and a later process's port was found taken only
    after the first had started."""
    first = settings.worker_metrics_port
    if not first:
        return
    last = first + count - 1
    if last > 65535:
        fail(
            f"{count} worker processes serve metrics on ports {first}-{last}: "
            f"RESUMABLE_WORKER_METRICS_PORT must be at most {65536 - count}"
        )
    for port in range(first, last + 1):
        where = _metrics_address(settings, port)
        _check_can_listen(settings.worker_metrics_host, port, where, "serve worker metrics on")


def _check_can_listen(host: str, port: int, where: str, what: str) -> None:
    """Bind the address once before anything starts: uvicorn reports a port in
    use, or a host that does not resolve, in several log lines and exits 3."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        fail(f"cannot {what} {where}: {getattr(exc, 'strerror', None) or exc}")
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            fail(f"cannot {what} {where}: {exc.strerror or exc}")


@click.command()
@click.pass_obj
def scheduler(settings: Settings) -> None:
    """Wake due timers, polls and timeouts; re-enqueue stranded sessions."""
    from resumable.scheduler.process import run_scheduler

    # Agents are optional here: only compacting event-sourced histories needs them.
    registry = optional_agents(settings.agents)
    with process_urls(settings) as urls:
        run_scheduler(settings, urls.database_url, urls.redis_url, registry)


@click.command()
@click.option(
    "--agents", "agent_modules", multiple=True, help="Agent modules for the worker (repeatable)."
)
@click.pass_obj
def dev(settings: Settings, agent_modules: tuple[str, ...]) -> None:
    """Run web, worker and scheduler together on the embedded (or configured) servers."""
    from resumable.dev import run_dev

    sys.exit(run_dev(settings, console, list(agent_modules) or settings.agents))


@click.command()
@click.pass_obj
def demo(settings: Settings) -> None:
    """Run the end-to-end demo on the embedded default (or the configured URLs)."""
    from resumable.demo import run_demo

    sys.exit(run_demo(settings, console))
