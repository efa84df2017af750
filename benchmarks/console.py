"""How fast does the operator console answer with 10,000 sessions and 1,000 dead letters?

Run from the repository root::

    .venv/bin/python benchmarks/console.py [--sessions 10000 --dead-letters 1000
                                            --requests 30 --home /tmp/bench-console]

Issue 41: "what an operator sees with 10,000 sessions and 1,000 dead letters
(pages answer in under 300 ms)". The run:

1. Real sessions first. A ``resumable web`` process and a worker of
   ``benchmarks/agents/console.py`` run a dozen template sessions to the end
   or to where they stop: an order completed, one waiting for a signal
   ``approval``, one asleep for six hours, orders that failed for good with
   ``ConnectError`` / ``ReadTimeout`` / ``CardDeclinedError`` and a report with
   ``ValueError`` (each dead-lettered), a fan-out of 8 children; and the two
   big sessions whose pages are timed: a conversation of ``--long-steps``
   steps (a tool call each, checkpoints stored incrementally: a full page of
   events, a window of 20 checkpoints each rebuilt from its snapshot) and a
   parent of ``--children`` children. The worker is then stopped.
2. The bulk, cloned in SQL from those templates: each clone copies its
   template's session row, audit events, checkpoints, tool calls and dead
   letter with a new id (and new tool-call keys), every timestamp moved back
   by a random age of up to 7 days; a fan-out's children are cloned with
   their parent. Some clones then take another status the way the code
   writes it: running (a lease, a step started seconds ago), pending,
   retrying (a transient error, a retry due), blocked (a ``tool_call_diverged``
   reason), cancelled. The columns are read from the migrated schema, so the
   copies are the real table layout. The mix (``--sessions`` in all):
   ``--dead-letters`` failed with an open dead letter in 4 (agent, step, error
   type) groups of 55/25/12/8 %, 9 % waiting for a signal, 6 % asleep, 1.5 %
   running, 2.5 % pending, 1 % retrying, 0.4 % blocked, 1 % cancelled, 40
   fan-out families of 9, 8 % completed reports and the rest completed orders.
3. Then, logged in as a browser is (the login form's CSRF token, a name and
   the API token posted, the cookie kept), each page is requested
   ``--warmup`` times and then timed ``--requests`` times, one at a time, over
   one keep-alive connection (httpx). Printed: p50, p95 and max in
   milliseconds, the page's size, and PASS when p95 is under 300 ms.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers
run under ``--home`` (default ``.resumable/console``). The tables are
truncated and Redis is flushed: never point this at a database you care about.
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.harness import BenchDeployment, Services
from benchmarks.harness.report import bench_parser, context_lines, parse, percentile, verdict
from resumable.models.tables import SessionRow

AGENT_MODULE = "benchmarks.agents.console"
TARGET_MS = 300.0
PG = psycopg.Connection[tuple[Any, ...]]

# -- the templates: real sessions run by a real worker ------------------------------------


@dataclass(frozen=True)
class Template:
    agent: str
    input: dict[str, Any]
    # Where the worker leaves it: the status it must reach before cloning.
    status: str


TEMPLATES = {
    "order_done": Template("console_order", {"order": 1}, "completed"),
    "order_signal": Template("console_order", {"order": 2, "wait": "signal"}, "suspended"),
    "order_timer": Template("console_order", {"order": 3, "wait": "timer"}, "suspended"),
    "fail_connect": Template(
        "console_order", {"order": 4, "fail": "charge", "error": "ConnectError"}, "failed"
    ),
    "fail_timeout": Template(
        "console_order", {"order": 5, "fail": "quote", "error": "ReadTimeout"}, "failed"
    ),
    "fail_declined": Template(
        "console_order", {"order": 6, "fail": "charge", "error": "CardDeclinedError"}, "failed"
    ),
    "report_done": Template("console_report", {"order": 7}, "completed"),
    "report_fail": Template("console_report", {"order": 8, "fail": "render"}, "failed"),
    "fanout": Template("console_fanout", {"children": 8}, "completed"),
}
# The dead letters' groups: (template, share of --dead-letters).
DEAD_LETTER_GROUPS = (
    ("fail_connect", 0.55),
    ("fail_timeout", 0.25),
    ("fail_declined", 0.12),
    ("report_fail", 0.08),
)
FANOUT_FAMILIES = 40


@dataclass(frozen=True)
class Clones:
    """`count` clones of `template`, taking `status` afterwards (None: the template's)."""

    template: str
    count: int
    status: str | None = None


def clone_plan(sessions: int, dead_letters: int, existing: int) -> list[Clones]:
    """What to clone so that there are `sessions` in all (`existing` are there)."""
    # Each template is dead-lettered too: one letter of each group is there already.
    plan = [Clones(name, round(dead_letters * share) - 1) for name, share in DEAD_LETTER_GROUPS]
    rest = dead_letters - len(DEAD_LETTER_GROUPS) - sum(c.count for c in plan[1:])
    plan[0] = Clones(plan[0].template, rest)

    def share(fraction: float) -> int:
        return round(sessions * fraction)

    plan += [
        Clones("order_signal", share(0.09)),
        Clones("order_timer", share(0.06)),
        Clones("order_signal", share(0.015), "running"),
        Clones("order_signal", share(0.025), "pending"),
        Clones("fail_connect", share(0.01), "retrying"),
        Clones("order_signal", share(0.004), "blocked"),
        Clones("order_signal", share(0.01), "cancelled"),
        Clones("report_done", share(0.08)),
        Clones("fanout", FANOUT_FAMILIES),
    ]
    family = 1 + int(TEMPLATES["fanout"].input["children"])
    used = existing + sum(c.count * (family if c.template == "fanout" else 1) for c in plan)
    if used > sessions:
        raise SystemExit(f"--sessions {sessions} is too few for this mix (at least {used})")
    plan.append(Clones("order_done", sessions - used))
    return plan


def wait_for(
    conn: PG, expected: dict[uuid.UUID, str], timeout: float, alive: Callable[[], None]
) -> None:
    """Until every session has its expected status (a failed one: with its dead letter)."""
    deadline = time.monotonic() + timeout
    ids = list(expected)
    while True:
        rows = conn.execute(
            f"SELECT s.id, s.status, count(d.id) FROM sessions s {harness.BENCH_TAG}"
            " LEFT JOIN dead_letters d ON d.session_id = s.id"
            " WHERE s.id = ANY(%s) GROUP BY s.id, s.status",
            [ids],
        ).fetchall()
        found = {sid: (status, letters) for sid, status, letters in rows}
        late = [
            f"{sid} is {found.get(sid, ('missing', 0))[0]}, not {status}"
            for sid, status in expected.items()
            if found.get(sid, ("", 0))[0] != status or (status == "failed" and not found[sid][1])
        ]
        if not late:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"templates not ready after {timeout:g} s: {late[:5]}")
        alive()
        time.sleep(0.05)


@dataclass
class Run:
    """The sessions the benchmark made, by name."""

    templates: dict[str, uuid.UUID] = field(default_factory=dict)
    long: uuid.UUID | None = None
    parent: uuid.UUID | None = None


def run_templates(
    args: argparse.Namespace, services: Services, deployment: BenchDeployment, conn: PG
) -> Run:
    run = Run()
    with harness.bench_client(services.settings(), 4) as client:
        for name, template in TEMPLATES.items():
            run.templates[name] = client.start(template.agent, template.input)
        run.long = client.start("console_long", {"steps": args.long_steps})
        run.parent = client.start("console_fanout", {"children": args.children})
    expected = {run.templates[name]: t.status for name, t in TEMPLATES.items()}
    expected[run.long] = "completed"
    expected[run.parent] = "completed"
    wait_for(conn, expected, args.timeout, deployment.check_alive)
    return run


# -- the bulk: clones of the templates, in SQL ----------------------------------------------

CLONE_MAP = """
CREATE TEMPORARY TABLE clone_map (
    template uuid NOT NULL, k int NOT NULL, new_id uuid NOT NULL,
    shift interval NOT NULL, status text
)
"""
# `count` clones of one template, each with its own id and age.
MAP_CLONES = """
INSERT INTO clone_map (template, k, new_id, shift, status)
SELECT %(template)s, g, gen_random_uuid(), make_interval(secs => random() * 7 * 86400),
       %(status)s
FROM generate_series(%(first)s, %(first)s + %(count)s - 1) AS g
"""
# A cloned parent's children, cloned with it (same k, same age).
MAP_CHILDREN = """
INSERT INTO clone_map (template, k, new_id, shift, status)
SELECT c.id, p.k, gen_random_uuid(), p.shift, NULL
FROM sessions c JOIN clone_map p ON p.template = c.parent_id
WHERE c.parent_id = %(parent)s
"""
# What a status given to clones changes, as the code writes that status.
BLOCKED_REASON = """jsonb_build_object(
    'kind', 'tool_call_diverged', 'step', 'charge', 'step_seq', s.step_seq, 'call_index', 0,
    'from', 'running',
    'message', 'step charge call #0 asks for other arguments than recorded: argument '
               'currency changed from ''EUR'' to ''USD''',
    'recorded', jsonb_build_object('tool', 'charge', 'status', 'completed',
                                   'request', jsonb_build_object('currency', 'EUR')),
    'requested', jsonb_build_object('tool', 'charge',
                                    'request', jsonb_build_object('currency', 'USD')))"""
STATUS_CHANGES = {
    "running": "cursor = 'charge', wait = NULL, wake_at = NULL, lease_epoch = s.lease_epoch + 1,"
    " lease_owner = 'bench-host:4242:t' || (random() * 8)::int,"
    " lease_expires_at = now() + interval '30 seconds',"
    " step_started_at = now() - random() * interval '20 seconds',"
    " updated_at = now() - random() * interval '60 seconds'",
    "pending": "cursor = 'charge', wait = NULL, wake_at = NULL,"
    " updated_at = now() - random() * interval '120 seconds'",
    "retrying": "finished_at = NULL, attempts = 1, wake_at = now() + random() * interval '60 s',"
    " updated_at = now() - random() * interval '10 seconds'",
    "blocked": f"cursor = 'charge', wait = NULL, wake_at = NULL, blocked_reason = {BLOCKED_REASON}",
    "cancelled": "wait = NULL, wake_at = NULL, finished_at = s.updated_at",
}
# Tables cloned per session, with the columns that change: the rest are copied
# (a timestamp moved back by the clone's age).
CLONED_TABLES: dict[str, tuple[str, dict[str, str], str]] = {
    # table: (its session column, overrides, extra condition)
    "sessions": (
        "id",
        {
            "id": "m.new_id",
            "idempotency_key": "NULL",
            "parent_id": "p.new_id",
            # A sleeper wakes hours from now, not in its template's past.
            "wake_at": "CASE WHEN t.wake_at IS NOT NULL"
            " THEN now() + random() * interval '6 hours' END",
        },
        "",
    ),
    "audit_events": ("session_id", {"session_id": "m.new_id"}, ""),
    "checkpoints": ("session_id", {"session_id": "m.new_id"}, ""),
    "tool_execution_cache": (
        "session_id",
        {
            "session_id": "m.new_id",
            "idempotency_key": "encode(sha256(convert_to(m.new_id::text || t.idempotency_key,"
            " 'UTF8')), 'hex')",
        },
        "",
    ),
    # A clone given another status (retrying) has no dead letter.
    "dead_letters": ("session_id", {"session_id": "m.new_id"}, " AND m.status IS NULL"),
}


def clone_sql(conn: PG, table: str) -> str:
    """INSERT ... SELECT copying `table`'s rows of the templates to their clones,
    with the migrated columns (identities left to the database)."""
    key, overrides, extra = CLONED_TABLES[table]
    columns = conn.execute(
        f"SELECT column_name, data_type, is_identity {harness.BENCH_TAG}"
        " FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
        [table],
    ).fetchall()
    names, values = [], []
    for name, data_type, identity in columns:
        if identity == "YES":
            continue
        names.append(name)
        if name in overrides:
            values.append(overrides[name])
        elif data_type == "timestamp with time zone":
            values.append(f"t.{name} - m.shift")
        else:
            values.append(f"t.{name}")
    parent = (
        " LEFT JOIN clone_map p ON p.template = t.parent_id AND p.k = m.k"
        if table == "sessions"
        else ""
    )
    return (
        f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(values)}"
        f" FROM {table} t JOIN clone_map m ON m.template = t.{key}{parent}"
        f" WHERE true{extra}"
    )


def load_clones(conn: PG, run: Run, plan: Sequence[Clones]) -> dict[str, int]:
    """Clone the templates as `plan` says; rows now in each table."""
    conn.execute(CLONE_MAP)
    first = 1
    for clones in plan:
        template = run.templates[clones.template]
        params = {"template": template, "first": first, "count": clones.count}
        conn.execute(MAP_CLONES, {**params, "status": clones.status})
        first += clones.count
    conn.execute(MAP_CHILDREN, {"parent": run.templates["fanout"]})
    with conn.transaction():
        for table in CLONED_TABLES:
            conn.execute(clone_sql(conn, table))
        for status, changes in STATUS_CHANGES.items():
            conn.execute(
                f"UPDATE sessions s SET status = %s, {changes} FROM clone_map m"
                " WHERE s.id = m.new_id AND m.status = %s",
                [status, status],
            )
    conn.execute("DROP TABLE clone_map")
    tables = [*CLONED_TABLES, "finished_session_counts", "resting_session_counts"]
    harness.settle(conn, tables)
    counts = {}
    for table in CLONED_TABLES:
        row = conn.execute(f"SELECT count(*) FROM {table} {harness.BENCH_TAG}").fetchone()
        counts[table] = int(row[0]) if row else 0
    return counts


# -- the console, as a browser sees it ------------------------------------------------------

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def log_in(http: httpx.Client, token: str) -> None:
    """The login form, filled in and posted; the session cookie kept by `http`."""
    form = http.get("/ui/login")
    form.raise_for_status()
    found = _CSRF.search(form.text)
    if found is None:
        raise RuntimeError("no CSRF token in the login form")
    answer = http.post(
        "/ui/login",
        data={"csrf": found.group(1), "next": "/ui/sessions", "name": "bench", "token": token},
    )
    if answer.status_code != 303 or "resumable_console" not in http.cookies:
        raise RuntimeError(f"login refused: {answer.status_code} {answer.text[:200]}")


@dataclass(frozen=True)
class Page:
    label: str
    path: str
    # Text the page must show (the benchmark measures the page it means to).
    expect: str


@dataclass
class Timing:
    page: Page
    seconds: list[float]
    size: int

    @property
    def p95_ms(self) -> float:
        return percentile(self.seconds, 0.95) * 1e3


def time_page(http: httpx.Client, page: Page, warmup: int, requests: int) -> Timing:
    size = 0
    seconds: list[float] = []
    for index in range(warmup + requests):
        started = time.perf_counter()
        answer = http.get(page.path)
        took = time.perf_counter() - started
        if answer.status_code != 200 or page.expect not in answer.text:
            raise RuntimeError(
                f"{page.path}: {answer.status_code}, {page.expect!r} not in the page:"
                f" {answer.text[:300]}"
            )
        size = len(answer.content)
        if index >= warmup:
            seconds.append(took)
    return Timing(page, seconds, size)


def pages(conn: PG, run: Run) -> list[Page]:
    prefix = str(run.templates["order_done"])[:2]  # 1 in 256: ~40 sessions
    drain = "/ui/dead-letters/drain?action=retry&limit=1000"
    group = "&agent=console_order&step=charge&error_type=ConnectError"
    return [
        Page("sessions: default (newest 50)", "/ui/sessions", "Status"),
        Page("sessions: status=failed", "/ui/sessions?status=failed", "failed"),
        Page("sessions: status=suspended", "/ui/sessions?status=suspended", "suspended"),
        Page(
            "sessions: agent=console_report", "/ui/sessions?agent=console_report", "console_report"
        ),
        Page(f"sessions: id starts with {prefix}", f"/ui/sessions?id={prefix}", prefix),
        Page(
            "sessions: status=blocked, agent=console_order",
            "/ui/sessions?status=blocked&agent=console_order",
            "blocked",
        ),
        Page("session: long conversation", f"/ui/sessions/{run.long}", "Checkpoints"),
        Page("session: parent of many children", f"/ui/sessions/{run.parent}", "Children"),
        Page(
            "session: failed, dead-lettered",
            f"/ui/sessions/{run.templates['fail_connect']}",
            "Dead letter",
        ),
        Page("dead letters: default (+ alike groups)", "/ui/dead-letters", "Alike failures"),
        Page(
            "dead letters: one group",
            "/ui/dead-letters?agent=console_order&step=charge&error_type=ConnectError",
            "Alike failures",
        ),
        Page("drain dry run: retry all open (1,000)", drain, "Drain"),
        Page("drain dry run: retry one group", drain + group, "Drain"),
    ]


# -- the report ------------------------------------------------------------------------------


def table(timings: Sequence[Timing]) -> list[str]:
    width = max(len(t.page.label) for t in timings)
    lines = [
        f"  {'page':<{width}}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'KB':>7}"
        f"   target p95 < {TARGET_MS:.0f} ms"
    ]
    for timing in timings:
        values = timing.seconds
        lines.append(
            f"  {timing.page.label:<{width}}{percentile(values, 0.5) * 1e3:9.1f}"
            f"{timing.p95_ms:9.1f}{max(values) * 1e3:9.1f}{timing.size / 1024:7.0f}"
            f"   {verdict(timing.p95_ms < TARGET_MS)}"
        )
    return lines


def data_line(conn: PG, counts: dict[str, int]) -> str:
    by_status = conn.execute(
        f"SELECT status, count(*) FROM sessions {harness.BENCH_TAG} GROUP BY status ORDER BY 2 DESC"
    ).fetchall()
    letters = conn.execute(
        f"SELECT count(*), count(DISTINCT (agent, step, error_type)) FROM dead_letters"
        f" {harness.BENCH_TAG} WHERE status = 'open'"
    ).fetchone()
    assert letters is not None
    statuses = ", ".join(f"{status} {n:,}" for status, n in by_status)
    return (
        f"data: {counts['sessions']:,} sessions ({statuses}); {letters[0]:,} open dead letters"
        f" in {letters[1]} groups; {counts['audit_events']:,} events,"
        f" {counts['checkpoints']:,} checkpoints, {counts['tool_execution_cache']:,} tool calls"
    )


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, home="console", timeout=120.0)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--dead-letters", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=30, help="timed requests per page")
    parser.add_argument("--warmup", type=int, default=5, help="untimed requests per page first")
    parser.add_argument("--long-steps", type=int, default=160, help="steps of the big session")
    parser.add_argument("--children", type=int, default=300, help="children of the big parent")
    names = ("sessions", "dead_letters", "requests", "long_steps", "children")
    args = parse(parser, argv, names)
    token = "bench-" + secrets.token_hex(16)
    env = harness.worker_env(8, RESUMABLE_API_TOKENS=token)
    with harness.bench_services(args.home) as services:
        tables = list(SessionRow.metadata.tables)
        harness.reset_data(services.pg_url, services.redis_url, tables)
        log_dir = harness.log_dir_for(args.home)
        with (
            BenchDeployment(services, log_dir, env) as deployment,
            harness.connect(services.pg_url) as conn,
        ):
            url = deployment.start_web()
            deployment.start_workers(1, AGENT_MODULE)
            started = time.monotonic()
            run = run_templates(args, services, deployment, conn)
            ran = time.monotonic() - started
            for worker in deployment.workers:  # nothing moves while pages are timed
                worker.stop(harness.STOP_GRACE_SECONDS)
            existing = int(harness.scalar(services.pg_url, "SELECT count(*) FROM sessions"))
            plan = clone_plan(args.sessions, args.dead_letters, existing)
            started = time.monotonic()
            counts = load_clones(conn, run, plan)
            loaded = time.monotonic() - started
            print(f"templates run by a worker in {ran:.1f} s; clones loaded in {loaded:.1f} s")
            with httpx.Client(base_url=url, timeout=args.timeout) as http:
                log_in(http, token)
                timings = [
                    time_page(http, page, args.warmup, args.requests) for page in pages(conn, run)
                ]
            summary = data_line(conn, counts)
            missed = [t for t in timings if t.p95_ms >= TARGET_MS]
    print()
    for line in context_lines(services.where):
        print(line)
    print(summary)
    print(
        f"{args.requests} timed requests per page after {args.warmup} untimed, one at a time,"
        f" logged in, over one keep-alive connection:"
    )
    for line in table(timings):
        print(line)
    print(f"{len(timings) - len(missed)} of {len(timings)} pages under {TARGET_MS:.0f} ms (p95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
