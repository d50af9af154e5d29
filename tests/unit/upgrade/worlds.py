"""The pools the upgrade test's statuses were recorded in (tests/unit/upgrade/record.py) and
the decisions are asked again in (tests/unit/test_upgrade_memory.py): plain data, built only
from classes both operator versions share (Member, Node, JobView, ComputeService, the spec)."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from ironic_shard_operator.adapters.nova import ComputeService
from ironic_shard_operator.core.handover import JobView
from ironic_shard_operator.core.model import Autoscale, Member, Node, PoolSpec
from ironic_shard_operator.core.refusals import refused
from ironic_shard_operator.core.shard_write import GuardHold
from ironic_shard_operator.core.spec import Handover, SecretKeyRef

POOL = "rack"
NOW = 1_800_000_000.0
GRACE = 120.0
AFTER_FAILURE = 600.0
HANDOVER = Handover(SecretKeyRef("nova-manage", "nova.conf"), after_failure_seconds=AFTER_FAILURE, max_concurrent=2)
LEAKED_AFTER = 600.0
POLL = 30.0


def m(i: int) -> str:
    return f"{POOL}-{i}"


# What the recorded statuses report, and what the next cycle meets again.
QUOTA = 'pods "rack-0" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2'
REFUSALS = (refused("create", "Pod", m(0), 403, QUOTA, "member rack-0 has no pod until this is fixed"),
            refused("create", "Pod", m(1), 403, QUOTA, "member rack-1 has no pod until this is fixed"))
HELD = (GuardHold("n00", ("build-1",)),)


def service(host: str, *, forced_down: bool = False) -> ComputeService:
    return ComputeService(id=f"id-{host}", host=host, up=not forced_down, enabled=True, forced_down=forced_down)


@dataclass(frozen=True)
class World:
    """One pool at one instant: its spec, members (readiness), member pods, Ironic's nodes,
    Nova's services and where Nova lists each node, at `now`."""

    spec: PoolSpec
    members: tuple[Member, ...]
    pods: tuple[str, ...]
    nodes: tuple[Node, ...]
    services: dict
    compute_host: dict
    now: float


def _nodes(free: dict[str, int], with_instance: dict[str, int]) -> tuple[Node, ...]:
    nodes, i = [], 0
    for owner, count in free.items():
        for _ in range(count):
            nodes.append(Node(f"n{i:02d}", shard=owner, provision_state="available"))
            i += 1
    for owner, count in with_instance.items():
        for _ in range(count):
            nodes.append(Node(f"n{i:02d}", shard=owner, instance_uuid=f"i-{i:02d}", provision_state="active"))
            i += 1
    return tuple(nodes)


def mid_retire(now: float = NOW) -> World:
    """replicas 3 -> 2: rack-2 retires with 4 nodes carrying instances, its free nodes gone,
    its pod deleted and its service forced down."""
    nodes = _nodes({m(0): 4, m(1): 4}, {m(2): 4})
    return World(PoolSpec(POOL, replicas=2, rebalance_after_seconds=GRACE),
                 (Member(m(0), True, NOW - 3600), Member(m(1), True, NOW - 3600), Member(m(2), False, NOW - 100)),
                 (m(0), m(1)), nodes,
                 {m(0): service(m(0)), m(1): service(m(1)), m(2): service(m(2), forced_down=True)},
                 {n.uuid: n.shard for n in nodes}, now)


def mid_failure(now: float = NOW) -> World:
    """rack-1 failed past afterFailureSeconds, its pod gone, its service forced down; its free
    nodes already moved, its 3 nodes with instances wait for a handover."""
    nodes = _nodes({m(0): 6, m(2): 6}, {m(1): 3})
    return World(PoolSpec(POOL, replicas=3, rebalance_after_seconds=GRACE),
                 (Member(m(0), True, NOW - 3600), Member(m(1), False, NOW - AFTER_FAILURE - 400),
                  Member(m(2), True, NOW - 3600)),
                 (m(0), m(2)), nodes,
                 {m(0): service(m(0)), m(1): service(m(1), forced_down=True), m(2): service(m(2))},
                 {n.uuid: n.shard for n in nodes}, now)


def forced_down_kept(now: float = NOW) -> World:
    """rack-1 is Ready again after a failure the operator forced down; an administrator forced
    rack-0's service down while it was Ready (the operator leaves that one alone)."""
    nodes = _nodes({m(0): 4, m(1): 4, m(2): 4}, {})
    return World(PoolSpec(POOL, replicas=3, rebalance_after_seconds=GRACE),
                 (Member(m(0), True, NOW - 3600), Member(m(1), True, NOW - 5), Member(m(2), True, NOW - 3600)),
                 (m(0), m(1), m(2)), nodes,
                 {m(0): service(m(0), forced_down=True), m(1): service(m(1), forced_down=True), m(2): service(m(2))},
                 {n.uuid: n.shard for n in nodes}, now)


AUTOSCALE = Autoscale(min_replicas=1, max_replicas=10, max_nodes_per_member=4,
                      scale_down_stabilization_seconds=300.0)


def autoscaled(node_count: int, now: float) -> World:
    """An autoscaled pool of 5 Ready members over `node_count` free nodes."""
    members = tuple(Member(m(i), True, NOW - 3600) for i in range(5))
    per = {m(i): node_count // 5 + (1 if i < node_count % 5 else 0) for i in range(5)}
    nodes = _nodes(per, {})
    return World(PoolSpec(POOL, replicas=1, autoscale=AUTOSCALE, rebalance_after_seconds=GRACE), members,
                 tuple(x.name for x in members), nodes, {x.name: service(x.name) for x in members},
                 {n.uuid: n.shard for n in nodes}, now)


def job_from(record: dict) -> JobView:
    return JobView(record["name"], record["source"], tuple(tuple(mv) for mv in record["moves"]), record["state"],
                   finished=record.get("finished"), log_tail=record.get("log_tail", ""),
                   attempt=record.get("attempt", 1), created=record.get("created"))


def job_record(job: JobView) -> dict:
    return {"name": job.name, "source": job.source, "moves": [list(mv) for mv in job.moves], "state": job.state,
            "finished": job.finished, "log_tail": job.log_tail, "attempt": job.attempt, "created": job.created}


# Fields added since the recorded version, left out while they hold their default (what that
# version decided without them): SourceProgress.busy_servers and no_destination_since (issue 37).
ADDED_SINCE = frozenset({"busy_servers", "no_destination_since"})


def plain(value):
    """A decision as JSON: dataclasses by field (ADDED_SINCE ones only when set), sets sorted,
    enums by value."""
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name not in ADDED_SINCE or getattr(value, f.name) != f.default}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
