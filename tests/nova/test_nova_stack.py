"""Real nova-compute processes with the Ironic driver and `[ironic]shard` report exactly their shard.

Each member runs as the operator will run it: `nova-compute --config-file nova.conf
--config-file member.conf`, nova.conf being the pool's base config and member.conf the
operator's overlay. Nova's own API is the judge.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.ironic_service import IronicService
from testbed.nova_stack import NovaStack
from tests.nova.sharded_pool import start_sharded_pool

pytestmark = pytest.mark.nova


def test_each_compute_lists_exactly_its_shard_and_a_killed_one_goes_down(
        nova_stack: NovaStack, nova_computes, ironic_service: IronicService,
        tmp_path: Path) -> None:
    pool = start_sharded_pool(nova_stack, ironic_service, tmp_path, members=2, nodes=12,
                              start=nova_computes)
    first, second = pool.members

    # Every node under exactly the compute of its shard, and nothing else under our computes.
    assert pool.listed(nova_stack) == {node: [shard] for node, shard in pool.shard_of.items()}
    under_members = {node for node, hosts in nova_stack.hypervisor_hosts().items()
                     if set(hosts) & set(pool.members)}
    assert under_members == set(pool.nodes)
    assert len(pool.nodes_of(first)) == len(pool.nodes_of(second)) == 6
    nova_stack.record_rss()

    pool.processes[second].kill()
    assert not pool.processes[second].alive()
    timings = nova_stack.timings
    nova_stack.wait_for(
        f"{second} down after its process was killed",
        lambda: nova_stack.compute_services()[second]["state"] == "down",
        timeout=timings["service_down_time"] + 3 * timings["report_interval"])
    services = nova_stack.compute_services()
    assert services[first]["state"] == "up"
    assert services[second]["forced_down"] is False  # nobody forced it: Nova noticed alone
    assert pool.processes[first].alive()
