"""`ironic-shard-operator simulate`: the planner on synthetic data, for sizing a deployment.

Builds a converged pool, applies one membership change (members failing past the grace,
members joining), and reports per-member ownership before and after and how many nodes
moved compared with the least any scheme could move.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass

from ironic_shard_operator.core.model import Member, Node, Observation, PoolSpec, member_name
from ironic_shard_operator.core.planner import owners_after, plan

SETTLED = 0.0          # synthetic clock: members have been ready since here
LONG_AFTER = 1.0e6     # a "now" far past any rebalance grace


@dataclass(frozen=True)
class Simulation:
    pool: str
    nodes: int
    members: int
    pinned_fraction: float = 0.0
    failed: tuple[str, ...] = ()
    joining: int = 0
    seed: int = 0


def check(sim: Simulation) -> None:
    """Refuse arguments that describe no pool, with a message saying which and why."""
    if sim.nodes < 0:
        raise ValueError(f"--nodes must be >= 0, got {sim.nodes}")
    if sim.members < 1:
        raise ValueError(f"--members must be >= 1, got {sim.members}")
    if not 0.0 <= sim.pinned_fraction <= 1.0:
        raise ValueError(f"--pinned is a fraction between 0 and 1, got {sim.pinned_fraction}")
    if sim.joining < 0:
        raise ValueError(f"--join must be >= 0, got {sim.joining}")
    names = {member_name(sim.pool, i) for i in range(sim.members)}
    unknown = sorted(set(sim.failed) - names)
    if unknown:
        raise ValueError(
            f"--fail {', '.join(unknown)}: not a member of {sim.pool} "
            f"(members are {member_name(sim.pool, 0)} .. {member_name(sim.pool, sim.members - 1)})")


def run(sim: Simulation) -> str:
    """The report for one simulation, as printed by the command."""
    check(sim)
    rng = random.Random(sim.seed)
    uuids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(sim.nodes)]
    spec = PoolSpec(name=sim.pool, replicas=sim.members, rebalance_after_seconds=120)
    ready = tuple(Member(member_name(sim.pool, i), True, SETTLED) for i in range(sim.members))

    adopted = plan(Observation(spec, ready, tuple(Node(u) for u in uuids), LONG_AFTER))
    owners = owners_after((Node(u) for u in uuids), adopted.moves)
    pinned = set(rng.sample(uuids, round(sim.pinned_fraction * sim.nodes)))
    before = tuple(
        Node(u, owners[u], instance_uuid=str(uuid.uuid5(uuid.NAMESPACE_OID, u)) if u in pinned else None)
        for u in uuids)

    failed = set(sim.failed)
    members = tuple(Member(m.name, m.name not in failed, SETTLED) for m in ready) + tuple(
        Member(member_name(sim.pool, sim.members + i), True, SETTLED) for i in range(sim.joining))
    after_spec = PoolSpec(name=sim.pool, replicas=sim.members + sim.joining,
                          rebalance_after_seconds=120)
    started = time.perf_counter()
    change = plan(Observation(after_spec, members, before, LONG_AFTER))
    seconds = time.perf_counter() - started

    before_loads = {m.name: (m.nodes, m.pinned) for m in plan(
        Observation(spec, ready, before, LONG_AFTER)).loads}
    lines = [f"{'member':<24} {'ready':<6} {'nodes before':>12} {'nodes after':>11} {'pinned':>7}"]
    for load in change.loads:
        nodes_before, _ = before_loads.get(load.name, (0, 0))
        lines.append(f"{load.name:<24} {'yes' if load.in_ring else 'no':<6} "
                     f"{nodes_before:>12} {load.nodes:>11} {load.pinned:>7}")
    # Whatever the scheme, a member that ends with more nodes than it had must receive the
    # difference, and one that ends with fewer must give it away.
    gains = sum(max(0, load.nodes - before_loads.get(load.name, (0, 0))[0]) for load in change.loads)
    losses = sum(max(0, before_loads.get(load.name, (0, 0))[0] - load.nodes) for load in change.loads)
    lines.append("")
    lines.append(f"nodes: {sim.nodes} ({len(pinned)} pinned)  moved: {len(change.moves)}  "
                 f"least any scheme could move to this balance: {max(gains, losses)}  "
                 f"planned in {seconds * 1000:.1f} ms")
    if change.scale_down_blocked:
        lines.append(f"scale-down blocked: {change.scale_down_blocked}")
    return "\n".join(lines)
