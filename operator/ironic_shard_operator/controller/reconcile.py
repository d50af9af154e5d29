"""One cycle of one pool against Kubernetes and Ironic: observe, plan, act, report.

`reconcile()` is a list of named steps (read the pool, observe the members, read the Secrets,
refuse on Conflict, the Ironic and Nova side in the background, decide and act on pods, the
side's result, report, the next delay); each ends the cycle with a reason or passes on what the
next needs. Invariant: the pod side never waits on Ironic or Nova beyond PATIENCE_SECONDS, and
only creating and retiring identities waits for a plan. The steps one by one:
docs/design.md, "One cycle".
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Iterable, Mapping

from ironic_shard_operator.adapters.ironic import (
    IronicAdapter, IronicAuthError, IronicConfigError, IronicEndpointError, IronicError, IronicTooOld,
)
from ironic_shard_operator.adapters.kube import KubeError, KubeRefused
from ironic_shard_operator.core.preflight import Inputs
from ironic_shard_operator.controller.cloud_side import HUNG_AFTER_SECONDS, CloudResult, CloudSide, CloudWork
from ironic_shard_operator.controller.disruption_budget import keep_budget
from ironic_shard_operator.controller.ironic_cycle import AdapterCache
from ironic_shard_operator.controller.log_redaction import KNOWN
from ironic_shard_operator.controller.runtime import Operator, PoolRuntime
from ironic_shard_operator.controller.signals import status_written
from ironic_shard_operator.core import fencing, handover, handover_job, model, pods, podspec, tracker_interval
from ironic_shard_operator.core.claims import Conflict, PoolClaim, cloud_identity, find_conflict
from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.guard_holds import guard_section, revert_failed_event
from ironic_shard_operator.core.pool_memory import PoolMemory, memory_of
from ironic_shard_operator.core.redact import secrets_in_clouds_yaml, secrets_in_ini
from ironic_shard_operator.core.refusals import Refusal, news, refused
from ironic_shard_operator.core.schedule import after_conflict, after_invalid_spec, earliest_wake, next_delay
from ironic_shard_operator.core.spec import InvalidSpec, Pool, SecretKeyRef, read_pool
from ironic_shard_operator.core.status import CycleFacts, build_status, format_time, moves_event

log = logging.getLogger(__name__)

async def reconcile(op: Operator, body: Mapping[str, Any], claims: Iterable[PoolClaim]) -> float:
    """One cycle of one pool; returns the seconds until the next one is due."""
    cycle = _begin(op, body)
    pool = await _read_pool(cycle)
    if isinstance(pool, _Ended):
        return pool.delay
    members = await _observe_members(cycle, pool)
    secrets = await _read_secrets(cycle, pool)
    conflict = find_conflict(PoolClaim(cycle.key, pool.created, pool.selector, cycle.runtime.cloud), claims)
    _follow_preflight(cycle, pool, secrets, may_probe=conflict is None)
    if conflict is not None:
        return (await _refuse_on_conflict(cycle, pool, members, conflict)).delay
    cloud = await _start_cloud_side(cycle, pool, members, secrets)
    chosen = await _decide_pods(cycle, pool, members, secrets, cloud)
    acted = await _act_on_pods(cycle, pool, chosen, secrets)
    acted = await _keep_disruption_budget(cycle, pool, chosen, secrets, acted)
    cloud = await _cloud_result(cycle, cloud)
    failed = await _report(cycle, pool, members, secrets, chosen, acted, cloud)
    outcome = cloud.result.handover if cloud.result is not None else None  # the handover step's
    handover_now = handover.recorded_handover(outcome.section) \
        if outcome is not None and outcome.section is not None else cycle.memory.handover
    wake_after = earliest_wake(chosen.decision.wake_after, handover_now, cycle.now,
                               outcome is not None and outcome.next_step_soon)
    return next_delay(poll_seconds=pool.ironic.poll_interval_seconds, members=members.readiness,
                      rebalance_after_seconds=pool.spec.rebalance_after_seconds, now=cycle.now, failed=failed,
                      wake_after=wake_after, moves_applied=cloud.applied)


# --- what the steps pass on ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Ended:
    """The cycle ends here (its status written); the next one is due in `delay` seconds."""

    delay: float


@dataclass(frozen=True, slots=True)
class _Cycle:
    """One cycle's context: the pool's CR and runtime, the clock, the status it starts from
    (`previous`, what the status write compares with) and that status read back once
    (`memory`, what every decision reads)."""

    op: Operator
    body: Mapping[str, Any]
    namespace: str
    name: str
    runtime: PoolRuntime
    now: float
    previous: Mapping[str, Any]
    memory: PoolMemory

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def write(self, facts: CycleFacts) -> None:
        """Write the cycle's status (only when it changed) and post its Events, with the
        credentials of the pool's Secrets masked (log_redaction.KNOWN)."""
        status, events = build_status(replace(facts, secrets=facts.secrets | KNOWN.of(self.key),
                                              preflight=facts.preflight or self.runtime.preflight.verdict),
                                      self.previous)
        if status != _comparable(self.previous, status):  # lastCycleTime goes with a write, never makes one
            await self.op.kube.patch_pool_status(self.namespace, self.name,
                                                 {**status, "lastCycleTime": format_time(self.now)})
        status_written(self.op.metrics, self.key, self.body, status, self.runtime.last_status)
        self.runtime.last_status = status
        self.runtime.generation = facts.generation
        stamp = format_time(self.now)
        for event in events:
            try:
                await self.op.kube.post_event(self.body, event, stamp)
            except KubeError as error:  # an Event lost is not worth failing the cycle
                log.warning("pool %s: event %s not posted: %s", self.key, event.reason, error)

    def record_ironic_error(self, error: IronicError) -> None:
        if self.op.metrics is not None:
            self.op.metrics.record_ironic_error(self.key, error)


@dataclass(frozen=True, slots=True)
class _Members:
    """The pool's members as observed: their pods and ConfigMap contents, every identity (a
    pod or a ConfigMap exists) in ordinal order, their readiness, `facts`: what every later
    status write of the cycle shares (the rest of its CycleFacts is filled in there), and `held`: the members a
    handover holds (no pod, forced_down kept) and why, from the last status.handover, the
    pool's handover Jobs and their pods (core/handover.py::holds), never from a plan; `nodes`:
    the Kubernetes nodes of members that are not Ready (_kubernetes_nodes), which both the
    readiness (fencing.counted_out_why) and the pod actions (fencing.fence_verdict) read."""

    pods: Mapping[str, pods.PodView]
    member_confs: Mapping[str, str | None]
    identities: list[str]
    readiness: tuple[model.Member, ...]
    facts: CycleFacts
    held: Mapping[str, str] = field(default_factory=dict)
    jobs: tuple[handover.JobView, ...] = ()
    job_pods: tuple[handover.JobPod, ...] = ()
    nodes: Mapping[str, fencing.NodeView] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Secrets:
    """The two Secrets as far as they can be used: nova.conf (its digest rolls members; "" when
    it cannot be used: then no pod is written), clouds.yaml to talk to the cloud (None when it
    cannot be used: then neither Ironic nor Nova is asked); `unusable` is the reason and message
    of why one cannot be used (ConfigurationMissing: a Secret or its key is missing;
    CloudConfigInvalid: the clouds.yaml names no usable cloud), `refusals` which reads the API
    server refused, `cloud_text` the clouds.yaml as the Secret holds it, usable or not (preflight
    says what is wrong with it)."""

    nova_secret: Mapping[str, Any] | None
    nova_digest: str
    clouds_yaml: str | None
    unusable: tuple[str, str] | None = None
    refusals: tuple[Refusal, ...] = ()
    cloud_text: str | None = None


@dataclass(frozen=True, slots=True)
class _Acted:
    """What the pod actions did: the Events of those that took effect, the refused ones."""

    events: tuple[Event, ...] = ()
    refusals: tuple[Refusal, ...] = ()


@dataclass(frozen=True, slots=True)
class _CloudSideView:
    """The pool's cloud side (Ironic and Nova, in the background) as this cycle sees it: the
    run it follows (None without a usable cloud configuration), the plan to act on and report
    (the side's, else the last one known), the Ironic error to report (the side's, else the
    last one), how long the side has been silent (cloud_side.CloudSide.silent_for), and the
    side's result once it ended and was not reported yet (its writes, its Nova outcome)."""

    cloud_side: CloudSide | None = None
    plan: model.Plan | None = None
    error: IronicError | None = None
    silent_for: float | None = None
    result: CloudResult | None = None

    @property
    def applied(self) -> int:
        return self.result.applied if self.result is not None else 0


@dataclass(frozen=True, slots=True)
class _PodPlan:
    """The members to keep (existing and new) and to retire, the pod actions that follow, and
    the resource-tracker interval each kept member's overlay renders."""

    keep: list[str]
    retire: set[str]
    decision: pods.Decision
    intervals: Mapping[str, tracker_interval.TrackerInterval] = field(default_factory=dict)


# --- the steps -------------------------------------------------------------------------


def _begin(op: Operator, body: Mapping[str, Any]) -> _Cycle:
    """The cycle's context; the status it starts from is the last one written, or the CR's."""
    now = op.clock()
    meta = body["metadata"]
    namespace, name = meta.get("namespace") or "default", meta["name"]
    runtime = op.runtime(f"{namespace}/{name}")
    previous = runtime.last_status if runtime.generation is not None else None
    if previous is None:
        previous = dict(body.get("status") or {})
    return _Cycle(op, body, namespace, name, runtime, now, previous, memory_of(previous))


async def _read_pool(cycle: _Cycle) -> Pool | _Ended:
    """The pool's spec, or InvalidSpec reported."""
    try:
        return read_pool(cycle.body)
    except InvalidSpec as error:
        await cycle.write(CycleFacts(generation=int(cycle.body["metadata"].get("generation") or 0),
                                     error=str(error), error_reason="InvalidSpec",
                                     now=cycle.now, selector=podspec.pool_selector(cycle.name)))
        return _Ended(after_invalid_spec())


async def _observe_members(cycle: _Cycle, pool: Pool) -> _Members:
    """The pool's pods (members' and handover Jobs'), ConfigMaps and handover Jobs (one listing
    each), and each member's readiness, whose `since` is carried over from the last status."""
    selector = podspec.pool_selector(cycle.name)
    pods_raw, configmaps_raw, jobs_raw = await asyncio.gather(
        cycle.op.kube.list_pods(cycle.namespace, selector),
        cycle.op.kube.list_configmaps(cycle.namespace, selector),
        cycle.op.kube.list_jobs(cycle.namespace, handover_job.job_selector(cycle.name)))
    member_pods, job_pods = {}, []
    for raw in pods_raw:
        view = pods.read_pod(raw)
        if view.name == view.member and model.member_ordinal(cycle.name, view.member) is not None:
            member_pods[view.member] = view
        elif (job_pod := handover_job.read_job_pod(raw)) is not None:
            job_pods.append(job_pod)
    member_confs = {}
    for raw in configmaps_raw:
        member = ((raw.get("metadata") or {}).get("labels") or {}).get(podspec.MEMBER_LABEL)
        if member and model.member_ordinal(cycle.name, member) is not None:
            member_confs[member] = (raw.get("data") or {}).get(podspec.MEMBER_CONF_KEY)
    identities = sorted(set(member_pods) | set(member_confs), key=lambda m: model.member_ordinal(cycle.name, m))
    recorded = cycle.memory.members
    last_nodes = {m: recorded[m].kubernetes_node for m in identities if m in recorded}
    nodes = await _kubernetes_nodes(cycle, member_pods, last_nodes)
    readiness = tuple(
        pods.member_readiness(m, member_pods.get(m), recorded.get(m), cycle.now, fencing.counted_out_why(
            member_pods.get(m), nodes, pool.failover.fencing, cycle.now, fenced=m in pool.fenced_members,
            last_node=last_nodes.get(m))) for m in identities)
    facts = CycleFacts(generation=pool.generation, members=readiness, now=cycle.now,
                       paused=pool.paused, selector=selector,
                       pods_existing=sum(1 for p in member_pods.values() if not p.deleting),
                       pods_ready=sum(1 for p in member_pods.values() if p.ready and not p.deleting),
                       oldest_pod_created=min((p.created for p in member_pods.values()
                                               if p.created and not p.deleting), default=None),
                       start_timeout_seconds=pool.failover.pod_pending_timeout_seconds)
    jobs = [j for j in map(handover_job.read_job, jobs_raw) if j is not None]
    held = handover.holds(recorded=cycle.memory.handover, jobs=jobs, job_pods=job_pods)
    return _Members(member_pods, member_confs, identities, readiness, facts, held, tuple(jobs), tuple(job_pods), nodes)


async def _kubernetes_nodes(cycle: _Cycle, member_pods: Mapping[str, pods.PodView],
                            last_nodes: Mapping[str, str | None]) -> dict[str, fencing.NodeView]:
    """The Kubernetes nodes of the members that are not Ready, by name: their pod's (being
    deleted, or not Ready) and the one their pod ran on at the last status (`last_nodes`); a node
    the API does not find is absent (deleted): what fencing's verdicts read."""
    unready = {m for m, p in member_pods.items() if p.deleting or not p.ready} | (set(last_nodes) - set(member_pods))
    names = sorted({p.node_name for m, p in member_pods.items() if m in unready and p.node_name}
                   | {n for m, n in last_nodes.items() if m in unready and n})
    found = await asyncio.gather(*(cycle.op.kube.get_node(n) for n in names))
    return {n["metadata"]["name"]: pods.read_node(n) for n in found if n}


async def _read_secrets(cycle: _Cycle, pool: Pool) -> _Secrets:
    """The two Secrets (and the cloud's identity, for Conflict), as far as they can be used."""
    (nova_secret, nova_refused), (cloud_secret, cloud_refused) = await asyncio.gather(
        _read_secret(cycle, pool.nova_config, "member pods are left as they are (none is created, "
                                              "replaced or rolled)"),
        _read_secret(cycle, pool.cloud, "neither Ironic nor Nova is asked"))
    clouds_yaml = _secret_text(cloud_secret, pool.cloud.key)
    KNOWN.remember(cycle.key, secrets_in_clouds_yaml(clouds_yaml)
                   | secrets_in_ini(_secret_text(nova_secret, pool.nova_config.key)))
    missing = (None if nova_refused else _unusable(nova_secret, pool.nova_config, cycle.namespace,
                                                   "spec.novaConfig", "the base nova.conf",
                                                   "member pods cannot start")) \
        or (None if cloud_refused else _unusable(cloud_secret, pool.cloud, cycle.namespace, "spec.cloud",
                                                 "clouds.yaml", "the operator cannot reach Ironic"))
    unusable = ("ConfigurationMissing", missing) if missing else None
    if clouds_yaml is not None:
        try:
            cycle.runtime.cloud = cloud_identity(clouds_yaml, pool.cloud_name)
        except InvalidSpec as error:
            unusable, clouds_yaml = unusable or ("CloudConfigInvalid", str(error)), None
    return _Secrets(nova_secret, podspec.secret_digest(nova_secret, pool.nova_config.key), clouds_yaml,
                    unusable, tuple(r for r in (nova_refused, cloud_refused) if r is not None),
                    _secret_text(cloud_secret, pool.cloud.key))


async def _refuse_on_conflict(cycle: _Cycle, pool: Pool, members: _Members, found: Conflict) -> _Ended:
    """Conflict reported when an earlier pool on the same cloud selects overlapping Ironic nodes
    or has the same name (core/claims.py, found before preflight is followed: its write probe
    is not sent meanwhile): write nothing."""
    await cycle.write(replace(members.facts, conflict=found.message, conflict_reason=found.reason))
    return _Ended(after_conflict(pool.ironic.poll_interval_seconds))


async def _start_cloud_side(cycle: _Cycle, pool: Pool, members: _Members, secrets: _Secrets) -> _CloudSideView:
    """The pool's Ironic and Nova side (cloud_side.py): the one under way, or a new one started
    with this cycle's observation once the last one was reported; its plan if it has one by
    its deadline, else the last plan known. An unusable cloud configuration is passed on."""
    runtime = cycle.runtime
    if secrets.clouds_yaml is None:
        return _CloudSideView()
    cloud_side = runtime.cloud_side
    if cloud_side is not None and cloud_side.hung(asyncio.get_running_loop().time()):
        log.error("pool %s: the Ironic and Nova side has sent no request for %.0fs: abandoned (it writes nothing "
                  "more), a new one starts on a new connection", cycle.key, HUNG_AFTER_SECONDS)
        cloud_side.abandon()
        runtime.ironic = AdapterCache()  # a new connection: the hung one keeps its locks
        runtime.nova.adapter = None
    if cloud_side is None or (cloud_side.task.done() and cloud_side.reported) or cloud_side.abandoned.is_set():
        try:
            adapter = _adapter(runtime, pool, secrets.clouds_yaml)
        except IronicError as error:
            cycle.record_ironic_error(error)
            return _CloudSideView(error=error)
        runtime.interrupt = threading.Event()
        cloud_side = runtime.cloud_side = CloudSide(CloudWork(
            key=cycle.key, pool=pool, adapter=adapter, members=members.readiness,
            identities=frozenset(members.identities),
            nova_conf=_secret_text(secrets.nova_secret, pool.nova_config.key),
            pool_memory=cycle.memory, now=cycle.now, nova=runtime.nova, metrics=cycle.op.metrics,
            may_write=cycle.op.may_write,
            memory=runtime.ironic.memory, kube=cycle.op.kube, held=frozenset(members.held),
            member_confs=tuple(members.member_confs.values())),
            runtime.interrupt, requests_made=lambda: adapter.requests_made + _nova_requests(runtime))
    _remember(runtime, await cloud_side.plan_by(cloud_side.deadline))
    return _CloudSideView(cloud_side, runtime.ironic_plan, runtime.ironic_error,
                          cloud_side.silent_for(asyncio.get_running_loop().time()))


async def _decide_pods(cycle: _Cycle, pool: Pool, members: _Members, secrets: _Secrets,
                       cloud: _CloudSideView) -> _PodPlan:
    """Pod actions: with a plan, create and retire identities; without, only look after the
    existing ones. The plan may be an earlier cycle's (a side still under way): what it
    creates or retires may have happened already. Each kept member's overlay renders its
    resource-tracker interval (member_intervals)."""
    plan = cloud.plan
    away = handover.kept_away(plan, pool.handover, members.readiness, members.pods.keys(), cycle.now,
                              held=members.held, recorded=cycle.memory.handover)
    side = handover.pod_side(identities=members.identities, plan=plan, away=away,
                             fenced_members=pool.fenced_members, jobs=members.jobs, job_pods=members.job_pods,
                             recorded=cycle.memory.handover)
    keep, retire, stop, fenced = list(side.keep), set(side.retire), side.stop, side.fenced
    intervals = tracker_interval.member_intervals(
        pool.tracker, keep, plan, {m: podspec.running_interval(members.member_confs.get(m)) for m in keep})
    decision = pods.decide(
        keep=keep, retire=sorted(retire), pods=members.pods, nodes=members.nodes,
        configmaps_current={m: members.member_confs.get(m) == podspec.member_conf(pool, m, intervals[m]) for m in keep},
        wanted_hash={m: podspec.config_hash(pool, m, secrets.nova_digest, intervals[m]) for m in keep},
        failover=pool.failover, now=cycle.now, stop=sorted(stop), fenced=sorted(fenced), held_why=away)
    return _PodPlan(keep, retire, decision, intervals)


async def _act_on_pods(cycle: _Cycle, pool: Pool, chosen: _PodPlan, secrets: _Secrets) -> _Acted:
    """Carry out the pod actions unless paused or without a nova.conf: ConfigMaps, then
    creations, then deletions. Returns the Events of the actions that took effect (a pod that
    existed already, or was replaced meanwhile, is no news) and the refused ones (the rest go
    on; a member whose ConfigMap was refused gets no pod); metrics count deletions by kind."""
    if pool.paused or not secrets.nova_digest or not cycle.op.may_write():  # (kube.py checks each write too)
        return _Acted()
    kube, decision, writes = cycle.op.kube, chosen.decision, _Writes()
    for member in decision.configmaps:
        if await writes.attempt(kube.put_configmap(pool.namespace, podspec.render_configmap(
                pool, member, chosen.intervals.get(member))),
                                "write", "ConfigMap", podspec.configmap_name(member),
                                f"member {member} gets no pod until it is written") is False:
            decision = replace(decision, creates=tuple(c for c in decision.creates if c.member != member))
    for create in decision.creates:
        pod = podspec.render_pod(pool, create.member, secrets.nova_digest, chosen.intervals.get(create.member))
        if await writes.attempt(kube.create_pod(pool.namespace, pod), "create", "Pod", create.member,
                                f"member {create.member} has no pod until this is fixed"):
            writes.done(create.event)
    for delete in decision.deletes:
        # the spec's grace, also for a pod made before it was set (or changed): nova-compute's
        # graceful shutdown is not cut by the 30 s a pod without one would get
        if await writes.attempt(kube.delete_pod(pool.namespace, delete.member, uid=delete.uid, force=delete.force,
                                                grace_seconds=pool.pod.grace_seconds), "delete", "Pod", delete.member,
                                "the pod stays"):
            writes.done(delete.event)
            _count_deletion(cycle.op.metrics, pool, delete)
    for member in decision.configmap_deletes:
        await writes.attempt(kube.delete_configmap(pool.namespace, podspec.configmap_name(member)),
                             "delete", "ConfigMap", podspec.configmap_name(member), "it stays")
    return _Acted(tuple(writes.events), tuple(writes.refusals))


async def _keep_disruption_budget(cycle: _Cycle, pool: Pool, chosen: _PodPlan, secrets: _Secrets,
                                  acted: _Acted) -> _Acted:
    """The pool's PodDisruptionBudget over the members it keeps (disruption_budget.py: a drain
    evicts one at a time), when the pod side may act (not paused, a nova.conf: without one
    member pods are left as they are, and so is their budget); a refused request is reported
    with the pod side's."""
    if pool.paused or not secrets.nova_digest or not cycle.op.may_write():
        return acted
    refusal = await keep_budget(cycle.op.kube, pool, len(chosen.keep))
    return acted if refusal is None else replace(acted, refusals=(*acted.refusals, refusal))


class _Writes:
    """The pod side's writes of one cycle: the Events of those that took effect, and the
    ones the API server refused (each refusal recorded, never raised: the rest go on)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.refusals: list[Refusal] = []

    async def attempt(self, write: Awaitable[Any], verb: str, kind: str, name: str,
                      consequence: str) -> Any:
        """The write's result, or False when the API server refused it (recorded)."""
        try:
            return await write
        except KubeRefused as error:
            self.refusals.append(refused(verb, kind, name, error.status, error.api_message, consequence))
            return False

    def done(self, event: Event | None) -> None:
        if event is not None:
            self.events.append(event)


def _count_deletion(metrics: Any, pool: Pool, delete: pods.DeletePod) -> None:
    """Metrics count a deletion by its kind, never by its message."""
    if metrics is not None and delete.kind is pods.PodActionKind.FENCE:
        metrics.record_fence(pool.key, pool.failover.fencing.mode)
    elif metrics is not None and delete.kind is pods.PodActionKind.REPLACE:
        metrics.record_replacement(pool.key)


async def _cloud_result(cycle: _Cycle, cloud: _CloudSideView) -> _CloudSideView:
    """The side's result, if it ends by its deadline and no cycle reported it yet (its plan
    and error are then the ones to report); else the side wakes the pool when it ends."""
    cloud_side = cloud.cloud_side
    if cloud_side is None or cloud_side.reported:
        return cloud
    result = await cloud_side.result_by(cloud_side.deadline)
    if result is None:
        cloud_side.wake_when_done(cycle.runtime.wake)
        return cloud
    _remember(cycle.runtime, result)
    return replace(cloud, plan=cycle.runtime.ironic_plan, error=cycle.runtime.ironic_error, silent_for=None,
                   result=result)


async def _report(cycle: _Cycle, pool: Pool, members: _Members, secrets: _Secrets, chosen: _PodPlan,
                  acted: _Acted, cloud: _CloudSideView) -> bool:
    """The cycle's metrics, status and Events (what was done, what was refused, then what
    changed), a log line when something was written. True when something failed that the
    next cycle tries again (a Secret, a refused write, Ironic). A side's result is reported
    once."""
    plan, decision, metrics, result = cloud.plan, chosen.decision, cycle.op.metrics, cloud.result
    report, nova = (result.report, result.nova) if result is not None else (None, None)
    outcome = result.handover if result is not None else None  # the handover step's
    mapping = result.host_mapping if result is not None else None
    if report is not None and metrics is not None:
        metrics.record_cycle(cycle.key, model.Observation(pool.spec, members.readiness, (), cycle.now),
                             plan, report.duration_seconds)
    refusals = (*secrets.refusals, *acted.refusals)
    if metrics is not None:
        metrics.record_refusals(cycle.key, (r.reason for r in refusals))
    problems = _problems(secrets, refusals, cloud)
    events = [] if pool.paused else [*acted.events, *decision.events]
    events.extend(news(refusals, cycle.memory.degraded))
    if cloud.applied and plan is not None:
        events.append(moves_event(plan.moves, cloud.applied))
    if report is not None and (failed_back := revert_failed_event(report.applied.revert_failed)) is not None:
        events.append(failed_back)
    events.extend(nova.events if nova is not None else ())
    events.extend(outcome.events if outcome is not None else ())
    events.extend(mapping.events if mapping is not None else ())
    events.extend(result.retiring.events if result is not None and result.retiring is not None else ())
    guard = None
    if report is not None and plan is not None:
        guard, leaks = guard_section(cycle.memory.guard, report.applied.held,
                                     {move.node_uuid for move in plan.moves}, cycle.now, pool.leaked_allocation_seconds)
        events.extend(leaks)
    await cycle.write(replace(
        members.facts, states=decision.states, plan=plan, moves_applied=cloud.applied,
        extra_events=tuple(events), error="; ".join(m for _, m in problems) or None,
        error_reason=problems[0][0] if problems else "Error", nova=nova.section if nova is not None else None,
        handover=outcome.section if outcome is not None else None, handover_enabled=pool.handover is not None,
        guard=guard, host_mapping=mapping.section if mapping is not None else None,
        intervals={m: i.seconds for m, i in chosen.intervals.items()}, seconds_per_node=pool.tracker.seconds_per_node))
    if cloud.cloud_side is not None and result is not None:
        cloud.cloud_side.reported = True
    if cloud.applied or decision.writes:
        log.info("pool %s: %d/%d members ready, %d shard moves written (%.1fs in Ironic), pod actions: %s",
                 cycle.key, sum(m.ready for m in members.readiness), len(chosen.keep), cloud.applied,
                 report.duration_seconds if report is not None else 0.0,
                 "; ".join(e.message for e in acted.events) or "none")
    return bool(problems)


# --- helpers of the steps --------------------------------------------------------------


def _problems(secrets: _Secrets, refusals: Iterable[Refusal], cloud: _CloudSideView) -> list[tuple[str, str]]:
    """(reason, message) of what failed this cycle and is tried again: the first names the
    condition's reason."""
    problems = [secrets.unusable] if secrets.unusable else []
    problems += [(r.reason, r.message) for r in refusals]
    if cloud.error is not None:
        problems.append((_ironic_reason(cloud.error), str(cloud.error)))
    elif cloud.silent_for is not None:
        problems.append(("IronicUnavailable", f"Ironic has not answered for {cloud.silent_for:.0f}s: member "
                                              "pods are looked after meanwhile, no node changes owner"))
    return problems


def _nova_requests(runtime: PoolRuntime) -> int:
    """Requests the pool's Nova adapter has sent (0 without one): a side's progress, with Ironic's."""
    return runtime.nova.adapter.requests_made if runtime.nova.adapter is not None else 0


def _remember(runtime: PoolRuntime, seen: CloudResult | None) -> None:
    """Keep what a side found as the last plan and Ironic error known (PoolRuntime): a plan
    clears the error; an error keeps the last plan (the last ownership known)."""
    if seen is None:
        return
    if seen.plan is not None:
        runtime.ironic_plan = seen.plan
    if seen.error is not None or seen.plan is not None:
        runtime.ironic_error = seen.error


def _ironic_reason(error: IronicError | None) -> str:
    """The condition reason for an Ironic failure, one word per thing to fix."""
    for kind, reason in ((IronicConfigError, "CloudConfigInvalid"), (IronicAuthError, "IronicAuthFailed"),
                         (IronicTooOld, "IronicTooOld"), (IronicEndpointError, "IronicEndpointWrong")):
        if isinstance(error, kind):
            return reason
    return "IronicUnavailable"


async def _read_secret(cycle: _Cycle, ref: SecretKeyRef, consequence: str) -> tuple[Any, Refusal | None]:
    """The Secret `ref` (None when it does not exist), or the API server's refusal to read it."""
    try:
        return await cycle.op.kube.get_secret(cycle.namespace, ref.name), None
    except KubeRefused as error:
        return None, refused("read", "Secret", ref.name, error.status, error.api_message, consequence)


def _unusable(secret: Mapping[str, Any] | None, ref: SecretKeyRef, namespace: str, field: str,
              holds: str, consequence: str) -> str | None:
    """Why the Secret `ref` cannot give what it `holds`: it does not exist (the API said 404),
    or it has no such key; None when it can."""
    if secret is None:
        return (f"Secret {ref.name} not found in namespace {namespace} ({field}.secretRef): create it "
                f"with key {ref.key} ({holds}); {consequence}")
    if _secret_text(secret, ref.key) is None:
        return f"Secret {ref.name} has no key {ref.key} ({holds}): {consequence}"
    return None


def _secret_text(secret: Mapping[str, Any] | None, key: str) -> str | None:
    """The text under `key` ("" for a key with an empty value), None when the key is absent."""
    value = ((secret or {}).get("data") or {}).get(key)
    if value is None:
        return None
    return base64.b64decode(value).decode("utf-8", errors="replace")


def _adapter(runtime: PoolRuntime, pool: Pool, clouds_yaml: str) -> IronicAdapter:
    """The pool's Ironic adapter, built only when its cloud or settings change; an unusable
    cloud config is logged once and raised again each cycle until it changes (AdapterCache)."""
    return runtime.ironic.get(
        (clouds_yaml, pool.cloud_name, pool.selector, pool.ironic),
        lambda: IronicAdapter.from_clouds_yaml(
            clouds_yaml, pool.cloud_name,
            selector=pool.selector,
            max_concurrent_writes=pool.ironic.max_concurrent_writes,
            writes_per_second=pool.ironic.writes_per_second),
        label=f"pool {pool.key}")


def _follow_preflight(cycle: _Cycle, pool: Pool, secrets: _Secrets, *, may_probe: bool) -> None:
    """Preflight (controller/preflight_side.py) runs in the background when the pool starts,
    whenever its Secrets' texts, cloud name, selector or image change or the pool enters or
    leaves Conflict (`may_probe`: its write probe is not sent in Conflict), and again 5 minutes
    after a failed verdict; every status write carries its latest verdict as the Preflight
    condition (_Cycle.write)."""
    cycle.runtime.preflight.follow(Inputs(
        clouds_yaml=secrets.cloud_text, cloud_name=pool.cloud_name,
        nova_conf=_secret_text(secrets.nova_secret, pool.nova_config.key), selector=pool.selector,
        image=pool.pod.image, pool_name=pool.name, may_probe=may_probe), cycle.runtime.wake, cycle.now)


def _comparable(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The previous status restricted to the keys the operator writes."""
    return {k: previous[k] for k in new if k in previous}
