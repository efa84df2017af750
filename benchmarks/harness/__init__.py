"""What every benchmark script needs besides what it measures.

- ``servers``: the PostgreSQL and Redis a run uses, migrated, and a run
  stopped from outside that still stops what it started;
- ``database``: the benchmark's own statements, emptying and settling tables;
- ``deployment``: the resumable processes a run starts;
- ``sessions``: the benchmark as a client, starting sessions and waiting for them;
- ``pg_counters``: what PostgreSQL did (commits, rows, WAL, statements);
- ``cpu``: where CPU time went, and who waited for a CPU (Linux /proc);
- ``report``: the options every script takes and how its numbers are printed.

The scripts run as ``.venv/bin/python benchmarks/NAME.py`` from the repository
root and import this package as ``benchmarks.harness`` (each puts the root on
``sys.path`` first). What the first four define is exported here
(``harness.connect``, ``harness.BenchDeployment``, ...); the last three are
imported by their module. The fault matrix and the chaos run (``tests/faults``)
use it too.
"""

from benchmarks.harness.database import (
    BENCH_TAG,
    connect,
    prepare_threshold,
    reset_data,
    scalar,
    settle,
)
from benchmarks.harness.deployment import (
    DEFAULT_POOL_SIZE,
    START_TIMEOUT,
    STOP_GRACE_SECONDS,
    BenchDeployment,
    join_or_kill,
    worker_env,
)
from benchmarks.harness.servers import (
    ROOT,
    Services,
    bench_services,
    broker_named,
    log_dir_for,
    stopped_like_ctrl_c,
)
from benchmarks.harness.sessions import bench_client, start_sessions, wait_sessions

__all__ = [
    # Servers
    "ROOT",
    "Services",
    "bench_services",
    "broker_named",
    "log_dir_for",
    "stopped_like_ctrl_c",
    # Database
    "BENCH_TAG",
    "connect",
    "prepare_threshold",
    "reset_data",
    "scalar",
    "settle",
    # Deployment
    "DEFAULT_POOL_SIZE",
    "START_TIMEOUT",
    "STOP_GRACE_SECONDS",
    "BenchDeployment",
    "join_or_kill",
    "worker_env",
    # Sessions
    "bench_client",
    "start_sessions",
    "wait_sessions",
]
