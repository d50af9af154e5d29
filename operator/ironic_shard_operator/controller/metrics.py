"""Prometheus metrics of the operator: what a pool looks like, what the operator did to it.

Invariants: one `CollectorRegistry` per `OperatorMetrics` (never the global one); every pool
series carries `pool` and goes with its pool or member; a pool has its series from its first
cycle, whether or not Ironic ever answers; every label value comes from a bounded set declared
in code. Details: docs/design.md, "Metrics".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ironic_shard_operator.adapters.ironic import ERROR_KINDS, IronicError
from ironic_shard_operator.core.handover import FAILURE, JOB_FAILURE_REASONS, SCALE_DOWN
from ironic_shard_operator.core.nova_policy import FINDING_KINDS
from ironic_shard_operator.core.model import Observation, Plan
from ironic_shard_operator.core.observation import FULL_LISTING_KINDS
from ironic_shard_operator.core.pool_signals import PoolSignals
from ironic_shard_operator.core.refusals import REASONS as REFUSAL_REASONS
from ironic_shard_operator.core.spec import FENCING_MODES

PREFIX = "ironic_shard"

# What went wrong talking to Ironic: the adapter's exception classes say it (unavailable,
# keystone_unavailable, auth, endpoint, too_old, config, request; other for anything else).
IRONIC_ERROR_KINDS = ERROR_KINDS

# Why a Nova call failed: Nova features off (`disabled`: no usable compute endpoint,
# credentials refused, Nova too old) or Nova not answering or failing (`unavailable`).
NOVA_ERROR_KINDS = ("disabled", "unavailable")

# Writes the Nova side makes: to Nova's compute services, Nova refusing one (a service that
# still hosts instances), misplaced nodes handed over in Ironic (spec.nova.repairMisplaced), and
# misplaced nodes given back at once to the live member Nova and their instance name.
NOVA_ACTIONS = ("forced_down_set", "forced_down_cleared", "service_deleted", "service_delete_refused",
                "misplaced_handed_over", "misplaced_returned")

# Why nodes with instances are handed over (core/handover.py): a member retired, or failed
# for spec.handover.afterFailureSeconds.
HANDOVER_TRIGGERS = (SCALE_DOWN, FAILURE)

# A reconcile cycle lists every managed node (~0.4 s per 1,000) and writes only moves
# (~50 ms each, serialised): from tens of milliseconds to minutes for a big adoption.
CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# The stages of a pool's Ironic and Nova side (controller/cloud_side.py), in the order they run.
CLOUD_SIDE_STAGES = ("ironic", "nova", "host_mapping", "writes", "handover")

# A handed-over node: a Job's pod start and nova-manage (~5 s per node, docs/operating.md),
# the next cycle's shard write; a failed Job's backoff reaches 960 s.
HANDOVER_BUCKETS = (5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800)


def classify_ironic_error(error: BaseException) -> str:
    """The `kind` label of an exception raised talking to Ironic: its adapter class's own kind
    (IronicError.kind), `other` for anything the adapter did not raise."""
    return error.kind if isinstance(error, IronicError) else "other"


class _SinceLastObservation(Collector):
    """Yields, at scrape time, now minus each pool's last successful Ironic observation."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.last: dict[str, float] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            f"{PREFIX}_seconds_since_last_ironic_observation",
            "Seconds since the operator last listed the pool's nodes from Ironic successfully.",
            labels=["pool"],
        )
        now = self._clock()
        for pool, at in sorted(self.last.items()):
            family.add_metric([pool], max(0.0, now - at))
        yield family


class OperatorMetrics:
    """All metrics of one operator process, in one dedicated registry.

    `clock` returns seconds since the epoch (the same clock as `Observation.now`);
    tests pass a fake one.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.members_desired = Gauge(
            f"{PREFIX}_members_desired", "Members the pool should have (replicas or autoscale).",
            ["pool"], registry=r)
        self.members_ready = Gauge(
            f"{PREFIX}_members_ready", "Members whose pod is Ready now.", ["pool"], registry=r)
        self.members_in_ring = Gauge(
            f"{PREFIX}_members_in_ring",
            "Members free nodes are assigned to (Ready, or within rebalanceAfterSeconds).",
            ["pool"], registry=r)
        self.member_nodes = Gauge(
            f"{PREFIX}_member_nodes",
            "Ironic nodes owned by the member once this cycle's moves are applied.",
            ["pool", "member"], registry=r)
        self.member_pinned_nodes = Gauge(
            f"{PREFIX}_member_pinned_nodes",
            "Owned nodes that are pinned (instance, transitional state or locked).",
            ["pool", "member"], registry=r)
        self.managed_nodes = Gauge(
            f"{PREFIX}_managed_nodes", "Ironic nodes matching the pool's selector.",
            ["pool"], registry=r)
        self.unassigned_nodes = Gauge(
            f"{PREFIX}_unassigned_nodes", "Managed nodes with no shard at observation time.",
            ["pool"], registry=r)
        self.misplaced_nodes = Gauge(
            f"{PREFIX}_misplaced_nodes",
            "Pinned nodes owned by no member of the pool (no compute serves them).",
            ["pool"], registry=r)
        self.pending_moves = Gauge(
            f"{PREFIX}_pending_moves", "Shard changes the last plan asked for.",
            ["pool"], registry=r)
        self.scale_down_blocked = Gauge(
            f"{PREFIX}_scale_down_blocked_members",
            "Retiring members kept because they still own pinned nodes.", ["pool"], registry=r)
        self.node_moves = Counter(
            f"{PREFIX}_node_moves", "Shard changes written to Ironic.", ["pool"], registry=r)
        self.moves_reverted = Counter(
            f"{PREFIX}_moves_reverted", "Guarded shard changes put back because a build claimed the node "
            "between its read and its write.", ["pool"], registry=r)
        self.moves_revert_failed = Counter(
            f"{PREFIX}_moves_revert_failed", "Guarded shard changes a build claimed meanwhile whose put-back "
            "failed: the node may be on the wrong shard (a Warning Event names it).", ["pool"], registry=r)
        self.replacements = Counter(
            f"{PREFIX}_member_replacements",
            "Member pods replaced (same identity) after failure.", ["pool"], registry=r)
        self.fences = Counter(
            f"{PREFIX}_member_fences",
            "Old member pods declared gone, by fencing mode.", ["pool", "mode"], registry=r)
        self.ironic_errors = Counter(
            f"{PREFIX}_ironic_api_errors",
            "Failed Ironic API calls, by kind.", ["pool", "kind"], registry=r)
        self.nova_errors = Counter(
            f"{PREFIX}_nova_api_errors",
            "Failed Nova cycles, by kind (disabled: Nova features off; unavailable).",
            ["pool", "kind"], registry=r)
        self.cycle_duration = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            "Duration of one reconcile cycle (observe, plan, write).",
            ["pool"], buckets=CYCLE_BUCKETS, registry=r)
        self.cloud_side_stage_duration = Histogram(
            f"{PREFIX}_cloud_side_stage_duration_seconds",
            "Duration of one stage of a pool's Ironic and Nova side (a failed member's nodes move "
            "only after the stages before the writes).",
            ["pool", "stage"], buckets=CYCLE_BUCKETS, registry=r)
        self.nova_findings = Gauge(
            f"{PREFIX}_nova_findings",
            "Findings of the last Nova audit, by kind: nodes listed under two computes "
            "(duplicate), not under their owner's compute (unlisted), with an instance on another "
            "host than their shard (misplaced), members Nova lists no node under (unmapped), half "
            "moves (incomplete), computes outside the pool Nova lists the pool's nodes under (stray).",
            ["pool", "kind"], registry=r)
        self.nova_actions = Counter(
            f"{PREFIX}_nova_actions",
            "Writes the Nova side makes, by action: to Nova's compute services, and misplaced "
            "nodes handed over to their instance's host in Ironic (misplaced_handed_over: "
            "spec.nova.repairMisplaced; misplaced_returned: at once, to a live member).",
            ["pool", "action"], registry=r)
        self.handover_nodes = Counter(
            f"{PREFIX}_handover_nodes",
            "Nodes with instances handed over (moved in Nova by nova-manage, then their Ironic shard "
            "written), by trigger: ScaleDown (a member retired) or Failure (afterFailureSeconds).",
            ["pool", "trigger"], registry=r)
        self.handover_duration = Histogram(
            f"{PREFIX}_handover_duration_seconds",
            "Per node handed over: seconds from the creation of the Job that moved it in Nova "
            "(its creationTimestamp) to its Ironic shard written, by trigger.",
            ["pool", "trigger"], buckets=HANDOVER_BUCKETS, registry=r)
        self.handover_job_failures = Counter(
            f"{PREFIX}_handover_job_failures",
            "Handover Jobs that failed with no node moved and were tried again, by reason read from "
            "their log: refused (a nova-manage precondition), database, other.",
            ["pool", "reason"], registry=r)
        self.full_listings = Counter(
            f"{PREFIX}_full_listings",
            "Full listings of the pool's Ironic nodes (ceil(N/1000)+1 requests each; a steady poll "
            "makes 2), by reason (core/observation.py FULL_LISTING_KINDS).",
            ["pool", "reason"], registry=r)
        self.conditions = Gauge(
            f"{PREFIX}_condition",
            "The pool's conditions as its status says them: 1 while True, 0 while False, with the "
            "condition's current reason.", ["pool", "condition", "reason"], registry=r)
        self.forced_down = Gauge(
            f"{PREFIX}_nova_forced_down_members",
            "Members whose Nova compute service is forced down now (status.nova.forcedDown).",
            ["pool"], registry=r)
        self.handover_in_flight = Gauge(
            f"{PREFIX}_handover_nodes_in_flight",
            "Nodes with instances a handover Job is moving in Nova now (status.handover).",
            ["pool"], registry=r)
        self.refusals = Counter(
            f"{PREFIX}_kube_api_refusals",
            "Requests of a pool's cycle the Kubernetes API server refused (403, 422), by reason.",
            ["pool", "reason"], registry=r)
        self.leader = Gauge(
            f"{PREFIX}_leader", "1 while this replica holds the leader Lease, else 0.",
            registry=r)
        self.lease_transitions = Gauge(
            f"{PREFIX}_lease_transitions",
            "The leader Lease's leaseTransitions as this replica last read it: it grows by one "
            "at every change of leader.", registry=r)
        self._since = _SinceLastObservation(clock)
        r.register(self._since)
        self._members: dict[str, set[str]] = {}
        # Every child series made for a pool (metric, label values): what forget_pool removes.
        self._series: dict[str, set[tuple[Any, tuple[str, ...]]]] = {}
        self._observed: set[str] = set()  # pools with an Ironic observation in this process
        self._started: set[str] = set()  # pools whose counters record_status has shown
        # Counters (and histograms) whose every label value is known: 0 from a pool's first cycle.
        self._zeroed: tuple[tuple[Any, tuple[tuple[str, ...], ...]], ...] = (
            (self.node_moves, ((),)), (self.moves_reverted, ((),)), (self.moves_revert_failed, ((),)),
            (self.replacements, ((),)),
            (self.cycle_duration, ((),)),
            (self.cloud_side_stage_duration, tuple((s,) for s in CLOUD_SIDE_STAGES)),
            (self.fences, tuple((m,) for m in FENCING_MODES)),
            (self.ironic_errors, tuple((k,) for k in IRONIC_ERROR_KINDS)),
            (self.nova_errors, tuple((k,) for k in NOVA_ERROR_KINDS)),
            (self.nova_actions, tuple((a,) for a in NOVA_ACTIONS)),
            (self.handover_nodes, tuple((t,) for t in HANDOVER_TRIGGERS)),
            (self.handover_duration, tuple((t,) for t in HANDOVER_TRIGGERS)),
            (self.handover_job_failures, tuple((f,) for f in JOB_FAILURE_REASONS)),
            (self.full_listings, tuple((f,) for f in FULL_LISTING_KINDS)),
            (self.refusals, tuple((f,) for f in REFUSAL_REASONS)),
        )

    def _child(self, metric: Any, pool_key: str, *labels: str) -> Any:
        """The series of `metric` for `pool_key` and `labels`, remembered for forget_pool."""
        self._series.setdefault(pool_key, set()).add((metric, (pool_key, *labels)))
        return metric.labels(pool_key, *labels)

    def _drop(self, metric: Any, pool_key: str, *labels: str) -> None:
        key = (metric, (pool_key, *labels))
        if key in self._series.get(pool_key, ()):
            self._series[pool_key].discard(key)
            metric.remove(pool_key, *labels)

    # ---- what the operator calls -------------------------------------------------------

    def record_cycle(self, pool_key: str, observation: Observation, plan: Plan,
                     duration_seconds: float) -> None:
        """One completed cycle: the pool's gauges now describe `plan`, and Ironic was seen
        successfully at `observation.now`."""
        self._child(self.members_in_ring, pool_key).set(len(plan.ring_members))
        counts = plan.counts
        self._child(self.managed_nodes, pool_key).set(counts.total)
        self._child(self.unassigned_nodes, pool_key).set(counts.unassigned)
        self._child(self.misplaced_nodes, pool_key).set(counts.misplaced)
        self._child(self.pending_moves, pool_key).set(counts.pending_moves)
        self._child(self.scale_down_blocked, pool_key).set(len(plan.scale_down_blocked))
        members = {load.name for load in plan.loads}
        for load in plan.loads:
            self._child(self.member_nodes, pool_key, load.name).set(load.nodes)
            self._child(self.member_pinned_nodes, pool_key, load.name).set(load.pinned)
        for gone in self._members.get(pool_key, set()) - members:
            self._drop(self.member_nodes, pool_key, gone)
            self._drop(self.member_pinned_nodes, pool_key, gone)
        self._members[pool_key] = members
        self._child(self.cycle_duration, pool_key).observe(duration_seconds)
        self._since.last[pool_key] = observation.now
        self._observed.add(pool_key)

    def record_status(self, pool_key: str, signals: PoolSignals) -> None:
        """After every status write of `pool_key`, from its first cycle on, whatever Ironic does:
        members desired and Ready, each condition (a reason gone takes its series along),
        forced-down members and handover nodes in flight (once the status has them), the
        clock of seconds since the last Ironic observation (from `signals.since_observed`
        until this process observes Ironic), and every known counter at 0."""
        if pool_key not in self._started:
            self._started.add(pool_key)
            for metric, label_sets in self._zeroed:
                for labels in label_sets:
                    self._child(metric, pool_key, *labels)  # 0, or what was counted already
        if signals.members_desired is not None:
            self._child(self.members_desired, pool_key).set(signals.members_desired)
        self._child(self.members_ready, pool_key).set(signals.members_ready)
        shown = {(c.type, c.reason) for c in signals.conditions}
        for metric, labels in list(self._series[pool_key]):
            if metric is self.conditions and labels[1:] not in shown:
                self._drop(self.conditions, *labels)
        for condition in signals.conditions:
            self._child(self.conditions, pool_key, condition.type, condition.reason).set(1 if condition.true else 0)
        for metric, value in ((self.forced_down, signals.forced_down),
                              (self.handover_in_flight, signals.handover_in_flight)):
            if value is None:
                self._drop(metric, pool_key)
            else:
                self._child(metric, pool_key).set(value)
        if pool_key not in self._observed and signals.since_observed is not None:
            self._since.last[pool_key] = signals.since_observed

    def record_refusals(self, pool_key: str, reasons: Iterable[str]) -> None:
        """Requests of one cycle the API server refused, by reason (core/refusals.py REASONS)."""
        for reason in reasons:
            if reason not in REFUSAL_REASONS:
                raise ValueError(f"refusal reason {reason!r} is not one of {', '.join(REFUSAL_REASONS)}")
            self._child(self.refusals, pool_key, reason).inc()

    def record_moves(self, pool_key: str, count: int) -> None:
        """`count` shard PATCHes succeeded."""
        self._child(self.node_moves, pool_key).inc(count)

    def record_moves_reverted(self, pool_key: str, count: int) -> None:
        """`count` guarded shard changes were put back (a build claimed the node meanwhile)."""
        self._child(self.moves_reverted, pool_key).inc(count)

    def record_moves_revert_failed(self, pool_key: str, count: int) -> None:
        """`count` guarded shard changes were claimed meanwhile and could not be put back."""
        self._child(self.moves_revert_failed, pool_key).inc(count)

    def record_replacement(self, pool_key: str) -> None:
        """A failed member pod was replaced by a new pod with the same identity."""
        self._child(self.replacements, pool_key).inc()

    def record_fence(self, pool_key: str, mode: str) -> None:
        """An old member pod was declared gone under fencing `mode` (one of FENCING_MODES)."""
        if mode not in FENCING_MODES:
            raise ValueError(f"fencing mode {mode!r} is not one of {', '.join(FENCING_MODES)}")
        self._child(self.fences, pool_key, mode).inc()

    def record_ironic_error(self, pool_key: str, error: BaseException | str) -> None:
        """A failed Ironic call: an exception (its adapter class's kind) or a kind from
        IRONIC_ERROR_KINDS."""
        kind = error if isinstance(error, str) else classify_ironic_error(error)
        if kind not in IRONIC_ERROR_KINDS:
            raise ValueError(
                f"Ironic error kind {kind!r} is not one of {', '.join(IRONIC_ERROR_KINDS)}")
        self._child(self.ironic_errors, pool_key, kind).inc()

    def record_nova_error(self, pool_key: str, kind: str) -> None:
        """A Nova cycle that failed: `kind` is one of NOVA_ERROR_KINDS."""
        if kind not in NOVA_ERROR_KINDS:
            raise ValueError(f"Nova error kind {kind!r} is not one of {', '.join(NOVA_ERROR_KINDS)}")
        self._child(self.nova_errors, pool_key, kind).inc()

    def record_nova_audit(self, pool_key: str, counts: dict[str, int]) -> None:
        """The findings of one Nova audit: {kind: count} (audit.FINDING_KINDS, zeros included)."""
        for kind, count in counts.items():
            if kind not in FINDING_KINDS:
                raise ValueError(f"Nova finding kind {kind!r} is not one of {', '.join(FINDING_KINDS)}")
            self._child(self.nova_findings, pool_key, kind).set(count)

    def record_nova_action(self, pool_key: str, action: str, count: int = 1) -> None:
        """`count` writes of one of NOVA_ACTIONS."""
        if action not in NOVA_ACTIONS:
            raise ValueError(f"Nova action {action!r} is not one of {', '.join(NOVA_ACTIONS)}")
        self._child(self.nova_actions, pool_key, action).inc(count)

    def record_handover_nodes(self, pool_key: str, trigger: str, count: int) -> None:
        """`count` nodes with instances handed over by `trigger` (one of HANDOVER_TRIGGERS)."""
        if trigger not in HANDOVER_TRIGGERS:
            raise ValueError(f"handover trigger {trigger!r} is not one of {', '.join(HANDOVER_TRIGGERS)}")
        self._child(self.handover_nodes, pool_key, trigger).inc(count)

    def record_handover_durations(self, pool_key: str, trigger: str, seconds: Iterable[float]) -> None:
        """Nodes just re-sharded by a handover: each one's time since its Job was created."""
        if trigger not in HANDOVER_TRIGGERS:
            raise ValueError(f"handover trigger {trigger!r} is not one of {', '.join(HANDOVER_TRIGGERS)}")
        for value in seconds:
            self._child(self.handover_duration, pool_key, trigger).observe(value)

    def record_handover_job_failure(self, pool_key: str, reason: str) -> None:
        """A failed handover Job deleted to try its batch again: `reason` is one of
        handover.JOB_FAILURE_REASONS."""
        if reason not in JOB_FAILURE_REASONS:
            raise ValueError(f"handover failure reason {reason!r} is not one of {', '.join(JOB_FAILURE_REASONS)}")
        self._child(self.handover_job_failures, pool_key, reason).inc()

    def record_cloud_side_stage(self, pool_key: str, stage: str, seconds: float) -> None:
        """One stage of a side ran for `seconds`: `stage` is one of CLOUD_SIDE_STAGES."""
        if stage not in CLOUD_SIDE_STAGES:
            raise ValueError(f"cloud side stage {stage!r} is not one of {', '.join(CLOUD_SIDE_STAGES)}")
        self._child(self.cloud_side_stage_duration, pool_key, stage).observe(seconds)

    def record_full_listing(self, pool_key: str, reason: str) -> None:
        """The pool's nodes were listed in full: `reason` is one of FULL_LISTING_KINDS
        (CycleReport.full_listing_kind)."""
        if reason not in FULL_LISTING_KINDS:
            raise ValueError(f"full listing reason {reason!r} is not one of {', '.join(FULL_LISTING_KINDS)}")
        self._child(self.full_listings, pool_key, reason).inc()

    def set_leader(self, leading: bool) -> None:
        """Whether this replica is the one acting (holds the Lease)."""
        self.leader.set(1 if leading else 0)

    def set_lease_transitions(self, transitions: int) -> None:
        """The leader Lease's spec.leaseTransitions, as last read (leader and standby alike)."""
        self.lease_transitions.set(transitions)

    def forget_pool(self, pool_key: str) -> None:
        """Drop every series of a deleted pool."""
        for metric, labels in self._series.pop(pool_key, set()):
            metric.remove(*labels)
        self._members.pop(pool_key, None)
        self._observed.discard(pool_key)
        self._started.discard(pool_key)
        self._since.last.pop(pool_key, None)

    def serve(self, port: int, addr: str = "0.0.0.0") -> WSGIServer:
        """Serve /metrics on `addr:port` from a daemon thread; returns the server
        (call `.shutdown()` to stop it). The port must be free: an error says which."""
        try:
            server, _thread = start_http_server(port, addr, registry=self.registry)
        except OSError as error:
            raise OSError(f"cannot serve metrics on {addr}:{port}: {error}") from error
        return server
