"""One cycle of one pool against Kubernetes and Ironic: observe, plan, act, report.

The pool's loop (pool_loop.py) runs `reconcile()`, a list of named steps. Each either ends
the cycle with a reason (writes the status, returns the delay until the next cycle) or
passes on what the next step needs:

1. read the pool (the CR, core/spec.py), or report InvalidSpec;
2. observe the members: the pool's pods and ConfigMaps, each member's readiness;
3. read the two Secrets; what cannot be used is reported (ConfigurationMissing, or
   SecretReadRefused) and the cycle goes on without it: no nova.conf, no pod is written; no
   clouds.yaml, neither Ironic nor Nova is asked;
4. refuse to write when an earlier pool on the same cloud selects overlapping Ironic nodes
   or has the same name (Conflict, core/claims.py);
5. plan Ironic: observe and plan with the members' readiness (ironic_cycle.py), no writes;
6. decide the pod actions (core/pods.py, core/fencing.py);
7. act on pods (kube.py) unless paused; a write the API server refuses (403, 422) is
   reported (`<Kind><Verb>Refused`, core/refusals.py) and the cycle goes on;
8. write shards: when the plan moves nodes and the pool is not paused, run the Ironic cycle
   again with writes (it re-reads Ironic first: a second listing only in cycles that move
   something);
9. Nova's side, when the cloud has a compute endpoint (nova_cycle.py): forced_down during
   failover, services of removed members deleted, Nova's hypervisor list audited;
10. report: write `.status` only when it changed, post Events for actions and transitions;
11. the next delay (core/schedule.py).

When Ironic cannot be read, pods are still looked after (replacements need no plan); only
creating or retiring identities waits for a plan. Shard writes stop between two writes
when something new happens or the loop is stopped (the pool's interrupt, pool_loop.py), so
a failed member is replaced promptly even during a long rebalance.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Awaitable, Iterable, Mapping

from ironic_shard_operator.adapters.ironic import (
    IronicAdapter, IronicAuthError, IronicConfigError, IronicEndpointError, IronicError, IronicTooOld,
)
from ironic_shard_operator.adapters.kube import KubeError, KubeRefused
from ironic_shard_operator.controller.ironic_cycle import CycleReport, run_cycle
from ironic_shard_operator.controller.leader import WriteStop
from ironic_shard_operator.controller.log_redaction import KNOWN
from ironic_shard_operator.controller.nova_cycle import NovaOutcome, run_nova_cycle
from ironic_shard_operator.core import model, pods, podspec
from ironic_shard_operator.core.claims import PoolClaim, cloud_identity, find_conflict
from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.redact import secrets_in_clouds_yaml, secrets_in_ini
from ironic_shard_operator.core.refusals import Refusal, news, refused
from ironic_shard_operator.core.schedule import RETRY_SECONDS, next_delay
from ironic_shard_operator.core.spec import InvalidSpec, Pool, SecretKeyRef, read_pool
from ironic_shard_operator.core.status import (
    CycleFacts, autoscale_history_of, build_status, format_time, moves_event, since_of,
)

if TYPE_CHECKING:
    from ironic_shard_operator.controller.pool_loop import Operator, PoolRuntime

log = logging.getLogger(__name__)

# An invalid spec is fixed only by an edit (which wakes the pool): look again only rarely.
INVALID_SPEC_RETRY_SECONDS = RETRY_SECONDS * 30


async def reconcile(op: Operator, body: Mapping[str, Any], claims: Iterable[PoolClaim]) -> float:
    """One cycle of one pool; returns the seconds until the next one is due."""
    cycle = _begin(op, body)
    pool = await _read_pool(cycle)
    if isinstance(pool, _Ended):
        return pool.delay
    members = await _observe_members(cycle, pool)
    secrets = await _read_secrets(cycle, pool)
    if conflict := await _refuse_on_conflict(cycle, pool, members, claims):
        return conflict.delay
    ironic = await _plan_ironic(cycle, pool, members, secrets)
    chosen = await _decide_pods(cycle, pool, members, secrets, ironic)
    acted = await _act_on_pods(cycle, pool, chosen, secrets)
    ironic = await _write_shards(cycle, pool, members, ironic)
    nova = await _nova(cycle, pool, members, secrets, chosen, ironic)
    failed = await _report(cycle, pool, members, secrets, chosen, acted, ironic, nova)
    return next_delay(poll_seconds=pool.ironic.poll_interval_seconds, members=members.readiness,
                      grace_seconds=pool.spec.rebalance_after_seconds, now=cycle.now,
                      failed=failed, wake_after=chosen.decision.wake_after, moves_applied=ironic.applied)


# --- what the steps pass on ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Ended:
    """The cycle ends here (its status written); the next one is due in `delay` seconds."""

    delay: float


@dataclass(frozen=True, slots=True)
class _Cycle:
    """One cycle's context: the pool's CR and runtime, the clock, the status it starts from."""

    op: Operator
    body: Mapping[str, Any]
    namespace: str
    name: str
    runtime: PoolRuntime
    now: float
    previous: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def write(self, facts: CycleFacts) -> None:
        """Write the cycle's status (only when it changed) and post its Events, with the
        credentials of the pool's Secrets masked (log_redaction.KNOWN)."""
        status, events = build_status(replace(facts, secrets=facts.secrets | KNOWN.of(self.key)), self.previous)
        if status != _comparable(self.previous, status):
            await self.op.kube.patch_pool_status(self.namespace, self.name, status)
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
    pod or a ConfigMap exists) in ordinal order, their readiness, and `facts`: the fields of
    CycleFacts every later status write of the cycle shares."""

    pods: Mapping[str, pods.PodView]
    overlays: Mapping[str, str | None]
    identities: list[str]
    readiness: tuple[model.Member, ...]
    facts: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class _Secrets:
    """The two Secrets as far as they can be used: nova.conf (its digest rolls members; "" when
    it cannot be used: then no pod is written), clouds.yaml to talk to the cloud (None when it
    cannot be used: then neither Ironic nor Nova is asked); `missing` says why one cannot be
    used (ConfigurationMissing), `refusals` which reads the API server refused."""

    nova_secret: Mapping[str, Any] | None
    nova_digest: str
    clouds_yaml: str | None
    missing: str | None = None
    refusals: tuple[Refusal, ...] = ()


@dataclass(frozen=True, slots=True)
class _Acted:
    """What the pod actions did: the Events of those that took effect, the refused ones."""

    events: tuple[Event, ...] = ()
    refusals: tuple[Refusal, ...] = ()


@dataclass(frozen=True, slots=True)
class _Ironic:
    """Ironic this cycle: the adapter (None when the cloud config is unusable), the last
    report (None when Ironic could not be read), the last error, the moves written."""

    adapter: IronicAdapter | None
    report: CycleReport | None = None
    error: IronicError | None = None
    applied: int = 0

    @property
    def plan(self) -> model.Plan | None:
        return self.report.plan if self.report is not None else None


@dataclass(frozen=True, slots=True)
class _PodPlan:
    """The members to keep (existing and new) and to retire, and the pod actions that follow."""

    keep: list[str]
    retire: set[str]
    decision: pods.Decision


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
    return _Cycle(op, body, namespace, name, runtime, now, previous)


async def _read_pool(cycle: _Cycle) -> Pool | _Ended:
    """The pool's spec, or InvalidSpec reported."""
    try:
        return read_pool(cycle.body)
    except InvalidSpec as error:
        await cycle.write(CycleFacts(generation=int(cycle.body["metadata"].get("generation") or 0),
                                     pool=cycle.name, error=str(error), error_reason="InvalidSpec",
                                     now=cycle.now, selector=podspec.pool_selector(cycle.name)))
        return _Ended(INVALID_SPEC_RETRY_SECONDS)


async def _observe_members(cycle: _Cycle, pool: Pool) -> _Members:
    """The pool's pods and ConfigMaps (one listing each), and each member's readiness, whose
    `since` is carried over from the last status."""
    selector = podspec.pool_selector(cycle.name)
    pods_raw, configmaps_raw = await asyncio.gather(
        cycle.op.kube.list_pods(cycle.namespace, selector),
        cycle.op.kube.list_configmaps(cycle.namespace, selector))
    member_pods = {}
    for raw in pods_raw:
        view = pods.read_pod(raw)
        if view.name == view.member and model.member_ordinal(cycle.name, view.member) is not None:
            member_pods[view.member] = view
    overlays = {}
    for raw in configmaps_raw:
        member = ((raw.get("metadata") or {}).get("labels") or {}).get(podspec.MEMBER_LABEL)
        if member and model.member_ordinal(cycle.name, member) is not None:
            overlays[member] = (raw.get("data") or {}).get(podspec.MEMBER_CONF_KEY)
    identities = sorted(set(member_pods) | set(overlays), key=lambda m: model.member_ordinal(cycle.name, m))
    recorded = since_of(cycle.previous)
    readiness = tuple(
        pods.member_readiness(m, member_pods.get(m), recorded.get(m), cycle.now) for m in identities)
    facts = dict(generation=pool.generation, pool=cycle.name, members=readiness, now=cycle.now,
                 paused=pool.paused, selector=selector,
                 pods_existing=sum(1 for p in member_pods.values() if not p.deleting),
                 pods_ready=sum(1 for p in member_pods.values() if p.ready and not p.deleting),
                 oldest_pod_created=min((p.created for p in member_pods.values()
                                         if p.created and not p.deleting), default=None),
                 start_timeout_seconds=pool.failover.pod_pending_timeout_seconds)
    return _Members(member_pods, overlays, identities, readiness, facts)


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
    if clouds_yaml is not None:
        try:
            cycle.runtime.cloud = cloud_identity(clouds_yaml, pool.cloud_name)
        except InvalidSpec as error:
            missing, clouds_yaml = missing or str(error), None
    return _Secrets(nova_secret, podspec.secret_digest(nova_secret, pool.nova_config.key), clouds_yaml,
                    missing, tuple(r for r in (nova_refused, cloud_refused) if r is not None))


async def _refuse_on_conflict(cycle: _Cycle, pool: Pool, members: _Members,
                              claims: Iterable[PoolClaim]) -> _Ended | None:
    """Conflict reported when an earlier pool on the same cloud selects overlapping Ironic nodes
    or has the same name (core/claims.py): write nothing."""
    found = find_conflict(PoolClaim(cycle.key, pool.created, pool.selector, cycle.runtime.cloud), claims)
    if found is None:
        return None
    await cycle.write(CycleFacts(**members.facts, conflict=found.message, conflict_reason=found.reason))
    return _Ended(pool.ironic.poll_interval_seconds)


async def _plan_ironic(cycle: _Cycle, pool: Pool, members: _Members, secrets: _Secrets) -> _Ironic:
    """Ironic, first look: observe and plan (ironic_cycle.py) with the members' readiness, no
    writes. An Ironic failure is passed on: the pods are looked after all the same."""
    adapter: IronicAdapter | None = None
    if secrets.clouds_yaml is None:
        return _Ironic(None)
    try:
        adapter = _adapter(cycle.runtime, pool, secrets.clouds_yaml)
        report = await asyncio.to_thread(run_cycle, adapter, pool.spec, members.readiness,
                                         now=cycle.now, paused=True,
                                         autoscale_history=autoscale_history_of(cycle.previous))
    except IronicError as error:
        cycle.record_ironic_error(error)
        return _Ironic(adapter, error=error)
    return _Ironic(adapter, report)


async def _decide_pods(cycle: _Cycle, pool: Pool, members: _Members, secrets: _Secrets,
                       ironic: _Ironic) -> _PodPlan:
    """Pod actions: with a plan, create and retire identities; without, only look after the
    existing ones. The Kubernetes nodes of pods that are not Ready are read for fencing."""
    plan = ironic.plan
    retire = set(plan.members_to_delete) if plan else set()
    keep = [m for m in members.identities if m not in retire] + list(plan.members_to_create if plan else ())
    node_names = {p.node_name for p in members.pods.values() if p.node_name and (p.deleting or not p.ready)}
    nodes_raw = await asyncio.gather(*(cycle.op.kube.get_node(n) for n in sorted(node_names)))
    decision = pods.decide(
        keep=keep, retire=sorted(retire), pods=members.pods,
        nodes={n["metadata"]["name"]: pods.read_node(n) for n in nodes_raw if n},
        configmaps_current={m: members.overlays.get(m) == podspec.member_conf(pool, m) for m in keep},
        wanted_hash={m: podspec.config_hash(pool, m, secrets.nova_digest) for m in keep},
        failover=pool.failover, now=cycle.now)
    return _PodPlan(keep, retire, decision)


async def _act_on_pods(cycle: _Cycle, pool: Pool, chosen: _PodPlan, secrets: _Secrets) -> _Acted:
    """Carry out the pod actions unless paused or without a nova.conf: ConfigMaps, then
    creations, then deletions. Returns the Events of the actions that took effect (a pod that
    existed already, or was replaced meanwhile, is no news) and the refused ones (the rest go
    on; a member whose ConfigMap was refused gets no pod); metrics count deletions by kind."""
    if pool.paused or not secrets.nova_digest or not cycle.op.may_write():  # (kube.py checks each write too)
        return _Acted()
    kube, metrics, decision = cycle.op.kube, cycle.op.metrics, chosen.decision
    done_events: list[Event] = []
    refusals: list[Refusal] = []

    async def attempt(write: Awaitable[Any], verb: str, kind: str, name: str, consequence: str) -> Any:
        """The write's result, or False when the API server refused it (recorded)."""
        try:
            return await write
        except KubeRefused as error:
            refusals.append(refused(verb, kind, name, error.status, error.api_message, consequence))
            return False

    for member in decision.configmaps:
        if await attempt(kube.put_configmap(pool.namespace, podspec.render_configmap(pool, member)),
                         "write", "ConfigMap", podspec.configmap_name(member),
                         f"member {member} gets no pod until it is written") is False:
            decision = replace(decision, creates=tuple(c for c in decision.creates if c.member != member))
    for create in decision.creates:
        pod = podspec.render_pod(pool, create.member, secrets.nova_digest)
        if await attempt(kube.create_pod(pool.namespace, pod), "create", "Pod", create.member,
                         f"member {create.member} has no pod until this is fixed"):
            done_events.extend([create.event] if create.event else [])
    for delete in decision.deletes:
        if not await attempt(kube.delete_pod(pool.namespace, delete.member, uid=delete.uid, force=delete.force),
                             "delete", "Pod", delete.member, "the pod stays"):
            continue
        done_events.extend([delete.event] if delete.event else [])
        if metrics is not None and delete.kind is pods.PodActionKind.FENCE:
            metrics.record_fence(pool.key, pool.failover.fencing.mode)
        elif metrics is not None and delete.kind is pods.PodActionKind.REPLACE:
            metrics.record_replacement(pool.key)
    for member in decision.configmap_deletes:
        await attempt(kube.delete_configmap(pool.namespace, podspec.configmap_name(member)), "delete",
                      "ConfigMap", podspec.configmap_name(member), "it stays")
    return _Acted(tuple(done_events), tuple(refusals))


async def _write_shards(cycle: _Cycle, pool: Pool, members: _Members, ironic: _Ironic) -> _Ironic:
    """Ironic, writes: only when the plan has moves and the pool is not paused. The Ironic cycle
    re-reads and re-plans (level-triggered) and stops between two writes on news (the pool's
    interrupt), so pods are never kept waiting, or once the leader may not write (WriteStop)."""
    plan = ironic.plan
    if plan is None or not plan.moves or pool.paused:
        return ironic
    try:
        stop = WriteStop(cycle.runtime.interrupt, cycle.op.may_write)
        report = await asyncio.to_thread(run_cycle, ironic.adapter, pool.spec, members.readiness,
                                         now=cycle.now, stop=stop,
                                         autoscale_history=autoscale_history_of(cycle.previous))
    except IronicError as error:
        cycle.record_ironic_error(error)
        return replace(ironic, error=error)
    if report.moves_applied and cycle.op.metrics is not None:
        cycle.op.metrics.record_moves(cycle.key, report.moves_applied)
    return replace(ironic, report=report, applied=report.moves_applied)


async def _nova(cycle: _Cycle, pool: Pool, members: _Members, secrets: _Secrets, chosen: _PodPlan,
                ironic: _Ironic) -> NovaOutcome | None:
    """Nova's side (nova_cycle.py), over the cloud connection of the Ironic adapter; None
    without one. Never raises for Nova."""
    if ironic.adapter is None:
        return None
    return await asyncio.to_thread(
        run_nova_cycle, cycle.runtime.nova, ironic.adapter, pool, members=members.readiness,
        identities=set(members.identities) | set(chosen.keep), retiring=chosen.retire,
        nova_conf=_secret_text(secrets.nova_secret, pool.nova_config.key),
        nodes=ironic.report.nodes if ironic.report is not None else None,
        previous=cycle.previous.get("nova"), now=cycle.now, metrics=cycle.op.metrics,
        may_write=cycle.op.may_write)


async def _report(cycle: _Cycle, pool: Pool, members: _Members, secrets: _Secrets, chosen: _PodPlan,
                  acted: _Acted, ironic: _Ironic, nova: NovaOutcome | None) -> bool:
    """The cycle's metrics, status and Events (what was done, what was refused, then what
    changed), a log line when something was written. True when something failed that the
    next cycle tries again (a Secret, a refused write, Ironic)."""
    report, plan, decision, metrics = ironic.report, ironic.plan, chosen.decision, cycle.op.metrics
    if report is not None and metrics is not None:
        metrics.record_cycle(cycle.key, model.Observation(pool.spec, members.readiness, (), cycle.now),
                             plan, report.duration_seconds)
    refusals = (*secrets.refusals, *acted.refusals)
    problems = [("ConfigurationMissing", secrets.missing)] if secrets.missing else []
    problems += [(r.reason, r.message) for r in refusals]
    if ironic.error is not None:
        problems.append((_ironic_reason(ironic.error), str(ironic.error)))
    events = [] if pool.paused else [*acted.events, *decision.events]
    events.extend(news(refusals, cycle.previous))
    if ironic.applied and plan is not None:
        events.append(moves_event(plan.moves, ironic.applied))
    events.extend(nova.events if nova is not None else ())
    await cycle.write(CycleFacts(
        **members.facts, states=decision.states, plan=plan, moves_applied=ironic.applied,
        extra_events=tuple(events), error="; ".join(m for _, m in problems) or None,
        error_reason=problems[0][0] if problems else "Error", nova=nova.section if nova is not None else None))
    if ironic.applied or decision.writes:
        log.info("pool %s: %d/%d members ready, %d shard moves written (%.1fs in Ironic), pod actions: %s",
                 cycle.key, sum(m.ready for m in members.readiness), len(chosen.keep), ironic.applied,
                 report.duration_seconds if report is not None else 0.0,
                 "; ".join(e.message for e in acted.events) or "none")
    return bool(problems)


# --- helpers of the steps --------------------------------------------------------------


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
    value = ((secret or {}).get("data") or {}).get(key)
    if not value:
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


def _comparable(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The previous status restricted to the keys the operator writes."""
    return {k: previous[k] for k in new if k in previous}
