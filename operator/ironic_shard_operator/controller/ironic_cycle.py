"""The Ironic side of one pool's cycle: observe -> plan (core/planner.py) -> write -> report.

Invariants: level-triggered (a cycle interrupted after any write, or killed, leaves every
node with its old owner or its new one, and the next cycle plans from what Ironic shows); a
converged pool makes no write; every shard write is planned from a listing made in the same
cycle and passes core/shard_write.py's rule against a fresh read; the guarded moves, and what
Placement must say first, are core/shard_write.py's. Callable without Kubernetes: members come
from the caller.
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
from ironic_shard_operator.core.shard_write import PlacementState, asks_placement, live_owners

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
    awaiting_nova: frozenset[str] = frozenset(),
    kept_by: frozenset[str] = frozenset(),
) -> CycleReport:
    """Observe the pool in Ironic (by need, with `memory`; see the module doc), plan with
    the pure planner, write the moves, report.

    `paused` plans and reports but writes nothing (every move counts as not attempted).
    `stop` ends the writing early (see IronicAdapter.apply_moves). `autoscale_history` is what
    autoscale kept from earlier cycles (status.autoscale). `guarded`: the owners a free node
    leaves only by a guarded move (shard_write.guarded_owners, from Nova's services); None:
    the live owners (shard_write.live_owners), for a caller that knows nothing of Nova.
    `awaiting_nova`: members Nova cannot schedule to yet, kept out of the ring (the planner's).
    `kept_by`: owners whose free nodes do not move this cycle (retiring members Nova does not
    show disabled yet: core/retiring_service.py::moves_wait_for); their moves count as not
    attempted. Ironic errors propagate as IronicError subclasses, after which Ironic holds a consistent,
    partial result. The adapter's one-time check() (first use) is not counted in the report's
    requests. Moves are written only when every node they move was listed by this cycle (a
    full listing, or the listing of their source owner or of the unsharded nodes).
    """
    adapter.check()  # once per adapter (endpoint, version, credentials): not a cycle cost
    started = time.monotonic()
    first_request = adapter.requests_made
    now = time.time() if now is None else now
    planner = _Planner(spec, tuple(members), now, autoscale_history, awaiting_nova)
    seen = _observe(adapter, planner, memory, paused=paused, full_resync_seconds=full_resync_seconds)
    observe_requests = adapter.requests_made - first_request
    if paused or not seen.decision.moves:
        applied = ApplyResult(planned=len(seen.decision.moves), not_attempted=len(seen.decision.moves))
    else:
        owners = live_owners(members, now, spec.rebalance_after_seconds) if guarded is None else guarded
        applied = _write_moves(adapter, seen, owners, stop, memory, kept_by)
    return CycleReport(
        nodes=seen.nodes,
        plan=seen.decision,
        applied=applied,
        observe_requests=observe_requests,
        ironic_requests=adapter.requests_made - first_request,
        duration_seconds=time.monotonic() - started,
        nodes_observed_at=seen.observed_at,
        full_listing=seen.reason.text if seen.reason is not None else None,
        full_listing_kind=seen.reason.kind if seen.reason is not None else None,
    )


@dataclass(frozen=True, slots=True)
class _Planner:
    """The planner's inputs of one cycle but the nodes: `plan_for(nodes, observed_at)`."""

    spec: PoolSpec
    members: tuple[Member, ...]
    now: float
    autoscale_history: AutoscaleHistory
    awaiting_nova: frozenset[str] = frozenset()

    def plan_for(self, nodes: tuple[Node, ...], observed_at: float) -> Plan:
        return plan(Observation(spec=self.spec, members=self.members, nodes=nodes, now=self.now,
                                autoscale_history=self.autoscale_history, nodes_observed_at=observed_at,
                                awaiting_nova=self.awaiting_nova))


@dataclass(frozen=True, slots=True)
class _Seen:
    """What a cycle observed and planned: the nodes, when they were listed, the plan, why the
    cycle listed in full (None: the cheap answers confirmed the last listing) and the shard
    summary asked with them (kept in the memory)."""

    nodes: tuple[Node, ...]
    observed_at: float
    decision: Plan
    reason: ListingReason | None
    summary: Mapping[str, int] | SummaryRefused


def _observe(adapter: IronicAdapter, planner: _Planner, memory: ObservationMemory | None, *,
             paused: bool, full_resync_seconds: float) -> _Seen:
    """The pool's nodes and the plan made from them: observation by need (core/observation.py).

    With a memory (one per pool, in memory only: a restart, or a new adapter, lists in full
    first), a cycle plans from the pool's last full listing when Ironic's cheap answers (shard
    summary, an unsharded probe, one probe per owner outside the ring) say it still stands: 2
    requests whatever the node count. It lists in full when they do not, when the ring changed,
    on the slow timer, and before writing anything not listed this cycle. Without a memory
    (benchmarks, tests of one cycle) every cycle lists in full. Credentials Ironic refuses the
    shard summary (policy baremetal:shards:get) make every poll list in full, at the cost of a
    full listing per poll; said once in the log (WARNING) and by preflight's
    `ironic-shard-summary` check, and undone at the first poll whose summary Ironic answers."""
    if memory is None:
        return _listed(adapter, planner, observation.EVERY_CYCLE, with_summary=False)
    confirmed = (_confirmed(adapter, planner, memory.last, paused, full_resync_seconds)
                 if memory.last is not None else observation.NO_LISTING_YET)
    seen = confirmed if isinstance(confirmed, _Seen) else _listed(adapter, planner, confirmed, with_summary=True)
    memory.last = FullObservation(seen.nodes, seen.observed_at, seen.decision.ring_members, seen.summary)
    if seen.reason is not None:
        _say_summary_refused(memory, seen.summary, planner.spec.name)
    return seen


def _confirmed(adapter: IronicAdapter, planner: _Planner, last: FullObservation, paused: bool,
               full_resync_seconds: float) -> _Seen | ListingReason:
    """The last full listing, brought up to date by the cheap answers, and the plan made from
    it; or why the pool must be listed in full instead (core/observation.py decides)."""
    decision = planner.plan_for(last.nodes, last.observed_at)
    reason = observation.reason_before_asking(last, decision.ring_members, planner.now, full_resync_seconds)
    if reason is not None:
        return reason
    answers = _cheap_answers(adapter, last.owners_outside(decision.ring_members))
    reason = observation.reason_from_answers(planner.spec.name, last, answers)
    if reason is not None:
        return reason
    nodes = observation.merged(last, answers)
    decision = planner.plan_for(nodes, last.observed_at)
    reason = None if paused else observation.unlisted_sources(decision.moves, answers)
    if reason is not None:
        return reason
    return _Seen(nodes, last.observed_at, decision, None, answers.summary)


def _listed(adapter: IronicAdapter, planner: _Planner, reason: ListingReason, *, with_summary: bool) -> _Seen:
    """The pool listed in full (the shard summary asked first, `with_summary`), and its plan."""
    summary = adapter.shard_summary() if with_summary else {}  # before the listing
    nodes = adapter.list_nodes()
    return _Seen(nodes, planner.now, planner.plan_for(nodes, planner.now), reason, summary)


def _write_moves(adapter: IronicAdapter, seen: _Seen, owners: frozenset[str], stop: threading.Event | None,
                 memory: ObservationMemory | None, kept_by: frozenset[str] = frozenset()) -> ApplyResult:
    """The plan's moves written, those leaving one of `owners` guarded (core/shard_write.py)
    and none leaving one of `kept_by` (counted not attempted); the memory then knows the pool
    was written since its listing, whatever happened."""
    moves = [move for move in seen.decision.moves if move.source not in kept_by]
    try:
        guard = Guard(owners)
        if asks_placement(moves, owners):
            guard = Guard(owners, *placement_question(adapter))
        result = adapter.apply_moves(moves, seen.nodes, stop, guard)
        return replace(result, planned=result.planned + len(seen.decision.moves) - len(moves),
                       not_attempted=result.not_attempted + len(seen.decision.moves) - len(moves))
    finally:
        if memory is not None and memory.last is not None:
            memory.last = replace(memory.last, wrote_since=True)


def placement_question(adapter: IronicAdapter) -> tuple[PlacementState, Callable[[str], tuple[str, ...]] | None]:
    """Placement's state for the adapter's cloud, and its `consumers` question when it answers.
    The cloud names no Placement: ABSENT (no Nova schedules there; the guard reads Ironic alone,
    per node, right before each write). Placement does not answer: NOT_ANSWERING, and the
    guarded moves wait for it (never write blind: shard_write.waits_for_placement). Said in
    the log each time, which is only when members change."""
    placement = PlacementAdapter(adapter.connection, cloud_name=adapter.cloud)
    try:
        placement.check()
    except PlacementNotConfigured as error:
        log.info("%s: moves away from live members are re-read in Ironic but Placement is not "
                 "asked for builds in flight (set placement_endpoint_override or a catalog "
                 "entry when the cloud runs Nova)", error)
        return PlacementState.ABSENT, None
    except PlacementError as error:
        log.warning("%s: this cycle's moves away from live members wait until Placement answers "
                    "(a build it placed may not show in Ironic yet)", error)
        return PlacementState.NOT_ANSWERING, None
    return PlacementState.ANSWERS, placement.consumers


def _say_summary_refused(memory: ObservationMemory, summary: Mapping[str, int] | SummaryRefused,
                         pool_name: str) -> None:
    """Log when Ironic starts refusing the shard summary (every poll lists in full from then
    on) and when it answers again: once each, not once per poll."""
    refused = isinstance(summary, SummaryRefused)
    if isinstance(summary, SummaryRefused) and not memory.summary_refused:
        log.warning("pool %s: %s (ceil(N/1000)+1 requests per poll instead of 2); allow "
                    "baremetal:shards:get for the operator's credentials (a system-scoped reader in "
                    "Ironic's default policy)", pool_name, observation.summary_refused_reason(summary))
    elif memory.summary_refused and not refused:
        log.info("pool %s: Ironic answers the shard summary again: polls list the pool only when "
                 "it changed", pool_name)
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
