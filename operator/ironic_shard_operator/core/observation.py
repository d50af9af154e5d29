"""Observation by need: when a pool must list all its nodes, and when cheap answers do.

Listing a pool costs ceil(N/1000)+1 Ironic requests (about 101 and ~18 s of Ironic's time at
100,000 nodes). Ownership only has to change when the ring changes, when nodes appear, leave or
are freed where no ring member serves them. So a poll plans from the pool's LAST FULL
LISTING (`FullObservation`) and asks Ironic only:

1. the shard summary (`GET /v1/shards`: node count per shard value, over ALL of Ironic);
2. the selector's unsharded nodes (`sharded=false` + selector: one request, empty when
   steady; new nodes typically arrive unsharded);
3. per owner outside the ring that still owned nodes of the pool at the last listing (a
   member that failed, left or retires, a stranger's shard on pinned nodes): that owner's
   nodes in the selector, one request per 1,000, to notice a node freed there and to give
   the plan a fresh view of every node that can move.

The fresh lists replace those owners' (and the unsharded) nodes of the last listing
(`merged`): when the ring only lost members, or a node arrived or was freed outside the
ring, those are exactly the nodes the planner moves, so the change is acted on without a
full listing. `reason_before_asking()` and `reason_from_answers()` say why a full listing is
needed instead, or None. A full listing is needed:
- when there is none yet (an operator restart starts with one; nothing here is persisted);
- when the ring gained a member since the last listing (a join takes nodes from everyone);
- when the pool wrote shards since (the listing predates its own writes);
- on the slow timer (`spec.ironic.fullResyncSeconds`);
- when the summary moved for a shard value that concerns the pool, or a new value appeared;
- before writing moves whose source was not listed in this cycle (`unlisted_sources`); the
  adapter's bulk re-read right before each batch of writes stays in any case.

What the GLOBAL shard summary can and cannot tell a pool with a selector. Every count is
over all of Ironic, every pool and every unmanaged node included:
- a value that is one of the pool's identities (`<pool>-<n>`, unique per cloud, invariant 8):
  every node carrying it should be one of the pool's, so its count must equal the pool's
  listed count; when not, a node carrying it was added, deleted, re-sharded, or entered or
  left the selector, and the pool lists (every poll, while nodes carrying its identities sit
  outside its selector: nodes someone moved out of it);
- a value that owned nodes of the pool at the last listing (a stranger's, on pinned nodes): a
  moved count means a node of it was added, deleted or re-sharded; the pool cannot tell
  whether inside its selector, so it lists. Its count is compared with the summary read just
  BEFORE the last listing (a change between the two is seen again);
- a value that did not exist at the last listing: it may be a new node of the selector
  enrolled with a preset shard, so the pool lists (another pool's new member costs this pool
  one full listing);
- any other value (another pool's members, strangers elsewhere, and the unsharded count,
  which the `sharded=false` listing answers for the selector exactly): ignored, so pools
  with disjoint selectors on one Ironic do not make each other list on every change;
- it cannot see: a node entering or leaving the selector (its conductor group or resource
  class changed) with a shard that is none of the pool's identities, a pinned node freed on a ring member
  whose pinned nodes alone exceeded its fair share, changes of instance or provision state
  on ring members' nodes (which change no owner). Those wait for the slow timer, which is
  why the status says when the counts were last listed in full (status.nodes.observedAt).

Credentials refused the summary (`SummaryRefused`: Ironic's policy `baremetal:shards:get`,
a system reader in Ironic's defaults, answered 403) cannot poll by need: every poll lists in
full, as before observation by need (ceil(N/1000)+1 requests instead of 2), and asks the
summary again before each listing (one refused request), so a policy that allows it again
takes effect at the next poll. Preflight's `ironic-shard-summary` check warns of it.

Each reason (`ListingReason`) is a sentence for people (numbers and shard values in it) and
its kind, one of the few fixed `FULL_LISTING_KINDS`: the label of the operator's metric of
full listings (a sentence in a label would make a new series per number). The rule that
writes a sentence names its kind; nothing reads a kind back out of a sentence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ironic_shard_operator.core.model import Move, Node, member_ordinal

# Ironic names the count of nodes without a shard "None" (str() of the database NULL).
UNSHARDED = "None"
DEFAULT_FULL_RESYNC_SECONDS = 600.0

# Why a pool listed in full, as a metric label: one kind per rule of this module, plus
# `no_memory` (a cycle run without memory lists every time: benchmarks, one-cycle tests).
FULL_LISTING_KINDS = (
    "no_memory", "no_listing_yet", "summary_refused", "own_writes", "resync_timer", "ring_gained",
    "identity_count", "new_shard", "owner_count", "unlisted_source",
)


@dataclass(frozen=True, slots=True)
class ListingReason:
    """Why a pool lists all its nodes: `text` for people (the log, the cycle report) and
    `kind`, one of FULL_LISTING_KINDS, for the metric's label."""

    kind: str
    text: str

    def __post_init__(self) -> None:
        if self.kind not in FULL_LISTING_KINDS:
            raise ValueError(f"full listing kind {self.kind!r} is not one of {', '.join(FULL_LISTING_KINDS)}")

    def __str__(self) -> str:
        return self.text


EVERY_CYCLE = ListingReason("no_memory", "every cycle lists (no ObservationMemory)")
NO_LISTING_YET = ListingReason("no_listing_yet", "no full listing yet")
OWN_WRITES = ListingReason("own_writes", "shards were written since the last full listing")


@dataclass(frozen=True, slots=True)
class SummaryRefused:
    """Ironic's policy refused the shard summary (`GET /v1/shards`, HTTP 403: the credentials
    lack `baremetal:shards:get`); `message` is the adapter's (no credential in it)."""

    message: str


def summary_refused_reason(refused: SummaryRefused) -> ListingReason:
    """Why every poll lists in full while the summary is refused (the cycle's reason)."""
    return ListingReason("summary_refused", "Ironic refuses these credentials the shard summary (GET /v1/shards "
                         f"needs policy baremetal:shards:get), so every poll lists the pool in full: {refused.message}")


@dataclass(frozen=True, slots=True)
class FullObservation:
    """What the pool saw at its last full listing: `nodes` (every managed node), at
    `observed_at` (seconds since the epoch), the ring the plan made from them had
    (`ring_members`), the shard summary read right before the listing (`summary`: shard
    value -> node count over all of Ironic, UNSHARDED for no shard; SummaryRefused when
    Ironic's policy refused it), and whether the pool wrote shards since (`wrote_since`:
    the listing no longer shows Ironic)."""

    nodes: tuple[Node, ...]
    observed_at: float
    ring_members: tuple[str, ...]
    summary: Mapping[str, int] | SummaryRefused
    wrote_since: bool = False

    def owners_outside(self, ring_members: Sequence[str]) -> tuple[str, ...]:
        """Owners (shard values) of the listed nodes that are not in `ring_members`, sorted:
        the ones whose nodes no ring member serves, so a node freed there must be noticed."""
        ring = set(ring_members)
        return tuple(sorted({node.shard for node in self.nodes
                             if node.shard is not None and node.shard not in ring}))


@dataclass(frozen=True, slots=True)
class CheapAnswers:
    """Ironic's answers to a poll's cheap questions: the shard summary, the selector's
    unsharded nodes, and for each owner outside the ring its nodes in the selector
    (`owners`), all read in this cycle. A refused summary (SummaryRefused) comes alone: the
    other questions are not asked, the poll lists in full."""

    summary: Mapping[str, int] | SummaryRefused
    unsharded: Sequence[Node]
    owners: Mapping[str, Sequence[Node]]


def reason_before_asking(last: FullObservation | None, ring_members: Sequence[str], now: float,
                         full_resync_seconds: float) -> ListingReason | None:
    """Why a full listing is needed whatever Ironic would answer (None: ask the cheap
    questions). `ring_members` is the ring planned now from `last`'s nodes. A ring that only
    lost members needs none: the members that left are listed as owners outside the ring."""
    if last is None:
        return NO_LISTING_YET
    if isinstance(last.summary, SummaryRefused):
        return summary_refused_reason(last.summary)
    if last.wrote_since:
        return OWN_WRITES
    if now - last.observed_at >= full_resync_seconds:
        return ListingReason("resync_timer",
                             f"the last full listing is older than fullResyncSeconds ({full_resync_seconds:g}s)")
    joined = sorted(set(ring_members) - set(last.ring_members))
    if joined:
        return ListingReason("ring_gained", f"the ring gained {', '.join(joined)} since the last full listing")
    return None


def reason_from_answers(pool: str, last: FullObservation, answers: CheapAnswers) -> ListingReason | None:
    """Why the cheap answers call for a full listing (None: `merged` is the pool's nodes).
    See the module doc for what the global summary can tell a pool with a selector."""
    if isinstance(answers.summary, SummaryRefused):
        return summary_refused_reason(answers.summary)
    if isinstance(last.summary, SummaryRefused):  # reason_before_asking lists first
        return summary_refused_reason(last.summary)
    listed = Counter(node.shard for node in last.nodes if node.shard is not None)
    for name in sorted(set(answers.summary) | set(last.summary) | set(listed)):
        if name == UNSHARDED:
            continue  # the sharded=false listing answers for the selector
        before, now = last.summary.get(name), answers.summary.get(name, 0)
        if member_ordinal(pool, name) is not None:
            if now != listed[name]:
                return ListingReason("identity_count", f"Ironic counts {now} nodes with shard {name}, an "
                                     f"identity of this pool, where the pool lists {listed[name]}")
        elif before is None and now:
            return ListingReason("new_shard", f"shard {name} is new in Ironic's shard summary")
        elif name in listed and before != now:
            return ListingReason("owner_count", f"shard {name} went from {before or 0} to {now} nodes in "
                                 "Ironic's shard summary")
    return None


def merged(last: FullObservation, answers: CheapAnswers) -> tuple[Node, ...]:
    """The pool's nodes: the last listing's, with the unsharded nodes and those of every
    owner listed in this cycle replaced by the fresh lists (fresh wins for a uuid in both)."""
    fresh = {node.uuid: node for node in (*answers.unsharded, *(n for ns in answers.owners.values() for n in ns))}
    listed = set(answers.owners)
    kept = (node for node in last.nodes
            if node.shard is not None and node.shard not in listed and node.uuid not in fresh)
    return (*kept, *fresh.values())


def unlisted_sources(moves: Sequence[Move], answers: CheapAnswers) -> ListingReason | None:
    """Why `moves` may not be written without a full listing first: a move whose source
    (None: unsharded) was not listed in this cycle. None: every source was."""
    listed: set[str | None] = {None, *answers.owners}
    unlisted = sorted({move.source or "unsharded" for move in moves if move.source not in listed})
    if unlisted:
        return ListingReason("unlisted_source",
                             f"moves are planned from {', '.join(unlisted[:3])}: writes follow a full listing")
    return None
