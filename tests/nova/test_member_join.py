"""A member joining, as Nova sees it: the real operator, real Ironic, the real Nova stack, member
pods as REAL nova-compute processes and the host-mapping Job's pod as REAL `nova-manage cell_v2
discover_hosts` (testbed/process_kubelet.py).

A new member is a new Nova host, and Nova lists a host's compute nodes, and schedules to them,
only once the host is mapped to a cell. 2 members, 12 nodes; scale to 3. The new member gets its
share of the nodes only after Nova lists its service and says its host is mapped (the operator's
host-mapping Job, created in the cycle the service appears), so no node is ever listed under no
compute: with the shards written first, the side-by-side bench saw 200 of 1,000 nodes
unschedulable for up to a minute.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.ironic_service import IronicService
from testbed.nova_stack import NovaStack
from testbed.operator_objects import create_secrets
from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
from tests.nova import handover_pool
from tests.nova.nova_watch import NovaWatch
from tests.nova.test_failover_scenario import CLOUD, clouds_yaml
from tests.support.kube_api import KubeAPI
from tests.support.sampling import Sampler
from tests.support.operator_harness import POOLS, OperatorProcess, events, patch_spec, pool_manifest

pytestmark = pytest.mark.nova

POLL = 5
NODES = 12


@dataclass
class JoinSightings(Sampler):
    """Samples, every 0.3 s until stopped, how many nodes Ironic gives `member` and whether Nova
    lists its service and has mapped its host: (at, shards, listed, mapped)."""

    nova: NovaStack
    shards: Callable[[], dict[str, str | None]]
    member: str
    period: float = 0.3
    samples: list[tuple[float, int, bool, bool]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def sample(self) -> tuple[float, int, bool, bool]:
        owned = sum(1 for owner in self.shards().values() if owner == self.member)
        listed = self.member in self.nova.compute_services()
        return time.monotonic(), owned, listed, listed and self.nova.host_mapped(self.member)


def test_a_joining_member_gets_nodes_only_once_nova_can_schedule_to_it(
        kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack, noauth_ironic: IronicService,
        tmp_path: Path) -> None:
    client, ns, wait, ironic = kube_api.client, kube_namespace, kube_api.wait_for, noauth_ironic
    interval = nova_stack.timings["update_resources_interval"]
    names = handover_pool.fresh_pool(kube_api, ironic, "join", NODES)
    pool, (m0, m1, m2), nodes, shards = names.pool, names.members, names.nodes, names.shards

    with ProcessKubelet(client, ns, nova_stack, tmp_path / "kubelet"):
        operator = OperatorProcess(kube_api, ns, "op-join", tmp_path).start()
        create_secrets(client, ns, clouds_yaml(nova_stack, ironic, nova_stack.compute_url),
                       nova_conf=nova_stack.compute_conf(ironic.cloud))
        handover_pool.create_manage_secret(client, ns, "nova-manage", nova_stack.nova_conf.read_text())
        try:
            client.create(POOLS.format(ns=ns), pool_manifest(
                pool, cloud_name=CLOUD, resource_class=names.resource_class, image=PROCESS_IMAGE, replicas=2,
                ironic={"pollIntervalSeconds": POLL},
                handover={"novaManageConfig": {"secretRef": {"name": "nova-manage"}}}))
            handover_pool.wait_for_members(kube_api, ns, nova_stack, pool, (m0, m1), shards)

            with NovaWatch(nova_stack, set(nodes), {m0, m1, m2}, period=1.0) as watch, \
                    JoinSightings(nova_stack, shards, m2) as sightings:
                patch_spec(client, ns, pool, {"replicas": 3})
                wait(lambda: sorted(shards().values()).count(m2) == NODES // 3, timeout=180, interval=1,
                     what="the new member's share written (12 nodes over 3 members)")
                wait(lambda: handover_pool.nova_agrees(nova_stack, shards), timeout=6 * interval, interval=1,
                     what="Nova listing every node under its shard's compute")

            assert not sightings.errors[len(sightings.samples) // 20:], sightings.errors[:3]
            early = [(at, owned) for at, owned, _, mapped in sightings.samples if owned and not mapped]
            assert not early, f"nodes given to {m2} before Nova could schedule to it: {early[:3]}"
            assert any(listed and not mapped for _, _, listed, mapped in sightings.samples), \
                "the new host was never seen unmapped: the test saw nothing of the gate"
            assert not watch.errors[len(watch.samples) // 20:], watch.errors[:3]
            under_none = sorted({node for sample in watch.samples for node, hosts in sample.hosts.items()
                                 if not hosts})
            assert not under_none, f"listed under no compute at some point: {under_none}"
            twice, node = watch.longest_listed_twice()
            assert node is None, f"node {node} listed under two computes for {twice:.1f}s"
            created = [e["message"] for e in events(client, ns, "HostMappingJobCreated") if m2 in e["message"]]
            assert len(created) == 1, created
            mapped_at = next(at for at, _, _, mapped in sightings.samples if mapped)
            first_owned = next(at for at, owned, _, _ in sightings.samples if owned)
            print(f"join: {m2}'s host mapped {mapped_at - sightings.samples[0][0]:.1f}s after the scale-up, "
                  f"its first node {first_owned - mapped_at:.1f}s later")
        finally:
            handover_pool.report_and_delete(kube_api, ns, pool, operator)
