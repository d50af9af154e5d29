"""Observation by need: when a pool must list all its nodes, and when cheap answers do.

A poll plans from the pool's last full listing (`FullObservation`) refreshed by cheap answers
(Ironic's shard summary, the selector's unsharded nodes, the nodes of owners outside the ring).
Invariant: a plan never moves a node whose owner was not read in this cycle; any change the cheap
answers cannot account for (`reason_before_asking`, `reason_from_answers`) makes the poll list in
full. Each reason names one of the fixed `FULL_LISTING_KINDS` (a metric label). What the summary
can and cannot tell a pool: docs/design.md, "Observation by need".
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


def reason_from_answers(pool_name: str, last: FullObservation, answers: CheapAnswers) -> ListingReason | None:
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
        if member_ordinal(pool_name, name) is not None:
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
