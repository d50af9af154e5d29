"""The host-mapping task of one pool, one step per cycle: observe, decide
(core/host_mapping.py), act.

cloud_side.py runs it after Nova's cycle, when Nova answered this cycle (its compute services
are known). Observed: the pool's host-mapping Jobs (and the log tail of a failed one), what
Nova says of each member not known mapped (NovaAdapter.host_mapped, spaced by the members'
update interval: the answers are kept in NovaRuntime), the hypervisor list if the audit read it,
and, only when a Job is wanted, the novaManageConfig Secret (the handover's check). Written: the
Job to create (Event HostMappingJobCreated), then the Jobs done with, as the handover's Jobs
are (controller/handover.py: the same Kubernetes calls, the same Job shape). Nothing is
written while paused or when this operator may not write; what cannot be read is reported
(HostMappingWaiting) and the last status.hostMapping kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from ironic_shard_operator.adapters.kube import KubeError
from ironic_shard_operator.adapters.nova import NovaAdapter, NovaError
from ironic_shard_operator.controller.handover import HandoverWork, job_view, manage_config_problem
from ironic_shard_operator.controller.nova_cycle import NovaRuntime
from ironic_shard_operator.core import host_mapping
from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.spec import Pool
from ironic_shard_operator.core.status import host_mapping_section

log = logging.getLogger(__name__)

NO_CONFIG = "the pool has no spec.handover.novaManageConfig, so the operator runs no nova-manage"
PAUSED = "spec.paused is true: no Job is created"


@dataclass(frozen=True, slots=True)
class HostMappingOutcome:
    """`section`: the new status.hostMapping (None: keep the last one); `events`: news and writes."""

    section: dict[str, Any] | None
    events: tuple[Event, ...] = ()


@dataclass(frozen=True, slots=True)
class MappingSeen:
    """What the step works from: the Nova service of each current member not retiring (from
    Nova's cycle), the hosts its hypervisor list named this cycle, the members' update
    interval (how often Nova is asked again), and the last status.hostMapping read back."""

    services: Mapping[str, Any]
    listed: AbstractSet[str]
    interval: float
    recorded: host_mapping.RecordedMapping


async def run_host_mapping(work: HandoverWork, pool: Pool, *, nova: NovaAdapter, runtime: NovaRuntime,
                           seen: MappingSeen, now: float) -> HostMappingOutcome:
    """One step (the module doc). Never raises for Kubernetes or Nova failures."""
    kube = work.kube
    try:  # without a novaManageConfig, a Job can only be one recorded before it was removed
        jobs = [j for j in [await job_view(kube, pool, raw, host_mapping.read_job) for raw in
                            await kube.list_jobs(pool.namespace, host_mapping.job_selector(pool.name))]
                if j is not None] if pool.handover is not None or seen.recorded.names_a_job else []
    except KubeError as error:
        return HostMappingOutcome(None, (Event("HostMappingWaiting", f"Kubernetes API: {error}", "Warning"),))
    answers = await _ask_nova(nova, runtime, seen, jobs, now)

    def decide(blocker: str | None) -> host_mapping.MappingStep:
        return host_mapping.decide(pool_name=pool.name, services=seen.services, recorded=seen.recorded,
                                   listed=seen.listed, answers=answers, jobs=jobs, blocker=blocker, now=now)

    step = decide(None)
    if step.create is not None or any(e.job for e in step.entries if e.state == host_mapping.NOT_MAPPED):
        blocker = await _blocker(work, pool)
        if blocker is not None:
            step = decide(blocker)
    events = list(step.events)
    if (step.create is not None or step.delete) and not pool.paused and work.may_write():
        await _act(work, pool, step, events)
    return HostMappingOutcome(host_mapping_section(step), tuple(events))


async def _ask_nova(nova: NovaAdapter, runtime: NovaRuntime, seen: MappingSeen,
                    jobs: list[host_mapping.MappingJob], now: float) -> dict[tuple[str, str], host_mapping.ProbeAnswer]:
    """Nova's answers for the members' services: the ones kept, and the ones asked now
    (host_mapping.hosts_to_probe). Nova failing to answer is no answer (None) for this cycle."""
    current = {(host, service.id) for host, service in seen.services.items()}
    for key in set(runtime.host_probes) - current:
        del runtime.host_probes[key]
    for host in host_mapping.hosts_to_probe(services=seen.services, recorded=seen.recorded, listed=seen.listed,
                                            jobs=jobs, answers=runtime.host_probes, now=now, every=seen.interval):
        try:
            mapped = await asyncio.to_thread(nova.host_mapped, host)
        except NovaError as error:
            log.warning("Nova did not say whether host %s is mapped to a cell: %s", host, error)
            mapped = None
        runtime.host_probes[(host, seen.services[host].id)] = host_mapping.ProbeAnswer(now, mapped)
    return dict(runtime.host_probes)


async def _blocker(work: HandoverWork, pool: Pool) -> str | None:
    """Why no host-mapping Job can be created now; None when one can."""
    if pool.handover is None:
        return NO_CONFIG
    if pool.paused:
        return PAUSED
    problem = await manage_config_problem(work.kube, pool)
    return problem[1] if problem is not None else None


async def _act(work: HandoverWork, pool: Pool, step: host_mapping.MappingStep, events: list[Event]) -> None:
    """Create the step's Job, then delete the Jobs done with (a failed one only once its next
    attempt exists); one Event per Job created. A failure stops the rest (the next cycle
    derives it again)."""
    kube = work.kube
    try:
        batch = step.create
        if batch is not None and await kube.create_job(pool.namespace, host_mapping.render_job(pool, batch)):
            members = ", ".join(member for member, _ in batch.services)
            events.append(Event("HostMappingJobCreated", (
                f"Created Job {batch.name}: nova-manage cell_v2 discover_hosts --by-service maps the hosts of "
                f"{members} to a cell" + (f", attempt {batch.attempt}" if batch.attempt > 1 else ""))))
        for name in step.delete:
            await kube.delete_job(pool.namespace, name)
    except KubeError as error:
        log.warning("pool %s: host-mapping step stopped: %s", pool.key, error)
        events.append(Event("HostMappingWaiting", f"Host-mapping step stopped, tried again next cycle: {error}",
                            "Warning"))
