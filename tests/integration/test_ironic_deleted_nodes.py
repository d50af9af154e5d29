"""Nodes deleted from Ironic while the operator works on them, against the real service: a
deleted node is skipped (never an error), every other move is written, and the next cycle
does not count it."""

from __future__ import annotations

import threading
import time

import pytest

from ironic_shard_operator.adapters.ironic import ApplyResult
from ironic_shard_operator.controller.ironic_cycle import run_cycle
from ironic_shard_operator.core.model import Observation, PoolSpec
from ironic_shard_operator.core.planner import owners_after, plan
from testbed.ironic_service import IronicService, shards_of
from tests.integration.conftest import POOL, members_with_down

pytestmark = pytest.mark.integration

NODES = 30
MEMBERS = 3
DEAD = 1


def delete_node(service: IronicService, node: str) -> None:
    """Delete a node as an administrator does: an available node goes into maintenance first
    (Ironic deletes only enroll, manageable or maintenance nodes)."""
    service.request("PUT", f"/nodes/{node}/maintenance", json={"reason": "decommissioned"})
    service.request("DELETE", f"/nodes/{node}")


def failover_plan(service: IronicService, adapter, now: float):
    """The observation and the plan of a cycle that finds member DEAD down."""
    observed = adapter.list_nodes()
    decision = plan(Observation(PoolSpec(POOL, replicas=MEMBERS),
                                tuple(members_with_down(MEMBERS, down={DEAD}, now=now)), observed, now))
    assert len(decision.moves) >= 6, "the dead member's free nodes move"
    return observed, decision


def test_nodes_deleted_between_observation_and_write_are_skipped_and_the_rest_applied(
        ironic_service: IronicService, converged_pool):
    """One moving node is deleted, and so is the node the bulk re-read pages from (its
    marker: the last node before the first move), so the re-read starts over."""
    pool_class, owners = converged_pool(NODES, members=MEMBERS, name="deleted-before-write")
    adapter = ironic_service.adapter(pool_class)
    observed, decision = failover_plan(ironic_service, adapter, time.time())
    known = sorted(owners)
    moving = [move.node_uuid for move in decision.moves]
    deleted_move = moving[len(moving) // 2]
    marker = known[known.index(moving[0]) - 1] if known.index(moving[0]) else None
    for node in filter(None, (deleted_move, marker)):
        delete_node(ironic_service, node)

    result = adapter.apply_moves(decision.moves, observed)

    assert (result.applied, result.skipped_changed, result.skipped) == (len(moving) - 1, 1, 1)
    after = shards_of(ironic_service, pool_class)
    expected = owners_after(observed, decision.moves)
    assert after == {node: owner for node, owner in expected.items() if node not in (deleted_move, marker)}


def test_a_node_deleted_between_the_re_read_and_its_write_is_counted_gone(
        ironic_service: IronicService, converged_pool):
    """Ironic answers the write with 404: the move is counted as gone, not as an error, and
    the writes after it go on. One write per 0.5 s gives the test seconds to delete the last
    node of the batch once the first write has landed."""
    pool_class, owners = converged_pool(NODES, members=MEMBERS, name="deleted-at-write")
    adapter = ironic_service.adapter(pool_class, max_concurrent_writes=1, writes_per_second=2,
                                      recheck_seconds=NODES)  # one batch, one re-read
    observed, decision = failover_plan(ironic_service, adapter, time.time())
    first, last = decision.moves[0], decision.moves[-1]
    outcome: list[ApplyResult | BaseException] = []

    def apply() -> None:
        try:
            outcome.append(adapter.apply_moves(decision.moves, observed))
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            outcome.append(error)

    writer = threading.Thread(target=apply)
    writer.start()
    try:
        deadline = time.monotonic() + 30
        while shards_of(ironic_service, pool_class)[first.node_uuid] != first.target:
            assert writer.is_alive() and time.monotonic() < deadline, "the first write never landed"
            time.sleep(0.05)
        delete_node(ironic_service, last.node_uuid)
    finally:
        writer.join(60)
    result, = outcome
    assert isinstance(result, ApplyResult), f"apply_moves raised {result!r}"
    assert adapter.writes_made == len(decision.moves), "the deleted node's write was sent, after its re-read"
    assert (result.applied, result.skipped_gone, result.skipped) == (len(decision.moves) - 1, 1, 1)
    after = shards_of(ironic_service, pool_class)
    assert last.node_uuid not in after
    assert all(after[move.node_uuid] == move.target for move in decision.moves[:-1])


def test_a_node_deleted_while_its_member_is_dead_is_neither_an_error_nor_counted(
        ironic_service: IronicService, converged_pool):
    pool_class, owners = converged_pool(NODES, members=MEMBERS, name="deleted-while-dead")
    adapter = ironic_service.adapter(pool_class)
    dead = f"{POOL}-{DEAD}"
    its_nodes = sorted(node for node, owner in owners.items() if owner == dead)
    delete_node(ironic_service, its_nodes[0])
    now = time.time()
    members = members_with_down(MEMBERS, down={DEAD}, now=now)

    report = run_cycle(adapter, PoolSpec(POOL, replicas=MEMBERS), members, now=now)

    assert report.counts.total == NODES - 1
    assert its_nodes[0] not in {node.uuid for node in report.nodes}
    assert report.moves_planned == report.moves_applied == len(its_nodes) - 1
    assert report.moves_skipped == 0
    after = shards_of(ironic_service, pool_class)
    assert set(after) == set(owners) - {its_nodes[0]}
    assert dead not in after.values()

    again = run_cycle(adapter, PoolSpec(POOL, replicas=MEMBERS), members, now=now)
    assert (again.counts.total, again.moves_planned, again.moves_skipped) == (NODES - 1, 0, 0)
