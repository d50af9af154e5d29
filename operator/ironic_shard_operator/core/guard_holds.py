"""The free nodes the shard-write guard holds back, since when, and which of them are leaked
allocations: status.guard and its Events. Pure.

The guard (core/shard_write.py) keeps a free node with its live owner while Placement holds
allocations on it: a build in flight claims the node there before Ironic shows its instance.
A build that failed can leave its allocation behind, and the guard would then hold the node
for ever, a retire sitting in MovingFreeNodes with nothing said. So every node held is listed
with its consumers and since when (carried from the last status, so a restart keeps the
clock); once a node has been held longer than `spec.nova.leakedAllocationSeconds` with no
instance on it in Ironic, it is reported as a leaked allocation (a Warning Event, once), with
the command that removes it. The operator never deletes an allocation: it is not its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set as AbstractSet
from typing import Any

from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.pool_memory import RecordedHold
from ironic_shard_operator.core.model import Move
from ironic_shard_operator.core.shard_write import GuardHold
from ironic_shard_operator.core.status import format_time

# At most this many held nodes are listed in status.guard.nodes (all are counted).
LISTED = 20


def guard_section(before: Mapping[str, RecordedHold], held: Sequence[GuardHold], still_moving: AbstractSet[str],
                  now: float, leaked_after: float) -> tuple[dict[str, Any], list[Event]]:
    """status.guard after a cycle's writes held `held`, and the Events of the nodes newly found
    leaked. A node keeps its `since` while it stays held; one the cycle did not get to (its
    writes stopped early) stays as it was while its move is still planned (`still_moving`:
    the plan's moves); any other leaves. `before`: the last status.guard (PoolMemory.guard)."""
    now_held = {hold.node_uuid: hold for hold in held}
    entries, events = [], []
    for node in sorted(set(now_held) | {n for n in before if n in still_moving}):
        seen = before.get(node)
        hold = now_held.get(node)
        consumers = list(hold.consumers) if hold is not None else list(seen.consumers if seen else ())
        since = now if seen is None or seen.since is None else min(seen.since, now)
        leaked = now - since >= leaked_after
        if leaked and not (seen and seen.leaked):
            events.append(Event("LeakedAllocation", (
                f"Free node {node} has had Placement allocations of {', '.join(consumers)} for "
                f"{now - since:.0f}s (spec.nova.leakedAllocationSeconds {leaked_after:g}) while Ironic shows no "
                "instance on it: most likely left behind by a build that failed. The operator does not move the "
                "node while it is allocated; if no server uses it, remove the allocation "
                f"(openstack resource provider allocation delete {consumers[0] if consumers else '<consumer>'}, "
                "or nova-manage placement audit --delete)"), "Warning"))
        entries.append({"node": node, "consumers": consumers, "since": format_time(since), "leaked": leaked})
    return {"held": len(entries), "leaked": sum(e["leaked"] for e in entries), "nodes": entries[:LISTED]}, events


def held_by_guard(before: Mapping[str, RecordedHold], held: Sequence[GuardHold]) -> dict[str, bool]:
    """node uuid -> whether it is reported as a leaked allocation, for every free node the guard
    holds: those this cycle's writes held, and those the last status.guard listed (a cycle whose
    writes stopped early did not get to them). What a retiring source's handover message names
    (core/handover.py::why_pod_stays), so a retire held by Placement says why."""
    found = {node: record.leaked for node, record in before.items()}
    for hold in held:
        found.setdefault(hold.node_uuid, False)
    return found


def revert_failed_event(moves: Sequence[Move]) -> Event | None:
    """The Warning of guarded moves a build claimed between their read and their write whose
    shard could not be put back: each such node may now be on the wrong shard (its instance
    names the source, its shard the target: no nova-compute serves it), so it is named with
    the fix, never only logged. None without such moves."""
    if not moves:
        return None
    listed = ", ".join(f"{m.node_uuid} ({m.source} -> {m.target})" for m in moves[:5])
    return Event("ShardRevertFailed", (
        f"{len(moves)} free nodes were claimed by a build while their shard changed, and putting the shard back "
        f"failed: {listed}. Such a node may be on the wrong shard: if its instance is on the old owner (openstack "
        "baremetal node show NODE -f value -c instance_uuid; openstack server show INSTANCE), set the shard "
        "back (openstack baremetal node set --shard OLD NODE); the Nova audit reports it misplaced meanwhile "
        "(spec.nova.repairMisplaced repairs it)"), "Warning")
