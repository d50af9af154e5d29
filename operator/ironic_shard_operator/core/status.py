"""Pure status of an IronicComputeShard: counts, members, ring and conditions.

`build_status()` turns what one cycle saw and decided into the CR's `.status` (the CRD
describes every field) and the Events that announce condition changes. Invariants:
- every condition carries the CR generation it was computed for (`observedGeneration`);
- a condition's `lastTransitionTime` changes only when its `status` changes, so a status
  rewritten every cycle with the same facts is byte-identical (no write, no event);
- an Event is returned only for a transition, never for a steady state;
- no credential is written: every text of the status and of its Events is redacted
  (core/redact.py) with the secrets the cycle read (`CycleFacts.secrets`).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ironic_shard_operator.core import handover, host_mapping, model, nova_policy
from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.pods import MemberState
from ironic_shard_operator.core.pool_memory import since_of
from ironic_shard_operator.core.redact import redact
from ironic_shard_operator.core.tracker_interval import IntervalSettings

CONDITION_TYPES = ("Ready", "Progressing", "Degraded", "ScaleDownBlocked", "Conflict")


def format_time(seconds: float) -> str:
    """Seconds since the epoch -> RFC 3339 in UTC, as Kubernetes writes times."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True, slots=True)
class CycleFacts:
    """What one cycle of one pool saw and decided, as far as status is concerned.

    `plan` is None when the cycle could not plan (bad spec, Ironic unreachable, conflict
    before observing); `error` then says why in one sentence for a human. `members` is the
    readiness of every known identity; `states` the lifecycle phase of each. `nova` is the
    new status.nova (nova_policy.status_section), None when Nova was not asked this cycle: the
    last one is kept, and its findings keep counting towards Degraded. `secrets` are the
    credentials of the pool's clouds.yaml and nova.conf (redact.secrets_in_*), masked
    wherever they would appear. `oldest_pod_created` is when the oldest member pod that is
    not being deleted was created (None: no pod); a pool whose members have never been ready
    may take `start_timeout_seconds` (failover.podPendingTimeoutSeconds) from then to start
    before Degraded says so.
    """

    generation: int
    members: Sequence[model.Member] = ()
    states: Sequence[MemberState] = ()
    plan: model.Plan | None = None
    moves_applied: int = 0
    error: str | None = None
    error_reason: str = "Error"
    conflict: str | None = None
    conflict_reason: str = "OverlappingPool"
    paused: bool = False
    pods_existing: int = 0
    pods_ready: int = 0
    selector: str = ""
    now: float = 0.0
    extra_events: Sequence[Event] = field(default_factory=tuple)
    # The Preflight condition (status, reason, message; core/preflight.condition), None when no
    # verdict is new this cycle: the last reported Preflight condition is then kept as it was.
    preflight: tuple[bool, str, str] | None = None
    nova: Mapping[str, Any] | None = None
    secrets: frozenset[str] = frozenset()
    oldest_pod_created: float | None = None
    start_timeout_seconds: float = 300.0
    handover: Mapping[str, Any] | None = None
    handover_enabled: bool = False
    # The new status.guard (core/guard_holds.py), None when no writes were tried this cycle:
    # the last one is kept.
    guard: Mapping[str, Any] | None = None
    # The new status.hostMapping (host_mapping_section), None when it was not decided this
    # cycle (Nova not asked): the last one is kept, and its members not mapped keep Degraded.
    host_mapping: Mapping[str, Any] | None = None
    # Each kept member's resource-tracker interval in seconds (core/tracker_interval.py; absent:
    # not decided this cycle, the member's last reported one is kept), and the cost of a pass per
    # node it was computed with (spec.nova.updateResourcesInterval.secondsPerNode).
    intervals: Mapping[str, float] = field(default_factory=dict)
    seconds_per_node: float = IntervalSettings().seconds_per_node


def ring_digest(members: Sequence[str]) -> str:
    """A short digest of the ring's membership: equal digests, equal assignments."""
    return hashlib.sha256("\n".join(sorted(members)).encode()).hexdigest()[:12]


def build_status(facts: CycleFacts, previous: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[Event]]:
    """The new `.status` and the Events for its condition transitions."""
    previous = previous or {}
    status: dict[str, Any] = {
        "observedGeneration": facts.generation,
        "replicas": facts.pods_existing,
        "readyReplicas": facts.pods_ready,
        "selector": facts.selector,
    }
    plan = facts.plan
    if plan is not None:
        status["desiredReplicas"] = plan.desired_replicas
        status["desiredReason"] = desired_reason(plan)
        if plan.autoscale is not None:
            status["autoscale"] = _autoscale(plan.autoscale.history)
        elif "autoscale" in previous:
            status["autoscale"] = None  # removed by the merge patch: autoscale is off
        status["members"] = _members(facts, {load.name: (load.nodes, load.pinned) for load in plan.loads}, previous)
        status["ring"] = _ring(plan, previous.get("ring") or {})
        status["nodes"] = _counts(plan.counts)
    else:  # nothing new is known about size and ownership: keep the last report
        for key in ("desiredReplicas", "desiredReason", "autoscale", "members", "ring", "nodes"):
            if key in previous:
                status[key] = previous[key]
        if facts.members:  # the members' own state is known: each keeps its last node counts
            status["members"] = _members(facts, {m.get("name"): (m.get("nodes", 0), m.get("pinnedNodes", 0))
                                                 for m in previous.get("members") or ()}, previous)
    nova = facts.nova if facts.nova is not None else previous.get("nova")
    if nova is not None:
        status["nova"] = dict(nova)
    guard = facts.guard if facts.guard is not None else previous.get("guard")
    if guard is not None:
        status["guard"] = dict(guard)
    mapping = facts.host_mapping if facts.host_mapping is not None else previous.get("hostMapping")
    if mapping is not None:
        status["hostMapping"] = dict(mapping)
    moving = facts.handover if facts.handover is not None else previous.get("handover")
    if moving:
        status["handover"] = dict(moving)
    elif "handover" in previous and previous["handover"] is not None:
        status["handover"] = None  # removed by the merge patch: handover is off
    conditions = _conditions(facts, nova or {}, moving or {}, mapping or {})
    if facts.preflight is not None:
        conditions.append(_Condition("Preflight", *facts.preflight))
    status["conditions"], events = _merge_conditions(
        conditions, previous.get("conditions") or [], facts.generation, facts.now)
    if facts.preflight is None:  # no new verdict: the last one stays
        status["conditions"] += [c for c in previous.get("conditions") or () if c.get("type") == "Preflight"]
    events = [*counted_out_events(facts.members, previous), *events]
    return (_redacted(status, facts.secrets),
            [replace(e, message=redact(e.message, facts.secrets)) for e in (*facts.extra_events, *events)])


def desired_reason(plan: model.Plan) -> str:
    """Why the pool steers towards `plan.desired_replicas` members, in one line
    (status.desiredReason): spec.replicas, or autoscale's arithmetic and its bounds; then the
    members retiring (spec.retireMembers first, then the highest ordinals)."""
    retiring = f"; retiring {', '.join(plan.retiring)}" if plan.retiring else ""
    scale = plan.autoscale
    if scale is None:
        return f"spec.replicas: {plan.desired_replicas}{retiring}"
    bounds = scale.settings
    text = f"autoscale: {scale.nodes:,} nodes / {bounds.max_nodes_per_member:,} per member -> "
    if scale.by_nodes > bounds.max_replicas:
        text += f"{scale.by_nodes:,}, capped at maxReplicas {bounds.max_replicas}"
    elif scale.by_nodes < bounds.min_replicas:
        text += f"{scale.by_nodes}, raised to minReplicas {bounds.min_replicas}"
    else:
        text += f"{scale.recommendation} (min {bounds.min_replicas}, max {bounds.max_replicas})"
    if scale.held_until is not None:
        text += (f"; held at {scale.desired} until {_time_up(scale.held_until)}: scale-down waits until "
                 f"the lower count has held for {bounds.scale_down_stabilization_seconds:g}s "
                 "(scaleDownStabilizationSeconds)")
    return text + retiring


def _autoscale(history: model.AutoscaleHistory) -> dict[str, Any]:
    """status.autoscale: what the scale-down stabilization keeps (pool_memory.autoscale_history_of reads it).
    Times are rounded up to the second, so a round trip never shortens the window."""
    return {"recommendation": history.recommendation,
            "peaks": [{"replicas": p.replicas, "lastWanted": _time_up(p.last_wanted)} for p in history.peaks]}


def _time_up(seconds: float) -> str:
    return format_time(math.ceil(seconds))


def _redacted(value: Any, secrets: frozenset[str]) -> Any:
    """`value` (a status document) with every string in it redacted."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, Mapping):
        return {key: _redacted(item, secrets) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_redacted(item, secrets) for item in value)
    return value


def _members(facts: CycleFacts, loads: Mapping[str, tuple[int, int]],
             previous: Mapping[str, Any]) -> list[dict[str, Any]]:
    """status.members: each member's state as observed, with its (nodes, pinned nodes) from `loads`,
    why it is counted out, its Kubernetes node, and its resource tracker's interval (this cycle's,
    else the last one reported) with the pass its nodes are expected to take."""
    states = {state.name: state for state in facts.states}
    before = {m.get("name"): m for m in previous.get("members") or () if isinstance(m, Mapping)}
    out = []
    for member in facts.members:
        nodes, pinned = loads.get(member.name, (0, 0))
        state = states.get(member.name)
        entry: dict[str, Any] = {
            "name": member.name,
            "phase": state.phase if state else ("Ready" if member.ready else "NotReady"),
            "ready": member.ready,
            "nodes": nodes,
            "pinnedNodes": pinned,
        }
        if member.since is not None:
            entry["since"] = format_time(member.since)
        if state and state.message:
            entry["message"] = state.message
        if member.counted_out is not None:
            entry["countedOut"] = member.counted_out
        if member.kubernetes_node is not None:
            entry["kubernetesNode"] = member.kubernetes_node
        interval = facts.intervals.get(member.name, (before.get(member.name) or {}).get("updateResourcesIntervalSeconds"))
        if interval is not None:
            entry["updateResourcesIntervalSeconds"] = interval
            entry["expectedPassSeconds"] = round(nodes * facts.seconds_per_node, 3)
        out.append(entry)
    return out


def counted_out_events(members: Sequence[model.Member], previous: Mapping[str, Any]) -> list[Event]:
    """A Warning for each member counted out this cycle that the last status did not show counted out."""
    before = {name for name, member in since_of(previous).items() if member.counted_out}
    return [Event("MemberCountedOut", (
        f"Member {m.name} is counted out at once: {m.counted_out}. Its Nova service is forced down and its free "
        "nodes move now, without waiting for failover.rebalanceAfterSeconds (nodes with instances move only "
        "through a handover); it counts again once its pod is Ready"), "Warning")
        for m in members if m.counted_out is not None and m.name not in before]


def _ring(plan: model.Plan, previous: Mapping[str, Any]) -> dict[str, Any]:
    digest = ring_digest(plan.ring_members)
    generation = int(previous.get("generation") or 0)
    if previous.get("digest") != digest:
        generation += 1
    return {"members": list(plan.ring_members), "generation": generation, "digest": digest}


def _counts(counts: model.NodeCounts) -> dict[str, Any]:
    """status.nodes; `observedAt` says when the counted nodes were listed in full."""
    section: dict[str, Any] = {
        "total": counts.total, "free": counts.free, "pinned": counts.pinned,
        "unassigned": counts.unassigned, "pendingMoves": counts.pending_moves,
        "misplaced": counts.misplaced,
    }
    if counts.observed_at is not None:
        section["observedAt"] = format_time(counts.observed_at)
    return section


@dataclass(frozen=True, slots=True)
class _Condition:
    type: str
    status: bool
    reason: str
    message: str


def handover_section(step: handover.HandoverStep | None) -> dict[str, Any]:
    """status.handover for a handover step ({} when spec.handover is off: the section goes).
    Only facts, no clock: an unchanged handover is not rewritten."""
    if step is None:
        return {}
    return {
        "sources": [{key: value for key, value in (
            ("member", p.member), ("trigger", p.trigger), ("phase", p.phase), ("nodes", p.nodes),
            ("done", p.done), ("inFlight", p.in_flight), ("waiting", p.waiting), ("failed", p.failed),
            ("job", p.job), ("message", p.message), ("attempts", p.attempts),
            ("nextRetryAt", format_time(p.next_retry_at) if p.next_retry_at is not None else None),
            ("busyNodes", [{"node": b.node, "state": b.state, "since": format_time(b.since)} for b in p.busy]
             if p.busy else None),
            ("busyServers", [{"server": b.server, "task": b.task, "since": format_time(b.since)}
                             for b in p.busy_servers] if p.busy_servers else None),
            ("noDestinationSince", format_time(p.no_destination_since) if p.no_destination_since is not None
             else None), ("held", p.held))
            if value is not None} for p in step.progress],
        "problems": [{"trigger": p.trigger, "reason": p.reason, "message": p.message} for p in step.problems],
        **({"receiving": list(step.receiving)} if step.receiving else {}),
    }


def host_mapping_section(step: host_mapping.MappingStep) -> dict[str, Any]:
    """status.hostMapping for a host-mapping step: one entry per member with a Nova service.
    Only facts, no clock: an unchanged pool's section is not rewritten."""
    return {"members": [{key: value for key, value in (
        ("member", e.member), ("service", e.service), ("state", e.state), ("reason", e.reason),
        ("message", e.message), ("job", e.job), ("attempts", e.attempts),
        ("nextRetryAt", format_time(e.next_retry_at) if e.next_retry_at is not None else None))
        if value is not None} for e in step.entries]}


def handover_section_unseen(recorded: handover.RecordedHandover,
                            problems: Sequence[handover.Problem]) -> dict[str, Any]:
    """status.handover of a step that could not see enough to decide: the recorded sources
    as they were (the holds they carry stay), with the problems that kept it from seeing."""
    return {"sources": [dict(e) for e in recorded.sources.values()],
            "problems": [{"trigger": p.trigger, "reason": p.reason, "message": p.message} for p in problems],
            **({"receiving": sorted(recorded.receiving)} if recorded.receiving else {})}


def _handover_conditions(facts: CycleFacts, moving: Mapping[str, Any]) -> dict[str, _Condition]:
    """What the handovers say about ScaleDownBlocked, Degraded and Progressing (absent: nothing)."""
    out: dict[str, _Condition] = {}
    problems = moving.get("problems") or ()
    for trigger, kind in ((handover.SCALE_DOWN, "ScaleDownBlocked"), (handover.FAILURE, "Degraded")):
        mine = [p for p in problems if p.get("trigger") == trigger]
        if mine:
            out[kind] = _Condition(kind, True, mine[0]["reason"], "; ".join(p["message"] for p in mine))
    going = [s for s in moving.get("sources") or () if s.get("phase") != handover.DONE]
    if going:
        text = "; ".join(
            f"{s['member']} ({s['trigger']}): {s['phase']}, {s.get('nodes', 0)} nodes with instances left, "
            f"{s.get('done', 0)} moved in Nova, {s.get('inFlight', 0)} in flight"
            + (f" (Job {s['job']})" if s.get("job") else "") + (f": {s['message']}" if s.get("message") else "")
            for s in going)
        out["Progressing"] = _Condition("Progressing", True, "HandingOver", text)
        out.setdefault("ScaleDownBlocked", _Condition("ScaleDownBlocked", False, "HandingOver", text))
    return out


def _conditions(facts: CycleFacts, nova: Mapping[str, Any], moving: Mapping[str, Any],
                mapping: Mapping[str, Any]) -> list[_Condition]:
    conditions = _base_conditions(facts, nova, mapping)
    if not facts.handover_enabled:
        return conditions
    override = _handover_conditions(facts, moving)
    out = []
    for condition in conditions:
        new = override.get(condition.type)
        if new is not None and condition.type == "ScaleDownBlocked" and condition.reason != "PinnedNodes":
            new = None  # Nova refusing a service deletion says more
        if new is not None and condition.type in ("Degraded", "Progressing") and condition.status and \
                condition.reason not in ("MisplacedNodes", "MembersChanging", "MemberFailing"):
            new = None  # an error of the cycle itself comes first
        out.append(new or condition)
    return out


def _base_conditions(facts: CycleFacts, nova: Mapping[str, Any], mapping: Mapping[str, Any]) -> list[_Condition]:
    """Ready, Progressing, Degraded, ScaleDownBlocked and Conflict, each from its own rules,
    first matching rule wins."""
    return [_ready(facts), _progressing(facts), _degraded(facts, nova, mapping), _scale_down_blocked(facts, nova),
            _conflict(facts)]


def _conflict(facts: CycleFacts) -> _Condition:
    if facts.conflict:
        return _Condition("Conflict", True, facts.conflict_reason, facts.conflict)
    return _Condition("Conflict", False, "NoOverlap", "no other pool selects these Ironic nodes")


def _scale_down_blocked(facts: CycleFacts, nova: Mapping[str, Any]) -> _Condition:
    plan = facts.plan
    if plan is not None and plan.scale_down_blocked:
        parts = ", ".join(f"{m} owns {n} pinned node{'s' if n != 1 else ''}"
                          for m, n in sorted(plan.scale_down_blocked.items()))
        total = sum(plan.scale_down_blocked.values())
        return _Condition(
            "ScaleDownBlocked", True, "PinnedNodes",
            f"{total} pinned node{'s' if total != 1 else ''} block scale-down ({parts}); "
            + ("the member stays until they are handed over" if facts.handover_enabled else
               "the member stays until they are freed, or set spec.handover (with a nova.conf that has "
               "database access in spec.handover.novaManageConfig) to hand them over to other members "
               "(docs/operating.md, Handing over nodes with instances)"))
    if refused := [w for w in nova.get("waiting") or () if nova_policy.REFUSED in w]:
        return _Condition("ScaleDownBlocked", True, "NovaServiceInUse",
                          "; ".join(refused) + f" (asked again every {nova_policy.REFUSAL_RETRY_SECONDS:.0f}s)")
    return _Condition("ScaleDownBlocked", False, "NotBlocked", "nothing blocks scaling")


def _degraded(facts: CycleFacts, nova: Mapping[str, Any], mapping: Mapping[str, Any]) -> _Condition:
    plan = facts.plan
    unmapped = host_mapping.degraded(mapping)
    troubled = [s for s in facts.states if s.phase in ("Fencing", "Replacing")]
    nova_enabled, findings = nova.get("state") == nova_policy.ENABLED, nova.get("findings") or {}
    if facts.error:
        return _Condition("Degraded", True, facts.error_reason, facts.error)
    if troubled:
        return _Condition("Degraded", True, "MemberFailing", _describe(troubled))
    if plan is not None and plan.counts.total and not plan.ring_members and plan.awaiting_nova:
        if unmapped is not None:
            return _Condition("Degraded", True, *unmapped)
        return _Condition("Degraded", False, "MembersAwaitingNova", _awaiting_nova(plan))
    if plan is not None and plan.counts.total and not plan.ring_members:
        return _no_ready_member(facts, plan)
    if plan is not None and plan.counts.misplaced:
        return _Condition("Degraded", True, "MisplacedNodes",
                          f"{plan.counts.misplaced} pinned nodes are owned by no member of "
                          "this pool; no compute serves them")
    if nova_enabled and findings.get(nova_policy.INCOMPLETE):
        return _Condition("Degraded", True, "HandoverIncomplete", str(nova.get("message", "")))
    if unmapped is not None:
        return _Condition("Degraded", True, *unmapped)
    if nova_enabled and any(findings.values()):
        return _Condition("Degraded", True, "NovaOutOfSync", str(nova.get("message", "")))
    if nova.get("state") == nova_policy.UNAVAILABLE:
        return _Condition("Degraded", True, "NovaUnavailable",
                          f"Nova is not answering: no forced_down during failover, no service "
                          f"cleanup, no audit until it does ({nova.get('message', '')})")
    return _Condition("Degraded", False, "AsExpected", "all members healthy")


def _progressing(facts: CycleFacts) -> _Condition:
    plan = facts.plan
    not_ready = [s for s in facts.states if s.phase != "Ready"]
    if facts.paused:
        return _Condition("Progressing", False, "Paused",
                          "spec.paused is true: no writes to Ironic or Kubernetes; status keeps reporting")
    if facts.conflict or facts.error:
        return _Condition("Progressing", False, "Blocked", facts.conflict or facts.error or "")
    if plan is not None and plan.counts.pending_moves:
        return _Condition("Progressing", True, "MovingNodes",
                          f"{plan.counts.pending_moves} nodes to move to their owner")
    if not_ready:
        return _Condition("Progressing", True, "MembersChanging", _describe(not_ready))
    if plan is not None and plan.desired_replicas == 0:
        return _Condition("Progressing", False, "Converged",
                          f"nothing to do: no member is wanted ({desired_reason(plan)})")
    return _Condition("Progressing", False, "Converged", "every node has a ready owner")


def _ready(facts: CycleFacts) -> _Condition:
    plan = facts.plan
    desired = plan.desired_replicas if plan is not None else None
    if facts.conflict:
        return _Condition("Ready", False, "Conflict", "this pool clashes with another and writes nothing")
    if facts.error:
        return _Condition("Ready", False, facts.error_reason, facts.error)
    if plan is not None and desired == 0 and plan.counts.total:
        return _Condition("Ready", False, "ScaledToZero", _scaled_to_zero(plan))
    if desired is not None and facts.pods_ready < desired:
        return _Condition("Ready", False, "MembersNotReady", f"{facts.pods_ready}/{desired} members ready")
    if plan is not None and plan.counts.pending_moves:
        return _Condition("Ready", False, "NodesPending",
                          f"{plan.counts.pending_moves} free nodes still to move to a ready member")
    if plan is not None and plan.awaiting_nova:
        return _Condition("Ready", False, "MembersAwaitingNova", _awaiting_nova(plan))
    return _Condition("Ready", True, "AllMembersReady",
                      f"{facts.pods_ready} members ready, every free node owned by a ready member")


def _awaiting_nova(plan: model.Plan) -> str:
    """What members kept out of the ring for Nova's sake wait for (status.hostMapping says more)."""
    return (f"{', '.join(plan.awaiting_nova)}: Ready, and given no node until Nova lists the nova-compute service "
            "and has mapped the host to a cell (status.hostMapping)")


def _scaled_to_zero(plan: model.Plan) -> str:
    counts = plan.counts
    pinned = f", {counts.pinned} of them pinned (an instance or work in progress)" if counts.pinned else ""
    return (f"no member is wanted ({desired_reason(plan)}): no nova-compute serves the pool's "
            f"{counts.total} Ironic node{'s' if counts.total != 1 else ''}{pinned}; they keep their shard "
            "and are served again once members run")


def _no_ready_member(facts: CycleFacts, plan: model.Plan) -> _Condition:
    """Degraded when the pool has nodes and no member in the ring. Not degraded when no member
    is wanted (ScaledToZero), nor while the members, none of which was ever ready, are being
    created or started within the normal start time (a new pool, or one scaled up from zero,
    is no news); degraded, with a Warning, once members that were ready are lost or the first
    start takes longer."""
    if plan.desired_replicas == 0:
        return _Condition("Degraded", False, "ScaledToZero", f"no member is wanted ({desired_reason(plan)})")
    never_ready = not any(m.ready or m.since is not None for m in facts.members)
    starting = all(s.phase in _STARTING for s in facts.states if s.phase != "Ready")
    timeout = f"failover.podPendingTimeoutSeconds, {facts.start_timeout_seconds:g}s"
    if never_ready and starting:
        created = facts.oldest_pod_created
        if created is None or facts.now - created < facts.start_timeout_seconds:
            return _Condition("Degraded", False, "MembersStarting",
                              "no member has been Ready yet and the members are starting: free nodes get an "
                              f"owner once one is Ready (Degraded if none is within {timeout}, of the first "
                              "member pod's creation)")
        return _Condition("Degraded", True, "NoReadyMember",
                          f"no member has become Ready within {timeout}, of the first member pod's creation: "
                          "free nodes wait for an owner; see the member pods' events and logs")
    return _Condition("Degraded", True, "NoReadyMember", "no member is ready: free nodes stay with their current owner")


# Member phases of a normal start (core/pods.py MemberState).
_STARTING = ("Creating", "Starting")


def _describe(states: Sequence[MemberState]) -> str:
    return "; ".join(f"{s.name}: {s.phase}" + (f" ({s.message})" if s.message else "") for s in states)


# Condition transitions worth an Event, and its type.
_EVENT_ON = {
    ("Ready", True): "Normal",
    ("Degraded", True): "Warning",
    ("ScaleDownBlocked", True): "Warning",
    ("ScaleDownBlocked", False): "Normal",
    ("Conflict", True): "Warning",
    ("Conflict", False): "Normal",
    ("Preflight", False): "Warning",
    ("Preflight", True): "Normal",
}


# The reason of a Preflight condition that passed with warnings (core/preflight.condition).
PREFLIGHT_WARNINGS = "PassedWithWarnings"

# Event reasons that are not <Type> / <Type>Cleared.
_EVENT_REASON = {("Preflight", False): "PreflightFailed", ("Preflight", True): "PreflightPassed"}


def _merge_conditions(
    conditions: Sequence[_Condition], previous: Sequence[Mapping[str, Any]], generation: int, now: float,
) -> tuple[list[dict[str, Any]], list[Event]]:
    before = {c.get("type"): c for c in previous}
    out, events = [], []
    for condition in conditions:
        status = "True" if condition.status else "False"
        old = before.get(condition.type)
        changed = old is None or old.get("status") != status
        out.append({
            "type": condition.type,
            "status": status,
            "reason": condition.reason,
            "message": condition.message,
            "lastTransitionTime": format_time(now) if changed else old.get("lastTransitionTime"),
            "observedGeneration": generation,
        })
        kind = _EVENT_ON.get((condition.type, condition.status))
        if condition.type == "Preflight" and condition.reason == PREFLIGHT_WARNINGS:
            # Warnings are news whenever they first show or change, at a pool's first check too.
            if old is None or (old.get("status"), old.get("reason"), old.get("message")) != \
                    (status, condition.reason, condition.message):
                events.append(Event("PreflightWarnings", condition.message, "Warning"))
            continue
        # A first report of a quiet condition (no old entry, status False) is not news.
        # Preflight is news when it first fails (its bad state is False), and when it passes again.
        if changed and kind and (old is not None or condition.status != (condition.type == "Preflight")):
            events.append(Event(reason=_EVENT_REASON.get((condition.type, condition.status))
                                or (f"{condition.type}{'' if condition.status else 'Cleared'}"
                                    if condition.type != "Ready" else "Ready"),
                                message=condition.message, type=kind))
    return out, events


def moves_event(moves: Sequence[model.Move], applied: int) -> Event | None:
    """One Event summarising a batch of shard moves written to Ironic (None: no batch)."""
    if not applied:
        return None
    return Event("MovedNodes", f"Set the Ironic shard of {applied} of {len(moves)} nodes ({spread(moves)})")


def spread(moves: Sequence[model.Move]) -> str:
    """Where moves go, for a human: '3 to pool-0, 2 to pool-1' (targets in name order)."""
    targets: dict[str, int] = {}
    for move in moves:
        targets[move.target] = targets.get(move.target, 0) + 1
    return ", ".join(f"{n} to {t}" for t, n in sorted(targets.items()))


