"""Fencing: when a member that stopped answering may be counted out, in one place. Pure.

Invariants: a member not Ready counts as ready for `failover.rebalanceAfterSeconds` (a restart
shuffles nothing) unless its failure is certain (`counted_out_why`); past its grace or counted
out, its Nova service is forced down; a pod on an unreachable Kubernetes node is forgotten only
as `failover.fencing.mode` allows (`fence_verdict`); the operator clears only the forced_down
flags a failure set (`clear_when_ready_after`). The rules in full: docs/design.md, "Fencing".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from ironic_shard_operator.core.model import Member
from ironic_shard_operator.core.nova_policy import ServiceRecord
from ironic_shard_operator.core.spec import Fencing

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"

# Restarts of a container in CrashLoopBackOff after which its failure is certain: the pod is
# replaced (elsewhere, with fresh volumes; core/pods.py) and its member counted out. Below
# it the kubelet's own restart is cheaper, and a restart is what the grace is for.
CRASH_LOOP_RESTARTS = 3


# --- the grace rule --------------------------------------------------------------------


def not_ready_for(member: Member, now: float, seconds: float) -> bool:
    """Not Ready, and lost readiness `seconds` ago or longer (a never-ready member: never)."""
    return not member.ready and member.since is not None and now - member.since >= seconds


def in_grace(member: Member, now: float, rebalance_after_seconds: float) -> bool:
    """Not ready, not counted out, and lost readiness less than `rebalance_after_seconds` ago (a
    never-ready member has none)."""
    return (not member.ready and member.counted_out is None and member.since is not None
            and now - member.since < rebalance_after_seconds)


def counts_as_ready(member: Member, now: float, rebalance_after_seconds: float) -> bool:
    """Not counted out, and Ready now or still within the grace (a restart shuffles nothing)."""
    return member.counted_out is None and (member.ready or in_grace(member, now, rebalance_after_seconds))


def past_grace(member: Member, now: float, rebalance_after_seconds: float) -> bool:
    """Counted out, or lost readiness `rebalance_after_seconds` ago or longer: the member no longer counts
    as ready, its service is forced down and its free nodes move."""
    return member.counted_out is not None or not_ready_for(member, now, rebalance_after_seconds)


def grace_left(member: Member, now: float, rebalance_after_seconds: float) -> float | None:
    """Seconds until the grace of a member within it ends (it then stops counting as ready);
    None for a member that is not within a grace (ready, never ready, or past it)."""
    if member.since is None or not in_grace(member, now, rebalance_after_seconds):
        return None
    return member.since + rebalance_after_seconds - now


def grace_ends_within(members: Iterable[Member], now: float, rebalance_after_seconds: float, seconds: float) -> bool:
    """Whether the grace of a member within one ends in `seconds` or less: a read that long,
    started now, would stand between that member's failure and its free nodes' move."""
    return any(left is not None and left <= seconds
               for left in (grace_left(member, now, rebalance_after_seconds) for member in members))


# --- the fence verdict -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeView:
    """A Kubernetes node as fencing sees it.

    `reachable` is False when the node's kubelet stopped reporting (Ready=Unknown or the
    unreachable taint): then nobody can confirm that a pod on it has stopped.
    """

    name: str
    reachable: bool = True
    unreachable_since: float | None = None
    out_of_service: bool = False


class FencedPod(Protocol):
    """What the verdict needs of a member pod (pods.PodView has these)."""

    @property
    def member(self) -> str: ...
    @property
    def node_name(self) -> str | None: ...
    @property
    def ready(self) -> bool: ...
    @property
    def deleting(self) -> bool: ...
    @property
    def deletion_since(self) -> float | None: ...
    @property
    def crash_looping(self) -> bool: ...
    @property
    def restarts(self) -> int: ...


class FenceAction(enum.Enum):
    """WAIT: leave the pod be. DELETE: delete it gracefully (its kubelet confirms the stop).
    FORCE: forget it (grace period 0) without its kubelet's word."""

    WAIT = "Wait"
    DELETE = "Delete"
    FORCE = "Force"


@dataclass(frozen=True, slots=True)
class FenceVerdict:
    """What to do with a member pod on a Node, and how its member's state reads meanwhile.

    `phase` and `message` are the member's status (Terminating, Replacing or Fencing); `event`
    the message of the Event posted once a deletion was accepted; `wake_after` the seconds
    after which the verdict changes by itself (ForceAfter), so the next cycle runs then.
    """

    action: FenceAction
    phase: str
    message: str
    event: str = ""
    wake_after: float | None = None


def fence_verdict(pod: FencedPod, nodes: Mapping[str, NodeView], fencing: Fencing,
                  now: float) -> FenceVerdict | None:
    """The verdict for `pod`; None when fencing has nothing to say (not being deleted, and Ready
    or on a reachable node, or on none). A node absent from `nodes` counts as unreachable.

    Invariant: FORCE only where `fencing.mode` allows it (never with Wait; with
    OutOfServiceTaint only once the taint is on the node; with ForceAfter only N seconds
    after the node went away), and only for a pod already being deleted on a lost node.
    """
    member, node_name = pod.member, pod.node_name
    node = nodes.get(node_name) if node_name else None
    lost = bool(node_name) and (node is None or not node.reachable)
    if not pod.deleting:
        if not lost or pod.ready:
            return None
        return FenceVerdict(
            FenceAction.DELETE, "Replacing", f"node {node_name} is unreachable",
            event=f"Deleting pod {member}: its Kubernetes node {node_name} is unreachable; "
                  f"fencing mode {fencing.mode} decides when it is forgotten")
    if not lost:
        return FenceVerdict(FenceAction.WAIT, "Terminating",
                            f"waiting for pod {member} to be gone before recreating it")
    return _on_lost_node(pod, node, fencing, now)


def _on_lost_node(pod: FencedPod, node: NodeView | None, fencing: Fencing, now: float) -> FenceVerdict:
    """A pod being deleted on an unreachable node: forget it when the mode allows, else wait."""
    member, node_name = pod.member, pod.node_name
    if fencing.mode == "OutOfServiceTaint" and node is not None and node.out_of_service:
        return FenceVerdict(
            FenceAction.FORCE, "Fencing", f"node {node_name} is out of service",
            event=f"Forgetting pod {member}: node {node_name} carries the "
                  f"{OUT_OF_SERVICE_TAINT} taint (fencing mode OutOfServiceTaint)")
    if fencing.mode == "ForceAfter" and fencing.force_after_seconds is not None:
        gone_since = (node.unreachable_since if node is not None else None) or pod.deletion_since or now
        due = gone_since + fencing.force_after_seconds
        if now >= due:
            return FenceVerdict(
                FenceAction.FORCE, "Fencing", f"force-deleted after {fencing.force_after_seconds:g}s",
                event=f"Force-deleting pod {member}: node {node_name} unreachable for more "
                      f"than {fencing.force_after_seconds:g}s (fencing mode ForceAfter)")
        return FenceVerdict(FenceAction.WAIT, "Fencing",
                            f"node {node_name} unreachable; force-delete in {due - now:.0f}s",
                            wake_after=due - now)
    wait_for = {
        "Wait": "the node to come back or an administrator to delete the pod",
        "OutOfServiceTaint": f"the {OUT_OF_SERVICE_TAINT} taint on the node",
        "ForceAfter": "the node to come back",
    }[fencing.mode]
    return FenceVerdict(FenceAction.WAIT, "Fencing",
                        f"node {node_name} unreachable; waiting for {wait_for} (fencing mode {fencing.mode})")


# --- counted out: certain failures ------------------------------------------------------


def crash_looped(pod: FencedPod) -> bool:
    """A pod that is not Ready and whose container is in CrashLoopBackOff after
    CRASH_LOOP_RESTARTS restarts or more: its failure is certain (it is replaced)."""
    return pod.crash_looping and pod.restarts >= CRASH_LOOP_RESTARTS and not pod.ready


def counted_out_why(pod: FencedPod | None, nodes: Mapping[str, NodeView], fencing: Fencing, now: float,
                    *, fenced: bool = False, last_node: str | None = None) -> str | None:
    """Why a member's failure is certain, so that it is counted out at once; None when it is
    not (a Ready pod, or not Ready with nothing else known: the grace decides).

    `pod` is the member's pod (None: gone); `last_node` the Kubernetes node its pod ran on at
    the last status (a pod the garbage collector removed from a node declared gone leaves no
    other trace); `nodes` the Kubernetes nodes read for members that are not Ready (both), a
    node absent from it was not found (deleted); `fenced`: the member is in spec.fencedMembers.
    Invariant: a Ready pod that is not being deleted is never counted out, unless an
    administrator fenced its member; a pod on a merely unreachable node (NotReady, the
    unreachable taint) is not either: only the fencing mode may forget it.
    """
    if fenced:
        return "fenced by spec.fencedMembers"
    if pod is not None and pod.ready and not pod.deleting:
        return None
    if pod is not None and crash_looped(pod):
        return f"its container crash-loops ({pod.restarts} restarts)"
    for name in dict.fromkeys(n for n in (pod.node_name if pod is not None else None, last_node) if n):
        node = nodes.get(name)
        if node is None:
            return f"its Kubernetes node {name} was deleted"
        if node.out_of_service:
            return f"its Kubernetes node {name} carries the {OUT_OF_SERVICE_TAINT} taint"
    if pod is None:
        return None
    verdict = fence_verdict(pod, nodes, fencing, now)
    if verdict is not None and verdict.action is FenceAction.FORCE:
        return f"its pod is provably gone ({verdict.message})"
    return None


# --- forced_down -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ForcedDownChange:
    """Set (`forced_down` True) or clear the flag on `service`, the service of `member`."""

    member: str
    service: ServiceRecord
    forced_down: bool
    message: str


def forced_down_changes(members: Iterable[Member], services: Mapping[str, ServiceRecord],
                        rebalance_after_seconds: float, now: float,
                        clear_when_ready: AbstractSet[str],
                        held: AbstractSet[str] = frozenset()) -> tuple[ForcedDownChange, ...]:
    """The forced_down writes one cycle needs, at most one per member.

    A member past its grace (lost readiness `rebalance_after_seconds` ago or longer, or counted out:
    at once) gets its service forced down; a ready member that is not counted out has its
    forced-down service cleared if the member is in
    `clear_when_ready` (its flag belongs to a failure: `clear_when_ready_after`) and is not
    `held` by a handover (core/handover.py::holds: nodes of it are in flight, and nova-manage
    needs its source forced down), and left as it is otherwise. A member that was never
    ready, or has no service, needs nothing. Applying the changes leaves none to decide.
    """
    changes = []
    for member in members:
        service = services.get(member.name)
        if service is None:
            continue
        if past_grace(member, now, rebalance_after_seconds):
            if not service.forced_down:
                why = _forced_why(member, now, rebalance_after_seconds)
                changes.append(ForcedDownChange(member.name, service, True, why))
        elif member.ready and service.forced_down:
            if member.name in clear_when_ready and member.name not in held:
                changes.append(ForcedDownChange(
                    member.name, service, False,
                    f"Cleared forced_down of Nova compute service {member.name}: the member is ready again"))
    return tuple(changes)


def _forced_why(member: Member, now: float, rebalance_after_seconds: float) -> str:
    """The message of forcing a member's service down: counted out (at once), or past its grace."""
    if member.counted_out is not None:
        return (f"Forced Nova compute service {member.name} down at once: the member is counted out "
                f"({member.counted_out}), without waiting for failover.rebalanceAfterSeconds")
    return (f"Forced Nova compute service {member.name} down: the member has not been "
            f"ready for {now - (member.since or now):.0f}s (failover.rebalanceAfterSeconds "
            f"{rebalance_after_seconds:g})")


def clear_when_ready_after(recorded: Iterable[str], members: Iterable[Member],
                           services: Mapping[str, ServiceRecord]) -> frozenset[str]:
    """The members whose forced_down flag the operator clears once they are ready again.

    A flag seen while its member is not ready belongs to a failure (the operator's own, a
    handover's, or an administrator's during a failover) and joins; it stays recorded until
    the flag is gone or the service is. A flag first seen on a ready member never joins, so
    an administrator's forced_down on a healthy member survives every cycle. Members this
    cycle does not list keep their record while their service is forced down.
    """
    known = {m.name for m in members if not m.ready or m.counted_out is not None} | set(recorded)
    return frozenset(name for name, service in services.items() if service.forced_down and name in known)


def clear_when_ready_written(clear_when_ready: AbstractSet[str], changes: Iterable[ForcedDownChange],
                             forced_now: AbstractSet[str]) -> frozenset[str]:
    """The record to keep once the cycle's writes are done: a flag the operator set itself
    belongs to a failure from its first cycle (the member may be ready again before the next
    one); only flags still set stay (`forced_now`: the hosts forced down after the writes)."""
    return frozenset((set(clear_when_ready) | {c.member for c in changes if c.forced_down}) & forced_now)

