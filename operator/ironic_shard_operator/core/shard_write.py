"""The safety rule of every shard write: given a planned move and a fresh read of its node,
write it or say why not; and which moves are guarded, and what Placement must say first.

The planner (or the Nova audit) decided from an observation; between that observation and
the write, Nova may have claimed the node, someone may have locked, moved or deleted it. The
Ironic adapter re-reads the node right before writing and writes only on WRITE, so:
- a node pinned since the observation (instance, provisioning, lock) is never moved;
- a node is written only from the shard the move was planned from (compare-and-set);
- a handover (spec.nova.repairMisplaced) moves a pinned node only while it still carries
  the instance the audit saw on it;
- a free node moving away from an owner whose nova-compute may take a build (`is_guarded`,
  invariant 13) is re-read on its own right before its write, and is not moved while
  Placement holds allocations on its resource provider; it is read again right after its
  write, and put back where it was when a build claimed it in the meantime
  (`claimed_after_write`: Ironic accepts no conditional write, so the claim may land between
  the read and the write);
- never write blind: a guarded move is written only on Placement's answer when the cloud has
  a Placement (`waits_for_placement`); one that does not answer keeps it where it is;
- a node the guard holds back is reported (`GuardHold`), never waited on silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from ironic_shard_operator.core.fencing import counts_as_ready
from ironic_shard_operator.core.model import Member, Move, Node
from ironic_shard_operator.core.nova_policy import ServiceRecord


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


def live_owners(members: Iterable[Member], now: float, rebalance_after_seconds: float) -> frozenset[str]:
    """The members whose nova-compute may take a build on its nodes right now: Ready, or
    still within the grace (fencing.counts_as_ready). A free node moving away from one of
    them is a guarded move: a build may have claimed it in Placement (before Ironic shows an
    instance) or in Ironic since its batch was re-read. A node moving away from anyone else
    (a member past its grace, a retired identity, no owner at all) needs no guard: nothing
    can spawn there."""
    return frozenset(m.name for m in members if counts_as_ready(m, now, rebalance_after_seconds))


def guarded_owners(members: Iterable[Member], now: float, rebalance_after_seconds: float,
                   services: Mapping[str, ServiceRecord] | None, identities: Iterable[str]) -> frozenset[str]:
    """The owners a free node leaves only by a guarded move (invariant 13): the live owners,
    and every owner whose nova-compute may still take a build whatever its pod shows: its
    Nova service up and not forced down (a failing readiness probe, or a Kubernetes node cut
    off from the API server but not from RabbitMQ, keeps it heartbeating and the scheduler
    placing builds there). With Nova's services unknown this cycle (`services` None: Nova
    not asked, not answering, or not configured), every member identity. A member forced down
    first, which Nova then reports down, needs no guard: that is the fast path of failover."""
    live = live_owners(members, now, rebalance_after_seconds)
    if services is None:
        return live | frozenset(identities)
    return live | frozenset(host for host, service in services.items() if service.up and not service.forced_down)


def is_guarded(move: Move, guarded: frozenset[str]) -> bool:
    """Whether `move` is a guarded move: its node leaves one of the `guarded` owners
    (`guarded_owners`, or `live_owners` for a caller that knows nothing of Nova)."""
    return move.source in guarded


def asks_placement(moves: Iterable[Move], guarded: frozenset[str]) -> bool:
    """Whether Placement is asked at all this cycle: only when a move is guarded."""
    return any(is_guarded(move, guarded) for move in moves)


class PlacementState(Enum):
    """What the guard knows of Placement as a cycle's writes start."""

    ANSWERS = "answers"              # asked about each guarded move's node
    ABSENT = "absent"                # the cloud names none: no Nova schedules there, Ironic's reads guard alone
    NOT_ANSWERING = "not_answering"  # named, but no answer: guarded moves wait (never write blind)


def waits_for_placement(move: Move, guarded: frozenset[str], placement: PlacementState) -> bool:
    """Never write blind: a guarded move is not written while the cloud's Placement does not
    answer (counted busy, tried again next cycle). A build Placement placed before it stopped
    answering still reaches Ironic's node only later, so Ironic's read alone cannot see it;
    and a free node is worth moving only for new builds, which Nova cannot schedule without
    Placement either, so waiting costs no capacity. The same holds for one guarded move whose
    own question gets no answer (the adapter tries it again, then counts it busy), and for a
    read after a write that gets none (the move is put back)."""
    return placement is PlacementState.NOT_ANSWERING and is_guarded(move, guarded)


def split_blind(moves: Sequence[Move], guarded: frozenset[str],
                placement: PlacementState) -> tuple[list[Move], list[Move]]:
    """`moves` as (those that may be tried this cycle, those that wait for Placement)."""
    tried: list[Move] = []
    waiting: list[Move] = []
    for move in moves:
        (waiting if waits_for_placement(move, guarded, placement) else tried).append(move)
    return tried, waiting


def guarded_verdict(move: Move, current: Node | None, claimed_in_placement: bool) -> Verdict:
    """The rule for a guarded move, from a read of its node made right before its own write
    (not its batch's) and Placement's answer for the node's resource provider: move_verdict's
    rule, and a node with allocations in Placement (a build in flight) counts as claimed,
    pinned for this cycle."""
    said = move_verdict(move, current)
    if said is Verdict.WRITE and claimed_in_placement:
        return Verdict.CLAIMED
    return said


@dataclass(frozen=True, slots=True)
class GuardHold:
    """A guarded move the guard held back because Placement holds allocations of `consumers`
    on its node's resource provider while Ironic shows the node free (a build in flight, or an
    allocation a failed build left behind: core/guard_holds.py tells them apart by age)."""

    node_uuid: str
    consumers: tuple[str, ...]


def claimed_after_write(move: Move, after: Node | None, consumers: tuple[str, ...]) -> bool:
    """Whether a guarded move that was just written must be put back to its source: the node,
    read again right after its write, is pinned now (a build claimed it between the read before
    the write and the write), or Placement holds allocations on it. Putting it back is safe: the
    target's nova-compute ignores a node whose instance is another host's."""
    if after is None or after.shard != move.target:
        return False  # gone, or someone else moved it since: nothing of ours to undo
    return after.pinned or bool(consumers)
