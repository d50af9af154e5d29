"""Nova's cell mapping of the members' hosts: what is known of it, the Job that maps new members,
and each member's entry in status.hostMapping. Pure: controller/host_mapping.py observes and acts.

Invariants: what is known is kept per member AND Nova service id (a new service is a new host);
one discover_hosts Job runs per pool at a time (parallel runs collide in Nova's database); a
(member, service) is Mapped on record only once Nova does not contradict the Job that covered it;
without a usable novaManageConfig, HostNotMapped is reported until Nova maps it. The sources of
truth, cheapest first, and the Job's life: docs/design.md, "Cells v2 host mapping".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.handover import ACTIVE, FAILED, SUCCEEDED, failure_text, retry_delay
from ironic_shard_operator.core.handover_job import (
    COMPONENT_LABEL, CONFIG_PATH, job_state, nova_manage_job,
)
from ironic_shard_operator.core.model import member_ordinal
from ironic_shard_operator.core.nova_policy import DISABLED, UNAVAILABLE, ServiceRecord
from ironic_shard_operator.core.podspec import POOL_LABEL
from ironic_shard_operator.core.pods import parse_time
from ironic_shard_operator.core.spec import GROUP, Pool

# A member's state (status.hostMapping.members[].state).
MAPPED, MAPPING, NOT_MAPPED, UNKNOWN = "Mapped", "Mapping", "NotMapped", "Unknown"
# Why a member is NotMapped (its entry's reason; condition Degraded).
HOST_NOT_MAPPED, MAPPING_FAILED = "HostNotMapped", "HostMappingFailed"
COMPONENT = "host-mapping"
SERVICES_ANNOTATION = f"{GROUP}/host-mapping-services"
ATTEMPT_ANNOTATION = f"{GROUP}/host-mapping-attempt"
COMMAND = ("nova-manage", "--config-file", CONFIG_PATH, "cell_v2", "discover_hosts", "--by-service", "--verbose")
# What a member waiting for its mapping is told (awaiting_nova keeps it out of the ring).
GETS_NODES_ONCE = "; the member gets nodes once it is mapped"
FIX = ("nova-manage cell_v2 discover_hosts --by-service, or [scheduler]discover_hosts_in_cells_interval on "
       "Nova's schedulers; with spec.handover.novaManageConfig the operator maps new members itself")


def job_selector(pool_name: str) -> str:
    """The label selector of a pool's host-mapping Jobs."""
    return f"{POOL_LABEL}={pool_name},{COMPONENT_LABEL}={COMPONENT}"


@dataclass(frozen=True, slots=True)
class MappingJob:
    """A host-mapping Job as observed: the (member, service id) pairs it maps, its state
    (core/handover.py ACTIVE, SUCCEEDED, FAILED), when it finished, its attempt, and the tail
    of its pod's log (read when it failed)."""

    name: str
    services: tuple[tuple[str, str], ...]
    state: str
    finished: float | None = None
    attempt: int = 1
    log_tail: str = ""


@dataclass(frozen=True, slots=True)
class MappingBatch:
    """A host-mapping Job to create: it maps `services` ((member, service id) pairs)."""

    name: str
    services: tuple[tuple[str, str], ...]
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    """What `GET /os-hosts/{host}` said of a member's service at `at` (epoch seconds):
    True mapped, False not mapped, None no answer."""

    at: float
    mapped: bool | None


@dataclass(frozen=True, slots=True)
class MemberMapping:
    """One entry of status.hostMapping.members (the CRD describes the fields)."""

    member: str
    service: str
    state: str
    message: str
    reason: str | None = None
    job: str | None = None
    attempts: int | None = None
    next_retry_at: float | None = None


@dataclass(frozen=True, slots=True)
class MappingStep:
    """The entries of status.hostMapping, the Job to create (None: none), the Jobs to delete
    after it, and the news (`events`: a member mapped, one Nova says is not, a Job failed)."""

    entries: tuple[MemberMapping, ...] = ()
    create: MappingBatch | None = None
    delete: tuple[str, ...] = ()
    events: tuple[Event, ...] = ()


def job_name(pool_name: str, services: Iterable[tuple[str, str]], attempt: int = 1) -> str:
    """A Job's name from what it maps and its attempt: the same members and services, the same
    name (after a restart too); at most 63 characters."""
    digest = hashlib.sha256("\n".join(f"{m}={s}" for m, s in sorted(services)).encode()
                            + (f"#{attempt}".encode() if attempt > 1 else b"")).hexdigest()[:8]
    return f"{pool_name[:40].rstrip('-')}-map-hosts-{digest}"


def render_job(pool: Pool, batch: MappingBatch) -> dict[str, Any]:
    """The batch's Job: `nova-manage cell_v2 discover_hosts --by-service` once, as a handover
    Job runs (core/handover_job.py::nova_manage_job: the pool's image, novaManageConfig)."""
    services = json.dumps([list(pair) for pair in batch.services])
    return nova_manage_job(pool, name=batch.name, labels={POOL_LABEL: pool.name, COMPONENT_LABEL: COMPONENT},
                           annotations={SERVICES_ANNOTATION: services, ATTEMPT_ANNOTATION: str(batch.attempt)},
                           pod_annotations={SERVICES_ANNOTATION: services}, command=list(COMMAND))


def read_job(raw: Mapping[str, Any], log_tail: str = "") -> MappingJob | None:
    """A MappingJob of a Job as the API returns it; None when it is no host-mapping Job of
    ours, or its annotation is unreadable (then it maps nothing the operator knows of)."""
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if (meta.get("labels") or {}).get(COMPONENT_LABEL) != COMPONENT:
        return None
    try:
        services = tuple((str(member), str(service)) for member, service in
                         json.loads(annotations.get(SERVICES_ANNOTATION, "")))
        attempt = max(1, int(annotations.get(ATTEMPT_ANNOTATION, "1")))
    except (ValueError, TypeError):
        return None
    state, finished = job_state(raw)
    return MappingJob(meta.get("name", ""), services, state, finished, attempt, log_tail)


@dataclass(frozen=True, slots=True)
class RecordedMapping:
    """status.hostMapping as the last step wrote it, read back once (`recorded_mapping`,
    PoolMemory.host_mapping): each member's entry, and the (member, service id) pairs it
    recorded Mapped."""

    entries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    mapped: frozenset[tuple[str, str]] = frozenset()

    @property
    def names_a_job(self) -> bool:
        """Whether an entry names a Job (one may still exist after novaManageConfig was removed)."""
        return any(entry.get("job") for entry in self.entries.values())


def recorded_mapping(section: Mapping[str, Any] | None) -> RecordedMapping:
    """The last status.hostMapping read back (entries without a member name dropped)."""
    members = (section.get("members") or ()) if isinstance(section, Mapping) else ()
    entries = {e["member"]: e for e in members if isinstance(e, Mapping) and isinstance(e.get("member"), str)}
    return RecordedMapping(entries, frozenset((m, e.get("service")) for m, e in entries.items()
                                              if e.get("state") == MAPPED))


def awaiting_nova(members: Iterable[str], *, nova_section: Mapping[str, Any] | None,
                  mapping: RecordedMapping) -> frozenset[str]:
    """The members Nova cannot schedule to yet, to which the planner gives no node: while the
    pool's Nova is in use (status.nova says Enabled; or Unavailable after it answered, the
    members' mapping on record), every member whose nova-compute service Nova does not list yet
    (no status.hostMapping entry) or whose host is not mapped to a cell yet (Mapping,
    NotMapped). A node given to such a member would be listed under no hypervisor and offered
    by no scheduler until the mapping (nova-api leaves an unmapped host's compute nodes out).
    Not waited on: a host Nova does not say about (Unknown: nothing would end the wait), and any
    member while Nova is not known to be in use (no status.nova yet, Disabled: no compute
    endpoint or credentials refused, or Unavailable before any mapping was recorded: an
    endpoint that never answered may be no Nova at all)."""
    state = (nova_section or {}).get("state")
    if state is None or state == DISABLED or (state == UNAVAILABLE and not mapping.entries):
        return frozenset()
    return frozenset(member for member in members
                     if (mapping.entries.get(member) or {}).get("state") not in (MAPPED, UNKNOWN))


def hosts_to_probe(*, services: Mapping[str, ServiceRecord], recorded: RecordedMapping,
                   listed: Iterable[str], jobs: Sequence[MappingJob],
                   answers: Mapping[tuple[str, str], ProbeAnswer], now: float, every: float) -> list[str]:
    """The members whose mapping Nova is asked about this cycle (NovaAdapter.host_mapped), in
    name order: not known mapped (on record or listed), no Job of theirs running, and their
    last answer older than `every` seconds, or older than the end of a Job that covered them."""
    known, shown = recorded.mapped, set(listed)
    wanted = []
    for member, service in sorted(services.items()):
        if (member, service.id) in known or member in shown:
            continue
        job = _covering(jobs, member, service.id)
        if job is not None and job.state == ACTIVE:
            continue
        last = answers.get((member, service.id))
        ended = job.finished if job is not None and job.finished is not None else None
        if last is None or now - last.at >= every or (ended is not None and last.at < ended):
            wanted.append(member)
    return wanted


def decide(*, pool_name: str, services: Mapping[str, ServiceRecord], recorded: RecordedMapping,
           listed: Iterable[str], answers: Mapping[tuple[str, str], ProbeAnswer], jobs: Sequence[MappingJob],
           blocker: str | None, now: float) -> MappingStep:
    """Each member's entry, the Job to create and the Jobs to delete (the module doc).

    `services`: the Nova service of each current member (retiring ones left out); `recorded`: the
    last status.hostMapping read back (PoolMemory.host_mapping); `listed`: the hosts the hypervisor
    list read this cycle names (empty when it was not read); `answers`: the last probe per (member,
    service id); `jobs`: the pool's host-mapping Jobs; `blocker`: why no Job can be created (no or
    no usable novaManageConfig, paused), None when one can."""
    known, shown, before = recorded.mapped, set(listed), recorded.entries
    entries: dict[str, MemberMapping] = {}
    waiting: list[tuple[str, str]] = []
    failed: list[MappingJob] = []
    for member in sorted(services, key=lambda m: (member_ordinal(pool_name, m) or 0, m)):
        service = services[member].id
        answer = answers.get((member, service))
        job = _covering(jobs, member, service)
        if (member, service) in known:
            entries[member] = MemberMapping(member, service, MAPPED, str(before[member].get("message") or ""))
        elif member in shown or (answer is not None and answer.mapped):
            how = f"Nova lists nodes under {member}" if member in shown else \
                f"Nova says host {member} is mapped to a cell"
            entries[member] = MemberMapping(member, service, MAPPED, how + _by(job), job=_done(job))
        elif job is not None and job.state == ACTIVE:
            entries[member] = MemberMapping(member, service, MAPPING, f"Job {job.name} maps host {member} to a "
                                            "cell (nova-manage cell_v2 discover_hosts --by-service)" + GETS_NODES_ONCE,
                                            job=job.name)
        elif job is not None and job.state == SUCCEEDED and (answer is None or answer.mapped is None
                                                                 or answer.at < (job.finished or now)):
            entries[member] = MemberMapping(member, service, MAPPED, (
                f"Job {job.name} mapped host {member} to a cell (nova-manage cell_v2 discover_hosts succeeded; "
                "Nova's os-hosts gives no answer)"), job=job.name)
        elif job is not None:
            failed.append(job)
            entries[member] = _failed_entry(member, service, job, blocker)
        else:
            waiting.append((member, service))
            entries[member] = _unmapped_entry(member, service, answer, blocker)
    return _with_jobs(pool_name, entries, waiting, failed, jobs, services, known, blocker, now, before)


def _with_jobs(pool_name: str, entries: dict[str, MemberMapping], waiting: list[tuple[str, str]],
               failed: list[MappingJob], jobs: Sequence[MappingJob], services: Mapping[str, ServiceRecord],
               known: set[tuple[str, str]], blocker: str | None, now: float,
               before: Mapping[str, Mapping[str, Any]]) -> MappingStep:
    """The step's Jobs: one at a time per pool. The next covers every member waiting and the
    members of failed Jobs whose backoff is over (attempt + 1); it is created once no Job runs
    and no failed one is in its backoff (members waiting meanwhile say for what)."""
    current = {(m, s.id) for m, s in services.items()}
    failed = list(dict.fromkeys(failed))
    due = [j for j in failed if now >= (j.finished or now) + retry_delay(j.attempt)]
    retry_at = min(((j.finished or now) + retry_delay(j.attempt) for j in failed if j not in due), default=None)
    running = next((j.name for j in jobs if j.state == ACTIVE), None)
    create = None
    if blocker is None and running is not None:
        for member, service in waiting:
            entries[member] = MemberMapping(member, service, MAPPING, f"host {member} waits for Job {running} to "
                                            "end (one discover_hosts at a time): the next host-mapping Job maps it"
                                            + GETS_NODES_ONCE)
    elif blocker is None and retry_at is not None:
        for member, service in waiting:
            entries[member] = MemberMapping(
                member, service, NOT_MAPPED, f"host {member} is not mapped to a cell yet: the next host-mapping Job "
                "maps it, once the last one's backoff is over (nextRetryAt)", MAPPING_FAILED, next_retry_at=retry_at)
    elif blocker is None and (waiting or due):
        retried = {p for j in due for p in j.services if p in current and entries[p[0]].state == NOT_MAPPED}
        pairs = tuple(sorted({*waiting, *retried}))
        attempt = 1 + max((j.attempt for j in due), default=0)
        create = MappingBatch(job_name(pool_name, pairs, attempt), pairs, attempt)
        for member, service in pairs:
            entries[member] = MemberMapping(member, service, MAPPING, f"Job {create.name} maps host {member} to a "
                                            "cell (nova-manage cell_v2 discover_hosts --by-service)"
                                            + (f", attempt {attempt}" if attempt > 1 else "") + GETS_NODES_ONCE,
                                            job=create.name)
    ordered = tuple(sorted(entries.values(), key=lambda e: (member_ordinal(pool_name, e.member) or 0, e.member)))
    delete = _jobs_to_delete(jobs, current - known, due if create is not None else [])
    return MappingStep(ordered, create, delete, tuple(_events(ordered, before)))


def _jobs_to_delete(jobs: Sequence[MappingJob], wanted: set[tuple[str, str]],
                    replaced: Sequence[MappingJob]) -> tuple[str, ...]:
    """Jobs that ended and are done with: once every member they map is Mapped on record (or
    no member any more), or, failed, once their next attempt is created (`replaced`). A
    running Job is left to end."""
    return tuple(job.name for job in jobs if job.state != ACTIVE
                 and (job in replaced or not any(p in wanted for p in job.services)))


def _events(entries: Sequence[MemberMapping], before: Mapping[str, Mapping[str, Any]]) -> list[Event]:
    """News against the recorded entries (same member and service): a member mapped that was
    reported otherwise, a member Nova says is not mapped (once), a Job failure (once per Job)."""
    events, failures = [], {}
    for entry in entries:
        old = before.get(entry.member) or {}
        same = old.get("service") == entry.service
        if entry.state == MAPPED and same and old.get("state") not in (None, MAPPED):
            events.append(Event("HostMapped", f"Host {entry.member} is mapped to a cell, so Nova lists its nodes and "
                                              f"schedules to them: {entry.message}"))
        elif entry.state == NOT_MAPPED and entry.reason == HOST_NOT_MAPPED and \
                not (same and old.get("reason") == HOST_NOT_MAPPED):
            events.append(Event(HOST_NOT_MAPPED, entry.message, "Warning"))
        elif entry.state == NOT_MAPPED and entry.job and \
                not (same and old.get("state") == NOT_MAPPED and old.get("job") == entry.job):
            failures.setdefault(entry.job, entry.message)
    events += [Event(MAPPING_FAILED, message, "Warning") for message in failures.values()]
    return events


def _covering(jobs: Iterable[MappingJob], member: str, service: str) -> MappingJob | None:
    """The latest attempt of the Jobs that map (member, service), if any."""
    mine = [j for j in jobs if (member, service) in j.services]
    return max(mine, key=lambda j: (j.attempt, j.state == ACTIVE, j.name)) if mine else None


def _done(job: MappingJob | None) -> str | None:
    """The name of `job` if it succeeded (it is deleted once the mapping is on record)."""
    return job.name if job is not None and job.state == SUCCEEDED else None


def _by(job: MappingJob | None) -> str:
    """Which Job of ours mapped the host, when one covers it: done, or still running (its pod
    ran discover_hosts and Nova already shows the mapping before the Job reports Complete)."""
    if job is not None and job.state == ACTIVE:
        return f" (mapped by Job {job.name}, still finishing)"
    return f" (mapped by Job {job.name})" if _done(job) else ""


def _failed_entry(member: str, service: str, job: MappingJob, blocker: str | None) -> MemberMapping:
    """A member whose Job failed, or succeeded while Nova still says its host is not mapped."""
    if job.state == SUCCEEDED:
        why = (f"succeeded, yet Nova still says host {member} is not mapped to any cell: does the [api_database] "
               "of spec.handover.novaManageConfig name this cloud's Nova API database?")
    else:
        why = f"failed: {failure_text(job.log_tail)}"
    retry_at = (job.finished or 0.0) + retry_delay(job.attempt)
    then = f"; no new Job: {blocker}" if blocker else "; tried again in a new Job after a backoff (nextRetryAt)"
    return MemberMapping(member, service, NOT_MAPPED, f"Job {job.name} (mapping host {member} to a cell, attempt "
                         f"{job.attempt}) {why}{then}", MAPPING_FAILED, job.name, job.attempt,
                         None if blocker else retry_at)


def _unmapped_entry(member: str, service: str, answer: ProbeAnswer | None, blocker: str | None) -> MemberMapping:
    """A member no Job covers: Mapping if one is created this step (`_with_jobs` rewrites it),
    else NotMapped as Nova says, or Unknown when Nova does not say."""
    if answer is not None and answer.mapped is False:
        return MemberMapping(member, service, NOT_MAPPED, (
            f"Nova says host {member} is not mapped to any cell: it lists none of its nodes and schedules nothing to "
            f"them, so the operator gives it no node. Map it: {FIX}" + (f" ({blocker})" if blocker else "")),
            HOST_NOT_MAPPED)
    return MemberMapping(member, service, UNKNOWN, (
        f"Nova does not say whether host {member} is mapped to a cell (GET /os-hosts/{member} at compute API "
        f"2.42 gave no answer) and lists no node under it yet; if it stays so (Nova audit finding unmapped), "
        f"map it: {FIX}" + (f" ({blocker})" if blocker else "")))


def degraded(section: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(reason, message) of condition Degraded for status.hostMapping: its NotMapped members,
    HostMappingFailed first; None when there is none."""
    entries = [e for e in (section or {}).get("members") or () if e.get("state") == NOT_MAPPED]
    if not entries:
        return None
    reasons = {e.get("reason") for e in entries}
    reason = MAPPING_FAILED if MAPPING_FAILED in reasons else HOST_NOT_MAPPED
    return reason, "; ".join(str(e.get("message", "")) for e in entries)


def next_retry(section: Mapping[str, Any] | None) -> float | None:
    """The earliest nextRetryAt of status.hostMapping (epoch seconds), None without one."""
    due = [parse_time(e.get("nextRetryAt")) for e in (section or {}).get("members") or () if e.get("nextRetryAt")]
    found = [d for d in due if d is not None]
    return min(found) if found else None
