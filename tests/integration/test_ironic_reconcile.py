"""Reconcile cycles against the real Ironic service with 1,000-node pools.

Writes are counted by the adapter's own request counter (`writes_made`), ownership is read
back from Ironic. Each test has its own resource class, hence its own pool.
"""

from __future__ import annotations

import math
import time
from collections import Counter

import pytest

from ironic_shard_operator.controller.ironic_cycle import run_cycle
from ironic_shard_operator.core.model import Move, Observation, PoolSpec
from ironic_shard_operator.core.planner import plan
from testbed.ironic_service import (
    IronicService,
    claim_for_instance,
    enrol_nodes,
    seed_nodes_directly_in_db,
    set_provision_state_directly_in_db,
    shards_of,
    unique_resource_class,
)
from tests.integration.conftest import POOL, members_with_down, ready_members
from tests.support.switchable_proxy import SwitchableProxy

pytestmark = pytest.mark.integration

NODES = 1000
# The first adoption writes every node through the API (~20 writes/s): a few hundred show the
# spread; paging is test_ironic_paging.py's.
ADOPTED = 200


def test_first_adoption_spreads_every_unassigned_node_evenly_and_a_rerun_writes_nothing(
        ironic_service: IronicService):
    pool_class = unique_resource_class("adoption")
    seed_nodes_directly_in_db(ironic_service, ADOPTED, resource_class=pool_class)
    other_class = unique_resource_class("not-ours")
    others = seed_nodes_directly_in_db(ironic_service, 50, resource_class=other_class)
    adapter = ironic_service.adapter(pool_class)
    spec = PoolSpec(POOL, replicas=4)

    first = run_cycle(adapter, spec, ready_members(4))

    owners = shards_of(ironic_service, pool_class)
    assert Counter(owners.values()) == {f"{POOL}-{i}": ADOPTED // 4 for i in range(4)}
    assert first.moves_planned == first.moves_applied == ADOPTED
    assert first.observe_requests <= math.ceil(ADOPTED / 1000) + 1
    assert set(shards_of(ironic_service, other_class).values()) == {None}, \
        "nodes outside the selector were written"
    assert len(others) == 50

    writes_before = adapter.writes_made
    second = run_cycle(adapter, spec, ready_members(4))

    assert adapter.writes_made == writes_before, "a cycle with nothing changed wrote to Ironic"
    assert second.moves_planned == 0
    assert second.ironic_requests == second.observe_requests <= math.ceil(ADOPTED / 1000) + 1
    assert shards_of(ironic_service, pool_class) == owners


def test_a_member_leaving_gives_up_only_its_free_nodes_and_gets_its_share_back_on_return(
        ironic_service: IronicService, converged_pool):
    pool_class, owners = converged_pool(NODES, members=10, name="leave-return")
    adapter = ironic_service.adapter(pool_class)
    spec = PoolSpec(POOL, replicas=10)
    leaving = f"{POOL}-3"
    its_nodes = sorted(node for node, owner in owners.items() if owner == leaving)
    with_instances, deploying, cleaning = its_nodes[:4], its_nodes[4:6], its_nodes[6:7]
    claim_for_instance(ironic_service, with_instances)
    set_provision_state_directly_in_db(ironic_service, deploying, "deploying", "active")
    set_provision_state_directly_in_db(ironic_service, cleaning, "cleaning", "available")
    pinned = set(with_instances + deploying + cleaning)
    now = time.time()

    writes = adapter.writes_made
    run_cycle(adapter, spec, members_with_down(10, down={3}, now=now), now=now)

    after_leave = shards_of(ironic_service, pool_class)
    moved = {node for node in owners if after_leave[node] != owners[node]}
    assert moved == set(its_nodes) - pinned, "only the leaving member's free nodes may move"
    assert all(after_leave[node] == leaving for node in pinned), "a pinned node was moved"
    ready = {f"{POOL}-{i}" for i in range(10)} - {leaving}
    assert {after_leave[node] for node in moved} <= ready
    assert adapter.writes_made - writes == len(moved) == len(its_nodes) - len(pinned)
    ready_loads = [count for owner, count in Counter(after_leave.values()).items()
                   if owner in ready]
    assert max(ready_loads) - min(ready_loads) <= 1, f"uneven after leave: {ready_loads}"

    writes = adapter.writes_made
    run_cycle(adapter, spec, ready_members(10))

    after_return = shards_of(ironic_service, pool_class)
    moved_back = {node for node in owners if after_return[node] != after_leave[node]}
    assert {after_return[node] for node in moved_back} == {leaving}, \
        "the return moved nodes between members that stayed"
    assert Counter(after_return.values()) == {f"{POOL}-{i}": NODES // 10 for i in range(10)}
    # The ideal: the returning member's fair share minus the pinned nodes it kept.
    assert adapter.writes_made - writes == len(moved_back) == NODES // 10 - len(pinned)


def test_nodes_enrolled_later_are_adopted_by_the_next_cycle_and_nothing_else_moves(
        ironic_service: IronicService, converged_pool):
    pool_class, owners = converged_pool(NODES, members=10, name="late-nodes")
    adapter = ironic_service.adapter(pool_class)
    spec = PoolSpec(POOL, replicas=10)
    run_cycle(adapter, spec, ready_members(10))  # converged already: nothing to do
    new_nodes = enrol_nodes(ironic_service, 10, resource_class=pool_class)

    writes = adapter.writes_made
    run_cycle(adapter, spec, ready_members(10))

    after = shards_of(ironic_service, pool_class)
    assert {node for node, owner in after.items() if owners.get(node) != owner} == set(new_nodes)
    assert adapter.writes_made - writes == len(new_nodes)
    assert Counter(after.values()) == {f"{POOL}-{i}": (NODES + 10) // 10 for i in range(10)}


def test_nodes_claimed_between_observation_and_write_are_never_moved(
        ironic_service: IronicService, converged_pool):
    """Nova claims nodes (and someone moves one by hand) after the plan was made: the
    bulk re-read before each batch of writes catches them, with one listing per batch."""
    pool_class, owners = converged_pool(NODES, members=10, name="claimed-meanwhile")
    adapter = ironic_service.adapter(pool_class)
    now = time.time()
    observed = adapter.list_nodes()
    decision = plan(Observation(PoolSpec(POOL, replicas=10),
                                tuple(members_with_down(10, down={3}, now=now)), observed, now))
    moving = [move.node_uuid for move in decision.moves]
    claimed, provisioning, moved_by_hand = moving[:3], moving[-2:], moving[50]
    claim_for_instance(ironic_service, claimed)
    set_provision_state_directly_in_db(ironic_service, provisioning, "deploying", "active")
    ironic_service.request("PATCH", f"/nodes/{moved_by_hand}",
                           json=[{"op": "add", "path": "/shard", "value": "by-hand"}])
    reads, writes = adapter.requests_made - adapter.writes_made, adapter.writes_made

    result = adapter.apply_moves(decision.moves, observed)

    after = shards_of(ironic_service, pool_class)
    assert all(after[node] == owners[node] for node in claimed + provisioning), \
        "a node claimed after the observation was moved"
    assert after[moved_by_hand] == "by-hand"
    assert (result.skipped_claimed, result.skipped_changed) == (5, 1)
    assert result.applied == adapter.writes_made - writes == len(moving) - 6
    batches = math.ceil(len(moving) / adapter.batch_size)
    assert adapter.requests_made - adapter.writes_made - reads == batches, \
        "the re-check must be one listing per batch, not one read per node"


def test_a_failed_members_free_nodes_reach_each_heir_in_one_go(ironic_service: IronicService, converged_pool):
    """A compute lists its shard when its resource-tracker pass starts: a heir whose set is
    written in one go is not caught half-written by a pass. The PATCHes, as the real Ironic
    received them (a forwarder in front of it keeps their order), come heir by heir, the heir
    with the most first; every node is written, with one bulk re-read per batch."""
    pool_class, owners = converged_pool(720, members=4, name="heir-by-heir")
    failed = f"{POOL}-0"
    leaving = {node for node, owner in owners.items() if owner == failed}
    now = time.time()
    with SwitchableProxy(ironic_service.url) as proxy:
        adapter = ironic_service.adapter(pool_class, url=proxy.url(ironic_service.url))
        report = run_cycle(adapter, PoolSpec(POOL, replicas=4), members_with_down(4, down={0}, now=now), now=now)
        patched = [line.split()[1].rsplit("/", 1)[1] for line in proxy.request_lines
                   if line.startswith("PATCH /v1/nodes/")]

    after = shards_of(ironic_service, pool_class)
    assert sorted(patched) == sorted(leaving) and report.applied.applied == len(leaving)
    heirs = Counter(after[node] for node in leaving)
    assert len(heirs) == 3 and len(leaving) >= 3 * adapter.batch_size, heirs  # a batch or more each
    in_flight = adapter.max_concurrent_writes - 1  # writes of one heir may still run as the next starts
    for heir, count in heirs.items():
        positions = [index for index, node in enumerate(patched) if after[node] == heir]
        assert positions[-1] - positions[0] + 1 <= count + 2 * in_flight, f"{heir}'s writes were spread out"
    first_written = sorted(heirs, key=lambda heir: next(i for i, n in enumerate(patched) if after[n] == heir))
    assert [heirs[heir] for heir in first_written] == sorted(heirs.values(), reverse=True)
    rereads = [line for line in proxy.request_lines if line.startswith(f"GET /v1/nodes?resource_class={pool_class}&")]
    assert len(rereads) == 1 + math.ceil(len(leaving) / adapter.batch_size), \
        "one listing to observe, then one bulk re-read per batch"


def test_hand_over_writes_a_node_with_an_instance_only_if_it_still_carries_that_instance(
        ironic_service: IronicService):
    """spec.nova.repairMisplaced's write: a pinned node's shard set to its instance's host,
    but only for nodes the fresh re-read shows unchanged since the audit read them."""
    pool_class = unique_resource_class("handover")
    old, new = f"{POOL}-0", f"{POOL}-1"
    kept, swapped, released, by_hand = nodes = enrol_nodes(ironic_service, 4, resource_class=pool_class,
                                                          shard=old)
    claim_for_instance(ironic_service, nodes)
    adapter = ironic_service.adapter(pool_class)
    observed = adapter.list_nodes()
    moves = [Move(node, old, new) for node in nodes]
    assert adapter.apply_moves(moves, observed).skipped_claimed == 4, "the ring's writes never move pinned nodes"
    # After the audit's read: one node's instance is replaced by another, one's is deleted,
    # one node is given another shard by hand.
    for node in (swapped, released):
        ironic_service.request("PATCH", f"/nodes/{node}", json=[{"op": "remove", "path": "/instance_uuid"}])
    claim_for_instance(ironic_service, [swapped])
    ironic_service.request("PATCH", f"/nodes/{by_hand}", json=[{"op": "add", "path": "/shard", "value": "by-hand"}])

    result = adapter.hand_over(moves, observed)

    assert shards_of(ironic_service, pool_class) == {kept: new, swapped: old, released: old, by_hand: "by-hand"}
    assert (result.applied, result.skipped_changed) == (1, 3)
    again = adapter.hand_over(moves, observed)
    assert (again.applied, again.already_right) == (0, 1), "a repeated handover writes nothing"
