"""Guarded free moves against the real Ironic: a node claimed by a build
AFTER its batch was re-read, but before its own write, is never moved away from its live
owner.

Before the guard, the "still free?" re-check ran once per batch (about 2 s of writes): a soak
saw 4 of 6 nodes claimed in that window moved to a joining member anyway, and a node whose
instance names one host while its shard names another is listed by no nova-compute.
"""

from __future__ import annotations

import threading
import time

import pytest

from ironic_shard_operator.controller.cloud_side import CloudResult, CloudSide, CloudWork
from ironic_shard_operator.controller.ironic_cycle import run_cycle
from ironic_shard_operator.controller.metrics import OperatorMetrics
from ironic_shard_operator.controller.nova_cycle import NovaRuntime
from ironic_shard_operator.core.guard_holds import revert_failed_event
from ironic_shard_operator.core.pool_memory import PoolMemory
from ironic_shard_operator.core.spec import read_pool
from ironic_shard_operator.core.model import Member, Observation, PoolSpec
from ironic_shard_operator.core.planner import plan
from testbed.ironic_service import (
    IronicService, claim_for_instance, lock_directly_in_db, seed_nodes_directly_in_db, shards_of, unique_resource_class,
)
from tests.support.switchable_proxy import SwitchableProxy

pytestmark = pytest.mark.integration

NODES = 60
CLAIMED_LATE = 5


def test_a_node_claimed_after_its_batch_was_reread_is_not_moved(ironic_service: IronicService) -> None:
    resource_class = unique_resource_class("guard")
    seed_nodes_directly_in_db(ironic_service, NODES, resource_class=resource_class, shard="pool-0")
    # One batch for every move (batch_size: ~2 s of writes at writes_per_second): the bulk
    # re-read happens once, before the first write, and the claims come after it.
    adapter = ironic_service.adapter(resource_class, writes_per_second=20.0, max_concurrent_writes=1)
    now = time.time()
    members = [Member("pool-0", ready=True, since=now - 600), Member("pool-1", ready=True, since=now - 60)]
    spec = PoolSpec(name="pool", replicas=2)
    moves = plan(Observation(spec=spec, members=tuple(members), nodes=adapter.list_nodes(), now=now)).moves
    assert len(moves) <= adapter.batch_size, "the moves must make one batch for this race"
    late = [move.node_uuid for move in moves[-CLAIMED_LATE:]]  # written last (uuid order)

    def claim_once_writing_started() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if shards_of(ironic_service, resource_class).get(moves[0].node_uuid) == "pool-1":
                claim_for_instance(ironic_service, late)  # a build lands on them now
                return
            time.sleep(0.02)

    claimer = threading.Thread(target=claim_once_writing_started)
    claimer.start()
    report = run_cycle(adapter, spec, members, now=now)
    claimer.join()

    shards = shards_of(ironic_service, resource_class)
    assert {node: shards[node] for node in late} == {node: "pool-0" for node in late}
    assert report.applied.skipped_claimed == CLAIMED_LATE
    assert report.applied.applied == len(moves) - CLAIMED_LATE


def test_a_move_away_from_a_dead_owner_is_not_read_again(ironic_service: IronicService) -> None:
    """Nothing can spawn on a member past its grace: its nodes move with the batch's re-read
    alone, at the full write rate (no per-node read)."""
    resource_class = unique_resource_class("unguarded")
    seed_nodes_directly_in_db(ironic_service, 20, resource_class=resource_class, shard="pool-0")
    adapter = ironic_service.adapter(resource_class)
    now = time.time()
    members = [Member("pool-0", ready=False, since=now - 600), Member("pool-1", ready=True, since=now - 600)]
    report = run_cycle(adapter, PoolSpec(name="pool", replicas=2), members, now=now)
    assert report.applied.applied == 20
    # One listing, one bulk re-read, twenty writes: no read per node.
    assert report.ironic_requests == 1 + 1 + 20


def test_a_node_claimed_between_its_read_and_its_write_is_put_back_to_its_live_owner(
        ironic_service: IronicService) -> None:
    """The last window of the move race: Ironic refuses a JSON-patch `test`,
    so no write is conditional. A build claims the node exactly between the guard's read of it
    and its PATCH (a forwarder in front of the real Ironic runs the claim when the PATCH comes
    and only then lets it through): the read right after the write sees the claim, and the
    node's shard goes back to its live owner; the move counts as reverted, not applied."""
    resource_class = unique_resource_class("revert")
    (node,) = seed_nodes_directly_in_db(ironic_service, 1, resource_class=resource_class, shard="pool-1")
    now = time.time()
    # pool-1 retires (one member wanted) while it is Ready: its free node moves to pool-0, guarded
    members = [Member("pool-0", ready=True, since=now - 600), Member("pool-1", ready=True, since=now - 600)]
    with SwitchableProxy(ironic_service.url) as proxy:
        adapter = ironic_service.adapter(resource_class, url=proxy.url(ironic_service.url))
        proxy.before_once(f"PATCH /v1/nodes/{node} ".encode(), lambda: claim_for_instance(ironic_service, [node]))
        report = run_cycle(adapter, PoolSpec(name="pool", replicas=1), members, now=now)
    assert report.moves_planned == 1
    assert proxy.befores == 1, "the claim was not injected between the read and the write"
    assert report.applied.reverted == 1 and report.applied.applied == 0
    assert shards_of(ironic_service, resource_class) == {node: "pool-1"}


async def test_a_claimed_move_put_back_is_counted_and_one_whose_put_back_fails_is_reported(
        ironic_service: IronicService) -> None:
    """The pool's cloud side (controller/cloud_side.py) over the real Ironic, with the operator's
    metrics: a guarded move a build claims between its read and its write is put back and counted
    in ironic_shard_moves_reverted_total. When the put-back itself fails (a conductor has locked
    the node for the build meanwhile: Ironic answers 409), the node stays at the target while its
    build is for the source: counted in ironic_shard_moves_revert_failed_total and named by a
    Warning Event with the fix, never only a log line."""
    resource_class = unique_resource_class("revertfail")
    (put_back,) = seed_nodes_directly_in_db(ironic_service, 1, resource_class=resource_class, shard="pool-1")
    metrics = OperatorMetrics()
    pool = read_pool({"metadata": {"name": "pool", "namespace": "ns", "uid": "u", "generation": 1},
                      "spec": {"replicas": 1, "image": "i", "novaConfig": {"secretRef": {"name": "n"}},
                               "cloud": {"secretRef": {"name": "c"}, "cloudName": "c"},
                               "selector": {"resourceClass": resource_class}}})

    def metric(name: str) -> float:
        return metrics.registry.get_sample_value(name, {"pool": "ns/pool"}) or 0.0

    async def retire_pool_1(proxy: SwitchableProxy) -> CloudResult:
        """One cloud side: pool-1 retires while Ready (its free nodes leave it guarded)."""
        adapter = ironic_service.adapter(resource_class, url=proxy.url(ironic_service.url))
        now = time.time()
        side = CloudSide(CloudWork(
            key="ns/pool", pool=pool, adapter=adapter, identities=frozenset({"pool-0", "pool-1"}),
            members=(Member("pool-0", ready=True, since=now - 600), Member("pool-1", ready=True, since=now - 600)),
            nova_conf=None, pool_memory=PoolMemory(), now=now, nova=NovaRuntime(),
            metrics=metrics, may_write=lambda: True), threading.Event())
        result = await side.task
        assert result.error is None, result.error
        return result

    def claim(node: str, then=None):
        def action() -> None:
            claim_for_instance(ironic_service, [node])
            if then is not None:
                then()
        return action

    with SwitchableProxy(ironic_service.url) as proxy:
        # claimed right before its PATCH: put back afterwards
        proxy.before_once(f"PATCH /v1/nodes/{put_back} ".encode(), claim(put_back))
        first = await retire_pool_1(proxy)
    assert first.report.applied.reverted == 1 and metric("ironic_shard_moves_reverted_total") == 1
    assert shards_of(ironic_service, resource_class)[put_back] == "pool-1"  # pinned there now
    (stuck,) = seed_nodes_directly_in_db(ironic_service, 1, resource_class=resource_class, shard="pool-1")
    with SwitchableProxy(ironic_service.url) as proxy:
        # stuck: claimed right before its PATCH, then locked by a conductor before the put-back
        lock = lambda: lock_directly_in_db(ironic_service, [stuck])  # noqa: E731
        proxy.before_once(f"PATCH /v1/nodes/{stuck} ".encode(), claim(stuck, lambda: proxy.before_once(
            f"PATCH /v1/nodes/{stuck} ".encode(), lock)))
        second = await retire_pool_1(proxy)
    assert proxy.befores == 2, "the claim and the lock were not injected around the write"
    assert [m.node_uuid for m in second.report.applied.revert_failed] == [stuck]
    assert shards_of(ironic_service, resource_class)[stuck] == "pool-0"  # the wrong shard, and said so:
    assert metric("ironic_shard_moves_revert_failed_total") == 1
    event = revert_failed_event(second.report.applied.revert_failed)
    assert event.type == "Warning" and f"{stuck} (pool-1 -> pool-0)" in event.message
    assert "openstack baremetal node set --shard OLD NODE" in event.message
    lock_directly_in_db(ironic_service, [stuck], conductor=None)
