"""One reconcile cycle of a pool's node ownership: observe -> plan -> apply -> report.

Callable without Kubernetes: members come from the caller (the kopf handler reads them
from pods; tests and benchmarks name them). Level-triggered: a cycle interrupted after any
write (or killed) leaves every node with either its old owner or its new one, and the next
cycle plans from what Ironic shows and finishes the job. Re-running a converged pool makes no
write.

Observation by need (core/observation.py): with an `ObservationMemory` (one per pool, in
memory only), a cycle plans from the pool's last full listing when Ironic's cheap answers
(shard summary, an unsharded probe, one probe per owner outside the ring) say it still
stands: 2 requests whatever the node count. It lists in full when they do not, when the ring
changed, on the slow timer, and always before writing: every shard write is planned from a
listing made in the same cycle (and re-checked in bulk by the adapter). Without a memory
(benchmarks, tests of one cycle) every cycle lists in full. A restart starts with a full
listing: nothing of this is persisted. Credentials Ironic refuses the shard summary (policy
baremetal:shards:get) make every poll list in full, as without a memory: the pool is managed
as before observation by need, at the cost of a full listing per poll; said once in the log
(WARNING) and by preflight's `ironic-shard-summary` check, and undone at the first poll whose
summary Ironic answers again.

`AdapterCache` keeps a pool's adapter from one cycle to the next: rebuilt when its
configuration changes, and a configuration that cannot be used is neither tried nor logged
again until it changes. It also keeps the pool's `ObservationMemory`, which starts empty with
every new adapter (a new cloud or selector is listed in full first).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

from ironic_shard_operator.adapters.ironic import ApplyResult, Guard, IronicAdapter, IronicConfigError
from ironic_shard_operator.adapters.placement import PlacementAdapter, PlacementError, PlacementNotConfigured
from ironic_shard_operator.core import observation
from ironic_shard_operator.core.model import (
    AutoscaleHistory, Member, Node, NodeCounts, Observation, Plan, PoolSpec,
)
from ironic_shard_operator.core.observation import CheapAnswers, FullObservation, ListingReason, SummaryRefused
from ironic_shard_operator.core.planner import plan
from ironic_shard_operator.core.shard_write import live_owners

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CycleReport:
    """What one cycle saw, decided and did. `nodes`: the pool's nodes as its last full
    listing read them, before this cycle's writes (the Nova audit reuses them instead of
    listing again), at `nodes_observed_at` (seconds since the epoch). When the cycle did not
    list (`full_listing` None: the cheap answers confirmed the last listing), they are up to
    spec.ironic.fullResyncSeconds old: their owners are confirmed by Ironic's shard summary
    count for count, their instances and provision states are as they were then.
    `full_listing` says why this cycle listed in full, `full_listing_kind` in a word (one of
    observation.FULL_LISTING_KINDS: the label of metrics.record_full_listing); both None when
    it did not."""

    nodes: tuple[Node, ...]
    plan: Plan
    applied: ApplyResult
    observe_requests: int       # Ironic requests to read the pool
    ironic_requests: int        # all Ironic requests of the cycle (reads, re-reads, writes)
    duration_seconds: float
    nodes_observed_at: float = 0.0
    full_listing: str | None = observation.EVERY_CYCLE.text
    full_listing_kind: str | None = observation.EVERY_CYCLE.kind

    @property
    def moves_planned(self) -> int:
        return len(self.plan.moves)

    @property
    def moves_applied(self) -> int:
        return self.applied.applied

    @property
    def moves_skipped(self) -> int:
        return self.applied.skipped

    @property
    def counts(self) -> NodeCounts:
        return self.plan.counts


class AdapterCache:
    """One pool's Ironic adapter across cycles, built once per configuration.

    `get(key, build)` returns the adapter built for `key` (the clouds.yaml and the settings
    it depends on), calling `build` only when the key differs from the last one. A build
    that fails with IronicConfigError is remembered with its key: every later `get` with the
    same key raises the same message without building again, and the failure is logged
    (WARNING, `label` naming the pool) once per key, not once per cycle.
    """

    def __init__(self) -> None:
        self.key: Hashable = None
        self.adapter: IronicAdapter | None = None
        self.error: IronicConfigError | None = None
        self.memory = ObservationMemory()

    def get(self, key: Hashable, build: Callable[[], IronicAdapter], *, label: str = "") -> IronicAdapter:
        if self.key is None or key != self.key:
            self.key, self.adapter, self.error, self.memory = key, None, None, ObservationMemory()
            try:
                self.adapter = build()
            except IronicConfigError as error:
                self.error = error
                log.warning("%s: the cloud configuration cannot be used: %s (not tried again until it "
                            "changes)", label or "pool", error)
        if self.error is not None:
            raise IronicConfigError(str(self.error))
        assert self.adapter is not None
        return self.adapter


class ObservationMemory:
    """A pool's last full listing between cycles (`last`), for observation by need, and
    whether Ironic refused the last shard summary asked (`summary_refused`: logged when it
    starts and ends). In memory only: a new operator process, or a new adapter, starts with
    a full listing."""

    def __init__(self) -> None:
        self.last: FullObservation | None = None
        self.summary_refused = False


def run_cycle(
    adapter: IronicAdapter,
    spec: PoolSpec,
    members: Sequence[Member],
    *,
    now: float | None = None,
    paused: bool = False,
    stop: threading.Event | None = None,
    autoscale_history: AutoscaleHistory = AutoscaleHistory(),
    memory: ObservationMemory | None = None,
    full_resync_seconds: float = observation.DEFAULT_FULL_RESYNC_SECONDS,
    guarded: frozenset[str] | None = None,
) -> CycleReport:
    """Observe the pool in Ironic (by need, with `memory`; see the module doc), plan with
    the pure planner, write the moves, report.

    `paused` plans and reports but writes nothing (every move counts as not attempted).
    `stop` ends the writing early (see IronicAdapter.apply_moves). `autoscale_history` is what
    autoscale kept from earlier cycles (status.autoscale). `guarded`: the owners a free node
    leaves only by a guarded move (shard_write.guarded_owners, from Nova's services); None:
    the live owners (shard_write.live_owners), for a caller that knows nothing of Nova. Ironic errors propagate
    as IronicError subclasses, after which Ironic holds a consistent, partial result.
    The adapter's one-time check() (first use) is not counted in the report's requests.
    Moves are written only when every node they move was listed by this cycle (a full
    listing, or the listing of their source owner or of the unsharded nodes).
    """
    adapter.check()  # once per adapter (endpoint, version, credentials): not a cycle cost
    started = time.monotonic()
    first_request = adapter.requests_made
    now = time.time() if now is None else now

    def planned(nodes: tuple[Node, ...], observed_at: float) -> Plan:
        return plan(Observation(spec=spec, members=tuple(members), nodes=nodes, now=now,
                                autoscale_history=autoscale_history, nodes_observed_at=observed_at))

    last = memory.last if memory is not None else None
    reason: ListingReason | None = observation.EVERY_CYCLE if memory is None else observation.NO_LISTING_YET
    if last is not None:
        decision = planned(last.nodes, last.observed_at)
        reason = observation.reason_before_asking(last, decision.ring_members, now, full_resync_seconds)
        if reason is None:
            answers = _cheap_answers(adapter, last.owners_outside(decision.ring_members))
            reason = observation.reason_from_answers(spec.name, last, answers)
        if reason is None:
            nodes = observation.merged(last, answers)
            decision = planned(nodes, last.observed_at)
            if not paused:
                reason = observation.unlisted_sources(decision.moves, answers)
            if reason is None:
                observed_at = last.observed_at
                memory.last = FullObservation(nodes, observed_at, decision.ring_members, answers.summary)
    if reason is not None:
        summary = adapter.shard_summary() if memory is not None else {}  # before the listing
        nodes, observed_at = adapter.list_nodes(), now
        decision = planned(nodes, observed_at)
        if memory is not None:
            memory.last = FullObservation(nodes, observed_at, decision.ring_members, summary)
            _say_summary_refused(memory, summary, spec.name)
    observe_requests = adapter.requests_made - first_request
    if paused or not decision.moves:
        applied = ApplyResult(planned=len(decision.moves), not_attempted=len(decision.moves))
    else:
        try:
            guard = Guard(live_owners(members, now, spec.rebalance_after_seconds) if guarded is None else guarded)
            if any(move.source in guard.live_owners for move in decision.moves):
                guard = replace(guard, placement_consumers=placement_question(adapter))
            applied = adapter.apply_moves(decision.moves, nodes, stop, guard)
        finally:
            if memory is not None and memory.last is not None:
                memory.last = replace(memory.last, wrote_since=True)
    return CycleReport(
        nodes=nodes,
        plan=decision,
        applied=applied,
        observe_requests=observe_requests,
        ironic_requests=adapter.requests_made - first_request,
        duration_seconds=time.monotonic() - started,
        nodes_observed_at=observed_at,
        full_listing=reason.text if reason is not None else None,
        full_listing_kind=reason.kind if reason is not None else None,
    )


def placement_question(adapter: IronicAdapter) -> Callable[[str], tuple[str, ...]] | None:
    """Placement's `consumers` question for the adapter's cloud, or None when there is none to
    ask: the cloud names no Placement (then no Nova schedules there), or Placement does not
    answer right now (then Nova cannot schedule either; holding every scale-down and
    rebalance until it is back would cost more than the window it guards). With None the
    guard reads Ironic alone, per node, right before each write; said in the log each time,
    which is only when members change. A Placement that answered here and fails on a later
    question keeps that move unwritten this cycle."""
    placement = PlacementAdapter(adapter.connection, cloud_name=adapter.cloud)
    try:
        placement.check()
    except PlacementNotConfigured as error:
        log.info("%s: moves away from live members are re-read in Ironic but Placement is not "
                 "asked for builds in flight (set placement_endpoint_override or a catalog "
                 "entry when the cloud runs Nova)", error)
        return None
    except PlacementError as error:
        log.warning("%s: this cycle's moves away from live members rely on Ironic's per-node "
                    "re-read alone", error)
        return None
    return placement.consumers


def _say_summary_refused(memory: ObservationMemory, summary: Mapping[str, int] | SummaryRefused,
                         pool: str) -> None:
    """Log when Ironic starts refusing the shard summary (every poll lists in full from then
    on) and when it answers again: once each, not once per poll."""
    refused = isinstance(summary, SummaryRefused)
    if isinstance(summary, SummaryRefused) and not memory.summary_refused:
        log.warning("pool %s: %s (ceil(N/1000)+1 requests per poll instead of 2); allow "
                    "baremetal:shards:get for the operator's credentials (a system-scoped reader in "
                    "Ironic's default policy)", pool, observation.summary_refused_reason(summary))
    elif memory.summary_refused and not refused:
        log.info("pool %s: Ironic answers the shard summary again: polls list the pool only when "
                 "it changed", pool)
    memory.summary_refused = refused


def _cheap_answers(adapter: IronicAdapter, owners_outside: Sequence[str]) -> CheapAnswers:
    """The cheap questions of a poll (core/observation.py): the summary first (a change
    after it is seen by the next poll), then the selector's unsharded nodes, then the nodes
    of each owner outside the ring: 2 requests, plus one per 1,000 nodes of such owners. A
    refused summary comes alone (the poll lists in full)."""
    summary = adapter.shard_summary()
    if isinstance(summary, SummaryRefused):
        return CheapAnswers(summary=summary, unsharded=(), owners={})
    return CheapAnswers(summary=summary, unsharded=adapter.unsharded_nodes(),
                        owners={owner: adapter.nodes_of(owner) for owner in owners_outside})
