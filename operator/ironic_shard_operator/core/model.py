"""Typed observations and decisions shared by the pure core and the adapters.

Everything here is plain, immutable data: adapters build observations from what they
read (Ironic, Kubernetes, Nova), the planner turns observations into decisions, and the
shell carries decisions out. Nothing here does I/O.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

# Ironic provision states in which a node is busy or owned by a running workflow.
# A node in any of them is pinned, as is a node with any target_provision_state.
# Stable states ("enroll", "manageable", "available", "active" without an instance,
# "error", ...) leave a node free unless something else pins it.
TRANSITIONAL_PROVISION_STATES = frozenset({
    "verifying", "inspecting", "inspect wait",
    "cleaning", "clean wait", "clean hold",
    "deploying", "wait call-back", "deploy hold",
    "deleting", "rescuing", "rescue wait", "unrescuing",
    "adopting", "servicing", "service wait", "service hold",
})

# RFC 1123 label (what a pod name, a Nova host and an Ironic shard key all accept),
# with room for "-<ordinal>" inside Kubernetes' 63-character label-value limit.
POOL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")


def member_name(pool_name: str, ordinal: int) -> str:
    """The identity of a pool's member: pod name, Nova host and Ironic shard key at once."""
    return f"{pool_name}-{ordinal}"


def member_ordinal(pool_name: str, name: str) -> int | None:
    """The ordinal of `name` if it is one of `pool_name`'s member identities, else None."""
    prefix, _, ordinal = name.rpartition("-")
    if prefix != pool_name or not ordinal.isdigit() or (ordinal != "0" and ordinal.startswith("0")):
        return None
    return int(ordinal)


@dataclass(frozen=True, slots=True)
class Node:
    """One managed Ironic node, as much of it as ownership decisions need.

    `shard` is the node's owner (None: unassigned). `pinned` is computed once: a pinned
    node's owner is frozen (invariant 2, docs/invariants.md).
    """

    uuid: str
    shard: str | None = None
    instance_uuid: str | None = None
    provision_state: str | None = None
    target_provision_state: str | None = None
    reservation: str | None = None
    # A power action in progress (Ironic's target_power_state): the conductor holds the node's
    # lock meanwhile (`reservation`), so such a node is pinned already; it is mid-operation too.
    target_power_state: str | None = None
    pinned: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pinned", bool(
            self.instance_uuid
            or self.target_provision_state
            or self.reservation
            or self.provision_state in TRANSITIONAL_PROVISION_STATES
        ))


@dataclass(frozen=True, slots=True)
class PinnedCounts:
    """Per owner (a node's shard; None: unassigned): its pinned nodes, and how many of those
    carry an instance (a node with an instance is always pinned)."""

    pinned: Counter[str | None] = field(default_factory=Counter)
    with_instance: Counter[str | None] = field(default_factory=Counter)


def pinned_by_owner(nodes: Iterable[Node]) -> PinnedCounts:
    """The one count of pinned nodes per owner: the planner makes it (`Plan.owned`), and the
    handover's sources and destinations read it from there."""
    pinned: Counter[str | None] = Counter()
    with_instance: Counter[str | None] = Counter()
    for node in nodes:
        if node.pinned:
            pinned[node.shard] += 1
            if node.instance_uuid:
                with_instance[node.shard] += 1
    return PinnedCounts(pinned, with_instance)


@dataclass(frozen=True, slots=True)
class Member:
    """One member identity `<pool>-<ordinal>` and its readiness.

    `ready` is the pod's Ready condition now. `since` is when the member's readiness last
    changed (seconds since the epoch), or None when it has never been ready. It belongs to
    the identity, not the pod: a replacement pod that is not Ready yet keeps the time the
    old one lost readiness, so the rebalance grace runs from the failure.

    `counted_out` says why the member's failure is certain (core/fencing.py::counted_out_why),
    None while it is not: a counted-out member is past its grace at once, whatever `ready`
    and `since` say. Once set, it stays until the member's pod is Ready again (the failure it
    names does not end when the failed pod is forgotten). `kubernetes_node` is the Kubernetes
    node its pod runs on (or last ran on while it is counted out), None when unknown.
    """

    name: str
    ready: bool = False
    since: float | None = None
    counted_out: str | None = None
    kubernetes_node: str | None = None


@dataclass(frozen=True, slots=True)
class Autoscale:
    """Replicas follow the managed node count: ceil(nodes / max_nodes_per_member), bounded.
    A lower count applies once it has held for `scale_down_stabilization_seconds`."""

    min_replicas: int = 1
    max_replicas: int = 10
    max_nodes_per_member: int = 500
    scale_down_stabilization_seconds: float = 300.0


@dataclass(frozen=True, slots=True)
class AutoscalePeak:
    """A member count autoscale recommended earlier, above its recommendation now, and the
    last time it was wanted (a recommendation counts until the cycle that saw the next one)."""

    replicas: int
    last_wanted: float


@dataclass(frozen=True, slots=True)
class AutoscaleHistory:
    """What the scale-down stabilization keeps from one cycle to the next (status.autoscale):
    the last recommendation (None: none yet), and the peaks of the last window, oldest
    first, each higher than every later one and than the last recommendation."""

    recommendation: int | None = None
    peaks: tuple[AutoscalePeak, ...] = ()


@dataclass(frozen=True, slots=True)
class AutoscaleDecision:
    """How autoscale sized the pool in one plan (core/autoscale.py).

    `nodes` managed nodes call for `by_nodes` = ceil(nodes / max_nodes_per_member) members;
    `recommendation` is that count within [min_replicas, max_replicas]; `desired` is the
    member count the plan steers towards: the recommendation, or a higher peak of the
    stabilization window, which holds it until `held_until` (None: not held). `history` is
    what the next cycle needs.
    """

    settings: Autoscale
    nodes: int
    by_nodes: int
    recommendation: int
    desired: int
    history: AutoscaleHistory = AutoscaleHistory()
    held_until: float | None = None


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """What the planner needs of an IronicComputeShard's spec.

    `replicas` is the member count unless `autoscale` is set, which then decides it.
    `retire_first` (spec.retireMembers): members that go before the highest ordinals when the
    pool has more members than that count.
    """

    name: str
    replicas: int = 1
    autoscale: Autoscale | None = None
    rebalance_after_seconds: float = 120.0
    retire_first: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything the planner sees of one pool at one instant, and what autoscale kept from
    earlier cycles (`autoscale_history`, read back from the last status). `nodes` were listed
    in full at `nodes_observed_at` (None: at `now`); observation by need plans from an
    earlier listing that Ironic's cheap answers confirmed (core/observation.py).
    `awaiting_nova`: members Nova cannot schedule to yet (core/host_mapping.py::awaiting_nova),
    which stay out of the ring whatever their readiness."""

    spec: PoolSpec
    members: tuple[Member, ...]
    nodes: tuple[Node, ...]
    now: float
    autoscale_history: AutoscaleHistory = AutoscaleHistory()
    nodes_observed_at: float | None = None
    awaiting_nova: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True, order=True)
class Move:
    """Set `node_uuid`'s shard from `source` (None: unassigned) to `target`."""

    node_uuid: str
    source: str | None
    target: str


@dataclass(frozen=True, slots=True)
class MemberLoad:
    """A member's ownership once the plan's moves are applied: `pinned` of its `nodes` are
    pinned, `with_instance` of those carry an instance (Nova's: only a handover moves them)."""

    name: str
    nodes: int
    pinned: int
    in_ring: bool
    with_instance: int = 0


@dataclass(frozen=True, slots=True)
class NodeCounts:
    """The status summary of a pool's nodes (status.nodes, described in the CRD).

    `pending_moves` counts the plan's moves, `misplaced` the pinned nodes whose owner is
    no member of the pool (no compute of this pool serves them, and the ring may not
    move them). `observed_at`: when the nodes counted were listed in full (seconds since the
    epoch; None: unknown), so the counts are never presented as fresher than they are.
    """

    total: int = 0
    free: int = 0
    pinned: int = 0
    unassigned: int = 0
    pending_moves: int = 0
    misplaced: int = 0
    observed_at: float | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """The planner's decisions for one observation.

    `moves` are sorted by node uuid. `members_to_create` are new identities,
    `members_to_delete` retired identities that own no node any more, and
    `scale_down_blocked` maps a retiring member to the pinned nodes it still owns, and `busy`
    a retiring member to its nodes in the middle of an operation (uuid, provision state ->
    target), which its nova-compute may be driving: its pod stays until they settle.
    `autoscale` says how autoscale chose `desired_replicas`; None: spec.replicas did.
    `retiring`: every member chosen to retire (owning nodes or not), by ordinal. `owned`: the
    pinned nodes per owner in the observation planned from (`pinned_by_owner`).
    `awaiting_nova`: the members that count as ready and are not retiring but stay out of the
    ring because Nova cannot schedule to them yet (Observation.awaiting_nova).
    """

    desired_replicas: int
    ring_members: tuple[str, ...]
    moves: tuple[Move, ...]
    members_to_create: tuple[str, ...]
    members_to_delete: tuple[str, ...]
    scale_down_blocked: dict[str, int]
    loads: tuple[MemberLoad, ...]
    counts: NodeCounts
    autoscale: AutoscaleDecision | None = None
    busy: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    retiring: tuple[str, ...] = ()
    owned: PinnedCounts = field(default_factory=PinnedCounts)
    awaiting_nova: tuple[str, ...] = ()


def mid_operation(node: Node) -> str | None:
    """The provision state (with " -> target", if any) of a node in the middle of an operation:
    a transitional provision state, or any target state; or the power action in progress
    ("power -> target"). None for a node at rest. A lock alone is not an operation: conductors
    take and drop locks all the time."""
    if node.provision_state in TRANSITIONAL_PROVISION_STATES or node.target_provision_state:
        return f"{node.provision_state}" + (f" -> {node.target_provision_state}"
                                            if node.target_provision_state else "")
    if node.target_power_state:
        return f"power -> {node.target_power_state}"
    return None


@dataclass(frozen=True, slots=True)
class Selector:
    """Which Ironic nodes the pool manages; None matches every value."""

    conductor_group: str | None = None
    resource_class: str | None = None

    def overlaps(self, other: "Selector") -> bool:
        """True when some node could match both selectors."""
        return not (
            _differ(self.conductor_group, other.conductor_group)
            or _differ(self.resource_class, other.resource_class)
        )


def _differ(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a != b
