"""One pool's reconcile loop against Kubernetes and Ironic: observe, plan, act, report.

`Operator.run_pool()` is the loop kopf starts once per IronicComputeShard (handlers.py
wires it): it runs `reconcile()` whenever something about the pool changed (`wake()`),
and otherwise every `spec.ironic.pollIntervalSeconds`, or sooner when a time-based
decision falls due (pending timeout, ForceAfter). One loop per pool means one cycle per
pool at a time; every trigger runs the same level-triggered cycle:

1. read the CR (resource.py), the pool's pods and ConfigMaps, the two Secrets;
2. refuse to write when an earlier pool selects overlapping Ironic nodes (Conflict);
3. observe Ironic and plan with the members' readiness (cycle.py, without writes);
4. decide pod actions (members.py) and carry them out (kube.py) unless paused;
5. when the plan moves nodes and the pool is not paused, run the cycle again with writes
   (it re-reads Ironic first: a second listing only in cycles that move something);
6. Nova's side, when the cloud has a compute endpoint (nova_cycle.py): forced_down during
   failover, services of removed members deleted, Nova's hypervisor list audited;
7. write `.status` only when it changed, post Events for actions and transitions.

When Ironic cannot be read, pods are still looked after (replacements need no plan); only
creating or retiring identities waits for a plan. Shard writes of a cycle stop between two
writes when something new happens (a pod event, a spec change: the next cycle starts at
once and, being level-triggered, continues the writes after looking after the pods) or
when the loop is stopped (CR deleted, operator stopping). So a failed member is replaced
promptly even during a long rebalance.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from ironic_shard_operator.core import pods as lifecycle
from ironic_shard_operator.core import model, podspec
from ironic_shard_operator.controller.ironic_cycle import run_cycle
from ironic_shard_operator.adapters.ironic import (
    IronicAdapter, IronicAuthError, IronicConfigError, IronicEndpointError, IronicError, IronicTooOld,
)
from ironic_shard_operator.adapters.kube import Kube, KubeError
from ironic_shard_operator.controller.nova_cycle import NovaRuntime, run_nova_cycle
from ironic_shard_operator.core.claims import PoolClaim, cloud_identity, earlier_overlap
from ironic_shard_operator.core.spec import InvalidSpec, Pool, read_pool
from ironic_shard_operator.core.status import CycleFacts, build_status, format_time, moves_event, since_of

log = logging.getLogger(__name__)

# Seconds to let a burst of triggers (a pod's create, schedule, start, ready) gather
# into one cycle.
DEBOUNCE_SECONDS = 0.5
# Retry delay after a failed cycle (Kubernetes or Ironic unreachable), at most the poll.
RETRY_SECONDS = 10.0


@dataclass
class PoolRuntime:
    """What the operator keeps in memory about one pool between its cycles.

    Nothing here is needed for correctness after a restart: the adapter is rebuilt, the
    cloud identity re-read, and `last_status` falls back to the CR's own status.
    """

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    adapter: IronicAdapter | None = None
    adapter_key: tuple[Any, ...] | None = None
    cloud: str | None = None
    last_status: dict[str, Any] | None = None
    generation: int | None = None
    # Set when the running cycle should end its shard writes early (news, or stopping).
    interrupt: threading.Event = field(default_factory=threading.Event)
    nova: NovaRuntime = field(default_factory=NovaRuntime)


class Operator:
    """The shared state of one operator process: its Kubernetes client and the pools."""

    def __init__(self, kube: Kube, *, metrics: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.metrics = metrics
        self.clock = clock
        self.pools: dict[str, PoolRuntime] = {}

    def runtime(self, key: str) -> PoolRuntime:
        return self.pools.setdefault(key, PoolRuntime())

    def wake(self, key: str) -> None:
        """Ask for a cycle of pool `key` (namespace/name) soon; bursts gather into one.

        Call it on the event loop (asyncio.Event is not thread-safe)."""
        runtime = self.runtime(key)
        runtime.wake.set()
        runtime.interrupt.set()

    def forget(self, key: str) -> None:
        runtime = self.pools.pop(key, None)
        if runtime is not None:
            runtime.interrupt.set()
        if self.metrics is not None:
            self.metrics.forget_pool(key)

    async def run_pool(self, body: Mapping[str, Any], stopped: Any,
                       claims: Callable[[], Iterable[PoolClaim]]) -> None:
        """Cycle pool `body` (a live view of the CR) until `stopped` (kopf's daemon flag).

        `claims` lists every pool's claim (for Conflict), read fresh for each cycle.
        """
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        runtime = self.runtime(key)
        runtime.wake.set()
        watcher = asyncio.ensure_future(_interrupt_when_stopped(stopped, runtime.interrupt))
        try:
            await self._loop(key, runtime, body, stopped, claims)
        finally:
            watcher.cancel()
            runtime.interrupt.set()
        log.info("pool %s: stopped; its pods go with the CR (owner references), "
                 "Ironic node shards are left as they are", key)

    async def _loop(self, key: str, runtime: PoolRuntime, body: Mapping[str, Any], stopped: Any,
                    claims: Callable[[], Iterable[PoolClaim]]) -> None:
        while not stopped:
            runtime.wake.clear()
            runtime.interrupt.clear()
            try:
                delay = await reconcile(self, body, claims())
            except (KubeError, IronicError) as error:  # noqa: PERF203 - the loop must go on
                log.warning("pool %s: cycle failed: %s", key, error)
                delay = RETRY_SECONDS
            except Exception:  # a bug: say so loudly, keep the other pools going
                log.exception("pool %s: cycle failed unexpectedly", key)
                delay = RETRY_SECONDS
            await _sleep_until(runtime.wake, stopped, delay)
            if runtime.wake.is_set() and not stopped:
                await asyncio.sleep(DEBOUNCE_SECONDS)


async def _interrupt_when_stopped(stopped: Any, flag: threading.Event) -> None:
    await stopped.wait()
    flag.set()


async def _sleep_until(wake: asyncio.Event, stopped: Any, seconds: float) -> None:
    """Return on `wake`, on `stopped`, or after `seconds`, whichever comes first."""
    waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def reconcile(op: Operator, body: Mapping[str, Any], claims: Iterable[PoolClaim]) -> float:
    """One cycle of one pool; returns the seconds until the next one is due."""
    now = op.clock()
    meta = body["metadata"]
    namespace, name = meta.get("namespace") or "default", meta["name"]
    key = f"{namespace}/{name}"
    runtime = op.runtime(key)
    previous = runtime.last_status if runtime.generation is not None else None
    if previous is None:
        previous = dict(body.get("status") or {})
    reporter = _Reporter(op, body, runtime, previous, now)

    try:
        pool = read_pool(body)
    except InvalidSpec as error:
        await reporter.write(CycleFacts(generation=int(meta.get("generation") or 0), pool=name,
                                      error=str(error), error_reason="InvalidSpec", now=now,
                                      selector=podspec.pool_selector(name)))
        return RETRY_SECONDS * 30

    kube = op.kube
    selector = podspec.pool_selector(name)
    pods_raw, configmaps_raw = await asyncio.gather(
        kube.list_pods(namespace, selector), kube.list_configmaps(namespace, selector))
    pods = {}
    for raw in pods_raw:
        view = lifecycle.read_pod(raw)
        if view.name == view.member and model.member_ordinal(name, view.member) is not None:
            pods[view.member] = view
    overlays = {}
    for raw in configmaps_raw:
        member = ((raw.get("metadata") or {}).get("labels") or {}).get(podspec.MEMBER_LABEL)
        if member and model.member_ordinal(name, member) is not None:
            overlays[member] = (raw.get("data") or {}).get(podspec.MEMBER_CONF_KEY)
    identities = sorted(set(pods) | set(overlays), key=lambda m: model.member_ordinal(name, m))
    recorded = since_of(previous)
    readiness = tuple(
        lifecycle.member_readiness(m, pods.get(m), recorded.get(m), now) for m in identities)

    facts = dict(generation=pool.generation, pool=name, members=readiness, now=now,
                 paused=pool.paused, selector=selector,
                 pods_existing=sum(1 for p in pods.values() if not p.deleting),
                 pods_ready=sum(1 for p in pods.values() if p.ready and not p.deleting))

    # The two Secrets: nova.conf only for its digest (rolls members), clouds.yaml to talk.
    nova_secret, cloud_secret = await asyncio.gather(
        kube.get_secret(namespace, pool.nova_config.name), kube.get_secret(namespace, pool.cloud.name))
    nova_digest = podspec.secret_digest(nova_secret, pool.nova_config.key)
    problem = None
    if not nova_digest:
        problem = (f"Secret {pool.nova_config.name} has no key {pool.nova_config.key} "
                   "(the base nova.conf): member pods cannot start")
    clouds_yaml = _secret_text(cloud_secret, pool.cloud.key)
    if clouds_yaml is None:
        problem = problem or (f"Secret {pool.cloud.name} has no key {pool.cloud.key} "
                              "(clouds.yaml): the operator cannot reach Ironic")
    else:
        try:
            runtime.cloud = cloud_identity(clouds_yaml, pool.cloud_name)
        except InvalidSpec as error:
            problem = problem or str(error)
    if problem:
        await reporter.write(CycleFacts(**facts, error=problem, error_reason="ConfigurationMissing"))
        return RETRY_SECONDS

    me = PoolClaim(key, pool.created, pool.selector, runtime.cloud)
    rival = earlier_overlap(me, [c if c.key != key else me for c in claims])
    if rival is not None:
        await reporter.write(CycleFacts(**facts, conflict=(
            f"pool {rival.key} (created {rival.created}) selects overlapping Ironic nodes "
            f"(conductorGroup/resourceClass); this pool writes nothing until the selectors "
            "are made disjoint or that pool is deleted")))
        return pool.ironic.poll_interval_seconds

    # Ironic, first look: observe and plan (cycle.py), no writes yet.
    ironic_error: IronicError | None = None
    report = None
    adapter: IronicAdapter | None = None
    try:
        adapter = _adapter(runtime, pool, clouds_yaml)
        report = await asyncio.to_thread(run_cycle, adapter, pool.spec, readiness, now=now, paused=True)
    except IronicError as error:
        ironic_error = error
        if op.metrics is not None:
            op.metrics.record_ironic_error(key, error)
    plan = report.plan if report is not None else None
    events: list[lifecycle.Event] = []

    # Pods: with a plan, create and retire identities; without, only look after existing ones.
    retire = set(plan.members_to_delete) if plan else set()
    keep = [m for m in identities if m not in retire] + list(plan.members_to_create if plan else ())
    node_names = {p.node_name for p in pods.values() if p.node_name and (p.deleting or not p.ready)}
    nodes_raw = await asyncio.gather(*(kube.get_node(n) for n in sorted(node_names)))
    kube_nodes = {n["metadata"]["name"]: lifecycle.read_node(n) for n in nodes_raw if n}
    decision = lifecycle.decide(
        keep=keep, retire=sorted(retire), pods=pods, nodes=kube_nodes,
        configmaps_current={m: overlays.get(m) == podspec.member_conf(pool, m) for m in keep},
        wanted_hash={m: podspec.config_hash(pool, m, nova_digest) for m in keep},
        failover=pool.failover, now=now)
    acted: list[lifecycle.Event] = []
    if not pool.paused:
        acted = await _apply_pod_actions(op, pool, decision, nova_digest)
        events.extend(acted + list(decision.events))

    # Ironic, writes: only when the plan has moves. The cycle re-reads and re-plans (level-
    # triggered) and stops between two writes on news, so pods are never kept waiting.
    applied = 0
    if plan is not None and plan.moves and not pool.paused:
        try:
            report = await asyncio.to_thread(run_cycle, adapter, pool.spec, readiness, now=now,
                                             stop=runtime.interrupt)
            plan, applied = report.plan, report.moves_applied
        except IronicError as error:
            ironic_error = error
            if op.metrics is not None:
                op.metrics.record_ironic_error(key, error)
        if applied:
            if op.metrics is not None:
                op.metrics.record_moves(key, applied)
            events.append(moves_event(plan.moves, applied))

    # Nova's side (nova_cycle.py), over the same cloud connection; never raises for Nova.
    nova_section = None
    if adapter is not None:
        nova = await asyncio.to_thread(
            run_nova_cycle, runtime.nova, adapter, pool, members=readiness,
            identities=set(identities) | set(keep), retiring=retire,
            nova_conf=_secret_text(nova_secret, pool.nova_config.key),
            nodes=report.nodes if report is not None else None, previous=previous.get("nova"),
            now=now, metrics=op.metrics)
        nova_section = nova.section
        events.extend(nova.events)

    if report is not None and op.metrics is not None:
        op.metrics.record_cycle(key, model.Observation(pool.spec, readiness, (), now), plan,
                                report.duration_seconds)
    await reporter.write(CycleFacts(
        **facts, states=decision.states, plan=plan, moves_applied=applied, extra_events=tuple(events),
        error=str(ironic_error) if ironic_error else None, error_reason=_ironic_reason(ironic_error),
        nova=nova_section))

    if applied or decision.writes:
        log.info("pool %s: %d/%d members ready, %d shard moves written (%.1fs in Ironic), pod actions: %s",
                 key, sum(m.ready for m in readiness), len(keep), applied,
                 report.duration_seconds if report is not None else 0.0,
                 "; ".join(e.message for e in acted) or "none")

    delay = pool.ironic.poll_interval_seconds
    # A member that lost readiness leaves the ring once its grace has run out: be there.
    for member in readiness:
        if not member.ready and member.since is not None:
            left = member.since + pool.spec.rebalance_after_seconds - now
            if left > 0:
                delay = min(delay, left + 0.5)
    if ironic_error is not None:
        delay = min(delay, RETRY_SECONDS)
    if decision.wake_after is not None:
        delay = min(delay, decision.wake_after + 1.0)
    if applied:
        delay = min(delay, 1.0)  # confirm the moves and continue with what is left
    return delay


def _ironic_reason(error: IronicError | None) -> str:
    """The condition reason for an Ironic failure, one word per thing to fix."""
    for kind, reason in ((IronicConfigError, "CloudConfigInvalid"), (IronicAuthError, "IronicAuthFailed"),
                         (IronicTooOld, "IronicTooOld"), (IronicEndpointError, "IronicEndpointWrong")):
        if isinstance(error, kind):
            return reason
    return "IronicUnavailable"


def _secret_text(secret: Mapping[str, Any] | None, key: str) -> str | None:
    value = ((secret or {}).get("data") or {}).get(key)
    if not value:
        return None
    return base64.b64decode(value).decode("utf-8", errors="replace")


def _adapter(runtime: PoolRuntime, pool: Pool, clouds_yaml: str) -> IronicAdapter:
    """The pool's Ironic adapter, rebuilt only when its cloud or settings change."""
    wanted = (clouds_yaml, pool.cloud_name, pool.selector, pool.ironic)
    if runtime.adapter is None or runtime.adapter_key != wanted:
        runtime.adapter = IronicAdapter.from_clouds_yaml(
            clouds_yaml, pool.cloud_name,
            selector=pool.selector,
            max_concurrent_writes=pool.ironic.max_concurrent_writes,
            writes_per_second=pool.ironic.writes_per_second)
        runtime.adapter_key = wanted
    return runtime.adapter


async def _apply_pod_actions(op: Operator, pool: Pool, decision: lifecycle.Decision,
                             nova_digest: str) -> list[lifecycle.Event]:
    """Carry out one Decision: ConfigMaps, then creations, then deletions. Returns the
    Events of the actions that took effect (a pod that existed already, or was replaced
    meanwhile, is no news)."""
    kube, key = op.kube, pool.key
    done_events: list[lifecycle.Event] = []
    for member in decision.configmaps:
        await kube.put_configmap(pool.namespace, podspec.render_configmap(pool, member))
    for create in decision.creates:
        if await kube.create_pod(pool.namespace, podspec.render_pod(pool, create.member, nova_digest)):
            done_events.extend([create.event] if create.event else [])
    for delete in decision.deletes:
        if not await kube.delete_pod(pool.namespace, delete.member, uid=delete.uid, force=delete.force):
            continue
        done_events.extend([delete.event] if delete.event else [])
        if op.metrics is not None:
            if delete.kind is lifecycle.PodActionKind.FENCE:
                op.metrics.record_fence(key, pool.failover.fencing.mode)
            elif delete.kind is lifecycle.PodActionKind.REPLACE:
                op.metrics.record_replacement(key)
    for member in decision.configmap_deletes:
        await kube.delete_configmap(pool.namespace, podspec.configmap_name(member))
    return done_events


class _Reporter:
    """Writes a cycle's status (only when it changed) and its Events."""

    def __init__(self, op: Operator, body: Mapping[str, Any], runtime: PoolRuntime,
                 previous: Mapping[str, Any], now: float) -> None:
        self.op, self.body, self.runtime, self.previous, self.now = op, body, runtime, previous, now

    async def write(self, facts: CycleFacts) -> None:
        status, events = build_status(facts, self.previous)
        meta = self.body["metadata"]
        if status != _comparable(self.previous, status):
            await self.op.kube.patch_pool_status(meta.get("namespace") or "default", meta["name"], status)
        self.runtime.last_status = status
        self.runtime.generation = facts.generation
        stamp = format_time(self.now)
        for event in events:
            try:
                await self.op.kube.post_event(self.body, event, stamp)
            except KubeError as error:  # an Event lost is not worth failing the cycle
                log.warning("pool %s/%s: event %s not posted: %s",
                            meta.get("namespace"), meta["name"], event.reason, error)


def _comparable(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The previous status restricted to the keys the operator writes."""
    return {k: previous[k] for k in new if k in previous}

