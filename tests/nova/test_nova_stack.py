"""Real nova-compute processes with the Ironic driver and `[ironic]shard` report exactly their shard.

Each member runs as the operator will run it: `nova-compute --config-file nova.conf
--config-file member.conf`, nova.conf being the pool's base config and member.conf the
operator's overlay. Nova's own API is the judge.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from ironic_shard_operator.podspec import member_conf
from ironic_shard_operator.resource import Pool, read_pool
from tests.support.ironic_service import (
    IronicService, enrol_nodes, unique_resource_class)
from tests.support.nova_stack import NovaStack

pytestmark = pytest.mark.nova

NODES = 12


def pool_named(name: str, resource_class: str) -> Pool:
    """A pool as the operator reads it from its CR (only what the overlay depends on matters)."""
    return read_pool({
        "metadata": {"name": name, "namespace": "nova-tier"},
        "spec": {"replicas": 2, "image": "nova-compute", "selector": {"resourceClass": resource_class},
                 "novaConfig": {"secretRef": {"name": "nova-config"}},
                 "cloud": {"secretRef": {"name": "openstack-cloud"}}},
    })


def available_nodes(ironic: IronicService, count: int, resource_class: str,
                    timeout: float = 60.0) -> list[str]:
    """`count` fake-hardware nodes made `available` through Ironic's API (enroll -> manage ->
    provide), all nodes moving at once."""
    nodes = enrol_nodes(ironic, count, resource_class=resource_class)
    for target, expect in (("manage", "manageable"), ("provide", "available")):
        for node in nodes:
            ironic.request("PUT", f"/nodes/{node}/states/provision", json={"target": target})
        deadline = time.monotonic() + timeout
        while True:
            listed = ironic.request(
                "GET", f"/nodes?resource_class={resource_class}&fields=uuid,provision_state").json()
            states = {n["uuid"]: n["provision_state"] for n in listed["nodes"]}
            if all(states.get(node) == expect for node in nodes):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"nodes did not all reach {expect}: {states}")
            time.sleep(0.2)
    return nodes


def test_each_compute_lists_exactly_its_shard_and_a_killed_one_goes_down(
        nova_stack: NovaStack, nova_computes, ironic_service: IronicService,
        tmp_path: Path) -> None:
    resource_class = unique_resource_class("nova-smoke")
    pool = pool_named(f"smoke{uuid.uuid4().hex[:6]}", resource_class)
    members = [f"{pool.name}-0", f"{pool.name}-1"]
    nodes = available_nodes(ironic_service, NODES, resource_class)
    shard_of = {node: members[i % 2] for i, node in enumerate(nodes)}
    for node, shard in shard_of.items():
        ironic_service.request("PATCH", f"/nodes/{node}",
                               json=[{"op": "add", "path": "/shard", "value": shard}])

    base = tmp_path / "nova.conf"
    base.write_text(nova_stack.compute_conf(ironic_service.cloud))
    processes = {}
    for member in members:
        overlay = tmp_path / member / "member.conf"
        overlay.parent.mkdir()
        overlay.write_text(member_conf(pool, member))  # exactly what the operator renders
        processes[member] = nova_computes(member, [base, overlay])

    nova_stack.wait_for(
        "both members' nova-compute services up",
        lambda: all(nova_stack.compute_services().get(m, {}).get("state") == "up" for m in members),
        timeout=90)
    nova_stack.discover_hosts()

    def ours() -> dict[str, list[str]]:
        listed = nova_stack.hypervisor_hosts()
        return {node: sorted(listed.get(node, [])) for node in nodes}

    nova_stack.wait_for("all nodes listed", lambda: all(ours().values()), timeout=90)
    # Every node under exactly the compute of its shard, and nothing else under our computes.
    assert ours() == {node: [shard] for node, shard in shard_of.items()}
    under_members = {node for node, hosts in nova_stack.hypervisor_hosts().items()
                     if set(hosts) & set(members)}
    assert under_members == set(nodes)
    nova_stack.record_rss()

    processes[members[1]].kill()
    assert not processes[members[1]].alive()
    down_within = nova_stack.timings["service_down_time"] + 3 * nova_stack.timings["report_interval"]
    nova_stack.wait_for(
        f"{members[1]} down after its process was killed",
        lambda: nova_stack.compute_services()[members[1]]["state"] == "down",
        timeout=down_within)
    services = nova_stack.compute_services()
    assert services[members[0]]["state"] == "up"
    assert services[members[1]]["forced_down"] is False  # nobody forced it: Nova noticed alone
    assert processes[members[0]].alive()
