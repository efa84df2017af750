"""How long a worker takes from spawn to consuming, and a killed child to be replaced.

Run from the repository root::

    .venv/bin/python benchmarks/cold_start.py [--rounds 5 --processes 2]

Each round times, with real processes on the benchmark's servers:

- ``single``: ``resumable worker --processes 1`` from spawn to its ``worker
  started`` line;
- ``first child`` / ``all children``: ``resumable worker --processes N`` from
  spawn to its first child's ``worker started`` line, and to the parent's
  ``all N worker processes ready``;
- ``replacement``: a child SIGKILLed under that parent, from the kill to its
  replacement's ``worker started`` line (what a crash storm pays per kill).

Beside them, measured in the same run, the floors: the interpreter alone
(``python -c pass``) and importing the worker's modules
(``python -c "import resumable.queue.worker"``). A start that costs much more
than the import floor spends it on work after the imports (agents loaded,
connections made, the heartbeat announced).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import ROOT, BenchDeployment, bench_services, log_dir_for
from benchmarks.harness.report import bench_parser, context_lines, parse, percentile
from resumable.dev.processes import Process

AGENTS = "benchmarks.agents.noop"


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> float:
    """Seconds until `predicate` is true (polled every 5 ms)."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        time.sleep(0.005)
    return time.monotonic() - started


def floor(code: str, rounds: int) -> list[float]:
    """Wall seconds of ``python -c CODE``, `rounds` times."""
    times = []
    for _ in range(rounds):
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
        times.append(time.monotonic() - started)
    return times


def started_lines(process: Process) -> int:
    return process.output().count("worker started:")


def time_single(deployment: BenchDeployment, timeout: float) -> float:
    started = time.monotonic()
    worker = deployment.processes.worker(AGENTS, RESUMABLE_WORKER_PROCESSES="1")
    try:
        wait_for(lambda: started_lines(worker) >= 1, timeout, "worker started")
        return time.monotonic() - started
    finally:
        worker.stop(30)


def time_supervised(
    deployment: BenchDeployment, processes: int, timeout: float
) -> tuple[float, float, float]:
    """(first child ready, all ready, a killed child replaced), seconds."""
    started = time.monotonic()
    worker = deployment.processes.worker(AGENTS, RESUMABLE_WORKER_PROCESSES=str(processes))
    try:
        wait_for(lambda: started_lines(worker) >= 1, timeout, "a child")
        first = time.monotonic()
        ready = f"all {processes} worker processes ready"
        wait_for(lambda: ready in worker.output(), timeout, ready)
        every = time.monotonic()
        pids = [int(p) for p in re.findall(r"started as pid (\d+)", worker.output())]
        before = started_lines(worker)
        os.kill(pids[0], signal.SIGKILL)
        replaced = wait_for(lambda: started_lines(worker) > before, timeout, "a replacement")
        return first - started, every - started, replaced
    finally:
        worker.stop(30)


def line(label: str, values: list[float], base: float | None = None) -> str:
    text = (
        f"  {label:<34} p50 {percentile(values, 0.5):6.2f} s   min {min(values):6.2f} s"
        f"   max {max(values):6.2f} s"
    )
    if base:
        text += f"   {percentile(values, 0.5) / base:4.1f}x the import floor"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, "bench", timeout=120.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2, help="children of the supervised run")
    args = parse(parser, argv, positive=["rounds", "processes"])
    with bench_services(args.home) as services:
        for context in context_lines(services.where):
            print(context)
        log_dir = log_dir_for(args.home)
        interpreter = floor("pass", args.rounds)
        imports = floor("import resumable.queue.worker", args.rounds)
        single: list[float] = []
        first: list[float] = []
        every: list[float] = []
        replaced: list[float] = []
        with BenchDeployment(services, log_dir, {}) as deployment:
            for _ in range(args.rounds):
                single.append(time_single(deployment, args.timeout))
                one, all_ready, again = time_supervised(deployment, args.processes, args.timeout)
                first.append(one)
                every.append(all_ready)
                replaced.append(again)
    base = percentile(imports, 0.5)
    print(f"\ncold start over {args.rounds} rounds")
    print(line("python -c pass", interpreter))
    print(line("import resumable.queue.worker", imports))
    print(line("single process: spawn -> started", single, base))
    print(line(f"{args.processes} processes: spawn -> first child", first, base))
    print(line(f"{args.processes} processes: spawn -> all ready", every, base))
    print(line("child SIGKILLed -> replacement", replaced, base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
