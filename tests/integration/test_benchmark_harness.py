"""The benchmarks' harness, stopped from outside: a benchmark ended with
``kill`` (SIGTERM) or by its terminal closing (SIGHUP) stops the resumable
processes it started. Each child leads a process group of its own, so only
the benchmark can stop them; before, a killed benchmark left its workers
taking messages from the next run on the same servers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from resumable._internal.embedded import ServiceURLs
from tests.conftest import ROOT, wait_until

# A benchmark cut down to what the harness does: its servers, a worker, then
# a long wait (where a real one measures).
BENCHMARK = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from benchmarks import harness

    with harness.bench_services(Path(sys.argv[1])) as services:
        with harness.BenchDeployment(services, Path(sys.argv[2]), harness.worker_env(2)) as d:
            (worker,) = d.start_workers(1, "tests.agents")
            print(worker.pid, flush=True)
            time.sleep(120)
    """
)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_benchmark_stopped_by_a_signal_stops_the_workers_it_started(
    urls: ServiceURLs, tmp_path: Path, stop: signal.Signals
) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": urls.database_url,
        "REDIS_URL": urls.redis_url,
        "PYTHONPATH": str(ROOT),
    }
    bench = subprocess.Popen(
        [sys.executable, "-c", BENCHMARK, str(tmp_path / "home"), str(tmp_path)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    worker: psutil.Process | None = None
    try:
        assert bench.stdout is not None
        line = bench.stdout.readline()  # once the worker is ready
        assert line.strip().isdigit(), f"the benchmark printed {line!r}"
        worker = psutil.Process(int(line))
        assert worker.is_running()

        bench.send_signal(stop)
        assert bench.wait(timeout=90) != 0  # interrupted, not finished

        def gone() -> bool:
            assert worker is not None
            return not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE

        wait_until(gone, timeout=10, what=f"the worker to stop after the benchmark's {stop.name}")
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        if bench.stdout is not None:
            bench.stdout.close()
        if worker is not None and worker.is_running():  # the failure: not left behind
            os.killpg(worker.pid, signal.SIGKILL)
