"""A pool of real nova-compute members over real Ironic nodes, set up as the operator would.

Nodes are made `available` through Ironic's API and given shards round-robin; every member
runs `nova-compute --config-file nova.conf --config-file member.conf`, nova.conf being the
pool's base config (what its Secret holds) and member.conf exactly what the operator renders
(`podspec.member_conf`). Nova's own API then tells what each member reports.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ironic_shard_operator.core.podspec import member_conf
from ironic_shard_operator.core.spec import Pool, read_pool
from testbed.ironic_service import IronicService, available_nodes, unique_resource_class
from testbed.nova_stack import ComputeProcess, NovaStack


def pool_named(name: str, resource_class: str) -> Pool:
    """A pool as the operator reads it from its CR (only what the overlay depends on matters)."""
    return read_pool({
        "metadata": {"name": name, "namespace": "nova-tier"},
        "spec": {"replicas": 2, "image": "nova-compute", "selector": {"resourceClass": resource_class},
                 "novaConfig": {"secretRef": {"name": "nova-config"}},
                 "cloud": {"secretRef": {"name": "openstack-cloud"}}},
    })


@dataclass
class ShardedPool:
    """`members` real nova-computes, node i in the shard of member i % len(members)."""

    pool: Pool
    members: list[str]
    shard_of: dict[str, str]                      # node uuid -> member
    processes: dict[str, ComputeProcess] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        return list(self.shard_of)

    def nodes_of(self, member: str) -> list[str]:
        return [node for node, owner in self.shard_of.items() if owner == member]

    def listed(self, stack: NovaStack) -> dict[str, list[str]]:
        """For each of our nodes, the hosts Nova lists it under (sorted)."""
        hosts = stack.hypervisor_hosts()
        return {node: sorted(hosts.get(node, [])) for node in self.shard_of}


def start_sharded_pool(stack: NovaStack, ironic: IronicService, workdir: Path, *,
                       members: int, nodes: int,
                       start: Callable[[str, list], ComputeProcess]) -> ShardedPool:
    """Create the nodes, shard them, start one nova-compute per member with `start(name,
    config_files)`, map the hosts, and return once Nova lists every node."""
    resource_class = unique_resource_class("nova")
    pool = pool_named(f"p{uuid.uuid4().hex[:8]}", resource_class)
    names = [f"{pool.name}-{i}" for i in range(members)]
    created = available_nodes(ironic, nodes, resource_class)
    result = ShardedPool(pool, names, {node: names[i % members] for i, node in enumerate(created)})
    for node, shard in result.shard_of.items():
        ironic.request("PATCH", f"/nodes/{node}", json=[{"op": "add", "path": "/shard", "value": shard}])

    base = workdir / "nova.conf"
    base.write_text(stack.compute_conf(ironic.cloud))
    for member in names:
        overlay = workdir / member / "member.conf"
        overlay.parent.mkdir(parents=True)
        overlay.write_text(member_conf(pool, member))  # exactly what the operator renders
        result.processes[member] = start(member, [base, overlay])

    stack.wait_for("every member's nova-compute service up", lambda: all(
        stack.compute_services().get(m, {}).get("state") == "up" for m in names), timeout=90)
    stack.discover_hosts()
    stack.wait_for("every node listed", lambda: all(result.listed(stack).values()), timeout=90)
    return result
