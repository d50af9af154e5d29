"""The safety rule of every shard write: given a planned move and a fresh read of its node,
write it or say why not.

The planner (or the Nova audit) decided from an observation; between that observation and
the write, Nova may have claimed the node, someone may have locked, moved or deleted it. The
Ironic adapter re-reads the node right before writing and writes only on WRITE, so:
- a node pinned since the observation (instance, provisioning, lock) is never moved;
- a node is written only from the shard the move was planned from (compare-and-set);
- a handover (spec.nova.repairMisplaced) moves a pinned node only while it still carries
  the instance the audit saw on it;
- a free node moving away from a LIVE owner (guarded) is re-read on its own right before its
  write, and is not moved while Placement holds allocations on its resource provider.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from ironic_shard_operator.core.fencing import counts_as_ready
from ironic_shard_operator.core.model import Member, Move, Node


class Verdict(Enum):
    """What to do with one move, and how it is counted when it is not written."""

    WRITE = "write"
    AT_TARGET = "at_target"   # already carries the target shard: nothing to write
    CLAIMED = "claimed"       # pinned since the observation: never moved
    CHANGED = "changed"       # gone, out of the pool, given another shard, or its instance changed


def move_verdict(move: Move, current: Node | None) -> Verdict:
    """The rule for a planned move: only a node still free and still at the move's source
    is written. `current` is the fresh read of the move's node (None: not found)."""
    if current is None:
        return Verdict.CHANGED
    if current.shard == move.target:
        return Verdict.AT_TARGET
    if current.pinned:
        return Verdict.CLAIMED
    if current.shard != move.source:
        return Verdict.CHANGED
    return Verdict.WRITE


def handover_verdict(move: Move, current: Node | None, instance: str | None) -> Verdict:
    """The rule for a handover of a pinned node: written only while the node is still at the
    move's source and still carries `instance`, the instance the audit saw on it (None: it
    saw none, and such a node is never handed over)."""
    if current is None:
        return Verdict.CHANGED
    if current.shard == move.target:
        return Verdict.AT_TARGET
    if current.shard != move.source:
        return Verdict.CHANGED
    if not current.instance_uuid or current.instance_uuid != instance:
        return Verdict.CHANGED  # its instance left or changed: nothing to repair
    return Verdict.WRITE


def live_owners(members: Iterable[Member], now: float, grace_seconds: float) -> frozenset[str]:
    """The members whose nova-compute may take a build on its nodes right now: Ready, or
    still within the grace (fencing.counts_as_ready). A free node moving away from one of
    them is a guarded move: a build may have claimed it in Placement (before Ironic shows an
    instance) or in Ironic since its batch was re-read. A node moving away from anyone else
    (a member past its grace, a retired identity, no owner at all) needs no guard: nothing
    can spawn there."""
    return frozenset(m.name for m in members if counts_as_ready(m, now, grace_seconds))


def guarded_verdict(move: Move, current: Node | None, claimed_in_placement: bool) -> Verdict:
    """The rule for a guarded move, from a read of its node made right before its own write
    (not its batch's) and Placement's answer for the node's resource provider: move_verdict's
    rule, and a node with allocations in Placement (a build in flight) counts as claimed,
    pinned for this cycle."""
    said = move_verdict(move, current)
    if said is Verdict.WRITE and claimed_in_placement:
        return Verdict.CLAIMED
    return said
