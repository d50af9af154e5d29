"""The safety rule of every shard write: given a planned move and a fresh read of its node,
write it or say why not.

The planner (or the Nova audit) decided from an observation; between that observation and
the write, Nova may have claimed the node, someone may have locked, moved or deleted it. The
Ironic adapter re-reads the node right before writing and writes only on WRITE, so:
- a node pinned since the observation (instance, provisioning, lock) is never moved;
- a node is written only from the shard the move was planned from (compare-and-set);
- a handover (spec.nova.repairMisplaced) moves a pinned node only while it still carries
  the instance the audit saw on it.
"""

from __future__ import annotations

from enum import Enum

from ironic_shard_operator.core.model import Move, Node


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
