"""One reconcile cycle of a pool's node ownership: observe -> plan -> apply -> report.

Callable without Kubernetes: members come from the caller (the kopf handler reads them
from pods; tests and benchmarks name them). The cycle keeps no state between runs: it
re-reads Ironic every time (level-triggered), so a cycle interrupted after any write (or
killed) leaves every node with either its old owner or its new one, and the next cycle
plans from what Ironic shows and finishes the job. Re-running a converged pool makes no
write.

`AdapterCache` keeps a pool's adapter from one cycle to the next: rebuilt when its
configuration changes, and a configuration that cannot be used is neither tried nor logged
again until it changes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from ironic_shard_operator.adapters.ironic import ApplyResult, IronicAdapter, IronicConfigError
from ironic_shard_operator.core.model import (
    AutoscaleHistory, Member, Node, NodeCounts, Observation, Plan, PoolSpec,
)
from ironic_shard_operator.core.planner import plan

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CycleReport:
    """What one cycle saw, decided and did. `nodes`: the pool's nodes as this cycle read
    them, before its own writes (the Nova audit reuses them instead of listing again)."""

    nodes: tuple[Node, ...]
    plan: Plan
    applied: ApplyResult
    observe_requests: int       # Ironic requests to read the pool
    ironic_requests: int        # all Ironic requests of the cycle (reads, re-reads, writes)
    duration_seconds: float

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

    def get(self, key: Hashable, build: Callable[[], IronicAdapter], *, label: str = "") -> IronicAdapter:
        if self.key is None or key != self.key:
            self.key, self.adapter, self.error = key, None, None
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


def run_cycle(
    adapter: IronicAdapter,
    spec: PoolSpec,
    members: Sequence[Member],
    *,
    now: float | None = None,
    paused: bool = False,
    stop: threading.Event | None = None,
    autoscale_history: AutoscaleHistory = AutoscaleHistory(),
) -> CycleReport:
    """Observe the pool in Ironic, plan with the pure planner, write the moves, report.

    `paused` plans and reports but writes nothing (every move counts as not attempted).
    `stop` ends the writing early (see IronicAdapter.apply_moves). `autoscale_history` is what
    autoscale kept from earlier cycles (status.autoscale). Ironic errors propagate
    as IronicError subclasses, after which Ironic holds a consistent, partial result.
    The adapter's one-time check() (first use) is not counted in the report's requests.
    """
    adapter.check()  # once per adapter (endpoint, version, credentials): not a cycle cost
    started = time.monotonic()
    first_request = adapter.requests_made
    nodes = adapter.list_nodes()
    observe_requests = adapter.requests_made - first_request
    observation = Observation(spec=spec, members=tuple(members), nodes=nodes,
                              now=time.time() if now is None else now, autoscale_history=autoscale_history)
    decision = plan(observation)
    if paused:
        applied = ApplyResult(planned=len(decision.moves), not_attempted=len(decision.moves))
    else:
        applied = adapter.apply_moves(decision.moves, nodes, stop)
    return CycleReport(
        nodes=nodes,
        plan=decision,
        applied=applied,
        observe_requests=observe_requests,
        ironic_requests=adapter.requests_made - first_request,
        duration_seconds=time.monotonic() - started,
    )
