"""The handover task of one pool, one step per cycle: observe, decide (core/handover.py), act.

cloud_side.py runs it after Ironic and Nova, when `spec.handover` is set. Nothing is kept
between runs: every step is re-derived from what Kubernetes (the pool's pods and handover
Jobs, the novaManageConfig Secret), Nova (services, the hypervisor list, the instances on the
sources) and Ironic (the nodes this side just read) show, so an operator killed at any point,
or a Job pod killed mid-batch, converges to the same end with no node moved twice.

Writes, each with its Event, in the order the steps need them: forced_down of a source's
service, creation of new Jobs, deletion of finished Jobs (after: a failed Job, and with it the
attempt its backoff counts, goes only once the batch's next Job exists), then the Ironic shard
of nodes Nova already lists under their new host (IronicAdapter.hand_over: compare-and-set on shard and
instance). What cannot go on is reported (status.handover, conditions HandoverFailed,
HandoverRefused, HandoverNoDestination, HandoverNeedsNova, HandoverConfigInvalid).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ironic_shard_operator.adapters.ironic import IronicAdapter, IronicError
from ironic_shard_operator.adapters.kube import KubeError
from ironic_shard_operator.controller.leader import WriteStop
from ironic_shard_operator.adapters.nova import (
    NovaAdapter, NovaAuthError, NovaError, NovaNotConfigured, NovaTooOld, ServiceNotFound,
)
from ironic_shard_operator.core import handover, handover_job, podspec
from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.model import Member, Node, Plan
from ironic_shard_operator.core.pods import read_pod
from ironic_shard_operator.core.spec import Pool
from ironic_shard_operator.core.status import handover_section, handover_section_unseen, spread

log = logging.getLogger(__name__)

LOG_LINES = 20


@dataclass(frozen=True, slots=True)
class HandoverOutcome:
    """`section`: the new status.handover (None: leave the last one); `events`: one per write
    done and per problem seen; `next_step_soon`: the next cycle is due at once."""

    section: dict[str, Any] | None
    events: tuple[Event, ...] = ()
    resharded: int = 0
    next_step_soon: bool = False  # core/handover.py HandoverStep.next_step_soon


@dataclass(frozen=True, slots=True)
class HandoverWork:
    """What the task needs beyond the side's own: the Kubernetes client, the writer check and
    the operator's metrics (controller/metrics.py; None: not counted)."""

    kube: Any
    may_write: Callable[[], bool]
    metrics: Any = None

    def write_stop(self) -> WriteStop:
        """The shard writes' stop flag: the Lease is checked before each write."""
        return WriteStop(threading.Event(), self.may_write)


async def run_handover(work: HandoverWork, pool: Pool, *, ironic: IronicAdapter, nova: NovaAdapter | None,
                       members: Sequence[Member], plan: Plan | None, nodes: Sequence[Node] | None,
                       now: float, recorded: handover.RecordedHandover = handover.RecordedHandover(),
                       guard_held: Mapping[str, bool] | None = None) -> HandoverOutcome:
    """One step of every handover of `pool` (the module doc), from one listing: `nodes` and the
    `plan` made from them (who retires, the pinned nodes per owner); `recorded` the last
    status.handover read back (PoolMemory.handover), `guard_held` the free nodes the shard-write
    guard holds (core/handover.py's `decide`). Never raises for Kubernetes, Nova or Ironic failures
    (they are reported): what cannot be seen keeps the recorded sources as they were, so no hold is
    lost."""
    settings = pool.handover
    if plan is None or nodes is None:
        return HandoverOutcome(None)
    kube = work.kube
    try:
        raw_pods = await kube.list_pods(pool.namespace, podspec.pool_selector(pool.name))
        jobs_raw = await kube.list_jobs(pool.namespace, handover_job.job_selector(pool.name))
    except KubeError as error:
        return HandoverOutcome(None, (Event("HandoverWaiting", f"Kubernetes API: {error}", "Warning"),))
    pods = [read_pod(p) for p in raw_pods]
    with_pod = {p.member for p in pods if p.name == p.member}
    job_pods = [view for view in map(handover_job.read_job_pod, raw_pods) if view is not None]
    found = handover.sources(settings=settings, members=members, retiring=plan.retiring, owned=plan.owned,
                             pods=with_pod, now=now)
    jobs = [j for j in [await _job_view(kube, pool, raw) for raw in jobs_raw] if j is not None]
    held = handover.holds(recorded=recorded, jobs=jobs, job_pods=job_pods)
    if not found and not held and not jobs_raw:
        return HandoverOutcome(handover_section(handover.HandoverStep()) if settings is not None else {})
    blocker = await _blocker(kube, pool, nova, found)
    if nova is None:  # nothing of Nova can be seen: every recorded source stays as it was
        reason, message = blocker or ("HandoverNeedsNova", NEEDS_NOVA)
        return _unseen(recorded, found, reason, message)
    try:
        view = await asyncio.to_thread(_nova_view, nova, set(found) | set(held), nodes,
                                       2 * (settings.max_concurrent if settings else 1),
                                       {m for m, trigger in found.items() if trigger == handover.SCALE_DOWN
                                        and m in with_pod})
    except NovaError as error:
        return _unseen(recorded, found, "HandoverNovaUnavailable", f"Nova: {error}")
    step = handover.decide(settings=settings, members=members, found=found,
                           ring_members=plan.ring_members, pods=with_pod, nodes=nodes, owned=plan.owned,
                           nova=view,
                           jobs=jobs, job_pods=job_pods, recorded=recorded, blocker=blocker, now=now,
                           guard_held=guard_held)
    events = [Event(p.reason, p.message, "Warning") for p in step.problems] + list(step.events)
    resharded = 0
    if step.writes and not pool.paused and work.may_write():
        resharded = await _act(work, pool, step, ironic, nova, view, nodes, events, jobs)
    return HandoverOutcome(handover_section(step), tuple(events), resharded, step.next_step_soon)


def _unseen(recorded: handover.RecordedHandover, found: Mapping[str, str], reason: str,
            message: str) -> HandoverOutcome:
    """A step that cannot see Nova: the recorded sources stay as they were, with the problem."""
    problems = handover.unseen_problems(recorded, found, reason, message)
    return HandoverOutcome(handover_section_unseen(recorded, problems), (Event(reason, message, "Warning"),))


NEEDS_NOVA = ("spec.handover is set but the cloud has no usable Nova compute endpoint (status.nova): nodes with "
              "instances cannot be handed over")


async def _blocker(kube: Any, pool: Pool, nova: NovaAdapter | None,
                   found: Mapping[str, str]) -> tuple[str, str] | None:
    """(reason, message) of what keeps every new handover Job from running: no Nova, or no
    usable nova.conf. Nothing to start: None."""
    if not found or pool.handover is None:
        return None
    if nova is None:
        return ("HandoverNeedsNova", NEEDS_NOVA)
    return await manage_config_problem(kube, pool)


async def manage_config_problem(kube: Any, pool: Pool) -> tuple[str, str] | None:
    """("HandoverConfigInvalid", why) when the Secret of `spec.handover.novaManageConfig` cannot
    be read or holds no nova.conf nova-manage can use (core/handover_job.py::config_problem);
    None when it can (every Job of nova-manage mounts it: handover and host mapping)."""
    assert pool.handover is not None
    ref = pool.handover.nova_manage_config
    try:
        secret = await kube.get_secret(pool.namespace, ref.name)
    except KubeError as error:
        return ("HandoverConfigInvalid", f"Secret {ref.name} (spec.handover.novaManageConfig) cannot be read: "
                                         f"{error}")
    if secret is None:
        return ("HandoverConfigInvalid", f"Secret {ref.name} not found in namespace {pool.namespace} "
                                         f"(spec.handover.novaManageConfig.secretRef): create it with key "
                                         f"{ref.key}, a nova.conf with [database] and [api_database]")
    value = (secret.get("data") or {}).get(ref.key)
    text = base64.b64decode(value).decode("utf-8", errors="replace") if value else None
    problem = handover_job.config_problem(text, ref.name, ref.key)
    return ("HandoverConfigInvalid", problem) if problem else None


def _nova_view(nova: NovaAdapter, subjects: set[str], nodes: Sequence[Node], per_source: int,
               retiring: set[str]) -> handover.NovaView:
    """Services, the hypervisor list, and Nova's answers to the step's questions about the
    subjects' nodes (core/handover.py::nova_questions): the instances on the next nodes to
    move, the half moves, the nodes read one by one before anything irreversible, and the
    servers with a task in progress on each `retiring` source (blocking)."""
    try:
        services = nova.compute_services()
        hosts = {h.node_uuid: h.host for h in nova.hypervisors() or ()}
        asked = handover.nova_questions(subjects, nodes, hosts, per_source)
        instances = {uuid: nova.instances_on_node(subject, uuid) for subject, uuid in asked.count}
        left = {uuid: nova.instances_on_node(subject, uuid) for subject, uuid in asked.half_moved}
        read = {uuid: _node_read(nova, uuid, instance) for uuid, instance in asked.direct}
        tasks = {host: tuple((i.id, i.task_state) for i in nova.instances_on_host(host) if i.task_state)
                 for host in sorted(retiring)}
    except (NovaNotConfigured, NovaAuthError, NovaTooOld) as error:
        raise NovaError(f"{error} (handover needs Nova: HandoverNeedsNova)") from error
    return handover.NovaView(services, hosts, instances, handover.stranded(left), read, tasks)


def _node_read(nova: NovaAdapter, uuid: str, instance_id: str) -> handover.NodeRead:
    """Node `uuid` and its server `instance_id`, each read directly (core's NodeRead)."""
    instance = nova.instance(instance_id)
    host = nova.hypervisor_host(uuid)
    if instance is None:
        return handover.NodeRead(host, instance_found=False)
    return handover.NodeRead(host, True, instance.host, instance.node, instance.task_state, instance.vm_state)


async def _job_view(kube: Any, pool: Pool, raw: dict[str, Any]) -> handover.JobView | None:
    """A handover Job read back (job_view)."""
    return await job_view(kube, pool, raw, handover_job.read_job)


async def job_view(kube: Any, pool: Pool, raw: dict[str, Any], read: Callable[..., Any]) -> Any:
    """A Job of nova-manage read back by `read(raw, log_tail)` (handover_job.read_job,
    host_mapping.read_job), with its log tail when it failed (what the user needs to see)."""
    view = read(raw)
    if view is None or view.state != handover.FAILED:
        return view
    try:
        tail = await kube.job_log_tail(pool.namespace, view.name, LOG_LINES)
    except KubeError as error:
        tail = f"(log not readable: {error})"
    return read(raw, " | ".join(line for line in tail.splitlines() if line.strip())[-2000:])


async def _act(work: HandoverWork, pool: Pool, step: handover.HandoverStep, ironic: IronicAdapter,
               nova: NovaAdapter | None, view: handover.NovaView, nodes: Sequence[Node],
               events: list[Event], jobs: Sequence[handover.JobView] = ()) -> int:
    """Carry out the step in order, one Event per write done (appended to `events`); returns
    the Ironic shards written. Each write fails on its own: a refused one (a namespace quota, a
    service Nova lost) is reported on its source and the others go on (the next cycle derives
    it again); the Lease is asked before each (`may_write`), and once it is lost nothing more
    is written. A batch of shard writes all applied is timed per node from its Job's creation
    (`jobs`: the pool's Jobs as read this step)."""
    kube, metrics, resharded = work.kube, work.metrics, 0
    retried = dict(step.retried)
    triggers = {p.member: p.trigger for p in step.progress}
    sources = {job.name: job.source for job in jobs}

    async def attempt(source: str, what: str, write: Callable[[], Any]) -> Any:
        if not work.may_write():
            return None
        try:
            return await write()
        except (KubeError, NovaError, ServiceNotFound, IronicError) as error:
            log.warning("pool %s: handover of %s: %s failed: %s", pool.key, source, what, error)
            events.append(Event("HandoverWaiting", f"Handover of {source}: {what} failed, tried again next cycle: "
                                                   f"{error}", "Warning"))
            return None

    for source in step.force_down:
        if await attempt(source, f"forcing Nova compute service {source} down", lambda s=source: asyncio.to_thread(
                nova.set_forced_down, view.services[s], True)) is not None:
            events.append(Event("HandoverForcedDown", f"Forced Nova compute service {source} down: its pod is "
                                                      "gone and its nodes with instances are handed over"))
    not_created: set[str] = set()
    for batch in step.create_jobs:
        created = await attempt(batch.source, f"creating Job {batch.name}", lambda b=batch: kube.create_job(
            pool.namespace, handover_job.render_job(pool, b)))
        if created is None:
            not_created.add(batch.source)
        if created:
            events.append(Event("HandoverJobCreated",
                                f"Created Job {batch.name}: nova-manage moves {len(batch.moves)} nodes of "
                                f"{batch.source} in Nova ({spread(batch.moves)})"
                                + (f", attempt {batch.attempt}" if batch.attempt > 1 else "")))
    for name in step.delete_jobs:
        if name in retried and sources.get(name) in not_created:
            continue  # a failed Job is the record of its attempt: it goes once its batch's next Job exists
        if await attempt(sources.get(name, name), f"deleting Job {name}",
                         lambda n=name: kube.delete_job(pool.namespace, n)):
            events.append(Event("HandoverJobDeleted", f"Deleted handover Job {name}"))
            if name in retried and metrics is not None:
                metrics.record_handover_job_failure(pool.key, retried[name])
    by_source: dict[str, list] = {}
    for move in step.shard_writes:
        by_source.setdefault(move.source, []).append(move)
    for source, moves in sorted(by_source.items()):
        trigger = triggers.get(source, handover.SCALE_DOWN)
        started = time.monotonic()
        result = await attempt(source, f"writing the Ironic shard of {len(moves)} nodes", lambda ms=moves: (
            asyncio.to_thread(ironic.hand_over, ms, nodes, work.write_stop())))
        if result is None or not result.applied:
            continue
        resharded += result.applied
        if metrics is not None:
            metrics.record_handover_nodes(pool.key, trigger, result.applied)
            if result.applied == len(moves):  # which ones of a partial batch: unknown
                metrics.record_handover_durations(pool.key, trigger,
                                                  handover.handover_durations(moves, jobs, time.time()))
        events.append(Event("HandedOverNodes",
                            f"Set the Ironic shard of {result.applied} nodes with instances after Nova "
                            f"moved them ({trigger}: {spread(moves)}; {time.monotonic() - started:.2f}s)"))
    return resharded
