"""When a pool's next cycle is due: every poll interval, sooner when something falls due.

Pure: the facts of the cycle that just ended in, seconds out. The pool's loop
(controller/pool_loop.py) sleeps that long unless something wakes it earlier (a pod event,
a spec change).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ironic_shard_operator.core.fencing import grace_left
from ironic_shard_operator.core.model import Member
from ironic_shard_operator.core.pods import parse_time

# Retry delay after a failed cycle (Kubernetes or Ironic unreachable, a Secret unusable, a
# write refused), at most the poll.
RETRY_SECONDS = 10.0
# After a grace ends, the next cycle runs this much later (so it sees the grace over).
AFTER_GRACE_SECONDS = 0.5
# After a time-based pod decision falls due (pending timeout, ForceAfter), this much later.
AFTER_WAKE_SECONDS = 1.0
# After shard moves were written: confirm them and continue with what is left.
AFTER_MOVES_SECONDS = 1.0


def next_delay(*, poll_seconds: float, members: Iterable[Member], grace_seconds: float, now: float,
               failed: bool, wake_after: float | None, moves_applied: int,
               retry_seconds: float = RETRY_SECONDS) -> float:
    """Seconds until the next cycle: the poll interval, or sooner when a member's grace ends
    (it then leaves the ring: be there), when something failed that a retry may fix (Ironic,
    a Secret, a write the API server refused), when a pod decision
    falls due (`wake_after`, pods.Decision), or when moves were written. Never more than
    `poll_seconds`."""
    delay = poll_seconds
    for member in members:
        left = grace_left(member, now, grace_seconds)
        if left is not None:
            delay = min(delay, left + AFTER_GRACE_SECONDS)
    if failed:
        delay = min(delay, retry_seconds)
    if wake_after is not None:
        delay = min(delay, wake_after + AFTER_WAKE_SECONDS)
    if moves_applied:
        delay = min(delay, AFTER_MOVES_SECONDS)
    return delay


def handover_retry_in(section: Mapping[str, Any] | None, now: float) -> float | None:
    """Seconds until the earliest `nextRetryAt` of a status.handover section (a failed Job's
    batch is tried again then), 0 when one is past; None when none is set. As a `wake_after`
    for next_delay, so a retry is not up to a poll late."""
    due = [parse_time(source.get("nextRetryAt")) for source in (section or {}).get("sources") or ()
           if source.get("nextRetryAt")]
    return max(0.0, min(due) - now) if due else None
