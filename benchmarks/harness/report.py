"""The benchmarks' command lines and reports: the options every script takes,
the context lines every report opens with, and how numbers are summarized."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.harness.servers import ROOT

# -- command line ------------------------------------------------------------------------


def bench_parser(doc: str | None, home: str, timeout: float) -> argparse.ArgumentParser:
    """A parser described by the script's first paragraph, with ``--home`` and ``--timeout``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)
    parser.add_argument(
        "--home",
        type=Path,
        default=ROOT / ".resumable" / home,
        help="home of the embedded servers (when DATABASE_URL/REDIS_URL are unset)",
    )
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds allowed per wait")
    return parser


def add_deployment(parser: argparse.ArgumentParser, threads: int) -> None:
    """``--workers`` and ``--threads``."""
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--threads", type=int, default=threads, help="threads per worker process")


def parse(
    parser: argparse.ArgumentParser, argv: list[str] | None, positive: Sequence[str]
) -> argparse.Namespace:
    """Parse `argv`; each option named in `positive` must be at least 1; `home` resolved."""
    args = parser.parse_args(argv)
    for name in positive:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    args.home = args.home.expanduser().resolve()
    return args


# -- context -----------------------------------------------------------------------------


def machine() -> str:
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return f"{os.cpu_count()} CPUs, load average now {load} (other processes share them)"


def command_line() -> str:
    """The command as typed, the interpreter by its name (``python -m ...`` too)."""
    return " ".join([Path(sys.executable).name, *sys.orig_argv[1:]])


def library_version() -> str:
    """The git commit of the code the workers ran, and whether resumable/ had edits."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "resumable"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return f"git {head}" + (" + uncommitted changes in resumable/" if dirty else "")


def context_lines(where: str) -> list[str]:
    """What a reader needs to weigh the numbers: command, code, servers, machine."""
    return [
        f"command: {command_line()}",
        f"library: {library_version()}",
        f"servers: {where}",
        f"machine: {machine()}",
    ]


# -- numbers -----------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f}"


def latency_header(title: str, width: int = 50) -> str:
    return f"{title:<{width + 2}}{'p50 ms':>8}{'p95':>8}{'p99':>8}{'max':>8}"


def latency_line(label: str, values: Sequence[float], width: int = 50) -> str:
    """p50, p95, p99 and max of `values` (seconds) in milliseconds, under latency_header."""
    return (
        f"  {label:<{width}}{ms(percentile(values, 0.5))}{ms(percentile(values, 0.95))}"
        f"{ms(percentile(values, 0.99))}{ms(max(values))}"
    )


#: One durable run of a way: steps/s, CPU ms a step in all, and its parts by process.
WayRun = tuple[float, float, dict[str, float]]


def interleaved_ways(
    labels: Sequence[str], rounds: int, run: Callable[[int], WayRun]
) -> dict[str, list[WayRun]]:
    """Each way (`run` of its index in `labels`) once a round, `rounds`
    times, so that each meets the same machine; a line per run."""
    width = max(len(label) for label in labels)
    results: dict[str, list[WayRun]] = {label: [] for label in labels}
    for round_number in range(1, rounds + 1):
        for index, label in enumerate(labels):
            rate, cpu_ms, parts = run(index)
            results[label].append((rate, cpu_ms, parts))
            described = ", ".join(f"{name} {value:.3f}" for name, value in parts.items() if value)
            print(
                f"round {round_number}  {label:<{width}} {rate:8,.0f} steps/s  "
                f"{cpu_ms:.3f} ms CPU a step ({described})",
                flush=True,
            )
    return results


def print_best_rounds(results: dict[str, list[WayRun]], baseline_label: str) -> None:
    """Each way's best round (by steps/s) against the baseline way's."""
    width = max(len(label) for label in results)
    baseline = max(results[baseline_label], key=lambda result: result[0])
    print(f"\nbest round of each way, against {baseline_label}:")
    for label, runs in results.items():
        rate, cpu_ms, _ = max(runs, key=lambda result: result[0])
        rates = ", ".join(f"{run[0]:,.0f}" for run in runs)
        print(
            f"  {label:<{width}} {rate:8,.0f} steps/s ({rate / baseline[0]:.2f}x; rounds {rates}), "
            f"{cpu_ms:.3f} ms CPU a step ({cpu_ms / baseline[1]:.2f}x)"
        )
