"""Desired state from observed state: which members should exist and who owns which node.

Pure: `plan(observation)` reads nothing but its argument and returns decisions.

The member count is spec.replicas, or autoscale's (autoscale.py: up at once, down only once
the lower count has held for the stabilization window).

The rules it keeps (invariants 1-4, docs/invariants.md):
- the members that retire when there are too many are those spec.retireMembers names, then
  the highest ordinals;
- a pinned node never changes owner;
- every free node ends up owned by a ring member (a non-retiring member that counts as
  ready by the grace rule, fencing.py, and that Nova can schedule to: its service listed and
  its host mapped to a cell, host_mapping.py::awaiting_nova), unless there is none, in which
  case nothing moves;
- a free node keeps its owner while that owner is in the ring and within its fair share,
  so a membership change moves only what it must (sticky consistent hashing with bounded
  loads): the rest go, in ring preference order, to members with room;
- fair shares count pinned nodes too and differ by at most one node between members that
  are not already above the level because of pinned nodes alone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from ironic_shard_operator.core import autoscale
from ironic_shard_operator.core.fencing import counts_as_ready
from ironic_shard_operator.core.model import (
    MemberLoad,
    Member,
    Move,
    Node,
    NodeCounts,
    Observation,
    PinnedCounts,
    mid_operation,
    Plan,
    member_name,
    member_ordinal,
    pinned_by_owner,
)
from ironic_shard_operator.core.ring import HashRing


def plan(observation: Observation) -> Plan:
    """Decide members and node owners for one pool from one observation."""
    spec, nodes = observation.spec, observation.nodes
    scale = None
    if spec.autoscale is not None:
        scale = autoscale.decide(spec.autoscale, len(nodes), observation.autoscale_history, observation.now)
    desired = scale.desired if scale is not None else spec.replicas
    members = sorted_members(spec.name, observation.members)
    retiring = set(retiring_members(members, desired, spec.retire_first))
    ready = [m.name for m in members
             if m.name not in retiring and counts_as_ready(m, observation.now, spec.rebalance_after_seconds)]
    ring_members = tuple(name for name in ready if name not in observation.awaiting_nova)
    owners = _by_owner(nodes, retiring)
    moves = plan_moves(owners.free, ring_members, owners.pinned) if ring_members else []
    free_now = Counter({owner: len(uuids) for owner, uuids in owners.free.items()})
    scale_down_blocked = {
        m.name: owners.pinned[m.name] for m in members
        if m.name in retiring and owners.pinned[m.name]
    }
    # A retiring member goes once Ironic shows it owns nothing (its free nodes moved in an
    # earlier cycle), or at replicas 0, where nobody could take its free nodes anyway.
    members_to_delete = tuple(
        m.name for m in members
        if m.name in retiring and not owners.pinned[m.name]
        and (not free_now[m.name] or desired == 0)
    )
    return Plan(
        desired_replicas=desired,
        ring_members=ring_members,
        moves=tuple(moves),
        members_to_create=members_to_create(spec.name, members, desired),
        members_to_delete=members_to_delete,
        scale_down_blocked=scale_down_blocked,
        loads=_loads(members, owners, free_now, moves, set(ring_members)),
        counts=_counts(observation, owners, moves, {m.name for m in members}),
        autoscale=scale,
        busy={owner: tuple(sorted(found)) for owner, found in owners.busy.items()},
        retiring=tuple(m.name for m in members if m.name in retiring),
        owned=owners.counts,
        awaiting_nova=tuple(name for name in ready if name in observation.awaiting_nova),
    )


@dataclass(frozen=True, slots=True)
class _Owners:
    """The nodes by owner (None: unsharded): pinned ones counted (`pinned_by_owner`), free ones
    listed, and the retiring members' nodes mid-operation."""

    counts: PinnedCounts
    free: dict[str | None, list[str]]
    busy: dict[str, list[tuple[str, str]]]

    @property
    def pinned(self) -> Counter[str | None]:
        return self.counts.pinned


def _by_owner(nodes: Sequence[Node], retiring: set[str]) -> _Owners:
    free: defaultdict[str | None, list[str]] = defaultdict(list)
    busy: defaultdict[str, list[tuple[str, str]]] = defaultdict(list)
    for node in nodes:
        if not node.pinned:
            free[node.shard].append(node.uuid)
        elif node.shard in retiring and (state := mid_operation(node)) is not None:
            busy[node.shard].append((node.uuid, state))
    return _Owners(pinned_by_owner(nodes), free, busy)


def _loads(members: Iterable[Member], owners: _Owners, free_now: Counter[str | None], moves: Iterable[Move],
           ring_set: set[str]) -> tuple[MemberLoad, ...]:
    """Each member's load once the moves are made."""
    free_after = free_now.copy()
    for move in moves:
        free_after[move.source] -= 1
        free_after[move.target] += 1
    return tuple(
        MemberLoad(
            name=m.name,
            nodes=owners.pinned[m.name] + free_after[m.name],
            pinned=owners.pinned[m.name],
            in_ring=m.name in ring_set,
            with_instance=owners.counts.with_instance[m.name],
        )
        for m in members
    )


def _counts(observation: Observation, owners: _Owners, moves: Sequence[Move], identities: set[str]) -> NodeCounts:
    """The pool's node counts (status.nodes); misplaced: pinned nodes whose owner is no member."""
    nodes = observation.nodes
    free_count = len(nodes) - sum(owners.pinned.values())
    return NodeCounts(
        total=len(nodes),
        free=free_count,
        pinned=len(nodes) - free_count,
        unassigned=sum(1 for node in nodes if node.shard is None),
        pending_moves=len(moves),
        misplaced=sum(c for owner, c in owners.pinned.items() if owner not in identities),
        observed_at=observation.now if observation.nodes_observed_at is None else observation.nodes_observed_at,
    )


def sorted_members(pool_name: str, members: Iterable[Member]) -> list[Member]:
    """The pool's member identities by ordinal; names that are no identity of `pool_name` are dropped."""
    ordinals = {m.name: member_ordinal(pool_name, m.name) for m in members}
    return sorted((m for m in members if ordinals[m.name] is not None),
                  key=lambda m: ordinals[m.name])


def retiring_members(members: list[Member], desired: int, first: Iterable[str]) -> list[str]:
    """The members that go when there are more than `desired` (`members` by ordinal): those
    named in `first` (spec.retireMembers) before the others, then the highest ordinals."""
    surplus = len(members) - desired
    if surplus <= 0:
        return []
    named = set(first)
    order = [m for m in members if m.name in named] + [m for m in reversed(members) if m.name not in named]
    return [m.name for m in order[:surplus]]


def members_to_create(pool_name: str, members: list[Member], desired: int) -> tuple[str, ...]:
    """The lowest free ordinals that bring the member count up to `desired`."""
    taken = {member_ordinal(pool_name, m.name) for m in members}
    created: list[str] = []
    ordinal = 0
    while len(members) + len(created) < desired:
        if ordinal not in taken:
            created.append(member_name(pool_name, ordinal))
        ordinal += 1
    return tuple(created)


def plan_moves(
    free_by_owner: Mapping[str | None, list[str]],
    ring_members: tuple[str, ...],
    pinned_by_owner: Mapping[str | None, int],
) -> list[Move]:
    """The fewest shard changes that give every free node an owner in `ring_members`
    with every member at exactly its fair share; sorted by node uuid.

    `free_by_owner` maps each current owner (None: unassigned) to its free nodes' uuids.
    """
    in_ring = set(ring_members)
    homeless = [(uuid, owner) for owner, uuids in free_by_owner.items()
                if owner not in in_ring for uuid in uuids]
    held = {m: len(free_by_owner.get(m, ())) for m in ring_members}
    free_count = sum(len(uuids) for uuids in free_by_owner.values())
    quotas = fair_quotas(free_count, ring_members, pinned_by_owner, held)

    room: dict[str, int] = {}
    for member in ring_members:
        excess = held[member] - quotas[member]
        if excess > 0:
            # Which nodes leave does not change how many move; the choice only has to be
            # deterministic (independent of input order).
            homeless.extend((uuid, member) for uuid in sorted(free_by_owner[member])[:excess])
        room[member] = max(0, -excess)

    if not homeless:
        return []
    homeless.sort(key=itemgetter(0))  # uuids are unique: the order of the uuids alone
    # Each node goes to the first member of its full-ring preference order that still has
    # room: where the full ring's walk would put it, minus the full members.
    targets = HashRing(ring_members).place([uuid for uuid, _ in homeless], room)
    return [Move(uuid, owner, target) for (uuid, owner), target in zip(homeless, targets) if target is not None]


def fair_quotas(
    free_count: int,
    ring_members: tuple[str, ...],
    pinned_by_owner: Mapping[str | None, int],
    held_counts: Mapping[str, int],
) -> dict[str, int]:
    """How many free nodes each ring member should own; the quotas sum to `free_count`.

    Totals (pinned + free) are levelled: a member whose pinned nodes alone reach the level
    gets no free node, the others' totals differ by at most one. The odd remainder goes
    first to members already holding more than the level (so rounding moves no node), then
    by name — never by how much a member holds, so applying any part of a plan and planning
    again reaches the same end state as applying all of it (an interrupted cycle converges
    to where the whole one would have).
    """
    pinned = {m: pinned_by_owner.get(m, 0) for m in ring_members}
    quotas = dict.fromkeys(ring_members, 0)
    if free_count <= 0:
        return quotas
    levelled = sorted(ring_members, key=lambda m: (pinned[m], m))
    while True:
        budget = free_count + sum(pinned[m] for m in levelled)
        level = budget / len(levelled)
        below = [m for m in levelled if pinned[m] < level]
        if len(below) == len(levelled):
            break
        levelled = below  # never empty: the least pinned member is always below the level
    base, remainder = divmod(budget, len(levelled))
    for m in levelled:
        quotas[m] = base - pinned[m]
    above_level_first = sorted(levelled, key=lambda m: (held_counts.get(m, 0) <= quotas[m], m))
    for m in above_level_first[:remainder]:
        quotas[m] += 1
    return quotas


def owners_after(nodes: Iterable[Node], moves: Iterable[Move]) -> dict[str, str | None]:
    """Every node's owner once `moves` are applied (for reports and tests)."""
    owners = {node.uuid: node.shard for node in nodes}
    for move in moves:
        owners[move.node_uuid] = move.target
    return owners
