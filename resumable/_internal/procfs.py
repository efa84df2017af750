"""What the kernel says about a process: alive or not, its start, its group, its CPU.

One reader of ``/proc/PID/stat`` for everything that asks: the embedded
servers' user registry (is that user still alive, is it the same process),
the process supervisor (is anything of that process group left) and the
benchmarks (CPU seconds per process). ``kill(pid, 0)`` alone is not enough:
it succeeds for a zombie, which an init that never reaps (a container's
``sleep infinity``) may keep forever. Where there is no ``/proc``, a process
that answers ``kill(pid, 0)`` counts as alive.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

PROC = Path("/proc")

# Indexes into the fields after the command name (see proc(5), counted from "state").
STATE, PARENT, GROUP = 0, 1, 2
USER_TICKS, SYSTEM_TICKS, CHILDREN_USER_TICKS, CHILDREN_SYSTEM_TICKS = 11, 12, 13, 14
START_TICKS = 19


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name, or None if gone."""
    return _fields(PROC / str(pid) / "stat")


def _fields(stat: Path) -> list[str] | None:
    """A ``stat`` file's fields after the command name (a process's or a thread's).

    The command name is in parentheses and may itself hold spaces and ")",
    hence the split at the last ") ".
    """
    try:
        text = stat.read_text()
    except OSError:
        return None
    try:
        return text.rsplit(") ", 1)[1].split()
    except IndexError:
        return None


def _live_members(pgid: int) -> Iterator[Path]:
    """The ``/proc/PID`` folder of each process of group `pgid` that is not a zombie."""
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = stat_fields(int(entry.name))
            if fields and int(fields[GROUP]) == pgid and fields[STATE] != "Z":
                yield entry


def _signalable(pid: int, *, group: bool = False) -> bool:
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    if not _signalable(pid):
        return False
    if not PROC.is_dir():
        return True
    fields = stat_fields(pid)
    return fields is not None and fields[STATE] != "Z"


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` has a member that is not a zombie."""
    if not _signalable(pgid, group=True):
        return False
    if not PROC.is_dir():
        return True
    return any(True for _ in _live_members(pgid))


def group_stopped(pgid: int) -> bool:
    """Whether every thread of every live process in group `pgid` is stopped.

    A SIGSTOP is not a stop the moment ``kill`` returns: the kernel wakes one
    thread of each process, and only when that thread runs does it stop the
    others. On a loaded machine that takes tens of milliseconds, while the
    process's other threads go on running (a paused worker's tool call could
    still send its write). Whoever must know the process is frozen waits on this.
    """
    found = False
    for member in _live_members(pgid):
        found = True
        try:
            tasks = list((member / "task").iterdir())
        except OSError:
            continue  # gone meanwhile
        for task in tasks:
            fields = _fields(task / "stat")  # None: a thread that just exited
            if fields and fields[STATE] not in ("T", "t", "Z", "X"):
                return False
    return found


def start_time(pid: int) -> str:
    """The kernel's start time of `pid` (clock ticks since boot), to tell a reused
    pid from the original; "" if unknown."""
    fields = stat_fields(pid)
    return fields[START_TICKS] if fields else ""


def parent(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[PARENT]) if fields else None


def children(of: int) -> list[int]:
    """The pids whose parent is `of`."""
    found: list[int] = []
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if entry.name.isdigit() and parent(int(entry.name)) == of:
            found.append(int(entry.name))
    return found


def cpu_seconds(pid: int, *, reaped_children: bool = False) -> float | None:
    """User + system CPU seconds of `pid` (None if gone); with `reaped_children`,
    plus those of its children it has waited for (a postmaster's exited backends)."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    ticks = int(fields[USER_TICKS]) + int(fields[SYSTEM_TICKS])
    if reaped_children:
        ticks += int(fields[CHILDREN_USER_TICKS]) + int(fields[CHILDREN_SYSTEM_TICKS])
    return ticks / os.sysconf("SC_CLK_TCK")
