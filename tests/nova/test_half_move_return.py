"""What real Nova does when the source of a half move comes back (issue 37, item 5): it heals.

A half move is what `nova-manage db ironic_compute_node_move` leaves when it is killed between its
two saves: the compute node already under the destination D, the instance still on the source S,
the Ironic shard still S. The operator keeps S held (no pod) until someone finishes the move with
SQL. The question: if S's own nova-compute ran again, would its resource tracker take the compute
node back (its shard and its instance both name S), healing the half move by itself?

Two real nova-computes (S and D, one shard each), an instance seeded on one of S's nodes, S stopped
and forced down as a handover leaves it, the half move made in the cell database exactly as
nova-manage's first save makes it; then S's forced_down cleared and its nova-compute started again
with its own config: within a resource-tracker pass, Nova lists the compute node under S again,
and compute node, instance and shard agree. (So a cancelled handover whose only loose end is a
half move releases its member: core/handover.py.)
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testbed.ironic_service import IronicService
from testbed.nova_stack import NovaStack, started_computes
from tests.nova.handover_pool import server_host
from tests.nova.sharded_pool import start_sharded_pool

pytestmark = pytest.mark.nova


def test_the_source_of_a_half_move_coming_back_takes_its_compute_node_back(
        nova_stack: NovaStack, ironic_service: IronicService, tmp_path: Path) -> None:
    interval = nova_stack.timings["update_resources_interval"]
    with started_computes(nova_stack) as start:
        pool = start_sharded_pool(nova_stack, ironic_service, tmp_path, members=2, nodes=4, start=start)
        source, destination = pool.members
        node = pool.nodes_of(source)[0]
        instance = nova_stack.seed_instance(source, node)
        ironic_service.request("PATCH", f"/nodes/{node}", json=[
            {"op": "add", "path": "/instance_uuid", "value": instance}])
        # as a handover leaves the source: its process gone, its service forced down
        process = pool.processes[source]
        config = process.config_files
        process.stop()
        nova_stack.set_forced_down(source, True)
        nova_stack.half_move(node, destination)
        assert nova_stack.hypervisor_hosts()[node] == [destination]
        assert server_host(nova_stack, instance, (source, destination)) == source

        # the member comes back: forced_down cleared, its own nova-compute started again
        nova_stack.set_forced_down(source, False)
        start(source, config)
        nova_stack.wait_for(f"{source}'s service up again",
                            lambda: nova_stack.compute_services()[source]["state"] == "up", timeout=90)
        came_back = time.monotonic()
        nova_stack.wait_for(f"{node}'s compute node listed under {source} again",
                            lambda: nova_stack.hypervisor_hosts()[node] == [source], timeout=4 * interval + 60)
        healed_after = time.monotonic() - came_back
        print(f"half move healed by its source's return: compute node under {source} again "
              f"{healed_after:.1f}s after its nova-compute was up (resource tracker interval {interval}s)")
        # Decided from this run (docs/design.md, "A half move and a returning source"): the
        # source's resource tracker takes the compute node back (its shard and its instance name
        # it), so compute node, instance and shard agree again, with nothing run by hand.
        assert server_host(nova_stack, instance, (source, destination)) == source
        assert nova_stack.hypervisor_hosts()[node] == [source]
        assert node not in {n for n, hosts in nova_stack.hypervisor_hosts().items() if destination in hosts}
