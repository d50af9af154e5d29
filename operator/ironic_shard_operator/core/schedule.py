"""When a pool's next cycle is due: every poll interval, sooner when something falls due.

Pure, and the one place that says it: after a cycle that ended normally (`next_delay`, with
`earliest_wake`), one that raised (`after_failed_cycle`), an invalid spec (`after_invalid_spec`)
and a Conflict (`after_conflict`). The pool's loop (controller/pool_loop.py) sleeps that long
unless something wakes it earlier (a pod event, a spec change).
"""

from __future__ import annotations

from collections.abc import Iterable

from ironic_shard_operator.core.fencing import grace_left
from ironic_shard_operator.core.handover import RecordedHandover
from ironic_shard_operator.core.model import Member
from ironic_shard_operator.core.pods import parse_time

# Retry delay after a failed cycle (Kubernetes or Ironic unreachable, a Secret unusable, a
# write refused), at most the poll.
FAILED_CYCLE_RETRY_SECONDS = 10.0
# After a grace ends, the next cycle runs this much later (so it sees the grace over).
AFTER_GRACE_SECONDS = 0.5
# While a member is within its grace, a cycle at least this often: a certain failure that no
# pod event announces (its Kubernetes node given the out-of-service taint or deleted, while the
# pod stays as it was) counts it out within seconds, not a poll interval later. A cycle reads
# the nodes of members that are not Ready (one GET each) and, steady, two Ironic requests.
IN_GRACE_RECHECK_SECONDS = 5.0
# After a time-based pod decision falls due (pending timeout, ForceAfter), this much later.
AFTER_WAKE_SECONDS = 1.0
# After shard moves were written: confirm them and continue with what is left.
AFTER_MOVES_SECONDS = 1.0
# An invalid spec is fixed only by an edit (which wakes the pool): look again only rarely.
INVALID_SPEC_RETRY_SECONDS = FAILED_CYCLE_RETRY_SECONDS * 30


def after_failed_cycle() -> float:
    """A cycle that raised (Kubernetes or Ironic unreachable): try again soon."""
    return FAILED_CYCLE_RETRY_SECONDS


def after_invalid_spec() -> float:
    """A spec the operator cannot read: an edit wakes the pool; otherwise look again rarely."""
    return INVALID_SPEC_RETRY_SECONDS


def after_conflict(poll_seconds: float) -> float:
    """A pool in Conflict writes nothing: it looks again every poll, until the other pool goes."""
    return poll_seconds


def earliest_wake(pod_wake: float | None, handover: RecordedHandover, now: float,
                  handover_step_soon: bool) -> float | None:
    """The `wake_after` of next_delay: the earliest of a pod decision falling due, a failed
    handover batch's retry (`handover_retry_in`) and a handover step that has more to do at once
    (AFTER_MOVES_SECONDS); None when nothing falls due before the poll."""
    wakes = [w for w in (pod_wake, handover_retry_in(handover, now),
                         AFTER_MOVES_SECONDS if handover_step_soon else None) if w is not None]
    return min(wakes, default=None)


def next_delay(*, poll_seconds: float, members: Iterable[Member], rebalance_after_seconds: float, now: float,
               failed: bool, wake_after: float | None, moves_applied: int,
               retry_seconds: float = FAILED_CYCLE_RETRY_SECONDS) -> float:
    """Seconds until the next cycle: the poll interval, or sooner when a member is within its
    grace (every IN_GRACE_RECHECK_SECONDS: a certain failure ends it at once) and just after it
    ends (it then leaves the ring: be there), when something failed that a retry may fix (Ironic,
    a Secret, a write the API server refused), when a pod decision
    falls due (`wake_after`, pods.Decision), or when moves were written. Never more than
    `poll_seconds`."""
    delay = poll_seconds
    for member in members:
        left = grace_left(member, now, rebalance_after_seconds)
        if left is not None:
            delay = min(delay, left + AFTER_GRACE_SECONDS, IN_GRACE_RECHECK_SECONDS)
    if failed:
        delay = min(delay, retry_seconds)
    if wake_after is not None:
        delay = min(delay, wake_after + AFTER_WAKE_SECONDS)
    if moves_applied:
        delay = min(delay, AFTER_MOVES_SECONDS)
    return delay


def handover_retry_in(recorded: RecordedHandover, now: float) -> float | None:
    """Seconds until the earliest `nextRetryAt` of a handover's sources (a failed Job's
    batch is tried again then), 0 when one is past; None when none is set. As a `wake_after`
    for next_delay, so a retry is not up to a poll late."""
    due = [parse_time(source.get("nextRetryAt")) for source in recorded.sources.values()
           if source.get("nextRetryAt")]
    return max(0.0, min(due) - now) if due else None
