"""Sampling profiles of a benchmark's processes, with py-spy (a dev dependency).

A benchmark's CPU figures say how much each process spends; a profile says on
what. ``Profiles`` records the named processes (and their children) while its
block runs, one raw file per name, and ``shares`` folds a file into the share
of samples by the package whose code was running (the leaf frame), the self
time a cut can remove. Only threads holding the GIL are sampled (``--gil``):
Python's own CPU, not waits on sockets and locks, nor C code that released
the GIL (psycopg's and the servers' work is in the processes' CPU figures).
The sampler costs the profiled processes CPU of its own: read the shares,
not the CPU figures, of a profiled run.
"""

from __future__ import annotations

import collections
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

# "function (package/module.py:123)": py-spy names a frame's file from its
# package's root (or the stdlib's), so the first part of the path is the package.
_FRAME_FILE = re.compile(r"\((?P<file>[^():]+)(?::\d+)?\)$")


def package_of(frame: str) -> str:
    """The package (or stdlib module) a frame's code belongs to."""
    found = _FRAME_FILE.search(frame)
    if found is None:
        return "native"
    first = found.group("file").lstrip("/").split("/", 1)[0]
    return first.removesuffix(".py").split(".", 1)[0]


@dataclass(frozen=True)
class Shares:
    """A profile's samples, by package and by function (self time)."""

    samples: int
    by_package: list[tuple[str, float]]
    by_function: list[tuple[str, float]]


def shares(raw: Path, top: int = 12) -> Shares:
    """Fold a py-spy raw file (``frame;frame;... count`` per line)."""
    packages: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        leaf = stack.rsplit(";", 1)[-1]
        packages[package_of(leaf)] += count
        functions[leaf] += count
        total += count
    if not total:
        return Shares(0, [], [])
    return Shares(
        total,
        [(name, n / total) for name, n in packages.most_common()],
        [(name, n / total) for name, n in functions.most_common(top)],
    )


class Profiles:
    """py-spy records each named process (with its children) while the block
    runs: ``directory/<name>.txt``, raw (collapsed) stacks."""

    def __init__(self, directory: Path, pids: dict[str, int], rate: int = 1000) -> None:
        self.directory = directory
        self.pids = pids
        self.rate = rate
        self.samplers: dict[str, subprocess.Popen[bytes]] = {}

    def __enter__(self) -> Profiles:
        beside = Path(sys.executable).parent / "py-spy"  # the venv's, not on PATH
        exe = str(beside) if beside.exists() else shutil.which("py-spy")
        if exe is None:
            raise SystemExit("--profile needs py-spy (pip install py-spy; a dev dependency)")
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, pid in self.pids.items():
            command = [exe, "record", "--format", "raw", "--rate", str(self.rate), "--gil"]
            command += ["--subprocesses", "--nonblocking", "-o", str(self.path(name))]
            command += ["-p", str(pid)]
            self.samplers[name] = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sampler in self.samplers.values():
            sampler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for sampler in self.samplers.values():
            try:
                sampler.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sampler.kill()
                sampler.wait()

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.txt"

    def report(self) -> list[str]:
        """Lines of each process's shares, for the benchmark's output."""
        lines = []
        for name in self.pids:
            path = self.path(name)
            found = shares(path) if path.exists() else Shares(0, [], [])
            if not found.samples:
                lines.append(f"  {name}: no samples ({path})")
                continue
            packages = ", ".join(f"{pkg} {share:.0%}" for pkg, share in found.by_package[:10])
            lines.append(f"  {name} ({found.samples} samples, {path}): {packages}")
            lines += [f"      {share:5.1%}  {fn}" for fn, share in found.by_function]
        return lines
