"""Handover of nodes that carry instances: which member hands which node to whom, and the next
step of each handover. Pure: the shell (controller/handover.py) observes and carries it out.

A node with an instance changes owner only through a handover (invariant 9,
docs/invariants.md). Per source member, in this order, each step re-derived every cycle from
Ironic, Nova and the Jobs (nothing is remembered that a restart would lose):

1. its free nodes move away (the planner does that: the source is out of the ring);
2. its pod is deleted and provably gone: no pod object of its name exists (core/pods.py
   deletes a retiring source's pod, `pods_to_stop`; fencing decides when a pod on a lost
   Kubernetes node is forgotten; a failed source's pod is not recreated, `pods_held`);
3. its Nova service is forced down (nova-manage refuses a move from a service that is not);
4. each node with an instance is moved in Nova by `nova-manage db ironic_compute_node_move`
   in a Kubernetes Job (core/handover_job.py), unless Nova's hypervisor list already names
   another member for it: then the move is done and never run again;
5. the node's Ironic shard is set to the host Nova names (compare-and-set,
   core/shard_write.py::handover_verdict);
6. once Ironic shows no node with an instance under it, the source is done: a retired member
   then owns nothing, and the planner deletes its identity and nova_policy its service.

Destinations are ring members (Ready by the grace rule, not retiring) whose Nova service is up
and not forced down, chosen in the ring's preference order under the planner's bounded-load
rule (`planner.fair_quotas`, pinned nodes counting), so a retire spreads its nodes.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ironic_shard_operator.core.model import TRANSITIONAL_PROVISION_STATES, Member, Move, Node, Plan
from ironic_shard_operator.core.nova_policy import ServiceRecord
from ironic_shard_operator.core.nova_schedule import backoff
from ironic_shard_operator.core.planner import fair_quotas
from ironic_shard_operator.core.ring import HashRing
from ironic_shard_operator.core.spec import Handover

SCALE_DOWN, FAILURE = "ScaleDown", "Failure"
# Phases of a source (status.handover.sources[].phase).
MOVING_FREE, STOPPING_POD, FORCING_DOWN, MOVING, DONE, BLOCKED = (
    "MovingFreeNodes", "StoppingPod", "ForcingDown", "MovingNodes", "Done", "Blocked")
# A Job that failed with no node moved is deleted, and its batch tried again in a new Job
# (attempt + 1), after a backoff from when it failed: RETRY_SECONDS after the first attempt,
# doubling with each attempt, at most MAX_RETRY_SECONDS (nova_schedule.backoff); its log tail
# is reported meanwhile (HandoverFailed), and when it is tried again (status nextRetryAt).
RETRY_SECONDS = 60.0
MAX_RETRY_SECONDS = 960.0
# Why a Job failed, from its log (bounded: the `reason` label of the failures metric):
# nova-manage refused a precondition (source not forced down, destination forced down, more
# than one instance, an unknown node or host), the database could not be reached or refused
# the credentials, or anything else.
JOB_FAILURE_REASONS = ("refused", "database", "other")
# Job states as core/handover_job.py reads them.
ACTIVE, SUCCEEDED, FAILED = "Active", "Succeeded", "Failed"


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
class JobBatch:
    """A Job to create: move `moves` (node, source, destination) in Nova; `name` is derived
    from its content (core/handover_job.py::job_name)."""

    source: str
    name: str
    moves: tuple[Move, ...]
    attempt: int = 1


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


@dataclass(frozen=True, slots=True)
class Problem:
    """A handover that cannot go on by itself: `reason` (HandoverFailed, HandoverRefused,
    HandoverNoDestination, ...) and a message for the condition of `trigger`'s kind
    (ScaleDownBlocked for SCALE_DOWN, Degraded for FAILURE)."""

    trigger: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class HandoverPlan:
    """The next step of every handover: forced_down to set, Jobs to delete and create, shard
    writes of nodes Nova already moved, progress per source, and what is stuck."""

    progress: tuple[SourceProgress, ...] = ()
    force_down: tuple[str, ...] = ()
    delete_jobs: tuple[str, ...] = ()
    create_jobs: tuple[JobBatch, ...] = ()
    shard_writes: tuple[Move, ...] = ()
    problems: tuple[Problem, ...] = ()
    # (Job name, JOB_FAILURE_REASONS) of the failed Jobs among `delete_jobs`: deleted to try
    # their batch again (the failures metric counts each once, when its deletion succeeds).
    retried: tuple[tuple[str, str], ...] = ()

    @property
    def writes(self) -> int:
        return len(self.force_down) + len(self.delete_jobs) + len(self.create_jobs) + len(self.shard_writes)


# --- who hands over: readable from the pod side too -------------------------------------


def failed_long(member: Member, settings: Handover | None, now: float) -> bool:
    """Not Ready for `afterFailureSeconds` or longer (never with it unset)."""
    if settings is None or settings.after_failure_seconds is None:
        return False
    return not member.ready and member.since is not None and now - member.since >= settings.after_failure_seconds


def sources(*, settings: Handover | None, members: Iterable[Member], retiring: Iterable[str],
            pods: Iterable[str], pinned: Mapping[str, int], now: float) -> dict[str, str]:
    """Source member -> trigger (SCALE_DOWN or FAILURE) of every handover that applies.

    SCALE_DOWN: a retiring member owning pinned nodes, with `onScaleDown`. FAILURE: a member not
    retiring, failed for `afterFailureSeconds`, whose pod is gone (`pods`: members with a pod
    object), owning pinned nodes. `pinned`: pinned nodes by owner (Ironic). No settings: none.
    """
    if settings is None:
        return {}
    leaving, with_pod = set(retiring), set(pods)
    found = {}
    for member in members:
        if not pinned.get(member.name):
            continue
        if member.name in leaving:
            if settings.on_scale_down:
                found[member.name] = SCALE_DOWN
        elif member.name not in with_pod and failed_long(member, settings, now):
            found[member.name] = FAILURE
    return found


# Problems that stop every handover before it starts (status.handover.problems): while one is
# reported, a retiring source's pod keeps running (stopping it would only make its instances
# unmanageable, with no handover to follow).
BLOCKERS = frozenset({"HandoverConfigInvalid", "HandoverNeedsNova", "HandoverNoDestination"})


def blocked(last_status: Mapping | None) -> bool:
    """Whether the last status.handover reported a problem that stops every handover."""
    section = (last_status or {}).get("handover") or {}
    return any(p.get("reason") in BLOCKERS for p in section.get("problems") or ())


def pods_to_stop(plan: Plan | None, settings: Handover | None, members: Iterable[Member],
                 pods: Iterable[str], now: float, *, stalled: bool = False) -> tuple[frozenset[str], frozenset[str]]:
    """(pods to delete, pods not to create) for handovers, from the pod side's facts.

    A retiring source whose free nodes have all moved away (no planned move from it, no free
    node left) has its pod deleted, once a ring member exists to take its nodes, unless the
    handovers are `stalled` (`blocked`: nothing would follow). A failed
    source (its pod already gone) gets no new pod while it owns pinned nodes: a nova-compute
    with its host would take back compute nodes Nova has moved.
    """
    if plan is None or settings is None:
        return frozenset(), frozenset()
    loads = {load.name: load for load in plan.loads}
    pinned = {name: load.pinned for name, load in loads.items()}
    retiring = {name for name in plan.scale_down_blocked}
    found = sources(settings=settings, members=members, retiring=retiring, pods=pods, pinned=pinned, now=now)
    moving_from = {move.source for move in plan.moves}
    stop = frozenset(m for m, trigger in found.items()
                     if trigger == SCALE_DOWN and plan.ring_members and not stalled and m not in moving_from
                     and loads[m].nodes == loads[m].pinned)
    held = frozenset(m for m, trigger in found.items() if trigger == FAILURE)
    return stop, held


# --- the next step of every handover ------------------------------------------------------


def decide(*, pool: str, settings: Handover, members: Sequence[Member], retiring: Iterable[str],
           ring_members: Iterable[str], pods: Iterable[str], nodes: Sequence[Node], nova: NovaView,
           jobs: Sequence[JobView], now: float) -> HandoverPlan:
    """The next step of each handover (module doc). `ring_members`: the plan's ring (ready
    by the grace rule, not retiring); `pods`: members with a pod object; `jobs`: the pool's
    handover Jobs.

    Invariants (tests/unit/test_handover.py): a node is put in a Job only from a source that
    is a handover source, whose pod is gone and whose service is forced down, and only while
    Nova lists it under that source and no Job of the pool already holds it; its destination
    is a ring member whose service is up and not forced down; a shard write only follows
    Nova (the host Nova lists it under, a member that is no source); at most
    `settings.max_concurrent` nodes are in Jobs that run.
    """
    owned_pinned = Counter(n.shard for n in nodes if n.pinned)
    found = sources(settings=settings, members=members, retiring=retiring, pods=pods,
                    pinned=owned_pinned, now=now)
    if not found:
        return HandoverPlan(delete_jobs=tuple(sorted(j.name for j in jobs if j.state != ACTIVE)))
    identities = {m.name for m in members}
    with_pod = set(pods)
    destinations = tuple(sorted(
        m for m in ring_members
        if m not in found and _usable(nova.services.get(m))))
    in_jobs = {uuid: (job, dest) for job in jobs if job.state == ACTIVE for uuid, dest in job.moves}
    in_flight = len(in_jobs)
    budget = max(0, settings.max_concurrent - in_flight)

    steps = _Steps()
    to_place: list[tuple[str, Node]] = []  # (source, node) needing a destination, ready to go
    per_source: dict[str, dict] = {}
    for source in sorted(found):
        info = per_source[source] = _source_step(
            source, found[source], nodes, nova, jobs, in_jobs, with_pod, identities, found, now, steps)
        if info["ready_to_move"]:
            to_place.extend((source, node) for node in info["candidates"])

    placed = _place(to_place, destinations, nodes, nova, in_jobs, found)
    for source in sorted(found):
        info = per_source[source]
        progress: SourceProgress = info["progress"]
        candidates = [n for n in info["candidates"] if n.uuid in placed]
        unplaced = len(info["candidates"]) - len(candidates)
        if info["ready_to_move"] and not info["job"] and candidates and budget:
            batch = tuple(Move(n.uuid, source, placed[n.uuid]) for n in candidates[:budget])
            budget -= len(batch)
            attempt = 1 + max(info["attempts"].get(mv.node_uuid, 0) for mv in batch)
            name = job_name(source, batch, attempt)
            steps.create_jobs.append(JobBatch(source, name, batch, attempt))
            progress = _with(progress, in_flight=progress.in_flight + len(batch), job=name,
                             waiting=progress.waiting - len(batch), next_retry_at=None,
                             attempts=attempt if attempt > 1 else None)
        if info["ready_to_move"] and unplaced:
            message = _no_destination(ring_members, found, nova)
            steps.problems.append(Problem(found[source], "HandoverNoDestination",
                                          f"{source}: {unplaced} nodes with instances wait: {message}"))
            progress = _with(progress, message=_join(progress.message, message))
        steps.progress.append(progress)
    return steps.build()


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


def half_move_message(node: Node, source: str, host: str) -> str:
    """What a half move is and how to finish it by hand (nova-manage cannot: it refuses a node
    whose compute node's service, now `host`, is not forced down)."""
    return (f"node {node.uuid}: Nova lists its compute node under {host} but its instance "
            f"{node.instance_uuid} still names host {source} (a nova-manage move interrupted between its "
            f"two saves; nova-manage refuses to finish it). Finish it in the cell database of "
            f"novaManageConfig: UPDATE instances SET host='{host}' WHERE uuid='{node.instance_uuid}' "
            f"AND deleted=0; the operator then sets the node's Ironic shard to {host}")


def retry_delay(attempt: int) -> float:
    """How long after a Job's `attempt` (>= 1) failed with no node moved its batch is tried
    again: RETRY_SECONDS, doubling per attempt, at most MAX_RETRY_SECONDS."""
    return backoff(attempt, RETRY_SECONDS, MAX_RETRY_SECONDS)


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

    def build(self) -> HandoverPlan:
        return HandoverPlan(tuple(self.progress), tuple(self.force_down), tuple(sorted(set(self.delete_jobs))),
                            tuple(self.create_jobs), tuple(sorted(self.shard_writes)), tuple(self.problems),
                            tuple(sorted(self.retried)))


def _usable(service: ServiceRecord | None) -> bool:
    return service is not None and service.up and not service.forced_down


def _with(progress: SourceProgress, **changes) -> SourceProgress:
    values = {name: getattr(progress, name) for name in SourceProgress.__slots__}
    values.update(changes)
    return SourceProgress(**values)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _source_step(source: str, trigger: str, nodes: Sequence[Node], nova: NovaView, jobs: Sequence[JobView],
                 in_jobs: Mapping[str, tuple[JobView, str]], with_pod: set[str], identities: set[str],
                 found: Mapping[str, str], now: float, steps: _Steps) -> dict:
    """One source's step: its progress, the nodes ready for a Job (`candidates`), whether the
    source may run Jobs (`ready_to_move`), and whether a Job of it exists (`job`)."""
    mine = [n for n in nodes if n.shard == source]
    free = sum(1 for n in mine if not n.pinned)
    pinned = sorted((n for n in mine if n.pinned), key=lambda n: n.uuid)
    own_jobs = [j for j in jobs if j.source == source]
    base = SourceProgress(source, trigger, MOVING_FREE, nodes=len(pinned),
                          job=own_jobs[0].name if own_jobs else None)
    result = {"progress": base, "candidates": [], "ready_to_move": False, "job": bool(own_jobs), "attempts": {}}
    if free:
        result["progress"] = _with(base, waiting=len(pinned),
                                   message=f"{free} free nodes still move to other members first")
        return result
    if source in with_pod:
        result["progress"] = _with(base, phase=STOPPING_POD, waiting=len(pinned),
                                   message=f"waiting for pod {source} to be gone")
        return result
    service = nova.services.get(source)
    if service is None:
        message = f"Nova has no compute service {source}: no node can be moved from it"
        steps.problems.append(Problem(trigger, "HandoverRefused", message))
        result["progress"] = _with(base, phase=BLOCKED, waiting=len(pinned), message=message)
        return result
    if not service.forced_down:
        steps.force_down.append(source)
        result["progress"] = _with(base, phase=FORCING_DOWN, waiting=len(pinned),
                                   message=f"forcing Nova compute service {source} down")
        return result

    done = in_flight = waiting = failed = 0
    reasons: list[str] = []
    attempts: dict[str, int] = {}  # node uuid -> attempt of the failed Job now tried again
    next_retry: float | None = None
    last_attempt: int | None = None
    for job in own_jobs:
        moved = [uuid for uuid, dest in job.moves if nova.compute_host.get(uuid) == dest]
        if job.state == SUCCEEDED or (job.state == FAILED and moved):
            steps.delete_jobs.append(job.name)
        elif job.state == FAILED:
            tail = failure_text(job.log_tail)
            retry_at = (job.finished or now) + retry_delay(job.attempt)
            steps.problems.append(Problem(trigger, "HandoverFailed",
                                          f"Job {job.name} (handover of {source}, attempt {job.attempt}) failed: "
                                          f"{tail}"))
            if now >= retry_at:
                steps.delete_jobs.append(job.name)
                steps.retried.append((job.name, job_failure_reason(job.log_tail)))
                attempts.update((uuid, job.attempt) for uuid, _ in job.moves)
                reasons.append(f"Job {job.name} failed (attempt {job.attempt}), tried again now")
            else:
                next_retry = retry_at if next_retry is None else min(next_retry, retry_at)
                last_attempt = max(last_attempt or 0, job.attempt)
                reasons.append(f"Job {job.name} failed (attempt {job.attempt}), tried again "
                               f"{retry_delay(job.attempt):g}s after it failed (nextRetryAt)")
    failed_job_nodes = {uuid for j in own_jobs if j.state == FAILED and j.name not in steps.delete_jobs
                        for uuid, _ in j.moves}
    candidates: list[Node] = []
    refused: list[str] = []
    for node in pinned:
        host = nova.compute_host.get(node.uuid)
        if not node.instance_uuid or node.target_provision_state or node.reservation \
                or node.provision_state in TRANSITIONAL_PROVISION_STATES:
            waiting += 1
            what = f"locked by {node.reservation}" if node.reservation else \
                f"in provision state {node.provision_state}" + (f" -> {node.target_provision_state}"
                                                                if node.target_provision_state else "")
            reasons.append(f"node {node.uuid} waits: {what}")
        elif host is not None and host != source and node.uuid in nova.stranded:
            if node.uuid in in_jobs:  # its Job still runs: nova-manage's second save may follow
                in_flight += 1
            else:
                failed += 1
                steps.problems.append(Problem(trigger, "HandoverIncomplete", half_move_message(
                    node, source, host)))
                reasons.append(f"node {node.uuid}: half moved in Nova (compute node under {host}, "
                               f"instance still on {source})")
        elif host is not None and host != source:
            if host in identities and host not in found:
                done += 1
                steps.shard_writes.append(Move(node.uuid, source, host))
            else:
                failed += 1
                reasons.append(f"node {node.uuid}: Nova lists it under {host}, no member to hand it to")
        elif host is None:
            waiting += 1
            reasons.append(f"node {node.uuid} waits: Nova lists no compute node for it")
        elif nova.instances.get(node.uuid, 1) > 1:
            failed += 1
            refused.append(node.uuid)
        elif node.uuid in in_jobs:
            in_flight += 1
        elif node.uuid in failed_job_nodes:
            failed += 1
        else:
            waiting += 1
            candidates.append(node)
    if refused:
        message = (f"{len(refused)} nodes of {source} carry more than one instance in Nova "
                   f"({', '.join(refused[:5])}): nova-manage refuses them; delete the instances "
                   "that do not match the instance_uuid recorded on the Ironic node")
        steps.problems.append(Problem(trigger, "HandoverRefused", message))
        reasons.append(message)
    phase = MOVING if pinned else DONE
    if phase == MOVING and not candidates and not in_flight and not done and (refused or failed):
        phase = BLOCKED
    remaining = [j for j in own_jobs if j.name not in steps.delete_jobs]
    result.update(candidates=candidates, ready_to_move=True, attempts=attempts, job=bool(remaining),
                  progress=_with(base, phase=phase, done=done, in_flight=in_flight, waiting=waiting,
                                 job=remaining[0].name if remaining else None,
                                 failed=failed, message=_join(*reasons[:5]), attempts=last_attempt,
                                 next_retry_at=next_retry))
    return result


def _place(to_place: Sequence[tuple[str, Node]], destinations: Sequence[str], nodes: Sequence[Node],
           nova: NovaView, in_jobs: Mapping[str, tuple[JobView, str]], found: Mapping[str, str]) -> dict[str, str]:
    """node uuid -> destination for every node ready to move, in the ring's preference order
    with bounded loads (planner.fair_quotas): a destination's load is its pinned nodes in
    Ironic plus those already on their way to it (in a Job, or moved in Nova and not yet
    re-sharded), so pinned nodes end up spread as evenly as the members already allow."""
    if not destinations or not to_place:
        return {}
    load: Counter[str | None] = Counter(n.shard for n in nodes if n.pinned and n.shard in destinations)
    for node in nodes:
        if node.shard in found and node.pinned:
            host = nova.compute_host.get(node.uuid)
            if host in destinations:
                load[host] += 1
            elif node.uuid in in_jobs and in_jobs[node.uuid][1] in destinations:
                load[in_jobs[node.uuid][1]] += 1
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


def _no_destination(ring_members: Iterable[str], found: Mapping[str, str], nova: NovaView) -> str:
    """Why no member can take a node: each ring member and what disqualifies it."""
    why = []
    for member in sorted(set(ring_members) - set(found)):
        service = nova.services.get(member)
        if service is None:
            why.append(f"{member} has no Nova compute service")
        elif service.forced_down:
            why.append(f"{member}'s Nova service is forced down")
        elif not service.up:
            why.append(f"{member}'s Nova service is down")
    if not why:
        return "no member is Ready and staying (a destination must be Ready, not retiring, its Nova service up)"
    return "no destination: " + ", ".join(why)
