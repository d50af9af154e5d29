"""The leader-election rule on a coordination.k8s.io/v1 Lease, pure.

One replica acts: the holder of the Lease `ironic-shard-operator`. A foreign holder is
taken over only once its record stayed unchanged for its whole lease duration as measured
on this replica's own monotonic clock (no trust in clock sync), or when it released the
Lease. controller/leader.py does the reading and writing.

The holder writes (Ironic shards, pods, Nova, status) only while `may_write`: less than
RENEW_DEADLINE has passed on its own clock since it STARTED its last successful renewal.
A standby first sees that renewal after it was started, and takes over no sooner than
LEASE_DURATION later on its own clock. So WRITE_MARGIN (LEASE_DURATION - RENEW_DEADLINE)
separates the holder's last write from the earliest takeover: room for a write checked
just before the deadline to reach its server, and for the two clocks' rates to differ. A
holder that was frozen (SIGSTOP, a paused VM) and wakes up past its deadline finds
`may_write` False before its next write, whatever it was doing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

LEASE_NAME = "ironic-shard-operator"
LEASE_DURATION = 15.0  # a standby waits this long for a holder's record to change
RENEW_DEADLINE = 10.0  # the holder stops writing this long after its last renewal began
RETRY = 2.0            # renewal (and standby) attempts are this far apart
WRITE_MARGIN = LEASE_DURATION - RENEW_DEADLINE


def micro_time(seconds: float) -> str:
    """Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Observed:
    """The holder record last seen and when (on this replica's monotonic clock)."""

    record: tuple[Any, ...] | None = None
    at: float = 0.0


def claim(lease: Mapping[str, Any] | None, me: str, observed: Observed, mono: float,
          wall: float) -> dict[str, Any] | None:
    """The Lease to write to hold leadership now, or None when another replica holds it.

    Pure. `observed` is updated with the holder record seen; a foreign holder is taken
    over only once its record stayed unchanged for its whole lease duration as measured
    here (`mono`), or when it released the Lease (empty holder).
    """
    spec = dict((lease or {}).get("spec") or {})
    holder = spec.get("holderIdentity") or ""
    record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
    if record != observed.record:
        observed.record, observed.at = record, mono
    duration = float(spec.get("leaseDurationSeconds") or LEASE_DURATION)
    if holder and holder != me and mono - observed.at < duration:
        return None
    now = micro_time(wall)
    new_spec = dict(spec, holderIdentity=me, leaseDurationSeconds=int(LEASE_DURATION), renewTime=now)
    if holder != me:
        new_spec["acquireTime"] = now
        new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease else 0)
    metadata = dict((lease or {}).get("metadata") or {})
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {k: metadata[k] for k in ("name", "namespace", "resourceVersion") if k in metadata}
            or {"name": LEASE_NAME},
            "spec": new_spec}


def may_write(last_renewed: float | None, now: float) -> bool:
    """Whether the holder may still write at `now`: it renewed (or acquired) the Lease in a
    renewal that began at `last_renewed` (None: never), less than RENEW_DEADLINE ago.

    Both times are on the holder's own monotonic clock; pure. A `now` before
    `last_renewed` (a clock that is not monotonic) is refused too.
    """
    return last_renewed is not None and 0.0 <= now - last_renewed < RENEW_DEADLINE
