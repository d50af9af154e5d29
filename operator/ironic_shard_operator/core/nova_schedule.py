"""When a pool's Nova is asked, and when its hypervisor list is audited.

Nova is optional and may be away; the cycle asks this schedule, not the clock, whether to
talk to it:
- Disabled (no compute endpoint, credentials refused, Nova too old): asked again after
  RECHECK_SECONDS.
- Unavailable (no answer, 5xx, any other Nova error): asked again after a backoff of
  FIRST_BACKOFF_SECONDS that doubles with every failure in a row, up to MAX_BACKOFF_SECONDS.
- Enabled: asked every cycle; the audit runs once per update interval of the members, but
  keeps Nova's API busy at most AUDIT_BUSY_SHARE of the time: it reads Nova's whole
  hypervisor list (at 1,000 nodes 2-9 s in the side-by-side bench, up to a minute on a busy
  nova-api), and a member's interval is 15 s at 250 nodes (core/tracker_interval.py): tied to
  the interval alone, a slow read would be repeated back to back, in the same nova-api and
  database the computes' passes use.
- A failover first: a due audit waits while a member is being forced down, or while a member's
  grace ends within AUDIT_LOOKAHEAD x the last read (a read started then would hold up that
  member's free nodes), but never more than one audit spacing past the first wait.
- A new clouds.yaml (another cloud): asked, and audited, at once.
- Before Nova has ever answered, it is not asked while Ironic cannot be read: with a cloud
  whose only endpoint is Ironic, "Nova" would be Ironic's dead URL, not news.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ironic_shard_operator.core.nova_policy import DISABLED, ENABLED, UNAVAILABLE

RECHECK_SECONDS = 300.0
FIRST_BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 300.0
# The next audit starts no sooner than the last one's duration / AUDIT_BUSY_SHARE after its start.
AUDIT_BUSY_SHARE = 0.2
# A due audit waits for a grace that ends within this many times the last read of Nova (a read
# slows under the load of a failover: the heirs' passes use the same nova-api and database).
AUDIT_LOOKAHEAD = 2.0


@dataclass(frozen=True, slots=True)
class NovaSchedule:
    """One pool's Nova timing between cycles. `retry_at`: Nova is not asked before then;
    `failures`: Unavailable cycles in a row; `answered`: Nova has answered at least once
    (this cloud has a Nova); `audited_at`: the last audit, None for none yet; `audit_seconds`:
    how long its read of Nova took; `postponed_at`: when a due audit was first left to a later
    cycle (None: not waiting)."""

    retry_at: float = 0.0
    failures: int = 0
    answered: bool = False
    audited_at: float | None = None
    audit_seconds: float = 0.0
    postponed_at: float | None = None

    def asks_nova(self, now: float, *, ironic_read: bool) -> bool:
        """Whether this cycle talks to Nova at all."""
        return now >= self.retry_at and (ironic_read or self.answered)

    def audit_due(self, now: float, interval: float) -> bool:
        """Whether this cycle audits: once per `interval` (the members' update interval), and
        never sooner than the last audit's duration / AUDIT_BUSY_SHARE after its start."""
        return self.audited_at is None or now - self.audited_at >= self.audit_spacing(interval)

    def audit_spacing(self, interval: float) -> float:
        """Seconds from one audit's start to the next's at the members' update `interval`."""
        return max(interval, self.audit_seconds / AUDIT_BUSY_SHARE)

    def audit_lookahead(self) -> float:
        """Seconds ahead within which a grace's end makes a due audit wait (0 before any read)."""
        return AUDIT_LOOKAHEAD * self.audit_seconds

    def may_postpone_audit(self, now: float, interval: float) -> bool:
        """Whether a due audit may wait one more cycle (a failover's writes go first): for one
        audit spacing from its first wait at most, so failures one after the other, or a
        member that keeps flapping, cannot starve the audit."""
        return self.postponed_at is None or now - self.postponed_at < self.audit_spacing(interval)

    def audit_postponed(self, now: float) -> NovaSchedule:
        """The audit due at `now` waits for a later cycle."""
        return self if self.postponed_at is not None else replace(self, postponed_at=now)

    def for_new_cloud(self) -> NovaSchedule:
        """Another clouds.yaml: ask at once and audit at once, rather than show the old
        cloud's findings or wait out its backoff."""
        return replace(self, retry_at=0.0, failures=0, audited_at=None)

    def answered_now(self) -> NovaSchedule:
        """Nova answered (its compute services were read)."""
        return replace(self, answered=True)

    def audited(self, now: float, seconds: float = 0.0) -> NovaSchedule:
        """The audit ran at `now`; its read of Nova took `seconds`."""
        return replace(self, audited_at=now, audit_seconds=max(0.0, seconds), postponed_at=None)

    def after(self, state: str, now: float) -> NovaSchedule:
        """The schedule after a cycle that ended in `state` (nova_policy's ENABLED,
        DISABLED or UNAVAILABLE) at `now`."""
        if state == ENABLED:
            return replace(self, retry_at=0.0, failures=0)
        if state == DISABLED:
            return replace(self, retry_at=now + RECHECK_SECONDS, failures=0)
        if state == UNAVAILABLE:
            failures = self.failures + 1
            return replace(self, retry_at=now + backoff(failures), failures=failures)
        raise ValueError(f"unknown Nova state {state!r}")


def backoff(failures: int, first: float = FIRST_BACKOFF_SECONDS, most: float = MAX_BACKOFF_SECONDS) -> float:
    """The wait after `failures` (>= 1) failures in a row: `first`, doubling with each
    failure, never more than `most` (Nova Unavailable cycles by default; handover Jobs pass
    their own bounds)."""
    return min(first * 2 ** (failures - 1), most)
