"""Handover of nodes that carry instances: which member hands which node to whom, the next
step of each handover, and which members it holds. Pure: controller/handover.py observes and acts.

Invariants (9 and 12, docs/invariants.md): per source, free nodes first, then its pod provably
gone, its service forced down, Nova's record moved by nova-manage in a Job, Ironic's shard last;
the source gets no pod while anything of it is in flight, derived from durable facts (`holds`),
never from whether this cycle has a plan; destinations are Ready now with their service up. The
steps and the hold in full: docs/design.md, "Handover".
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.fencing import not_ready_for
from ironic_shard_operator.core.model import Member, Move, Node, PinnedCounts, Plan, mid_operation
from ironic_shard_operator.core.nova_policy import ServiceRecord, half_move_message
from ironic_shard_operator.core.nova_schedule import backoff
from ironic_shard_operator.core.planner import fair_quotas
from ironic_shard_operator.core.pods import parse_time
from ironic_shard_operator.core.ring import HashRing
from ironic_shard_operator.core.spec import Handover

SCALE_DOWN, FAILURE = "ScaleDown", "Failure"
# Phases of a source (status.handover.sources[].phase).
MOVING_FREE, STOPPING_POD, FORCING_DOWN, MOVING, DONE, BLOCKED, CANCELLING = (
    "MovingFreeNodes", "StoppingPod", "ForcingDown", "MovingNodes", "Done", "Blocked", "Cancelling")
# The phases that held their source (no pod, forced_down kept) in a status written before the
# entries said so themselves (`held`): how `holds` reads an operator upgraded mid-handover.
HELD_PHASES = frozenset({STOPPING_POD, FORCING_DOWN, MOVING, BLOCKED, CANCELLING})
# A Job that failed with no node moved is deleted, and its batch tried again in a new Job
# (attempt + 1), after a backoff from when it failed: JOB_RETRY_SECONDS after the first attempt,
# doubling with each attempt, at most JOB_MAX_RETRY_SECONDS (nova_schedule.backoff); its log tail
# is reported meanwhile (HandoverFailed), and when it is tried again (status nextRetryAt).
JOB_RETRY_SECONDS = 60.0
JOB_MAX_RETRY_SECONDS = 960.0
# A retiring source's pod waits for its nodes mid-operation (a deploy, a clean, a rescue its
# nova-compute may be driving); once one has been so for this long, a Warning says so
# (HandoverWaitingForBusyNodes). At most BUSY_LISTED of them are listed in the status.
BUSY_WARNING_SECONDS = 1800.0
BUSY_LISTED = 20
# A held source with nothing in flight whose handover finds no destination keeps its hold this
# long before it is released (gets its pod back): a destination's Nova service seen down for one
# heartbeat (service_down_time is 60 s by default) must not restart the source's nova-compute
# only to stop it again a cycle later.
NO_DESTINATION_RELEASE_SECONDS = 180.0
# ... and for its servers with a task in progress (a reboot, a power action, a rebuild: only
# the instance's own nova-compute clears `task_state`, and after a handover that compute never
# runs again), at most this long: then a Warning names them with the fix
# (HandoverServerTasksLeft) and the pod goes.
TASK_WAIT_SECONDS = 1800.0
# A Job pod asked to stop that has not ended this long after (its grace is 120 s by default, and
# it finishes one nova-manage run of seconds) is on a Kubernetes node whose kubelet no longer
# answers: it holds its source, as it must (its process may still run), and a Warning says so
# (HandoverJobPodStuck) with the fix.
JOB_POD_STUCK_SECONDS = 600.0
# Why a Job failed, from its log (bounded: the `reason` label of the failures metric):
# nova-manage refused a precondition (source not forced down, destination forced down, more
# than one instance, an unknown node or host), the database could not be reached or refused
# the credentials, or anything else.
JOB_FAILURE_REASONS = ("refused", "database", "other")
# Job states as core/handover_job.py reads them.
ACTIVE, SUCCEEDED, FAILED = "Active", "Succeeded", "Failed"
# Problems that stop every handover before it starts (status.handover.problems): while one is
# reported, a retiring source's pod keeps running (stopping it would only make its instances
# unmanageable, with no handover to follow).
BLOCKERS = frozenset({"HandoverConfigInvalid", "HandoverNeedsNova", "HandoverNoDestination"})
# A node whose server Nova deleted while its source was down (status.handover.problems, an
# Event, the metric of the nodes reported so).
DELETED_IN_NOVA = "HandoverDeletedInNova"


@dataclass(frozen=True, slots=True)
class NodeRead:
    """A node and its instance read from Nova directly, one by one (not from a list, whose
    silence proves nothing: a page that ended early, a host not mapped to a cell, a cell that
    does not answer): `host` the host Nova names for the node's compute node (None: Nova has
    no compute node for it); `instance_found` whether Nova has the server Ironic's
    `instance_uuid` names (False: Nova answered that it has none); where that server runs
    (`instance_host`, `instance_node`) and what it is doing (`task_state`, `vm_state`)."""

    host: str | None
    instance_found: bool
    instance_host: str | None = None
    instance_node: str | None = None
    task_state: str | None = None
    vm_state: str | None = None

    def proves(self, uuid: str, host: str) -> bool:
        """Whether Nova, read directly, names `host` for the compute node `uuid` and for the
        server on it: the proof every irreversible step of a handover waits for."""
        return self.host == host and self.instance_found and (self.instance_host, self.instance_node) == (host, uuid)


@dataclass(frozen=True, slots=True)
class NovaView:
    """What Nova shows of the pool's handovers: compute services by host, the host each
    compute node (Ironic node uuid) is listed under, and the number of non-deleted instances
    Nova has on each node of the sources (nova-manage refuses more than one)."""

    services: Mapping[str, ServiceRecord]
    compute_host: Mapping[str, str]
    instances: Mapping[str, int] = field(default_factory=dict)
    # Nodes whose compute node Nova lists under another host while an instance on the node
    # still names the source: nova-manage saves the compute node, then the instance; killed in
    # between, it leaves this half move, and refuses to finish it (the compute node's service,
    # the destination, is not forced down).
    stranded: frozenset[str] = frozenset()
    # The nodes of NovaQuestions.direct, read one by one (node uuid -> NodeRead).
    read: Mapping[str, NodeRead] = field(default_factory=dict)
    # For each retiring source with a pod: its servers that have a task in progress
    # (server id, task_state), as Nova's list of the servers on its host shows them.
    tasks: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    def host_of(self, uuid: str) -> str | None:
        """The host Nova names for the compute node `uuid`: its list's word, else a direct
        read's; None: no compute node, or not known (`known`)."""
        listed = self.compute_host.get(uuid)
        if listed is not None:
            return listed
        found = self.read.get(uuid)
        return found.host if found is not None else None

    def known(self, uuid: str) -> bool:
        """Whether Nova said where the compute node `uuid` is: listed, or read directly (then
        also "nowhere"). Absent from the list alone is unknown, never "no compute node"."""
        return uuid in self.compute_host or uuid in self.read


@dataclass(frozen=True, slots=True)
class NovaQuestions:
    """What a handover step asks Nova about the nodes with instances of its subjects (the
    sources, and the members a handover still holds), each as (subject, node uuid):
    `count`: the instances on the next nodes Nova still lists under the subject, at most
    `per_source` of them in uuid order (the order Jobs take them in; nova-manage refuses a
    node with more than one, and counts the others itself); `half_moved`: whether an instance
    still names the subject on a node Nova lists under another host (`stranded`); `direct`:
    (node uuid, instance uuid) of the nodes to read one by one before anything irreversible
    (NodeRead): the next nodes to batch (their server must be found on the subject: one Nova
    deleted while the subject was down is never moved), those Nova lists under another host
    (their shard is written only on a direct read's proof), and those the list is silent about
    (unknown until read; at most `per_source` of them per subject)."""

    count: tuple[tuple[str, str], ...]
    half_moved: tuple[tuple[str, str], ...]
    direct: tuple[tuple[str, str], ...] = ()


def nova_questions(subjects: Iterable[str], nodes: Iterable[Node], compute_host: Mapping[str, str],
                   per_source: int) -> NovaQuestions:
    """The questions of `NovaQuestions`, from the nodes as Ironic shows them and the host
    Nova's hypervisor list names for each."""
    nodes = tuple(nodes)
    count: list[tuple[str, str]] = []
    half_moved: list[tuple[str, str]] = []
    direct: list[tuple[str, str]] = []
    for subject in sorted(subjects):
        mine = sorted((n for n in nodes if n.shard == subject and n.instance_uuid), key=lambda n: n.uuid)
        waiting = [n for n in mine if compute_host.get(n.uuid) == subject][:per_source]
        elsewhere = [n for n in mine if compute_host.get(n.uuid, subject) != subject]
        unlisted = [n for n in mine if n.uuid not in compute_host][:per_source]
        count += [(subject, n.uuid) for n in waiting]
        half_moved += [(subject, n.uuid) for n in elsewhere]
        direct += [(n.uuid, str(n.instance_uuid)) for n in waiting + elsewhere + unlisted]
    return NovaQuestions(tuple(count), tuple(half_moved), tuple(direct))


def stranded(instances_left: Mapping[str, int]) -> frozenset[str]:
    """The nodes of a half move (NovaView.stranded), from `instances_left`: for each node of
    NovaQuestions.half_moved, how many instances on it still name its Ironic shard's host."""
    return frozenset(uuid for uuid, left in instances_left.items() if left)


@dataclass(frozen=True, slots=True)
class JobView:
    """A handover Job as observed: its `moves` (node uuid, destination), its state (ACTIVE,
    SUCCEEDED, FAILED), when it finished (FAILED/SUCCEEDED), the tail of its pod's log, and
    when it was created (its creationTimestamp, epoch seconds; None if unreadable)."""

    name: str
    source: str
    moves: tuple[tuple[str, str], ...]
    state: str
    finished: float | None = None
    log_tail: str = ""
    attempt: int = 1
    created: float | None = None


@dataclass(frozen=True, slots=True)
class JobPod:
    """A pod of a handover Job as observed: its Job's name, its source, the moves it carries
    (its own annotation; None: unknown, so it may be moving any node of its source), and
    whether its process may still run (`alive`: not Succeeded or Failed, deleted or not: a
    pod being deleted runs until its kubelet says it ended). A pod may outlive its Job; one on
    a lost Kubernetes node is never said to have ended (`stopping_since`: JOB_POD_STUCK_SECONDS)."""

    name: str
    job: str
    source: str
    moves: tuple[tuple[str, str], ...] | None
    alive: bool
    stopping_since: float | None = None  # its deletionTimestamp (epoch seconds): asked to stop
    node: str | None = None              # the Kubernetes node it was bound to


@dataclass(frozen=True, slots=True)
class JobBatch:
    """A Job to create: move `moves` (node, source, destination) in Nova; `name` is derived
    from its content (core/handover_job.py::job_name)."""

    source: str
    name: str
    moves: tuple[Move, ...]
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class BusyNode:
    """A node of a retiring source in the middle of an operation (`state`, as
    model.mid_operation says it) since `since` (epoch seconds, kept across cycles)."""

    node: str
    state: str
    since: float


@dataclass(frozen=True, slots=True)
class BusyServer:
    """A server of a retiring source with a task in progress (`task`, its task_state) since
    `since` (epoch seconds, kept across cycles)."""

    server: str
    task: str
    since: float


@dataclass(frozen=True, slots=True)
class SourceProgress:
    """One entry of status.handover.sources (the CRD describes the fields)."""

    member: str
    trigger: str
    phase: str
    nodes: int = 0
    done: int = 0
    in_flight: int = 0
    waiting: int = 0
    failed: int = 0
    job: str | None = None
    message: str = ""
    attempts: int | None = None
    next_retry_at: float | None = None
    busy: tuple[BusyNode, ...] = ()
    held: bool = False
    busy_servers: tuple[BusyServer, ...] = ()
    no_destination_since: float | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """A handover that cannot go on by itself: `reason` (HandoverFailed, HandoverRefused,
    HandoverNoDestination, ...) and a message for the condition of `trigger`'s kind
    (ScaleDownBlocked for SCALE_DOWN, Degraded for FAILURE)."""

    trigger: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class HandoverStep:
    """The next step of every handover: forced_down to set, Jobs to delete and create, shard
    writes of nodes Nova already moved, progress per source, what is stuck, and the news
    (`events`: a source released)."""

    progress: tuple[SourceProgress, ...] = ()
    force_down: tuple[str, ...] = ()
    delete_jobs: tuple[str, ...] = ()
    create_jobs: tuple[JobBatch, ...] = ()
    shard_writes: tuple[Move, ...] = ()
    problems: tuple[Problem, ...] = ()
    # (Job name, JOB_FAILURE_REASONS) of the failed Jobs among `delete_jobs`: deleted to try
    # their batch again (the failures metric counts each once, when its deletion succeeds).
    retried: tuple[tuple[str, str], ...] = ()
    events: tuple[Event, ...] = ()
    # Members that hold, in Nova, a node Ironic still gives another member, or that a Job
    # moves nodes to (`receivers`): recorded in status.handover so that the pod side never
    # retires one (`retirable`), whatever this cycle's plan or Jobs say.
    receiving: tuple[str, ...] = ()

    @property
    def writes(self) -> int:
        return len(self.force_down) + len(self.delete_jobs) + len(self.create_jobs) + len(self.shard_writes)

    @property
    def next_step_soon(self) -> bool:
        """Whether the next step has something to do at once: this one wrote, or a held source
        has nodes waiting and no Job (its first Job follows once its hold is on record)."""
        return bool(self.writes) or any(p.held and p.waiting and not p.job for p in self.progress)


# --- who hands over, and who is held: readable from the pod side too ----------------------


def failed_long(member: Member, settings: Handover | None, now: float) -> bool:
    """Not Ready for `afterFailureSeconds` or longer (never with it unset)."""
    if settings is None or settings.after_failure_seconds is None:
        return False
    return not_ready_for(member, now, settings.after_failure_seconds)


def trigger_of(member: Member, *, settings: Handover | None, retiring: Iterable[str], pods: Iterable[str],
               now: float) -> str | None:
    """Why `member` would hand its nodes with instances over: SCALE_DOWN (retiring, with
    `onScaleDown`), FAILURE (not retiring, failed for `afterFailureSeconds`, its pod gone), or
    None. No settings: never."""
    if settings is None:
        return None
    if member.name in set(retiring):
        return SCALE_DOWN if settings.on_scale_down else None
    if member.name not in set(pods) and failed_long(member, settings, now):
        return FAILURE
    return None


def sources(*, settings: Handover | None, members: Iterable[Member], retiring: Iterable[str],
            owned: PinnedCounts, pods: Iterable[str], now: float) -> dict[str, str]:
    """Source member -> trigger of every handover that applies (`trigger_of`): a SCALE_DOWN
    source owns pinned nodes (its nodes mid-operation or locked wait with it), a FAILURE
    source owns nodes with an instance (Nova's: a node pinned otherwise, a clean or a lock,
    stays with the member, which comes back). `retiring` and `owned` are the plan's
    (`Plan.retiring`, `Plan.owned`): the pod side and the handover step read the same."""
    leaving, with_pod = set(retiring), set(pods)
    found = {}
    for member in members:
        trigger = trigger_of(member, settings=settings, retiring=leaving, pods=with_pod, now=now)
        counted = owned.pinned if trigger == SCALE_DOWN else owned.with_instance
        if trigger is not None and counted.get(member.name):
            found[member.name] = trigger
    return found


def holds(*, recorded: RecordedHandover, jobs: Iterable[JobView], job_pods: Iterable[JobPod]) -> dict[str, str]:
    """Member -> why it is held (no pod; forced_down kept), from durable facts alone: the
    phase the last status.handover recorded for it (HELD_PHASES), a Job of it that runs, a
    pod of one of its Jobs that may still run. Whether this cycle has a plan plays no part.
    Only a handover step that finds nothing of the member in flight releases it (`decide`)."""
    why: dict[str, str] = {}
    for entry in recorded.sources.values():
        if recorded_held(entry):
            why.setdefault(entry["member"], f"its handover is at {entry.get('phase')} (status.handover)")
    for job in jobs:
        if job.state == ACTIVE:
            why.setdefault(job.source, f"its handover Job {job.name} runs")
    for pod in job_pods:
        if pod.alive:
            why.setdefault(pod.source, f"pod {pod.name} of its handover Job {pod.job} may still run")
    return why


def recorded_held(entry: Mapping) -> bool:
    """Whether a status.handover.sources entry holds its member: its `held` field, or, as an
    operator before that field wrote it, a phase in HELD_PHASES."""
    return bool(entry["held"]) if "held" in entry else entry.get("phase") in HELD_PHASES


@dataclass(frozen=True, slots=True)
class RecordedHandover:
    """status.handover as the last handover step wrote it, read back once (`recorded_handover`,
    PoolMemory.handover): its source entries by member, the members it recorded receiving
    (`receivers`), whether it reported a problem that stops every handover (BLOCKERS), and the
    section itself (kept as it was by a step that could not see enough to decide)."""

    sources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    receiving: frozenset[str] = frozenset()
    blocked: bool = False
    section: Mapping[str, Any] | None = None


def recorded_handover(section: Mapping[str, Any] | None) -> RecordedHandover:
    """The last status.handover read back (entries without a member name dropped)."""
    if not isinstance(section, Mapping):
        return RecordedHandover()
    entries = section.get("sources") or ()
    return RecordedHandover(
        sources={e["member"]: e for e in entries if isinstance(e, Mapping) and isinstance(e.get("member"), str)},
        receiving=frozenset(m for m in section.get("receiving") or () if isinstance(m, str)),
        blocked=any(isinstance(p, Mapping) and p.get("reason") in BLOCKERS for p in section.get("problems") or ()),
        section=section)


def unseen_problems(recorded: RecordedHandover, found: Mapping[str, str], reason: str,
                    message: str) -> tuple[Problem, ...]:
    """The problem of a step that could not see enough to decide (Nova not answering, or
    none): one per trigger of the sources found, else of those recorded."""
    triggers = set(found.values()) or {e.get("trigger") for e in recorded.sources.values()
                                       if e.get("trigger") in (SCALE_DOWN, FAILURE)} or {SCALE_DOWN}
    return tuple(Problem(t, reason, message) for t in sorted(triggers))


def why_pod_stays(*, free: int, busy: Sequence[tuple[str, str]], ring_members: Sequence[str],
                  stalled: bool, guarded: int = 0, leaked: int = 0, still_listed: int = 0,
                  tasks: Sequence[tuple[str, str]] = ()) -> str | None:
    """Why a retiring source's pod is not stopped yet, None when it may go: its free nodes
    move first (its nova-compute serves them meanwhile; `guarded` of them the shard-write guard
    holds for Placement allocations, `leaked` of those reported as leaked allocations), a node
    of it is mid-operation (its nova-compute may be driving it: a deploy stopped half-way needs
    a reset by hand), Nova still lists `still_listed` of its former free nodes under it (until
    their new owner's resource tracker takes them, a build Nova placed on one is its
    nova-compute's to deploy), a server of it has a task in progress (`tasks`: (server,
    task_state); stopped now, it would answer 409 until an administrator resets it), no ring
    member could take its nodes, or a problem stops every handover (`stalled`)."""
    if free:
        why = f"{free} free nodes still move to other members first"
        if guarded:
            why += (f"; {guarded} of them are held by the guard: Placement holds allocations on them (a build "
                    "in flight, or an allocation a failed build left behind; status.guard lists them"
                    + (f", {leaked} reported as leaked allocations: Event LeakedAllocation says how to remove "
                       "one no server uses" if leaked else "") + ")")
        return why
    if busy:
        return f"{len(busy)} of its nodes are mid-operation: " + ", ".join(
            f"{uuid} ({state})" for uuid, state in busy[:5])
    if still_listed:
        return (f"Nova still lists {still_listed} of its former free nodes under it: its nova-compute serves them "
                "until their new owner's resource tracker takes them")
    if tasks:
        return f"{len(tasks)} of its servers have a task in progress: " + ", ".join(
            f"{server} ({task})" for server, task in tasks[:5])
    if not ring_members:
        return "no member is Ready to take its nodes"
    if stalled:
        return "a problem stops every handover (status.handover.problems)"
    return None


def failed_kept_away(plan: Plan | None, settings: Handover | None, members: Iterable[Member],
                     pods: Iterable[str], now: float, *, stalled: bool = False) -> frozenset[str]:
    """The failed sources this cycle's plan starts a handover with (their pods already gone):
    no new pod while a ring member could take their nodes and no problem stops every handover
    (else they come back: nothing would move their nodes).

    A retiring source's pod is never stopped on a plan alone: only Nova shows whether its
    former free nodes are listed elsewhere and its servers have no task in progress, so the
    handover step decides it and records it (STOPPING_POD, `held`), and `holds` reads that
    record, with or without a plan. A cycle without a plan starts nothing and releases nothing.
    """
    if plan is None or settings is None:
        return frozenset()
    found = sources(settings=settings, members=members, retiring=plan.retiring, owned=plan.owned, pods=pods,
                    now=now)
    return frozenset(m for m, trigger in found.items()
                     if trigger == FAILURE and set(plan.ring_members) - {m} and not stalled)


def kept_away(plan: Plan | None, settings: Handover | None, members: Sequence[Member], pods: Iterable[str],
              now: float, *, held: Mapping[str, str], recorded: RecordedHandover) -> dict[str, str]:
    """Member -> why its pod must not run, for the pod side: the members a handover holds
    (`held`, from `holds`: with or without a plan; a retiring source from the step's record
    that it may stop), and the failed sources this cycle's plan starts a handover with
    (`failed_kept_away`, unless the last status says a problem stops every handover). A member
    the plan retires is the pod side's to remove, whatever this says."""
    failed = failed_kept_away(plan, settings, members, pods, now, stalled=recorded.blocked)
    # The step's own word comes first: a source it found Blocked with nothing in flight (its
    # nodes refused) holds nothing, and a plan does not keep it from its pod either.
    failed -= {m for m, e in recorded.sources.items() if e.get("phase") == BLOCKED and not recorded_held(e)}
    away = dict(held)
    for member in sorted(failed):
        away.setdefault(member, "it failed and its nodes with instances are handed over")
    return away


def retirable(members_to_delete: Iterable[str], jobs: Iterable[JobView], job_pods: Iterable[JobPod],
              receiving: Iterable[str] = ()) -> frozenset[str]:
    """The members the plan retires (they own nothing in Ironic) that no handover Job still
    moves nodes to or from. A destination may already hold, in Nova, a node Ironic still gives
    its source: retired, it could never get that node's shard (its Job is the record until
    Ironic shows the move, core/handover.py's `_Context.settled`). A source whose Job runs, or
    a pod of whose Jobs may still run, is held (`holds`): retired, its identity would be gone
    while a nova-manage run still names it, and a scale back up would give it a pod at once.
    `receiving`: what the last handover step recorded (`RecordedHandover.receiving`): a member Nova
    lists a node under whose Job is gone and whose shard is not written yet."""
    jobs, job_pods = tuple(jobs), tuple(job_pods)
    busy = set(receiving) | job_destinations(jobs, job_pods)
    busy |= {job.source for job in jobs if job.state == ACTIVE} | {pod.source for pod in job_pods if pod.alive}
    return frozenset(set(members_to_delete) - busy)


@dataclass(frozen=True, slots=True)
class PodSide:
    """What the pod side does with each member identity this cycle: `keep` (its pod kept, or
    created), `retire` (pod and ConfigMap removed: the identity ends), `stop` (no pod, the
    identity kept: `away`), `fenced` (spec.fencedMembers: left as they are)."""

    keep: tuple[str, ...]
    retire: frozenset[str]
    stop: frozenset[str]
    fenced: frozenset[str]


def pod_side(*, identities: Sequence[str], plan: Plan | None, away: Mapping[str, str],
             fenced_members: Iterable[str], jobs: Iterable[JobView], job_pods: Iterable[JobPod],
             recorded: RecordedHandover) -> PodSide:
    """The pod side's membership: with a plan, identities are created and retired; without,
    only the existing ones are looked after. Invariants: a member kept away (`away`, from
    `kept_away`: held by its handover, or stopped by this cycle's plan) gets no pod, whether it
    has an identity or is one the plan creates again; a member is retired only when no handover
    Job moves nodes to or from it and the last status.handover records no node Nova lists under
    it that Ironic gives another member (`retirable`, `RecordedHandover.receiving`)."""
    present, fenced_all = set(identities), set(fenced_members)
    retire = retirable(plan.members_to_delete if plan else (), jobs, job_pods,
                       recorded.receiving) & present
    stop = set(away) & present - retire
    fenced = fenced_all & present - retire - stop
    keep = [m for m in identities if m not in retire and m not in stop and m not in fenced]
    keep += [m for m in (plan.members_to_create if plan else ())
             if m not in present and m not in fenced_all and m not in away]
    return PodSide(tuple(keep), frozenset(retire), frozenset(stop), frozenset(fenced))


# --- the next step of every handover ------------------------------------------------------


def decide(*, settings: Handover | None, members: Sequence[Member], found: Mapping[str, str],
           ring_members: Iterable[str], pods: Iterable[str], nodes: Sequence[Node], owned: PinnedCounts,
           nova: NovaView,
           jobs: Sequence[JobView], now: float, job_pods: Sequence[JobPod] = (),
           recorded: RecordedHandover = RecordedHandover(), blocker: tuple[str, str] | None = None,
           guard_held: Mapping[str, bool] | None = None) -> HandoverStep:
    """The next step of each handover (module doc). `found`: this step's sources and their
    triggers (`sources`); `ring_members`: the plan's ring (ready by the grace rule, not retiring);
    `owned`: the pinned nodes per owner in `nodes` (the plan's, `Plan.owned`); `pods`: members with
    a pod object; `jobs`: the pool's handover Jobs, `job_pods` their pods (those of deleted Jobs
    too); `recorded`: the last status.handover read back; `blocker`: (reason, message) of what stops every new
    Job (no usable nova.conf), the rest of each step goes on; `guard_held`: the free nodes the
    shard-write guard holds for Placement allocations (node uuid -> reported leaked,
    core/guard_holds.py::held_by_guard), named in a retiring source's message. `settings` None
    (handover off): only what is in flight is finished.

    Invariants (tests/unit/test_handover.py, tests/unit/test_handover_faults.py): a node is
    put in a Job only from a source whose pod is gone and whose service is forced down, while
    Nova lists it under that source, no Job runs it and no pod of any Job may still be moving
    it; its destination is a member Ready now whose service is up and not forced down; a
    shard write only follows Nova (the member Nova lists it under, which may be a source in
    its turn: then the node is handed over again from there);
    at most `settings.max_concurrent` nodes are in flight; a member stays in the result (held)
    while anything of it is in flight, and leaves it only with an Event.
    """
    ctx = _Context.of(settings=settings, members=members, found=found, ring_members=ring_members,
                      pods=pods, nodes=nodes, nova=nova, jobs=jobs, job_pods=job_pods, recorded=recorded,
                      blocker=blocker, now=now, guard_held=guard_held or {})
    steps = _Steps()
    _report_stuck_job_pods(ctx, steps)
    steps.delete_jobs.extend(j.name for j in jobs if j.source not in ctx.found and j.source not in ctx.cancelled
                             and ctx.settled(j))
    receiving = receivers(nodes, nova, jobs, job_pods)
    if not ctx.found and not ctx.cancelled:
        return replace(steps.build(), receiving=receiving)
    if blocker is not None:
        steps.problems.extend(Problem(t, blocker[0], blocker[1]) for t in sorted(set(ctx.found.values())))
    found = {source: _source_step(source, trigger, ctx, steps) for source, trigger in sorted(ctx.found.items())}
    to_place = [(source, node) for source, step in found.items() if step.may_batch for node in step.candidates]
    placed = _place(to_place, ctx.destinations, nodes, owned, nova, ctx.holding, ctx.found)
    budget = max(0, (settings.max_concurrent if settings else 0) - len(ctx.holding))
    for source, step in found.items():
        budget = _batch(source, step, placed, budget, ctx, steps)
    for member in sorted(ctx.cancelled):
        _cancel_step(member, ctx, steps)
    return replace(steps.build(), receiving=receiving)


def _report_stuck_job_pods(ctx: _Context, steps: _Steps) -> None:
    """A Warning for each Job pod asked to stop JOB_POD_STUCK_SECONDS ago or more that has not
    ended: its source stays held (the process may still run), and the fix is named."""
    for pod in ctx.job_pods:
        if pod.alive and pod.stopping_since is not None and ctx.now - pod.stopping_since >= JOB_POD_STUCK_SECONDS:
            entry = ctx.recorded.get(pod.source) or {}
            trigger = ctx.found.get(pod.source) or (entry.get("trigger") if entry.get("trigger") in (SCALE_DOWN, FAILURE)
                                                    else SCALE_DOWN)
            steps.problems.append(Problem(trigger, "HandoverJobPodStuck", (
                f"pod {pod.name} of handover Job {pod.job or '(deleted)'} of {pod.source} was asked to stop "
                f"{ctx.now - pod.stopping_since:.0f}s ago and has not ended: its Kubernetes node "
                f"{pod.node or '(unknown)'} does not answer. {pod.source} stays held while its nova-manage may still "
                "run. Once that node is known to be down (powered off, or its kubelet gone for good), taint it "
                "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, or delete the pod with --force "
                "--grace-period=0; the handover goes on")))


def _batch(source: str, step: _SourceStep, placed: Mapping[str, str], budget: int, ctx: _Context,
           steps: _Steps) -> int:
    """`source`'s Job of this step (its placed candidates, within `budget` nodes) and its
    progress; what is left of the budget. Candidates no destination takes are reported."""
    progress = step.progress
    candidates = [n for n in step.candidates if n.uuid in placed]
    unplaced = len(step.candidates) - len(candidates)
    if step.may_batch and candidates and budget:
        batch = tuple(Move(n.uuid, source, placed[n.uuid]) for n in candidates[:budget])
        budget -= len(batch)
        attempt = 1 + max(step.attempts.get(mv.node_uuid, 0) for mv in batch)
        name = job_name(source, batch, attempt)
        steps.create_jobs.append(JobBatch(source, name, batch, attempt))
        progress = replace(progress, in_flight=progress.in_flight + len(batch), job=name,
                           waiting=progress.waiting - len(batch), next_retry_at=None,
                           attempts=attempt if attempt > 1 else None)
    if step.may_batch and unplaced:
        message = _no_destination(ctx.ring_members, ctx.ready_now, ctx.found, ctx.nova)
        steps.problems.append(Problem(ctx.found[source], "HandoverNoDestination",
                                      f"{source}: {unplaced} nodes with instances wait: {message}"))
        progress = replace(progress, message=_join(progress.message, message))
    steps.progress.append(progress)
    return budget


def receivers(nodes: Sequence[Node], nova: NovaView, jobs: Iterable[JobView],
              job_pods: Iterable[JobPod]) -> tuple[str, ...]:
    """The members that hold, in Nova, a node with an instance that Ironic still gives another
    member (its shard write has not followed Nova yet), and the destinations of the Jobs and of
    the Job pods that may still run. Each will own that node in Ironic; retired first, it never
    could (its compute node would be listed under a host with no member)."""
    found = {host for node in nodes if node.instance_uuid
             and (host := nova.host_of(node.uuid)) not in (None, node.shard)}
    return tuple(sorted(found | job_destinations(jobs, job_pods)))


def job_destinations(jobs: Iterable[JobView], job_pods: Iterable[JobPod]) -> set[str]:
    """The members the pool's handover Jobs move nodes to, and those of Job pods that may still run."""
    found = {dest for job in jobs for _, dest in job.moves}
    return found | {dest for pod in job_pods if pod.alive and pod.moves for _, dest in pod.moves}


def job_name(source: str, moves: Sequence[Move], attempt: int = 1) -> str:
    """A Job's name from its content and attempt: the same batch has the same name, after a
    restart too, and a batch tried again (after its Job failed) a new one. At most 63
    characters (the Job's name is a label value of its pods)."""
    digest = hashlib.sha256("\n".join(f"{m.node_uuid}>{m.target}" for m in sorted(moves)).encode()
                            + source.encode() + (f"#{attempt}".encode() if attempt > 1 else b"")).hexdigest()[:8]
    return f"{source[:44].rstrip('-')}-handover-{digest}"


def handover_durations(moves: Iterable[Move], jobs: Iterable[JobView], written_at: float) -> list[float]:
    """For each of `moves` (shard writes just done) that a known Job carried (same node and
    destination), the seconds from that Job's creation (its creationTimestamp, as read back)
    to `written_at`; a move whose Job is gone or unreadable gives none (never a guess)."""
    created = {move: job.created for job in jobs if job.created is not None for move in job.moves}
    return [max(0.0, written_at - created[(m.node_uuid, m.target)]) for m in moves
            if (m.node_uuid, m.target) in created]


def stray_move_message(node: str, source: str, host: str) -> str:
    """What a node Nova moved to a host that is no member of the pool (any more) needs: its
    destination's identity was retired, or someone moved it by hand, while Ironic still gives
    it to `source`; and how to finish it by hand."""
    return (f"node {node}: Nova lists it under {host}, which is no member of this pool, while its Ironic shard is "
            f"still {source} (its destination was retired, or it was moved by hand, before the operator wrote "
            f"the shard). Move it in Nova to a member: openstack compute service set --down {host} nova-compute; "
            f"nova-manage db ironic_compute_node_move --ironic-node-uuid {node} --destination-host <a Ready "
            "member>; the operator then sets its Ironic shard to that member")


def no_compute_node_message(source: str, nodes: Sequence[Node]) -> str:
    """What nodes of `source` that carry an instance in Ironic, while Nova lists no compute
    node for them, need: nova-manage has nothing to move, so they stay with the member (they are
    not Nova's); and how to find out which of the two it is."""
    listed = ", ".join(f"{n.uuid} (instance {n.instance_uuid})" for n in nodes[:5])
    return (f"{len(nodes)} nodes of {source} carry an instance in Ironic but Nova lists no compute node for them "
            f"({listed}): nova-manage cannot move them and they stay with {source}. For each, ask Nova for "
            "the server (openstack server show INSTANCE): if there is none, Ironic's instance_uuid is stale "
            "(a deploy Nova forgot, or one made without Nova): tear the node down (openstack baremetal node "
            f"undeploy NODE) once nobody uses it; if there is one, its compute node is missing: {source}'s "
            "nova-compute records it again once it runs")


def deleted_in_nova_message(source: str, nodes: Sequence[Node]) -> str:
    """What nodes of `source` that Ironic says carry an instance Nova has no server for need:
    the server was deleted while `source` was down (a local delete: Nova dropped its record,
    Ironic never heard of it), so the machine still runs its workload and data. They are not
    moved (nothing of Nova's is on them) and stay with the member; how to end it."""
    listed = ", ".join(f"{n.uuid} (instance {n.instance_uuid})" for n in nodes[:5])
    return (f"{len(nodes)} nodes of {source} still run an instance Nova has deleted ({listed}): the server was "
            f"deleted while {source}'s nova-compute was down (a local delete), and Ironic kept the node deployed "
            "with the deleted server's disk and data. They are not handed over and stay with the member. Once "
            "nobody uses it, tear each down: openstack baremetal node undeploy NODE")


def retry_delay(attempt: int) -> float:
    """How long after a Job's `attempt` (>= 1) failed with no node moved its batch is tried
    again: JOB_RETRY_SECONDS, doubling per attempt, at most JOB_MAX_RETRY_SECONDS."""
    return backoff(attempt, JOB_RETRY_SECONDS, JOB_MAX_RETRY_SECONDS)


# A traceback's last word: "pkg.SomeError: what went wrong" (nova-manage's refusals are one line).
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Refused|NotFound)\b.*:")


def failure_text(log_tail: str) -> str:
    """What a failed Job's condition says: its log tail (lines joined with " | "), led by the
    line that names the error (the last exception line of a traceback, else the last line),
    so a message cut to an Event's length still carries it."""
    tail = log_tail.strip()
    if not tail:
        return "(no log)"
    lines = [line.strip() for line in tail.split(" | ") if line.strip()]
    return tail if len(lines) == 1 else f"{_error_line(lines)} (log tail: {tail})"


def _error_line(lines: Sequence[str]) -> str:
    """The line of a log that names its error: the last exception line, else the last line."""
    return next((line for line in reversed(lines) if _EXCEPTION_LINE.match(line)), lines[-1])


def job_failure_reason(log_tail: str) -> str:
    """The JOB_FAILURE_REASONS entry of a failed Job's log (nova 34's nova-manage messages),
    read from the error that ended it (an earlier node's refusal, noted and skipped by the
    Job's script, does not count)."""
    lines = [line.strip() for line in log_tail.split(" | ") if line.strip()]
    text = _error_line(lines).lower() if lines else ""
    if any(word in text for word in ("forced down", "more than one instance", "could not be found",
                                     "not found", "computehostnotfound")):
        return "refused"
    if any(word in text for word in ("operationalerror", "can't connect", "access denied", "dbconnectionerror",
                                     "database", "sqlalchemy", "connection refused")):
        return "database"
    return "other"


# --- helpers --------------------------------------------------------------------------------


@dataclass
class _Steps:
    progress: list[SourceProgress] = field(default_factory=list)
    force_down: list[str] = field(default_factory=list)
    delete_jobs: list[str] = field(default_factory=list)
    create_jobs: list[JobBatch] = field(default_factory=list)
    shard_writes: list[Move] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    retried: list[tuple[str, str]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def build(self) -> HandoverStep:
        return HandoverStep(tuple(self.progress), tuple(self.force_down), tuple(sorted(set(self.delete_jobs))),
                            tuple(self.create_jobs), tuple(sorted(self.shard_writes)), tuple(self.problems),
                            tuple(sorted(self.retried)), tuple(self.events))


@dataclass(frozen=True)
class _Context:
    """What every source's step reads: the facts of the cycle and what follows from them once.

    `found`: the sources (`sources`); `cancelled`: members held by the last status or by a Job
    or a pod of one that are no source any more; `holding`: node -> (Job or pod, destination)
    for every node a running Job or a pod that may still run carries; `opaque`: sources with
    such a pod whose batch is unknown; `destinations`: who may receive nodes."""

    settings: Handover | None
    members: Sequence[Member]
    identities: frozenset[str]
    ring_members: tuple[str, ...]
    ready_now: frozenset[str]
    with_pod: frozenset[str]
    nodes: Sequence[Node]
    nova: NovaView
    jobs: Sequence[JobView]
    job_pods: Sequence[JobPod]
    recorded: Mapping[str, Mapping]
    blocker: tuple[str, str] | None
    now: float
    found: Mapping[str, str]
    cancelled: frozenset[str]
    holding: Mapping[str, tuple[str, str]]
    opaque: frozenset[str]
    destinations: tuple[str, ...]
    stalled: bool
    running: frozenset[str]
    guard_held: Mapping[str, bool]

    @classmethod
    def of(cls, *, settings: Handover | None, members: Sequence[Member], found: Mapping[str, str],
           ring_members: Iterable[str], pods: Iterable[str], nodes: Sequence[Node], nova: NovaView,
           jobs: Sequence[JobView], job_pods: Sequence[JobPod], recorded: RecordedHandover,
           blocker: tuple[str, str] | None, now: float, guard_held: Mapping[str, bool]) -> _Context:
        with_pod, ring = frozenset(pods), tuple(ring_members)
        before = recorded.sources
        held = set(holds(recorded=recorded, jobs=jobs, job_pods=job_pods))
        holding: dict[str, tuple[str, str]] = {}
        for job in jobs:
            if job.state == ACTIVE:
                holding.update((uuid, (job.name, dest)) for uuid, dest in job.moves)
        for pod in job_pods:
            if pod.alive and pod.moves is not None:
                holding.update((uuid, (pod.name, dest)) for uuid, dest in pod.moves)
        ready_now = frozenset(m.name for m in members if m.ready)
        destinations = tuple(sorted(m for m in ring if m in ready_now and m not in found
                                    and _usable(nova.services.get(m))))
        return cls(settings, members, frozenset(m.name for m in members), ring, ready_now, with_pod, nodes,
                   nova, jobs, job_pods, before, blocker, now, found, frozenset(held - set(found)), holding,
                   frozenset(p.source for p in job_pods if p.alive and p.moves is None), destinations,
                   recorded.blocked or blocker is not None,
                   frozenset({j.source for j in jobs if j.state == ACTIVE} | {p.source for p in job_pods if p.alive}),
                   guard_held)

    def recorded_held(self, member: str) -> bool:
        """Whether the last status recorded `member` held (what every pod side reads)."""
        entry = self.recorded.get(member)
        return entry is not None and recorded_held(entry)

    def pods_alive(self, job: str) -> bool:
        """Whether a pod of Job `job` may still run."""
        return any(p.alive and p.job == job for p in self.job_pods)

    def shard(self, uuid: str) -> str | None:
        return next((n.shard for n in self.nodes if n.uuid == uuid), None)

    def settled(self, job: JobView) -> bool:
        """Whether a Job that ended may go: no pod of it may still run, and of each node it
        carries Ironic shows the new shard, or Nova says (listed, or read directly) that it is
        anywhere but under the destination. Until then the Job is the record of the move;
        a node the list is silent about is unknown, never "not moved"."""
        if job.state == ACTIVE or self.pods_alive(job.name):
            return False
        owners = {n.uuid: n.shard for n in self.nodes}
        return all(owners.get(uuid) == dest or uuid not in owners
                   or (self.nova.known(uuid) and self.nova.host_of(uuid) != dest) for uuid, dest in job.moves)

    def no_destination_since(self, source: str) -> float:
        """Since when the last status saw `source` with no destination (now, if it did not)."""
        seen = (self.recorded.get(source) or {}).get("noDestinationSince")
        since = parse_time(seen) if isinstance(seen, str) else None
        return self.now if since is None else min(since, self.now)

    def busy_servers(self, source: str) -> tuple[BusyServer, ...]:
        """The source's servers with a task in progress, each since when the last status saw it so."""
        seen = {b.get("server"): b.get("since") for b in (self.recorded.get(source) or {}).get("busyServers") or ()
                if isinstance(b, Mapping)}
        found = []
        for server, task in sorted(self.nova.tasks.get(source, ())):
            since = parse_time(seen.get(server)) if isinstance(seen.get(server), str) else None
            found.append(BusyServer(server, task, self.now if since is None else min(since, self.now)))
        return tuple(found)

    def busy_nodes(self, source: str, *, locked: bool = False) -> tuple[BusyNode, ...]:
        """The source's nodes mid-operation (and, with `locked`, its nodes with an instance that
        a conductor holds locked), each since when the last status saw it so."""
        seen = {b.get("node"): b.get("since") for b in (self.recorded.get(source) or {}).get("busyNodes") or ()
                if isinstance(b, Mapping)}
        found = []
        for node in sorted((n for n in self.nodes if n.shard == source), key=lambda n: n.uuid):
            state = mid_operation(node) or (f"locked by {node.reservation}"
                                            if locked and node.reservation and node.instance_uuid else None)
            if state is not None:
                since = parse_time(seen.get(node.uuid)) if isinstance(seen.get(node.uuid), str) else None
                found.append(BusyNode(node.uuid, state, self.now if since is None else min(since, self.now)))
        return tuple(found)


def _usable(service: ServiceRecord | None) -> bool:
    return service is not None and service.up and not service.forced_down


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


@dataclass
class _SourceStep:
    """One source's step before its Job: its progress, the nodes ready for a Job
    (`candidates`), whether it may start one (`may_batch`), and the attempt each node's last
    failed Job made."""

    progress: SourceProgress
    candidates: list[Node] = field(default_factory=list)
    may_batch: bool = False
    attempts: dict[str, int] = field(default_factory=dict)


def _source_step(source: str, trigger: str, ctx: _Context, steps: _Steps) -> _SourceStep:
    """One source's step (module doc, steps 1-6)."""
    mine = [n for n in ctx.nodes if n.shard == source]
    pinned = sorted((n for n in mine if n.pinned), key=lambda n: n.uuid)
    kept: list[Node] = []
    if trigger == FAILURE:  # only Nova's nodes are handed over; the rest stays with the member
        kept = [n for n in pinned if not n.instance_uuid]
        pinned = [n for n in pinned if n.instance_uuid]
    own_jobs = [j for j in ctx.jobs if j.source == source]
    base = SourceProgress(source, trigger, MOVING_FREE, nodes=len(pinned), job=own_jobs[0].name if own_jobs else None,
                          message=_kept_message(kept))
    if source in ctx.with_pod:
        return _with_pod_step(source, base, [n.uuid for n in mine if not n.pinned], len(pinned), ctx, steps)
    in_flight = source in ctx.running or any(ctx.nova.host_of(n.uuid) not in (None, source) for n in pinned)
    if not in_flight and (ctx.blocker is not None or not ctx.destinations):
        # nothing of it in flight and nothing can start: not held, its pod may come back
        why = ctx.blocker[1] if ctx.blocker is not None else _no_destination(
            ctx.ring_members, ctx.ready_now, ctx.found, ctx.nova)
        if ctx.blocker is None:
            steps.problems.append(Problem(trigger, "HandoverNoDestination", f"{source}: {why}"))
            since = ctx.no_destination_since(source)
            if ctx.recorded_held(source) and ctx.now - since < NO_DESTINATION_RELEASE_SECONDS:
                # hysteresis: a destination's service down for a heartbeat does not give the
                # source its pod back only to stop it again a cycle later
                return _SourceStep(replace(base, phase=BLOCKED, waiting=len(pinned), held=True,
                                           no_destination_since=since, message=_join(
                                               why, f"held for {NO_DESTINATION_RELEASE_SECONDS:g}s with no destination "
                                               "before it gets its pod back", base.message)))
        return _SourceStep(replace(base, phase=BLOCKED, waiting=len(pinned), message=_join(why, base.message)))
    service = ctx.nova.services.get(source)
    if service is None:
        message = f"Nova has no compute service {source}: no node can be moved from it"
        steps.problems.append(Problem(trigger, "HandoverRefused", message))
        return _SourceStep(replace(base, phase=BLOCKED, waiting=len(pinned), held=in_flight,
                                   message=_join(message, base.message)))
    if not service.forced_down:
        steps.force_down.append(source)
        return _SourceStep(replace(base, phase=FORCING_DOWN, waiting=len(pinned), held=True,
                                   message=_join(f"forcing Nova compute service {source} down", base.message)))
    count = _Count()
    retries = _ended_jobs(source, trigger, own_jobs, ctx, steps, count)
    failed_job_nodes = {uuid for j in own_jobs if j.state == FAILED and j.name not in steps.delete_jobs
                        for uuid, _ in j.moves}
    candidates = [node for node in pinned if _classify(node, source, trigger, ctx, steps, count, failed_job_nodes)]
    _report_unmovable(source, trigger, count, steps)
    handed = {n.uuid for n in pinned}
    holding_back = tuple(b for b in ctx.busy_nodes(source, locked=True) if b.node in handed)
    _report_late_busy(source, trigger, holding_back, "its handover waits for", ctx, steps)
    phase = MOVING if pinned else DONE
    stuck = count.refused or count.failed or count.unknown or count.deleted
    if phase == MOVING and not candidates and not count.in_flight and not count.done and stuck:
        phase = BLOCKED
    remaining = [j for j in own_jobs if j.name not in steps.delete_jobs]
    # Held while it moves, and while anything of it is in flight; a failed member whose nodes
    # are all refused or not Nova's (no compute node), with nothing in flight, comes back (its
    # instances stay manageable).
    held = phase == MOVING or in_flight or bool(remaining) or (phase == BLOCKED and trigger == SCALE_DOWN)
    progress = replace(base, phase=phase, done=count.done, in_flight=count.in_flight,
                       waiting=count.waiting + len(candidates),
                       failed=count.failed + len(count.refused) + len(count.unknown) + len(count.deleted),
                       job=remaining[0].name if remaining else None,
                       message=_join(*count.reasons[:5], base.message), attempts=retries.last_attempt,
                       next_retry_at=retries.next_retry, held=held, busy=holding_back[:BUSY_LISTED])
    # A Job only once the hold is on record: no cycle, with or without a plan, can then give
    # the source a pod while the Job runs.
    may_batch = not remaining and ctx.blocker is None and ctx.recorded_held(source)
    return _SourceStep(progress, candidates, may_batch=may_batch, attempts=retries.attempts)


def _report_unmovable(source: str, trigger: str, count: _Count, steps: _Steps) -> None:
    """The problems of a source's nodes no Job can move: more than one instance in Nova
    (HandoverRefused), no compute node in Nova (HandoverNoComputeNode), a server Nova deleted
    while Ironic still runs it (HandoverDeletedInNova); each also in its message."""
    if count.refused:
        message = (f"{len(count.refused)} nodes of {source} carry more than one instance in Nova "
                   f"({', '.join(count.refused[:5])}): nova-manage refuses them; delete the instances "
                   "that do not match the instance_uuid recorded on the Ironic node")
        steps.problems.append(Problem(trigger, "HandoverRefused", message))
        count.reasons.append(message)
    if count.unknown:
        message = no_compute_node_message(source, count.unknown)
        steps.problems.append(Problem(trigger, "HandoverNoComputeNode", message))
        count.reasons.append(message)
    if count.deleted:
        message = deleted_in_nova_message(source, count.deleted)
        steps.problems.append(Problem(trigger, DELETED_IN_NOVA, message))
        count.reasons.append(message)
    if count.tasks_left:
        steps.problems.append(Problem(trigger, "HandoverServerTasksLeft", tasks_left_message(
            source, count.tasks_left, "they were handed over so, and their new member's nova-compute never clears it")))


@dataclass
class _Retries:
    """What a source's ended Jobs say of its next ones: the attempt of each node's failed Job
    tried again now, and when the next failed batch is tried again (and its attempt)."""

    attempts: dict[str, int] = field(default_factory=dict)
    next_retry: float | None = None
    last_attempt: int | None = None


def _ended_jobs(source: str, trigger: str, own_jobs: Sequence[JobView], ctx: _Context, steps: _Steps,
                count: _Count) -> _Retries:
    """A source's Jobs that ended (none of their pods may still run): one that moved nodes goes
    once Ironic shows the moves (`settled`); one that failed with nothing moved is reported, and
    deleted to be tried again once its backoff is over (unless a blocker stops new Jobs)."""
    retries = _Retries()
    for job in own_jobs:
        moved = [uuid for uuid, dest in job.moves if ctx.nova.host_of(uuid) == dest]
        if job.state == ACTIVE or ctx.pods_alive(job.name):
            continue
        if job.state == SUCCEEDED or moved:
            if ctx.settled(job):
                steps.delete_jobs.append(job.name)
            continue
        tail = failure_text(job.log_tail)
        retry_at = (job.finished or ctx.now) + retry_delay(job.attempt)
        steps.problems.append(Problem(trigger, "HandoverFailed",
                                      f"Job {job.name} (handover of {source}, attempt {job.attempt}) failed: {tail}"))
        if ctx.now >= retry_at and ctx.blocker is None:
            steps.delete_jobs.append(job.name)
            steps.retried.append((job.name, job_failure_reason(job.log_tail)))
            retries.attempts.update((uuid, job.attempt) for uuid, _ in job.moves)
            count.reasons.append(f"Job {job.name} failed (attempt {job.attempt}), tried again now")
        else:
            retries.next_retry = retry_at if retries.next_retry is None else min(retries.next_retry, retry_at)
            retries.last_attempt = max(retries.last_attempt or 0, job.attempt)
            count.reasons.append(f"Job {job.name} failed (attempt {job.attempt}), tried again "
                                 f"{retry_delay(job.attempt):g}s after it failed (nextRetryAt)")
    return retries


@dataclass
class _Count:
    done: int = 0
    in_flight: int = 0
    waiting: int = 0
    failed: int = 0
    refused: list[str] = field(default_factory=list)
    unknown: list[Node] = field(default_factory=list)  # an instance in Ironic, no compute node in Nova
    deleted: list[Node] = field(default_factory=list)  # an instance in Ironic that Nova has not (any more)
    tasks_left: list[tuple[str, str]] = field(default_factory=list)  # (server, task) handed over with a task
    reasons: list[str] = field(default_factory=list)


def _classify(node: Node, source: str, trigger: str, ctx: _Context, steps: _Steps, count: _Count,
              failed_job_nodes: set[str]) -> bool:
    """Count one pinned node of a source whose pod is gone and whose service is forced down;
    True when it is ready for a Job. Nova's word on where a node is comes first; what is
    irreversible (a shard written, a node put in a Job) waits for Nova's direct read of the
    node and its server (`NodeRead`): a list's silence is never an answer."""
    uuid = node.uuid
    host = ctx.nova.host_of(uuid)
    read = ctx.nova.read.get(uuid)
    if host is not None and host != source and uuid in ctx.nova.stranded:
        if uuid in ctx.holding:  # its Job still runs: nova-manage's second save may follow
            count.in_flight += 1
        else:
            count.failed += 1
            steps.problems.append(Problem(trigger, "HandoverIncomplete", half_move_message(
                uuid, node.instance_uuid, source, host)))
            count.reasons.append(f"node {uuid}: half moved in Nova (compute node under {host}, "
                                 f"instance still on {source})")
    elif host is not None and host != source:
        if host not in ctx.identities:
            count.failed += 1
            steps.problems.append(Problem(trigger, "HandoverIncomplete", stray_move_message(uuid, source, host)))
            count.reasons.append(f"node {uuid}: Nova lists it under {host}, no member to hand it to")
        elif read is not None and read.proves(uuid, host):
            count.done += 1  # Ironic follows Nova, even to a member that hands over in turn
            steps.shard_writes.append(Move(uuid, source, host))
            if read.task_state or read.vm_state == "error":
                count.tasks_left.append((str(node.instance_uuid), read.task_state or "vm_state error"))
        else:
            count.in_flight += 1
            count.reasons.append(f"node {uuid}: Nova's list names {host}; its shard is written once Nova, read "
                                 f"directly, shows the node and its server on {host}")
    elif uuid in ctx.holding:
        count.in_flight += 1
    elif not node.instance_uuid or node.reservation or mid_operation(node) is not None:
        count.waiting += 1
        what = f"locked by {node.reservation}" if node.reservation else \
            f"in provision state {mid_operation(node) or node.provision_state}"
        count.reasons.append(f"node {uuid} waits: {what}")
    elif not ctx.nova.known(uuid):
        count.waiting += 1
        count.reasons.append(f"node {uuid} waits: Nova's hypervisor list does not name it (unknown until read "
                             "directly)")
    elif host is None:  # not Nova's: nova-manage has no compute node to move
        count.unknown.append(node)
    elif ctx.nova.instances.get(uuid, 1) > 1:
        count.refused.append(uuid)
    elif uuid in failed_job_nodes:
        count.failed += 1
    elif source in ctx.opaque:
        count.waiting += 1
        count.reasons.append(f"node {uuid} waits: a pod of an earlier handover Job of {source} may still run")
    elif read is None:
        count.waiting += 1  # beyond this step's direct reads: a later step reads it
    elif not read.instance_found:
        count.deleted.append(node)
    elif not read.proves(uuid, source):
        count.waiting += 1
        count.reasons.append(f"node {uuid} waits: its server {node.instance_uuid} is on "
                             f"{read.instance_host or '(no host)'}/{read.instance_node or '(no node)'} in Nova, "
                             f"not on {source}/{uuid}")
    else:
        return True
    return False


def _with_pod_step(source: str, base: SourceProgress, free: Sequence[str], pinned: int, ctx: _Context,
                   steps: _Steps) -> _SourceStep:
    """A source whose pod exists: it moves its free nodes, waits for its nodes mid-operation,
    for Nova to list its former free nodes elsewhere and for its servers' tasks first
    (MOVING_FREE), then its pod goes (STOPPING_POD: from here on it is held; the pod side stops
    a retiring source's pod only on this record). `why_pod_stays` says why it waits."""
    busy = ctx.busy_nodes(source)
    guarded = [uuid for uuid in free if uuid in ctx.guard_held]
    still_listed = sum(1 for n in ctx.nodes if n.shard != source and not n.pinned
                       and ctx.nova.compute_host.get(n.uuid) == source)
    servers = ctx.busy_servers(source)
    overdue = [b for b in servers if ctx.now - b.since >= TASK_WAIT_SECONDS]
    why = why_pod_stays(free=len(free), busy=[(b.node, b.state) for b in busy], ring_members=ctx.ring_members,
                        stalled=ctx.stalled, guarded=len(guarded), leaked=sum(ctx.guard_held[u] for u in guarded),
                        still_listed=still_listed,
                        tasks=[(b.server, b.task) for b in servers if b not in overdue])
    if why is None or source in ctx.running:  # (a Job of it running: it is held, whatever else)
        if why is None and overdue:
            steps.problems.append(Problem(base.trigger, "HandoverServerTasksLeft", tasks_left_message(
                source, [(b.server, b.task) for b in overdue], f"waited {TASK_WAIT_SECONDS:g}s; its pod stops now")))
        return _SourceStep(replace(base, phase=STOPPING_POD, waiting=pinned, held=True,
                                   message=_join(f"waiting for pod {source} to be gone", base.message)))
    _report_late_busy(source, base.trigger, busy, "its pod waits for", ctx, steps)
    return _SourceStep(replace(base, phase=MOVING_FREE, waiting=pinned, busy=busy[:BUSY_LISTED],
                               busy_servers=servers[:BUSY_LISTED], message=_join(why, base.message)))


def _report_late_busy(source: str, trigger: str, busy: Sequence[BusyNode], waiter: str, ctx: _Context,
                      steps: _Steps) -> None:
    """A Warning (HandoverWaitingForBusyNodes) once a node the handover of `source` waits for
    has been mid-operation or locked for BUSY_WARNING_SECONDS: named, with the fix."""
    late = [b for b in busy if ctx.now - b.since >= BUSY_WARNING_SECONDS]
    if late:
        steps.problems.append(Problem(trigger, "HandoverWaitingForBusyNodes", (
            f"{source}: {waiter} {len(late)} nodes mid-operation or locked for more than "
            f"{BUSY_WARNING_SECONDS:g}s: " + ", ".join(f"{b.node} ({b.state})" for b in late[:5])
            + "; the handover goes on once they settle. Check them in Ironic (openstack baremetal node show NODE): "
              "a deploy, clean or service step that hangs, or a lock no conductor releases, needs an administrator "
              "(openstack baremetal node abort NODE, or maintenance)")))


def tasks_left_message(host: str, tasks: Sequence[tuple[str, str]], what: str) -> str:
    """What servers left with a task in progress (or in vm_state error) on `host` need: no
    nova-compute will clear it now, so Nova answers 409 to every action on them; the fix."""
    listed = ", ".join(f"{server} ({task})" for server, task in tasks[:5])
    return (f"{host}: {len(tasks)} servers keep a task in progress or an error state ({listed}); {what}. Nova "
            "refuses actions on them (409) until an administrator resets each: check the machine in Ironic, then "
            "openstack server set --state active SERVER (nova reset-state --active SERVER)")


def _kept_message(kept: Sequence[Node]) -> str:
    if not kept:
        return ""
    return (f"{len(kept)} pinned nodes without an instance stay with the member (not Nova's: "
            + ", ".join(f"{n.uuid} ({mid_operation(n) or ('locked by ' + str(n.reservation))})" for n in kept[:5])
            + ")")


def _cancel_step(member: str, ctx: _Context, steps: _Steps) -> None:
    """A held member that is no source any more (scaled back up, handover off, its failure
    over, or all its nodes with instances handed over): its running Jobs end, every node Nova
    moved gets its shard; then it is released with an Event. A half move (compute node under
    another member, the instance still on this one) does not keep it: its own nova-compute,
    running again, takes the compute node back (measured on Nova 34:
    tests/nova/test_half_move_return.py), which no SQL by hand could do better. Anything else
    moved in Nova keeps it held, since that same nova-compute would take such a node back too."""
    entry = ctx.recorded.get(member) or {}
    trigger = entry.get("trigger") if entry.get("trigger") in (SCALE_DOWN, FAILURE) else SCALE_DOWN
    own_jobs = [j for j in ctx.jobs if j.source == member]
    running = [j.name for j in own_jobs if j.state == ACTIVE] + \
        sorted({p.job or p.name for p in ctx.job_pods if p.source == member and p.alive})
    count = _Count()
    nodes = sorted((n for n in ctx.nodes if n.shard == member and n.instance_uuid), key=lambda n: n.uuid)
    unknown = [node.uuid for node in nodes if not ctx.nova.known(node.uuid)]
    half_moved = [n for n in nodes if n.uuid in ctx.nova.stranded and n.uuid not in ctx.holding
                  and ctx.nova.host_of(n.uuid) not in (None, member)]
    for node in nodes:
        host = ctx.nova.host_of(node.uuid)
        if host is not None and host != member and node not in half_moved:
            _classify(node, member, trigger, ctx, steps, count, set())
    _report_unmovable(member, trigger, count, steps)
    if unknown:  # released only on Nova's word for each of its nodes
        count.in_flight += len(unknown)
        count.reasons.append(f"{len(unknown)} of its nodes Nova's hypervisor list does not name "
                             f"({', '.join(unknown[:3])}): unknown until read directly")
    steps.delete_jobs.extend(j.name for j in own_jobs if ctx.settled(j))
    if running or count.done or count.in_flight or count.failed:
        for node in half_moved:  # reported while it waits for the rest; it heals once the member runs
            host = ctx.nova.host_of(node.uuid) or "?"
            steps.problems.append(Problem(trigger, "HandoverIncomplete", half_move_message(
                node.uuid, node.instance_uuid, member, host)))
            count.failed += 1
        reasons = [f"{len(running)} handover Jobs or pods still run ({', '.join(sorted(set(running))[:3])})"
                   if running else "", *count.reasons[:3]]
        if count.done:
            reasons.append(f"{count.done} nodes Nova moved get their Ironic shard")
        steps.progress.append(SourceProgress(
            member, trigger, CANCELLING, nodes=len(nodes), done=count.done, held=True,
            in_flight=count.in_flight + len(running), failed=count.failed,
            message=_join(f"{member} is no handover source any more: what is in flight ends first", *reasons)))
        return
    kept = len(nodes)
    if not kept and trigger == SCALE_DOWN:
        steps.events.append(Event("HandoverDone", (
            f"Every node with an instance of {member} is handed over; its retire goes on: its identity is removed "
            "and its Nova service deleted once Nova lists nothing under it")))
    elif not kept:
        steps.events.append(Event("HandoverDone", (
            f"Every node with an instance of {member} is handed over; the member is released: its pod is "
            "created again and owns only nodes that are not Nova's")))
    else:
        healing = (f"; {len(half_moved)} of them half moved in Nova ({', '.join(n.uuid for n in half_moved[:3])}: "
                   "compute node under another member, server still on this one): its nova-compute takes their "
                   "compute nodes back once it runs") if half_moved else ""
        steps.events.append(Event("HandoverCancelled", (
            f"The handover of {member} is cancelled ({_why_cancelled(member, ctx)}); nothing of it is in flight "
            f"any more: it keeps its {kept} nodes with instances{healing}, its pod is created again and its Nova "
            "service's forced_down is cleared once it is Ready")))


def _why_cancelled(member: str, ctx: _Context) -> str:
    if ctx.settings is None:
        return "spec.handover was removed"
    return "the member is no longer retiring or failed"


def _place(to_place: Sequence[tuple[str, Node]], destinations: Sequence[str], nodes: Sequence[Node],
           owned: PinnedCounts, nova: NovaView, holding: Mapping[str, tuple[str, str]],
           found: Mapping[str, str]) -> dict[str, str]:
    """node uuid -> destination for every node ready to move, in the ring's preference order
    with bounded loads (planner.fair_quotas): a destination's load is its pinned nodes in
    Ironic plus those already on their way to it (in a Job, or moved in Nova and not yet
    re-sharded), so pinned nodes end up spread as evenly as the members already allow."""
    if not destinations or not to_place:
        return {}
    load: Counter[str | None] = Counter({m: owned.pinned[m] for m in destinations})
    for node in nodes:
        if node.shard in found and node.pinned:
            host = nova.host_of(node.uuid)
            if host in destinations:
                load[host] += 1
            elif node.uuid in holding and holding[node.uuid][1] in destinations:
                load[holding[node.uuid][1]] += 1
    quotas = fair_quotas(len(to_place), tuple(destinations), load, {})
    ring = HashRing(destinations)
    placed: dict[str, str] = {}
    for _, node in sorted(to_place, key=lambda pair: pair[1].uuid):
        for member in ring.preference(node.uuid):
            if quotas[member] > 0:
                quotas[member] -= 1
                placed[node.uuid] = member
                break
    return placed


def _no_destination(ring_members: Iterable[str], ready_now: Iterable[str], found: Mapping[str, str],
                    nova: NovaView) -> str:
    """Why no member can take a node: each ring member and what disqualifies it."""
    why, ready = [], set(ready_now)
    for member in sorted(set(ring_members) - set(found)):
        service = nova.services.get(member)
        if member not in ready:
            why.append(f"{member} is not Ready (within its grace)")
        elif service is None:
            why.append(f"{member} has no Nova compute service")
        elif service.forced_down:
            why.append(f"{member}'s Nova service is forced down")
        elif not service.up:
            why.append(f"{member}'s Nova service is down")
    if not why:
        return "no member is Ready and staying (a destination must be Ready, not retiring, its Nova service up)"
    return "no destination: " + ", ".join(why)
