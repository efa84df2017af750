"""``resumable dev``: the whole deployment (web, worker, scheduler) on one
machine, in one terminal, on the embedded servers unless the URLs are set.

The order of things is what makes it safe to stop at any moment:

0. a lock in the home makes sure this is the only ``dev`` there (see
   ``home_lock.py``);
1. stop signals are caught first, so a Ctrl-C or SIGTERM during start-up
   still ends in an orderly stop (a second one abandons start-up);
2. the servers are acquired through ``service_urls``, which registers this
   process as a user of the embedded servers for its whole life: children
   come and go, the servers stay up until ``dev`` itself leaves;
3. the migrations run once, here, which is why the Procfile's ``release:`` is
   skipped;
4. the children get the resolved URLs, so they share ``dev``'s servers
   instead of registering as users themselves;
5. on the way out the children are stopped first and only then are the
   servers released, so no child outlives the database it writes to.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from rich.console import Console
from rich.markup import escape
from sqlalchemy.exc import SQLAlchemyError

from resumable._internal.embedded import EmbeddedServices, ServiceURLs, service_urls
from resumable._internal.home import local_token
from resumable._internal.reachability import rabbitmq_location
from resumable.dev.home_lock import AnotherDevError, dev_lock
from resumable.dev.procfile import Processes, load_processes
from resumable.dev.signals import StopRequests
from resumable.dev.supervisor import Supervisor
from resumable.errors import ResumableError
from resumable.models import migrate
from resumable.settings import Settings

# The agent the worker runs when none is named, so `resumable dev` works in an
# empty directory.
DEMO_AGENTS = ["resumable.demo.agent"]

# On SIGTERM a worker finishes its steps in flight for up to a lease before it
# exits; this much longer, and whatever is left is killed.
STOP_GRACE_EXTRA_SECONDS = 10.0


def run_dev(settings: Settings, console: Console, agents: list[str]) -> int:
    """Run the Procfile's processes until Ctrl-C/SIGTERM (0) or a child exits (1);
    a child killed by SIGKILL is started again (see ``supervisor.py``)."""
    processes = load_processes(Path.cwd())
    modules = list(agents) or DEMO_AGENTS
    try:
        with dev_lock(settings.home_dir):
            return _run_alone(settings, console, modules, processes)
    except AnotherDevError as exc:
        console.print(f"[red]error:[/red] {escape(exc.message)}", soft_wrap=True, highlight=False)
        return 1


def _run_alone(
    settings: Settings, console: Console, agents: list[str], processes: Processes
) -> int:
    with StopRequests() as stops:
        try:
            status = _run(settings, console, agents, processes, stops)
        except KeyboardInterrupt:
            console.print("[yellow]start-up abandoned[/yellow]")
            return 130
        except ResumableError:
            if not stops.requested:
                raise
            # A terminal's Ctrl-C also reaches initdb and pg_ctl, which then fail.
            console.print("[yellow]stopped during start-up[/yellow]")
            return 130
    if settings.database_url is None or settings.redis_url is None:
        left = EmbeddedServices(settings.home_dir).running_pids()
        console.print(
            "embedded servers still used by other processes"
            if left
            else "embedded servers stopped",
            highlight=False,
        )
    return status


def _run(
    settings: Settings,
    console: Console,
    agents: list[str],
    processes: Processes,
    stops: StopRequests,
) -> int:
    with service_urls(settings.database_url, settings.redis_url, settings.home_dir) as urls:
        if stops.requested:
            return 0
        try:
            migrate.upgrade(urls.database_url)
            revision = migrate.current_revision(urls.database_url)
        except SQLAlchemyError as exc:
            cause = getattr(exc, "orig", None) or exc  # the driver's message, if any
            console.print(f"[red]error:[/red] migrations failed: {escape(str(cause))}")
            return 1
        if stops.requested:
            return 0
        url = web_url(settings)
        env = child_environment(settings, urls, agents, url)
        _print_banner(console, settings, urls, agents, processes, url, revision)
        supervisor = Supervisor(
            processes.specs,
            env,
            console.file,
            stops,
            grace_seconds=settings.lease_seconds + STOP_GRACE_EXTRA_SECONDS,
        )
        return supervisor.run()


def web_url(settings: Settings) -> str:
    """Where the web process can be reached from this machine."""
    host = settings.web_host
    if host in {"", "0.0.0.0", "::"}:
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.web_port}"


def child_environment(
    settings: Settings, urls: ServiceURLs, agents: list[str], url: str
) -> dict[str, str]:
    """The children's environment: ours, pointed at the servers ``dev`` holds."""
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": urls.database_url,
            "REDIS_URL": urls.redis_url,
            "RESUMABLE_AGENTS": ",".join(agents),
            # Absolute, so every child finds the same api-token whatever its cwd.
            "RESUMABLE_HOME": str(settings.home_dir),
            # The Procfile's own commands (not only `resumable`) from this install.
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            # For Heroku-style `web: ... --port $PORT` lines.
            "PORT": str(settings.web_port),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if "public_url" not in settings.model_fields_set:
        # Callback URLs handed out must point at this web process, not the default port.
        env["RESUMABLE_PUBLIC_URL"] = url
    return env


def redact(url: str) -> str:
    """`url` with its password, if any, replaced by ***."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _print_banner(
    console: Console,
    settings: Settings,
    urls: ServiceURLs,
    agents: list[str],
    processes: Processes,
    url: str,
    revision: str | None,
) -> None:
    names = ", ".join(spec.name for spec in processes.specs)
    source = str(processes.procfile) if processes.procfile else "the built-in commands"
    if settings.api_tokens:
        token_line = "from RESUMABLE_API_TOKENS"
    else:
        token = local_token(settings.home_dir)
        token_line = f"{token}  (curl -H 'Authorization: Bearer {token}' {url}/v1/sessions)"
    embedded = f"embedded, in {settings.home_dir}"
    db_origin = embedded if settings.database_url is None else "DATABASE_URL"
    redis_origin = embedded if settings.redis_url is None else "REDIS_URL"
    database = f"{redact(urls.database_url)}  ({db_origin}, schema at {revision})"
    redis = f"{redact(urls.redis_url)}  ({redis_origin})"
    lines = [
        f"[bold]resumable dev[/bold]: {escape(names)} from {escape(source)}",
        f"  web        {escape(url)}  (API description: {escape(url)}/openapi.json)",
        f"  API token  {escape(token_line)}",
        f"  database   {escape(database)}",
        f"  redis      {escape(redis)}",
        *(
            [f"  broker     RabbitMQ at {escape(rabbitmq_location(settings.broker_url))}"]
            if settings.broker_url is not None
            else []
        ),
        f"  agents     {escape(', '.join(agents))}"
        + (
            "  (none named: the demo agent; pass --agents MODULE or set RESUMABLE_AGENTS)"
            if agents == DEMO_AGENTS
            else ""
        ),
        "Press Ctrl-C to stop everything.",
    ]
    for line in lines:
        # soft_wrap: long socket paths stay on one line, for copy and paste.
        console.print(line, soft_wrap=True, highlight=False)
