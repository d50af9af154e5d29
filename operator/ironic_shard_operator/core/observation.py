"""Observation by need: when a pool must list all its nodes, and when two cheap answers do.

Listing a pool costs ceil(N/1000)+1 Ironic requests (about 101 and ~18 s of Ironic's time at
100,000 nodes). Ownership only has to change when the ring changes, when nodes appear, leave or
are freed where no ring member serves them. So a poll plans from the pool's LAST FULL
LISTING (`FullObservation`) and asks Ironic only:

1. the shard summary (`GET /v1/shards`: node count per shard value, over ALL of Ironic);
2. "is any node of my selector unsharded?" (`sharded=false` + selector, `limit=1`);
3. per owner outside the ring that still owned nodes of the pool at the last listing (a
   member that failed or retires with pinned nodes, a stranger's shard on pinned nodes):
   that owner's nodes without an instance in the selector, to notice a node freed there.

`reason_before_asking()` and `reason_from_answers()` say why a full listing is needed, or
None when the last one still stands. A full listing is needed:
- when there is none yet (an operator restart starts with one; nothing here is persisted);
- when the ring differs from the ring planned at the last listing (readiness, a grace that
  ended, scaling);
- when the pool wrote shards since (the listing predates its own writes);
- on the slow timer (`spec.ironic.fullResyncSeconds`);
- when the summary moved for a shard value that concerns the pool, or a new value appeared;
- when a node of the selector is unsharded (a new node, typically);
- when a node of an owner outside the ring is free;
- and, decided by the caller, before any batch of writes (ironic_cycle.run_cycle).

What the GLOBAL shard summary can and cannot tell a pool with a selector. Every count is
over all of Ironic, every pool and every unmanaged node included:
- a value that is one of the pool's identities (`<pool>-<n>`, unique per cloud, invariant 8)
  or that owned nodes of the pool at the last listing: a moved count means a node of it was
  added, deleted or re-sharded; the pool cannot tell whether inside its selector, so it
  lists. The counts are compared with the summary read just BEFORE the last listing, not
  with that listing's own per-owner counts: a change between the two is seen again, and a
  member shard someone put on a node outside the selector does not trigger every poll;
- a value that did not exist at the last listing: it may be a new node of the selector
  enrolled with a preset shard, so the pool lists (another pool's new member costs this pool
  one full listing);
- any other value (another pool's members, strangers elsewhere, and the unsharded count,
  which the `sharded=false` probe answers for the selector exactly): ignored, so pools with
  disjoint selectors on one Ironic do not make each other list on every change;
- it cannot see: a node entering or leaving the selector (its conductor group or resource
  class changed) with a shard that already existed, a pinned node freed on a ring member
  whose pinned nodes alone exceeded its fair share, changes of instance or provision state
  on ring members' nodes (which change no owner). Those wait for the slow timer, which is
  why the status says when the counts were last listed in full (status.nodes.observedAt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ironic_shard_operator.core.model import Node, member_ordinal

# Ironic names the count of nodes without a shard "None" (str() of the database NULL).
UNSHARDED = "None"
DEFAULT_FULL_RESYNC_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class FullObservation:
    """What the pool saw at its last full listing: `nodes` (every managed node), at
    `observed_at` (seconds since the epoch), the ring the plan made from them had
    (`ring_members`), the shard summary read right before the listing (`summary`: shard
    value -> node count over all of Ironic, UNSHARDED for no shard), and whether the pool
    wrote shards since (`wrote_since`: the listing no longer shows Ironic)."""

    nodes: tuple[Node, ...]
    observed_at: float
    ring_members: tuple[str, ...]
    summary: Mapping[str, int]
    wrote_since: bool = False

    def owners_outside(self, ring_members: Sequence[str]) -> tuple[str, ...]:
        """Owners (shard values) of the listed nodes that are not in `ring_members`, sorted:
        the ones whose nodes no ring member serves, so a node freed there must be noticed."""
        ring = set(ring_members)
        return tuple(sorted({node.shard for node in self.nodes
                             if node.shard is not None and node.shard not in ring}))

    def has_unassigned(self) -> bool:
        return any(node.shard is None for node in self.nodes)


@dataclass(frozen=True, slots=True)
class CheapAnswers:
    """Ironic's answers to a poll's cheap questions: the shard summary, whether the selector
    holds an unsharded node, and for each owner outside the ring its nodes in the selector
    that carry no instance (`unassociated`)."""

    summary: Mapping[str, int]
    unsharded: bool
    unassociated: Mapping[str, Sequence[Node]]


def reason_before_asking(last: FullObservation | None, ring_members: Sequence[str], now: float,
                         full_resync_seconds: float) -> str | None:
    """Why a full listing is needed whatever Ironic would answer (None: ask the cheap
    questions). `ring_members` is the ring planned now from `last`'s nodes."""
    if last is None:
        return "no full listing yet"
    if last.wrote_since:
        return "shards were written since the last full listing"
    if tuple(ring_members) != tuple(last.ring_members):
        return "the ring changed since the last full listing"
    if now - last.observed_at >= full_resync_seconds:
        return f"the last full listing is older than fullResyncSeconds ({full_resync_seconds:g}s)"
    return None


def reason_from_answers(pool: str, last: FullObservation, answers: CheapAnswers,
                        ring_members: Sequence[str]) -> str | None:
    """Why the cheap answers call for a full listing (None: `last` still stands). See the
    module doc for what the global summary can tell a pool with a selector."""
    moved = summary_moved(pool, last, answers.summary)
    if moved is not None:
        return moved
    if answers.unsharded and not _nothing_to_do_with_unsharded(last, answers.summary, ring_members):
        return "a node of the selector has no shard"
    for owner, nodes in sorted(answers.unassociated.items()):
        free = sum(1 for node in nodes if not node.pinned)
        if free:
            return f"{free} node(s) of {owner}, which is outside the ring, are free"
    return None


def summary_moved(pool: str, last: FullObservation, summary: Mapping[str, int]) -> str | None:
    """The first shard value that concerns the pool whose count moved, or that is new, as a
    reason; None when none did."""
    owned = {node.shard for node in last.nodes if node.shard is not None}
    for name in sorted(set(summary) | set(last.summary)):
        if name == UNSHARDED:
            continue  # the sharded=false probe answers for the selector
        before, now = last.summary.get(name), summary.get(name)
        if before is None:
            return f"shard {name} is new in Ironic's shard summary"
        concerns = name in owned or member_ordinal(pool, name) is not None
        if concerns and before != (now or 0):
            return f"shard {name} went from {before} to {now or 0} nodes in Ironic's shard summary"
    return None


def _nothing_to_do_with_unsharded(last: FullObservation, summary: Mapping[str, int],
                                  ring_members: Sequence[str]) -> bool:
    """With no ring member, unsharded nodes stay as they are (invariant 3): when the last
    listing already had some and Ironic's unsharded count did not move, listing again would
    show the same."""
    return (not ring_members and last.has_unassigned()
            and summary.get(UNSHARDED) == last.summary.get(UNSHARDED))

