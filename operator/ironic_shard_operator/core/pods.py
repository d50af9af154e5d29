"""Pure member/pod lifecycle: observed pods and Kubernetes nodes in, pod actions out.

A member is one identity `<pool>-<ordinal>`; its pod has exactly that name. Kubernetes
refuses a second object with a name that exists, so as long as the operator only creates
a member's pod when no pod object of that name exists, and only forgets (force-deletes)
a pod whose process is provably stopped or whose fencing policy allows it, there are
never two live pods with one identity (invariant 5, docs/invariants.md). Every decision here keeps that:

- a missing pod is created; a pod being deleted is waited for, never replaced early;
- a pod that Failed, was evicted, is in a crash loop, or stayed Pending too long is
  deleted (gracefully); its replacement follows once the old object is gone;
- a pod on an unreachable Kubernetes node is deleted gracefully, then forgotten only per
  `failover.fencing.mode`, as the fence verdict says (fencing.py);
- a pod whose config hash is stale is rolled, one member at a time, and only while every
  other member is Ready (so a roll never takes two members down at once).

Nothing here does I/O: `decide()` returns data; kube.py carries it out. Every pod action
carries its kind (`PodActionKind`), which metrics count by; its Event reason is what users see.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar, Iterable, Mapping

from ironic_shard_operator.core import model
from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.fencing import (
    OUT_OF_SERVICE_TAINT, UNREACHABLE_TAINT, FenceAction, FenceVerdict, NodeView, crash_looped, fence_verdict,
)
from ironic_shard_operator.core.podspec import CONFIG_HASH, MEMBER_LABEL
from ironic_shard_operator.core.spec import Failover


# --- observations ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodView:
    """What lifecycle decisions need of one member pod. Times are seconds since epoch."""

    name: str
    member: str
    uid: str
    phase: str = "Pending"
    reason: str | None = None  # status.reason, e.g. "Evicted"
    ready: bool = False
    ready_since: float | None = None  # lastTransitionTime of the Ready condition
    created: float | None = None
    deleting: bool = False
    deletion_since: float | None = None
    node_name: str | None = None
    crash_looping: bool = False
    restarts: int = 0
    config_hash: str | None = None


def parse_time(value: str | None) -> float | None:
    """RFC 3339 (as the Kubernetes API writes it) -> seconds since the epoch."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def read_pod(pod: Mapping[str, Any]) -> PodView:
    """A PodView of a pod object as the API returns it."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    ready_condition = next(
        (c for c in status.get("conditions") or () if c.get("type") == "Ready"), {}
    )
    containers = status.get("containerStatuses") or ()
    return PodView(
        name=meta.get("name", ""),
        member=(meta.get("labels") or {}).get(MEMBER_LABEL) or meta.get("name", ""),
        uid=meta.get("uid", ""),
        phase=status.get("phase") or "Pending",
        reason=status.get("reason"),
        ready=ready_condition.get("status") == "True",
        ready_since=parse_time(ready_condition.get("lastTransitionTime")),
        created=parse_time(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        deletion_since=parse_time(meta.get("deletionTimestamp")),
        node_name=(pod.get("spec") or {}).get("nodeName"),
        crash_looping=any(
            ((c.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"
            for c in containers
        ),
        restarts=max((int(c.get("restartCount") or 0) for c in containers), default=0),
        config_hash=(meta.get("annotations") or {}).get(CONFIG_HASH),
    )


def read_node(node: Mapping[str, Any]) -> NodeView:
    """A NodeView of a node object as the API returns it."""
    status = node.get("status") or {}
    taints = (node.get("spec") or {}).get("taints") or ()
    ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
    unreachable_taint = next((t for t in taints if t.get("key") == UNREACHABLE_TAINT), None)
    unreachable = unreachable_taint is not None or ready.get("status") == "Unknown"
    since = None
    if unreachable:
        since = parse_time((unreachable_taint or {}).get("timeAdded")) or parse_time(
            ready.get("lastTransitionTime"))
    return NodeView(
        name=(node.get("metadata") or {}).get("name", ""),
        reachable=not unreachable,
        unreachable_since=since,
        out_of_service=any(t.get("key") == OUT_OF_SERVICE_TAINT for t in taints),
    )


def member_readiness(
    name: str, pod: PodView | None, previous: model.Member | None, now: float, counted_out: str | None = None
) -> model.Member:
    """The member's readiness for the ring, with `since` = when it last changed.

    A pod being deleted counts as not ready. `since` survives pod replacement: it is
    carried over from `previous` (the last status) while readiness is unchanged, so a
    crash-looping replacement cannot keep restarting the rebalance grace period.
    `counted_out` (fencing.counted_out_why, this cycle) is kept from `previous` while the
    member is not ready, so a certain failure stays counted once its pod is forgotten and
    until a pod of the member is Ready again.
    """
    ready = pod is not None and pod.ready and not pod.deleting
    if not ready and counted_out is None and previous is not None:
        counted_out = previous.counted_out
    node = pod.node_name if pod is not None and pod.node_name else None
    if node is None and counted_out is not None and previous is not None:
        node = previous.kubernetes_node
    return replace(_readiness(name, ready, pod, previous, now), counted_out=counted_out, kubernetes_node=node)


def _readiness(name: str, ready: bool, pod: PodView | None, previous: model.Member | None,
               now: float) -> model.Member:
    """`ready` and when it last changed (member_readiness)."""
    if previous is not None and previous.ready == ready:
        return model.Member(name=name, ready=ready, since=previous.since)
    if ready:
        return model.Member(name=name, ready=True, since=min(pod.ready_since or now, now))
    if previous is None:
        return model.Member(name=name, ready=False, since=None)  # never seen ready
    lost = pod.ready_since if pod is not None and not pod.deleting and pod.ready_since else now
    return model.Member(name=name, ready=False, since=min(lost, now))


# --- decisions -------------------------------------------------------------------------


class PodActionKind(enum.Enum):
    """Why a member pod is created or deleted.

    CREATE: a kept member has no pod. REPLACE: its pod failed, was evicted, crash-loops,
    stayed Pending too long, or its node is unreachable (deleted gracefully; the new pod
    follows once it is gone). FENCE: a pod on a lost node is forgotten (force-deleted) as
    the fencing mode allows. ROLL: a stale pod restarts with the new configuration.
    SCALE_DOWN: a retired member's pod goes. HANDOVER: a member whose nodes with instances are
    handed over (core/handover.py) has its pod stopped, and none created meanwhile. STOP: a
    member an administrator fenced (spec.fencedMembers, `kubectl ics fence`) has its pod
    stopped, and none created until it is unfenced.
    """

    CREATE = "Create"
    REPLACE = "Replace"
    FENCE = "Fence"
    ROLL = "Roll"
    SCALE_DOWN = "ScaleDown"
    HANDOVER = "Handover"
    STOP = "Stop"


@dataclass(frozen=True, slots=True)
class CreatePod:
    """Create `member`'s pod; `event` is posted once it was created."""

    kind: ClassVar[PodActionKind] = PodActionKind.CREATE
    member: str
    event: Event | None = None


@dataclass(frozen=True, slots=True)
class DeletePod:
    """Delete `member`'s pod, only if it is still the object with `uid`.

    `force` (grace period 0) is used only to fence (`kind` FENCE), where fencing allows it:
    the API then forgets the pod without waiting for its kubelet to confirm that the
    process stopped. `event` (its reason is `reason`) is posted once the deletion was accepted.
    """

    member: str
    uid: str
    reason: str
    kind: PodActionKind
    force: bool = False
    event: Event | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class MemberState:
    """A member's phase for status.members[].phase, and a sentence explaining it."""

    name: str
    phase: str  # Ready, Starting, Creating, Replacing, Terminating, Fencing, Rolling, Retiring, Fenced
    message: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """The pod actions of one cycle. Apply `configmaps` before `creates`.

    `events` are posted whatever happens; an action's own event only once it succeeded.

    `wake_after` is the number of seconds after which a time-based decision (pending
    timeout, ForceAfter) falls due, so the caller can run the next cycle then.
    """

    configmaps: tuple[str, ...] = ()  # members whose ConfigMap must be written
    creates: tuple[CreatePod, ...] = ()
    deletes: tuple[DeletePod, ...] = ()
    configmap_deletes: tuple[str, ...] = ()
    events: tuple[Event, ...] = ()
    states: tuple[MemberState, ...] = ()
    wake_after: float | None = None

    @property
    def writes(self) -> int:
        return len(self.configmaps) + len(self.creates) + len(self.deletes) + len(self.configmap_deletes)


@dataclass
class _Builder:
    configmaps: list[str] = field(default_factory=list)
    creates: list[CreatePod] = field(default_factory=list)
    deletes: list[DeletePod] = field(default_factory=list)
    configmap_deletes: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    states: list[MemberState] = field(default_factory=list)
    wake_after: float | None = None

    def wake(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.wake_after = seconds if self.wake_after is None else min(self.wake_after, seconds)

    def delete(self, pod: PodView, reason: str, message: str, *, kind: PodActionKind,
               warning: bool = True) -> None:
        """Delete `pod` gracefully, or with FENCE forget it (force)."""
        self.deletes.append(DeletePod(member=pod.member, uid=pod.uid, reason=reason, kind=kind,
                                      force=kind is PodActionKind.FENCE,
                                      event=Event(reason, message, "Warning" if warning else "Normal")))

    def build(self) -> Decision:
        return Decision(
            configmaps=tuple(self.configmaps), creates=tuple(self.creates),
            deletes=tuple(self.deletes), configmap_deletes=tuple(self.configmap_deletes),
            events=tuple(self.events), states=tuple(self.states), wake_after=self.wake_after,
        )


def decide(
    *,
    keep: Iterable[str],
    retire: Iterable[str],
    pods: Mapping[str, PodView],
    nodes: Mapping[str, NodeView],
    configmaps_current: Mapping[str, bool],
    wanted_hash: Mapping[str, str],
    failover: Failover,
    now: float,
    stop: Iterable[str] = (),
    fenced: Iterable[str] = (),
    held_why: Mapping[str, str] | None = None,
) -> Decision:
    """Pod actions that move the pool's pods toward one healthy pod per kept member.

    `keep`: members that must run (existing and new), in ordinal order. `retire`: members
    whose pod and ConfigMap must go (the planner found they own nothing). `pods`: the
    pool's pods by member. `nodes`: the Kubernetes nodes of pods that are not Ready (a node
    absent from the mapping is treated as unreachable). `configmaps_current`: member ->
    whether its ConfigMap exists with the wanted content. `wanted_hash`: member -> the
    config hash its pod should carry. `stop`: members (not in `keep`) whose pod must be gone
    while their nodes with instances are handed over: deleted if there, never created; their
    ConfigMap stays. `fenced`: members (not in `keep`) an administrator took out of service
    (spec.fencedMembers): the same, phase Fenced. `held_why`: why a member of `stop` is kept
    from its pod, for its state's message.
    """
    out = _Builder()
    unsettled, roll_candidates = _look_after(list(keep), pods, nodes, configmaps_current, wanted_hash,
                                             failover, now, out)
    _roll(roll_candidates, unsettled, out)
    _keep_away(stop, fenced, held_why or {}, pods, nodes, failover, now, out)
    _retire(retire, pods, nodes, failover, now, out)
    return out.build()


def _look_after(keep: list[str], pods: Mapping[str, PodView], nodes: Mapping[str, NodeView],
                configmaps_current: Mapping[str, bool], wanted_hash: Mapping[str, str], failover: Failover,
                now: float, out: _Builder) -> tuple[bool, list[PodView]]:
    """Each kept member's ConfigMap and pod: created when missing, replaced or fenced when
    failed (`_handle_pod`). Returns whether some kept member is not a Ready, current pod (which
    holds rolling back) and the pods whose config hash is not the wanted one."""
    unsettled = False
    roll_candidates: list[PodView] = []
    for member in keep:
        if not configmaps_current.get(member, False):
            out.configmaps.append(member)
        pod = pods.get(member)
        if pod is None:
            out.creates.append(CreatePod(member, Event("CreatedPod", f"Created pod {member} (member {member})")))
            out.states.append(MemberState(member, "Creating", "pod is being created"))
            unsettled = True
            continue
        state = _handle_pod(pod, nodes, failover, now, out)
        if state is not None:
            out.states.append(state)
            unsettled = True
            continue
        if pod.config_hash != wanted_hash.get(member):
            roll_candidates.append(pod)
        if not pod.ready:
            unsettled = True
            out.states.append(MemberState(member, "Starting", _starting_message(pod)))
        else:
            out.states.append(MemberState(member, "Ready", "pod is Ready"))
    return unsettled, roll_candidates


def _keep_away(stop: Iterable[str], fenced: Iterable[str], held_why: Mapping[str, str],
               pods: Mapping[str, PodView], nodes: Mapping[str, NodeView], failover: Failover, now: float,
               out: _Builder) -> None:
    """Members held by a handover (`stop`) and fenced ones: their pod deleted if there, never
    created; their ConfigMap stays."""
    for member in stop:
        why = held_why.get(member)
        _stop(pods.get(member), member, "HandingOver", nodes, failover, now, out,
              gone=f"no pod while held: {why}" if why else "pod gone; its nodes with instances are handed over",
              waiting="waiting for the pod to be gone",
              deleting="pod is being deleted (handover)", reason="HandoverStoppingPod", kind=PodActionKind.HANDOVER,
              event=f"Deleting pod {member}: its nodes with instances are handed over to other members "
                    "(its pod must be gone first)")
    for member in fenced:
        _stop(pods.get(member), member, "Fenced", nodes, failover, now, out,
              gone="no pod: fenced by spec.fencedMembers (kubectl ics unfence starts it again)",
              waiting="waiting for the pod to be gone (spec.fencedMembers)",
              deleting="pod is being deleted (spec.fencedMembers)", reason="StoppingFencedMember",
              kind=PodActionKind.STOP,
              event=f"Deleting pod {member}: fenced by spec.fencedMembers; no pod is created for it until it is "
                    "unfenced")


def _retire(retire: Iterable[str], pods: Mapping[str, PodView], nodes: Mapping[str, NodeView],
            failover: Failover, now: float, out: _Builder) -> None:
    """Members scale-down removes: the pod deleted first, the ConfigMap once the pod is gone."""
    for member in retire:
        pod = pods.get(member)
        if pod is None:
            out.configmap_deletes.append(member)
            out.events.append(Event("MemberRemoved", f"Member {member} removed by scale-down"))
            continue
        if pod.deleting:
            verdict = fence_verdict(pod, nodes, failover.fencing, now)
            out.states.append(_fence(pod, verdict, out) if verdict is not None else
                              MemberState(member, "Retiring", "waiting for the pod to be gone"))
        else:
            out.delete(pod, "ScalingDown",
                       f"Deleting pod {member}: scale-down, it owns no Ironic node any more",
                       kind=PodActionKind.SCALE_DOWN, warning=False)
            out.states.append(MemberState(member, "Retiring", "pod is being deleted (scale-down)"))


def _stop(pod: PodView | None, member: str, phase: str, nodes: Mapping[str, NodeView], failover: Failover,
          now: float, out: _Builder, *, gone: str, waiting: str, deleting: str, reason: str, kind: PodActionKind,
          event: str) -> None:
    """A member that must have no pod (`phase` says why): its pod deleted gracefully if there,
    fenced as the verdict says while it is being deleted on a lost node, never created."""
    if pod is None:
        out.states.append(MemberState(member, phase, gone))
    elif pod.deleting:
        verdict = fence_verdict(pod, nodes, failover.fencing, now)
        out.states.append(_fence(pod, verdict, out) if verdict is not None else MemberState(member, phase, waiting))
    else:
        out.delete(pod, reason, event, kind=kind, warning=False)
        out.states.append(MemberState(member, phase, deleting))


def _handle_pod(pod: PodView, nodes: Mapping[str, NodeView], failover: Failover, now: float,
                out: _Builder) -> MemberState | None:
    """Replace or fence a kept member's pod if it needs it; None when the pod is fine."""
    member = pod.member
    verdict = fence_verdict(pod, nodes, failover.fencing, now)
    if verdict is not None:
        return _fence(pod, verdict, out)
    if pod.phase in ("Failed", "Succeeded"):
        why = pod.reason or pod.phase.lower()
        what = "was evicted" if pod.reason == "Evicted" else f"ended ({why})"
        out.delete(pod, "ReplacingPod",
                   f"Replacing pod {member}: it {what}; "
                   "a new pod with the same name follows once it is gone",
                   kind=PodActionKind.REPLACE)
        return MemberState(member, "Replacing", f"pod {pod.phase} ({why})")
    if crash_looped(pod):
        out.delete(pod, "ReplacingPod",
                   f"Replacing pod {member}: crash loop after {pod.restarts} restarts",
                   kind=PodActionKind.REPLACE)
        return MemberState(member, "Replacing", f"crash loop ({pod.restarts} restarts)")
    if pod.phase == "Pending" and pod.created is not None:
        due = pod.created + failover.pod_pending_timeout_seconds
        if now >= due:
            out.delete(pod, "ReplacingPod",
                       f"Replacing pod {member}: Pending for more than "
                       f"{failover.pod_pending_timeout_seconds:g}s",
                       kind=PodActionKind.REPLACE)
            return MemberState(member, "Replacing", "stuck Pending")
        out.wake(due - now)
    return None


# The pod action that follows a fence verdict, by its action: (Event reason, kind).
_FENCE_DELETES = {
    FenceAction.DELETE: ("NodeUnreachable", PodActionKind.REPLACE),
    FenceAction.FORCE: ("FencedPod", PodActionKind.FENCE),
}


def _fence(pod: PodView, verdict: FenceVerdict, out: _Builder) -> MemberState:
    """Carry out a fence verdict on `pod` (fencing.py decides); the member's state meanwhile."""
    if verdict.action in _FENCE_DELETES:
        reason, kind = _FENCE_DELETES[verdict.action]
        out.delete(pod, reason, verdict.event, kind=kind)
    if verdict.wake_after is not None:
        out.wake(verdict.wake_after)
    return MemberState(pod.member, verdict.phase, verdict.message)


def _roll(candidates: list[PodView], unsettled: bool, out: _Builder) -> None:
    """Delete at most one stale pod: a not-Ready one first, a Ready one only when all settled."""
    if not candidates or out.deletes or out.creates:
        return
    not_ready = [p for p in candidates if not p.ready]
    if not_ready:
        pick = not_ready[0]
    elif not unsettled:
        pick = candidates[0]
    else:
        return
    out.delete(pick, "RollingUpdate",
               f"Restarting pod {pick.member} with the new configuration (one member at a time)",
               kind=PodActionKind.ROLL, warning=False)
    out.states[:] = [
        MemberState(s.name, "Rolling", "restarting with the new configuration") if s.name == pick.member else s
        for s in out.states
    ]


def _starting_message(pod: PodView) -> str:
    if pod.phase == "Pending":
        return "pod is Pending" + (f" on {pod.node_name}" if pod.node_name else " (not scheduled)")
    if pod.crash_looping:
        return f"container in CrashLoopBackOff ({pod.restarts} restarts)"
    return f"pod is {pod.phase}, not Ready"
