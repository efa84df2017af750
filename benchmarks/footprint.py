"""How much memory the default deployment holds at idle.

Run from the repository root::

    .venv/bin/python benchmarks/footprint.py [--sessions 200 --settle 3]

Starts the deployment as its defaults run it, with real processes on the
benchmark's servers: one ``resumable web``, one ``resumable worker`` (its
supervising parent and one child per core, the default) and one ``resumable
scheduler``. Memory is read from ``/proc/PID/smaps_rollup`` twice:

- ``started``: once every process is ready;
- ``after work``: after ``--sessions`` sessions of ``benchmarks.agents.noop``
  (``--steps`` steps each) ran to completion and the deployment settled for
  ``--settle`` seconds, since pools, caches and the allocator's arenas grow
  with the first work and stay grown.

The figure that matters is the proportional set size (PSS): a page shared by
the worker's parent and its forked children is counted once, split between
them, so the PSS of every process adds up to what the deployment really costs
the machine (RSS would count the shared pages once per process). The target
(issue 38): at most 300 MiB in all, at idle.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home``. The tables are truncated and Redis is flushed: never point
this at a database you care about.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.harness import BenchDeployment, bench_services, log_dir_for
from benchmarks.harness.report import bench_parser, context_lines, parse
from resumable._internal import procfs

AGENTS = "benchmarks.agents.noop"
TARGET_MIB = 300.0
TRUNCATED = ("sessions",)


@dataclass(frozen=True)
class Memory:
    """One process's memory, in MiB."""

    rss: float
    pss: float
    pss_anon: float

    @classmethod
    def of(cls, pid: int) -> Memory | None:
        """Read from smaps_rollup; None if the process is gone or not readable."""
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            return None
        fields: dict[str, float] = {}
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if len(parts) == 2 and parts[1] == "kB":
                fields[name] = int(parts[0]) / 1024
        return cls(fields.get("Rss", 0.0), fields.get("Pss", 0.0), fields.get("Pss_Anon", 0.0))


def processes(deployment: BenchDeployment) -> list[tuple[str, int]]:
    """Every process of the deployment, named, the worker's children included."""
    named: list[tuple[str, int]] = []
    for child in deployment.processes.children:
        named.append((child.name, child.pid))
        for index, pid in enumerate(sorted(procfs.children(child.pid))):
            named.append((f"{child.name} child {index + 1}", pid))
    return named


def report(title: str, deployment: BenchDeployment) -> float:
    """Print each process's memory and the total; returns the total PSS."""
    print(f"\n{title:<34} {'RSS MiB':>9} {'PSS MiB':>9} {'PSS anon':>9}")
    total = Memory(0.0, 0.0, 0.0)
    for name, pid in processes(deployment):
        memory = Memory.of(pid)
        if memory is None:
            raise RuntimeError(f"{name} (pid {pid}) is gone or unreadable")
        print(f"  {name:<32} {memory.rss:9.1f} {memory.pss:9.1f} {memory.pss_anon:9.1f}")
        total = Memory(
            total.rss + memory.rss, total.pss + memory.pss, total.pss_anon + memory.pss_anon
        )
    print(f"  {'in all':<32} {total.rss:9.1f} {total.pss:9.1f} {total.pss_anon:9.1f}")
    return total.pss


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, "bench-footprint", timeout=120.0)
    parser.add_argument("--sessions", type=int, default=200, help="sessions before 'after work'")
    parser.add_argument("--steps", type=int, default=5, help="steps per session")
    parser.add_argument("--settle", type=float, default=3.0, help="idle seconds before reading")
    args = parse(parser, argv, positive=["sessions", "steps"])
    if not Path("/proc/self/smaps_rollup").exists():
        parser.error("needs Linux's /proc/PID/smaps_rollup")
    with bench_services(args.home) as services:
        for context in context_lines(services.where):
            print(context)
        harness.reset_data(services.pg_url, services.redis_url, TRUNCATED)
        with BenchDeployment(services, log_dir_for(args.home), {}) as deployment:
            deployment.start_web()
            deployment.processes.scheduler()
            worker = deployment.processes.worker(AGENTS)
            deadline = time.monotonic() + args.timeout
            while "worker processes ready" not in worker.output():
                if time.monotonic() > deadline:
                    raise RuntimeError("the worker's children did not all become ready")
                deployment.check_alive()
                time.sleep(0.05)
            time.sleep(args.settle)
            started = report("started (idle)", deployment)
            with (
                harness.connect(services.pg_url) as poller,
                harness.bench_client(services.settings(), 4) as client,
            ):
                ids = harness.start_sessions(
                    client, "bench_noop", [{"steps": args.steps}] * args.sessions, 4
                )
                harness.wait_sessions(
                    poller,
                    lambda counts: counts["completed"] >= len(ids),
                    what=f"{len(ids)} sessions to complete",
                    timeout=args.timeout,
                    ids=ids,
                    alive=deployment.check_alive,
                )
            time.sleep(args.settle)
            worked = report(f"after {args.sessions} sessions (idle)", deployment)
    for label, pss in (("started", started), ("after work", worked)):
        verdict = "PASS" if pss <= TARGET_MIB else "MISS"
        print(
            f"target (idle, {label}): PSS <= {TARGET_MIB:g} MiB in all: {verdict} ({pss:.1f} MiB)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
