"""Live processes, read from /proc: for the starters of the peer services (Ironic, Nova), which
start each service in a process group of its own, must know when all of it has ended, and must
tell a process they started from a later one with the same PID.

Only the standard library: the starters run under any python3 >= 3.9, before the venv exists.
"""

from __future__ import annotations

import os
from pathlib import Path


def group_members(pgid: int) -> list[int]:
    """Live (not zombie, not dead) processes whose process group is `pgid`.

    Where /proc is missing, the best answer is whether the group can be signalled
    ([pgid] or []): zombies then count as alive.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    return [int(entry.name) for entry in proc.iterdir()
            if entry.name.isdigit() and (fields := _live_stat(entry.name)) and int(fields[2]) == pgid]


def cpu_seconds(pgid: int) -> float:
    """CPU time (user + system) the live processes of group `pgid` have used so far."""
    ticks = 0
    for pid in group_members(pgid):
        fields = _live_stat(pid)
        if fields:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (stat fields 14, 15)
    return ticks / os.sysconf("SC_CLK_TCK")


def resident_bytes(pgid: int, field: str = "VmRSS") -> int:
    """Resident memory of the live processes of group `pgid`, in bytes: now (VmRSS), or each
    process's peak so far summed (field "VmHWM")."""
    total = 0
    for pid in group_members(pgid):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(f"{field}:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def start_time_of(pid: int) -> str | None:
    """The kernel's start time of `pid` (tells it apart from a later process with the same PID);
    None when it is gone or a zombie."""
    fields = _live_stat(pid)
    return fields[19] if fields else None


def _live_stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after "pid (comm)" (state, ppid, pgrp, ...), or None when
    the process is gone, a zombie or dead."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # comm may hold spaces and parentheses
    return None if fields[0] in ("Z", "X") else fields
