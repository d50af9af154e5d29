"""A pool's Ironic and Nova side, run in the background so that its pod side never waits on it.

One `CloudSide` per pool at a time: observe and plan Ironic, Nova (forced_down before any free
node of a member past its grace moves), host mapping, the writes, the handover step. Invariant:
the cycle that starts it waits only PATIENCE_SECONDS; a side that hangs or refuses keeps
running on its own while later cycles look after the pods with the last plan, and one that sends
no request for HUNG_AFTER_SECONDS is abandoned. The steps: docs/design.md, "The cloud side".
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any

from ironic_shard_operator.adapters.ironic import IronicAdapter, IronicError
from ironic_shard_operator.controller.handover import HandoverOutcome, HandoverWork, run_handover
from ironic_shard_operator.controller.host_mapping import HostMappingOutcome, MappingSeen, run_host_mapping
from ironic_shard_operator.controller.ironic_cycle import CycleReport, ObservationMemory, run_cycle
from ironic_shard_operator.controller.leader import WriteStop
from ironic_shard_operator.controller.nova_cycle import NovaOutcome, NovaRuntime, run_nova_cycle
from ironic_shard_operator.controller.retiring_services import RetiringOutcome, switch_services
from ironic_shard_operator.core import host_mapping, model, nova_policy
from ironic_shard_operator.core.guard_holds import held_by_guard
from ironic_shard_operator.core.pool_memory import PoolMemory
from ironic_shard_operator.core.shard_write import guarded_owners
from ironic_shard_operator.core.spec import Pool

log = logging.getLogger(__name__)

# How long a cycle waits for the side it follows (its plan, then its end), counted from the
# side's start: longer than a healthy Ironic takes to list a pool, short beside a failover.
PATIENCE_SECONDS = 2.0
# A side that has not planned after this long is reported as Ironic not answering, before its
# own requests time out (one request's timeout).
SILENT_SECONDS = 30.0
# A side that has sent no request for this long is hung (10 request timeouts of 30 s: a request
# that gets no answer times out, and the next one is sent): it is abandoned (CloudSide.hung).
HUNG_AFTER_SECONDS = 300.0
# A side that takes this long says in the log what each stage took: a failed member's free nodes
# move only in its writes stage, so the stages before it are the wait a user sees.
SLOW_SIDE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class CloudResult:
    """What a side found and did. `report`: Ironic's (after writes, the writing run's; None
    when Ironic could not be read); `error`: the Ironic error that stopped it; `applied`:
    shard moves written; `nova`: Nova's outcome (None: Nova was not asked)."""

    report: CycleReport | None = None
    error: IronicError | None = None
    applied: int = 0
    nova: NovaOutcome | None = None
    handover: HandoverOutcome | None = None
    host_mapping: HostMappingOutcome | None = None
    retiring: RetiringOutcome | None = None

    @property
    def plan(self) -> model.Plan | None:
        return self.report.plan if self.report is not None else None


@dataclass(frozen=True, slots=True)
class CloudWork:
    """What a side works from: the cycle that starts it observed `members` (readiness) and
    `identities` (every member with a pod or a ConfigMap) at `now`; `pool_memory` is what the
    last status recorded (autoscale's window, status.nova, .handover, .hostMapping, .guard);
    `memory` the pool's last full listing (ironic_cycle.ObservationMemory; None: list every
    time); `kube` the Kubernetes client the handover task uses (None: no handover step);
    `held` the members a handover holds (core/handover.py::holds, as the cycle read it);
    `member_confs` the members' own nova.conf files (podspec.member_conf) as their ConfigMaps
    hold them (their resource-tracker intervals pace the audit)."""

    key: str
    pool: Pool
    adapter: IronicAdapter
    members: tuple[model.Member, ...]
    identities: AbstractSet[str]
    nova_conf: str | None
    pool_memory: PoolMemory
    now: float
    nova: NovaRuntime
    metrics: Any
    may_write: Callable[[], bool]
    memory: ObservationMemory | None = None
    kube: Any = None
    held: AbstractSet[str] = frozenset()
    member_confs: tuple[str | None, ...] = ()


class CloudSide:
    """One run of a pool's Ironic and Nova side (the module doc): its plan once known
    (`planned`: a result without writes, or the error that stopped the observation), its
    result once it ended (`task`), and whether a cycle reported that result (`reported`).

    A side whose requests all hang for good (a library deadlock: keystoneauth waiting on a lock
    for ever) would hold its pool's Ironic and Nova work for good. `hung(now)` says when it has
    sent no request for `hung_after` seconds (many request timeouts: no answer is that slow);
    `abandon()` then stops every write it could still make (its interrupt, and `may_write`
    False for it alone) so the next cycle can start a new side on a new connection. Its thread
    may never end; it can no longer write."""

    def __init__(self, work: CloudWork, interrupt: threading.Event, *,
                 requests_made: Callable[[], int] = lambda: 0, hung_after: float = HUNG_AFTER_SECONDS) -> None:
        loop = asyncio.get_running_loop()
        self.started = loop.time()
        self.planned: CloudResult | None = None
        self.reported = False
        self.abandoned = threading.Event()
        self._interrupt = interrupt
        self._requests_made, self._hung_after = requests_made, hung_after
        self._last_requests, self._progressed_at = requests_made(), self.started
        self._planned = asyncio.Event()
        self._may_write = work.may_write
        work = replace(work, may_write=self.may_write)
        self.task: asyncio.Task[CloudResult] = loop.create_task(self._run(work, interrupt))

    def may_write(self) -> bool:
        """The writers' check for this side: the operator's (the Lease), and not abandoned."""
        return not self.abandoned.is_set() and self._may_write()

    def hung(self, now: float) -> bool:
        """Whether this side, not ended, has sent no request for `hung_after` seconds (`now`:
        the loop's time; each call samples its request count)."""
        if self.task.done():
            return False
        count = self._requests_made()
        if count != self._last_requests:
            self._last_requests, self._progressed_at = count, now
        return now - self._progressed_at >= self._hung_after

    def abandon(self) -> None:
        """No write of this side from now on; its pool's next cycle starts a new one."""
        self.abandoned.set()
        self._interrupt.set()
        self.reported = True

    @property
    def deadline(self) -> float:
        """The loop time until which a cycle waits for this side."""
        return self.started + PATIENCE_SECONDS

    def silent_for(self, now: float) -> float | None:
        """Seconds this side has been observing Ironic without an answer, once past
        SILENT_SECONDS (`now`: the loop's time); None otherwise."""
        waited = now - self.started
        return waited if self.planned is None and waited > SILENT_SECONDS else None

    async def plan_by(self, deadline: float) -> CloudResult | None:
        """The plan stage's result, waiting for it until `deadline` (loop time) at most."""
        left = deadline - asyncio.get_running_loop().time()
        if self.planned is None and left > 0:
            waiter = asyncio.ensure_future(self._planned.wait())
            try:
                await asyncio.wait([waiter], timeout=left)
            finally:
                waiter.cancel()
        return self.planned

    async def result_by(self, deadline: float) -> CloudResult | None:
        """The side's result, waiting for its end until `deadline` (loop time) at most."""
        if not self.task.done():
            left = deadline - asyncio.get_running_loop().time()
            if left > 0:
                await asyncio.wait([self.task], timeout=left)
        return self.task.result() if self.task.done() else None

    def wake_when_done(self, wake: asyncio.Event) -> None:
        """Set `wake` (the pool's) when this side ends, so that a cycle reports it."""
        self.task.add_done_callback(lambda _: wake.set())

    async def _run(self, work: CloudWork, interrupt: threading.Event) -> CloudResult:
        try:
            return await self._stages(work, interrupt)
        except Exception:  # a bug: say so loudly; the pool's next cycle starts a new side
            log.exception("pool %s: the Ironic and Nova side failed unexpectedly", work.key)
            return CloudResult()
        finally:
            self._planned.set()

    async def _stages(self, work: CloudWork, interrupt: threading.Event) -> CloudResult:
        times = StageTimes()
        try:
            return await self._timed_stages(work, interrupt, times)
        finally:
            times.report(work.key, work.metrics)

    async def _timed_stages(self, work: CloudWork, interrupt: threading.Event, times: StageTimes) -> CloudResult:
        pool, metrics = work.pool, work.metrics
        recorded = work.pool_memory
        awaiting = host_mapping.awaiting_nova((m.name for m in work.members), nova_section=recorded.nova.section,
                                              mapping=recorded.host_mapping)
        try:
            report = await asyncio.to_thread(run_cycle, work.adapter, pool.spec, work.members, now=work.now,
                                             paused=True, autoscale_history=work.pool_memory.autoscale,
                                             memory=work.memory, full_resync_seconds=pool.ironic.full_resync_seconds,
                                             awaiting_nova=awaiting)
            result = CloudResult(report)
            _record_listing(metrics, work.key, report)
        except IronicError as error:
            _record_error(metrics, work.key, error)
            result = CloudResult(error=error)
        times.lap("ironic")
        self.planned = result
        self._planned.set()
        plan = result.plan
        nova = await asyncio.to_thread(
            run_nova_cycle, work.nova, work.adapter, pool, members=work.members,
            identities=set(work.identities) | set(plan.members_to_create if plan else ()),
            deleting=set(plan.members_to_delete if plan else ()), retiring=set(plan.retiring if plan else ()),
            nova_conf=work.nova_conf,
            nodes=result.report.nodes if result.report is not None else None,
            previous=work.pool_memory.nova, now=work.now, metrics=metrics, may_write=work.may_write,
            held=work.held, member_confs=work.member_confs, stop=interrupt.is_set)
        times.lap("nova")
        retiring = await _retiring_services(work, nova, plan)
        mapping = await _host_mapping(work, nova, set(plan.members_to_delete if plan else ()))
        times.lap("host_mapping")
        # Before the writes: a member whose host this cycle found mapped (or unmapped) is in the
        # ring (or out of it) for this cycle's writes already.
        now_awaiting = host_mapping.awaiting_nova(
            (m.name for m in work.members), nova_section=nova.section or recorded.nova.section,
            mapping=recorded.host_mapping if mapping is None or mapping.section is None
            else host_mapping.recorded_mapping(mapping.section))
        if plan is not None and (plan.moves or now_awaiting != awaiting) and not pool.paused:
            # 4. the writes; a retiring member's free nodes only once Nova shows its service disabled
            guarded = guarded_owners(work.members, work.now, pool.spec.rebalance_after_seconds, nova.services,
                                     work.identities)
            try:
                report = await asyncio.to_thread(
                    run_cycle, work.adapter, pool.spec, work.members, now=work.now,
                    stop=WriteStop(interrupt, work.may_write), autoscale_history=work.pool_memory.autoscale,
                    memory=work.memory, full_resync_seconds=pool.ironic.full_resync_seconds, guarded=guarded,
                    awaiting_nova=now_awaiting, kept_by=retiring.kept_by)
                result = CloudResult(report, applied=report.moves_applied)
                _record_listing(metrics, work.key, report)
                if report.moves_applied and metrics is not None:
                    metrics.record_moves(work.key, report.moves_applied)
                if report.applied.reverted and metrics is not None:
                    metrics.record_moves_reverted(work.key, report.applied.reverted)
                if report.applied.revert_failed and metrics is not None:
                    metrics.record_moves_revert_failed(work.key, len(report.applied.revert_failed))
            except IronicError as error:
                _record_error(metrics, work.key, error)
                result = CloudResult(result.report, error=error)
            times.lap("writes")
        handover_outcome = None
        if work.kube is not None:  # 5. handovers of nodes with instances (controller/handover.py)
            handover_outcome = await run_handover(
                HandoverWork(work.kube, work.may_write, metrics), pool, ironic=work.adapter,
                nova=_usable_nova(work.nova, nova), members=work.members, plan=result.plan,
                nodes=result.report.nodes if result.report is not None else None,
                now=work.now, recorded=work.pool_memory.handover,
                guard_held=held_by_guard(work.pool_memory.guard, result.report.applied.held
                                         if result.report is not None else ()))
            if handover_outcome.resharded and work.memory is not None:
                work.memory.last = None  # shards written outside run_cycle: list in full next time
            times.lap("handover")
        return CloudResult(result.report, result.error, result.applied, nova, handover_outcome, mapping, retiring)


class StageTimes:
    """The seconds each stage of one side took, in the order they ran (a stage that did not run
    has none). Reported once, when the side ends: each stage to the
    cloud_side_stage_duration_seconds histogram, and, for a side of SLOW_SIDE_SECONDS or more,
    one log line naming them all."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._mark = clock()
        self.seconds: list[tuple[str, float]] = []

    def lap(self, stage: str) -> None:
        """`stage` (one of metrics.CLOUD_SIDE_STAGES) ran from the last lap until now."""
        now = self._clock()
        self.seconds.append((stage, now - self._mark))
        self._mark = now

    def report(self, key: str, metrics: Any) -> None:
        total = sum(seconds for _, seconds in self.seconds)
        if metrics is not None:
            for stage, seconds in self.seconds:
                metrics.record_cloud_side_stage(key, stage, seconds)
        if total >= SLOW_SIDE_SECONDS:
            log.info("pool %s: the Ironic and Nova side took %.1f s: %s", key, total,
                     ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in self.seconds))


async def _retiring_services(work: CloudWork, nova: NovaOutcome, plan: model.Plan | None) -> RetiringOutcome:
    """3a. the retiring members' Nova services disabled, and those whose retire ended enabled
    again (controller/retiring_services.py), from the services the Nova side just read. A
    cloud whose Nova is off for the pool (status.nova Disabled, now or last recorded) has
    nothing to disable."""
    state = (nova.section or work.pool_memory.nova.section or {}).get("state")
    adapter = None if work.nova.adapter is None or state in (None, "Disabled") else work.nova.adapter
    return await asyncio.to_thread(
        switch_services, adapter, pool_key=work.key, retiring=plan.retiring if plan is not None else (),
        identities=work.identities, services=nova.services, may_write=work.may_write, paused=work.pool.paused)


async def _host_mapping(work: CloudWork, nova: NovaOutcome, deleting: AbstractSet[str]) -> HostMappingOutcome | None:
    """3. the members' hosts mapped to a cell (controller/host_mapping.py), when Nova answered
    this cycle; None (the last status.hostMapping kept) otherwise."""
    adapter = _usable_nova(work.nova, nova)
    if work.kube is None or adapter is None or nova.services is None:
        return None
    services = {host: s for host, s in nova.services.items() if host in work.identities and host not in deleting}
    seen = MappingSeen(services, nova.listed, nova_policy.update_interval(work.nova_conf, work.member_confs),
                       work.pool_memory.host_mapping)
    return await run_host_mapping(HandoverWork(work.kube, work.may_write, work.metrics), work.pool, nova=adapter,
                                  runtime=work.nova, seen=seen, now=work.now)


def _usable_nova(runtime: NovaRuntime, outcome: NovaOutcome) -> Any:
    """The pool's Nova adapter unless Nova is off for the pool (Disabled) or was never asked."""
    state = (outcome.section or {}).get("state")
    return None if runtime.adapter is None or state == "Disabled" else runtime.adapter


def _record_error(metrics: Any, key: str, error: IronicError) -> None:
    if metrics is not None:
        metrics.record_ironic_error(key, error)


def _record_listing(metrics: Any, key: str, report: CycleReport) -> None:
    """Count the run's full listing of the pool, if it made one (by reason)."""
    if metrics is not None and report.full_listing_kind is not None:
        metrics.record_full_listing(key, report.full_listing_kind)
