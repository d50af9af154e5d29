"""The live processes of a process group, read from /proc: shared by the scripts under hack/
that start services in a group of their own and must know when all of it has ended.

Only the standard library; imported by path (each script puts hack/ on sys.path).
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
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members
