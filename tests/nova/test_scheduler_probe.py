"""The test bed asks Nova's REAL scheduler where a build would go, and sees what it sees.

Two real nova-computes (Ironic driver, one shard each) over free nodes of one resource class;
`NovaStack.select_destinations` sends the RequestSpec of a baremetal boot to the real
nova-scheduler as nova-conductor does (hack/nova/select_destinations.py: the API's part of a
boot is the shortcut, as no real boot can complete here; nothing is left behind). While both
services are enabled, builds land on both hosts' nodes;
once an administrator disables one through Nova's API, no build reaches it and its free nodes
are not even candidates; enabled again, it is chosen again. This is what lets a test show that
a retiring member whose service is disabled gets no build.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.ironic_service import IronicService
from testbed.nova_stack import NovaStack
from tests.nova.sharded_pool import ShardedPool, start_sharded_pool

pytestmark = pytest.mark.nova

# One-instance boots asked per phase: the scheduler picks at random among equally weighed nodes
# (shuffle_best_same_weighed_hosts), so a host with half the nodes is missed by all of them
# with probability 2**-ROUNDS.
ROUNDS = 24


def power_off(ironic: IronicService, pool: ShardedPool, stack: NovaStack) -> None:
    """Give the pool's nodes a power state, as any enrolled machine has: Nova's Ironic driver
    reserves the whole inventory of a node whose power state is unknown (the test bed's
    fake-hardware nodes have none until asked), so none would be a candidate for a build."""
    for node in pool.nodes:
        ironic.request("PUT", f"/nodes/{node}/states/power", json={"target": "power off"})
    all_offered(pool, stack)


def all_offered(pool: ShardedPool, stack: NovaStack) -> None:
    """Wait until Placement offers every node of the pool for a build (inventory not reserved,
    nothing allocated); the failure names each node missing, with its inventory and allocations."""
    def missing() -> dict:
        offered = stack.allocation_candidates(pool.pool.selector.resource_class)
        return {node: (stack.placement_json(f"/resource_providers/{node}/inventories")["inventories"],
                       stack.placement_json(f"/resource_providers/{node}/allocations")["allocations"])
                for node in set(pool.nodes) - offered}

    try:
        stack.wait_for("every node offered by Placement", lambda: not missing(), timeout=90)
    except AssertionError as timeout:
        raise AssertionError(f"{timeout}; not offered (inventory, allocations): {missing()}") from None


def test_the_scheduler_sends_no_build_to_a_disabled_service_and_does_again_once_enabled(
        nova_stack: NovaStack, nova_computes, ironic_service: IronicService,
        tmp_path: Path) -> None:
    pool = start_sharded_pool(nova_stack, ironic_service, tmp_path, members=2, nodes=6,
                              start=nova_computes)
    retiring, staying = pool.members
    resource_class = pool.pool.selector.resource_class
    everywhere = {(host, node) for node, host in pool.shard_of.items()}
    power_off(ironic_service, pool, nova_stack)

    # Both enabled: one boot of six fills every free node, each under its own shard's host;
    # one-instance boots land on both hosts.
    assert set(nova_stack.select_destinations(resource_class, count=6)) == everywhere
    singles = nova_stack.select_destinations_rounds(resource_class, rounds=ROUNDS)
    assert {host for [(host, _)] in singles} == {retiring, staying}

    nova_stack.set_service_enabled(retiring, False, reason="ironic-shard-operator: retiring")
    assert nova_stack.compute_services()[retiring]["status"] == "disabled"
    singles = nova_stack.select_destinations_rounds(resource_class, rounds=ROUNDS)
    assert {host for [(host, _)] in singles} == {staying}
    # Not a matter of luck: the staying host's three nodes are all there is to place on.
    assert set(nova_stack.select_destinations(resource_class, count=3)) == \
        {(staying, node) for node in pool.nodes_of(staying)}
    assert nova_stack.select_destinations(resource_class, count=4) == []   # NoValidHost
    assert all(hosts == [retiring] for node, hosts in pool.listed(nova_stack).items()
               if pool.shard_of[node] == retiring), \
        "the disabled member still lists its nodes (it serves its instances): only builds stop"

    nova_stack.set_service_enabled(retiring, True)
    # The API enables the service at once; the compute clears its nodes' providers'
    # COMPUTE_STATUS_DISABLED trait (the scheduler's Placement pre-filter) on an RPC cast.
    nova_stack.wait_for("builds placed on every node again", lambda: set(
        nova_stack.select_destinations(resource_class, count=6)) == everywhere, timeout=60, interval=2)
    singles = nova_stack.select_destinations_rounds(resource_class, rounds=ROUNDS)
    assert {host for [(host, _)] in singles} == {retiring, staying}
    assert nova_stack.allocation_candidates(resource_class) == set(pool.nodes), \
        "every probe released the nodes the scheduler claimed in Placement"
