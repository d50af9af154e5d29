"""Whether the operator's pool loops are alive: what /healthz answers, so that the kubelet
restarts an operator whose loop is stuck (a hung request that no timeout ends, a deadlock, a
loop that died). Pure: the loop reports beats, this module judges them.

Each pool loop is either in a cycle (`busy_since`) or asleep until its next cycle is due
(`due`). A cycle waits on Ironic and Nova at most PATIENCE_SECONDS and each Kubernetes request
is bounded, so a healthy cycle takes seconds. A loop is stuck once it has been in one cycle, or
past its due time without starting one, for STUCK_INTERVALS poll intervals, and at least
STUCK_FLOOR_SECONDS (a slow API server under load must not restart the operator).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

STUCK_INTERVALS = 5
STUCK_FLOOR_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Beat:
    """A pool loop's last sign of life, on a monotonic clock: in a cycle since `busy_since`
    (None while it sleeps), its next cycle due at `due`; `interval` is the pool's poll interval."""

    busy_since: float | None
    due: float
    interval: float


def limit(interval: float) -> float:
    """How long a loop may be in one cycle, or late for the next, before it counts as stuck."""
    return max(STUCK_FLOOR_SECONDS, STUCK_INTERVALS * interval)


def stuck(beats: Mapping[str, Beat], now: float) -> list[str]:
    """One sentence per stuck pool loop (none: healthy), by pool."""
    out = []
    for pool, beat in sorted(beats.items()):
        allowed = limit(beat.interval)
        if beat.busy_since is not None and now - beat.busy_since > allowed:
            out.append(f"pool {pool}: one cycle has run for {now - beat.busy_since:.0f}s "
                       f"(more than {allowed:.0f}s: {STUCK_INTERVALS} poll intervals)")
        elif beat.busy_since is None and now - beat.due > allowed:
            out.append(f"pool {pool}: its next cycle was due {now - beat.due:.0f}s ago "
                       f"(more than {allowed:.0f}s: {STUCK_INTERVALS} poll intervals)")
    return out
