"""The live processes of a process group, read from /proc: for the starters of the peer services
(Ironic, Nova), which start each service in a group of its own and must know when all of it
has ended.

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
