"""Scaling back up in the middle of a retire, as Nova sees it: the real
operator, real Ironic, the real Nova stack, member pods as REAL nova-compute processes and the
handover Jobs' pods as REAL `nova-manage db ironic_compute_node_move` (testbed/process_kubelet.py).

3 members, 18 nodes, 3 instance nodes each. Scale to 2: the retiring member's free nodes move,
its pod goes, its service is forced down and its first Job (one node at a time) starts. Scale
back to 3 right then. The handover is cancelled, not abandoned: what is in flight ends (the Job
runs to its end, each node Nova moved gets its Ironic shard), no pod of the member appears
meanwhile, then it is released with a HandoverCancelled Event; its pod comes back, its
forced_down is cleared, and it serves the nodes Nova left it. Nova agrees with Ironic on every
node, none was ever listed under two computes, and every server moved and every server that
stayed accepts os-stop and its Ironic node powers off. The member's return needs no new host
mapping: the operator's host-mapping Job ran for it once, at the start.
"""

from __future__ import annotations

import time
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
from tests.support.operator_harness import (
    POOLS, OperatorProcess, events, get_pool, patch_spec, pool_manifest, ready_members,
)

pytestmark = pytest.mark.nova

POLL = 5
NODES = 18


def test_scaling_back_up_mid_retire_finishes_what_is_in_flight_and_the_member_returns(
        kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack, noauth_ironic: IronicService,
        tmp_path: Path) -> None:
    client, ns, wait, ironic = kube_api.client, kube_namespace, kube_api.wait_for, noauth_ironic
    started = time.monotonic()
    interval = nova_stack.timings["update_resources_interval"]
    names = handover_pool.fresh_pool(kube_api, ironic, "hc", NODES)
    pool, (m0, m1, m2), resource_class, nodes, shards = \
        names.pool, names.members, names.resource_class, names.nodes, names.shards

    def power(node: str) -> str | None:
        return ironic.request("GET", f"/nodes/{node}?fields=power_state").json()["power_state"]

    with ProcessKubelet(client, ns, nova_stack, tmp_path / "kubelet"):
        operator = OperatorProcess(kube_api, ns, "op-cancel", tmp_path).start()
        create_secrets(client, ns, clouds_yaml(nova_stack, ironic, nova_stack.compute_url),
                       nova_conf=nova_stack.compute_conf(ironic.cloud))
        handover_pool.create_manage_secret(client, ns, "nova-manage", nova_stack.nova_conf.read_text())
        try:
            client.create(POOLS.format(ns=ns), pool_manifest(
                pool, cloud_name=CLOUD, resource_class=resource_class, image=PROCESS_IMAGE,
                failover={"rebalanceAfterSeconds": 30}, ironic={"pollIntervalSeconds": POLL},
                handover={"novaManageConfig": {"secretRef": {"name": "nova-manage"}}, "maxConcurrent": 1}))
            handover_pool.wait_for_members(kube_api, ns, nova_stack, pool, (m0, m1, m2), shards)
            owners = shards()
            instances = handover_pool.seed_instances(nova_stack, ironic, owners, (m0, m1, m2), 3)
            on_m2 = sorted(n for n in instances if owners[n] == m2)

            with NovaWatch(nova_stack, set(nodes), {m0, m1, m2}, period=1.0) as watch, \
                    handover_pool.PodSightings(client, ns, {m2}) as sightings:
                patch_spec(client, ns, pool, {"replicas": 2})
                wait(lambda: events(client, ns, "HandoverJobCreated"), timeout=12 * POLL, interval=0.3,
                     what="the retiring member's first handover Job")
                first_job_at = time.monotonic()
                patch_spec(client, ns, pool, {"replicas": 3})  # scaled back up while the Job runs
                wait(lambda: events(client, ns, "HandoverCancelled"), timeout=120, interval=0.5,
                     what="the handover cancelled once nothing of it is in flight")
                cancelled_at = time.monotonic()
                wait(lambda: ready_members(client, ns, pool) == sorted((m0, m1, m2)), timeout=120, interval=1,
                     what="the member back and Ready")
                wait(lambda: not nova_stack.compute_services()[m2].get("forced_down")
                     and nova_stack.compute_services()[m2].get("state") == "up", timeout=60, interval=1,
                     what="its service's forced_down cleared")
                wait(lambda: handover_pool.nova_agrees(nova_stack, shards), timeout=6 * interval, interval=2,
                     what="Nova agreeing with Ironic on every node")
            final = shards()
            moved = [n for n in on_m2 if final[n] != m2]
            stayed = [n for n in on_m2 if final[n] == m2]
            assert moved and stayed, (moved, stayed)  # the Job in flight ended; the rest stayed
            assert set(final[n] for n in moved) <= {m0, m1}
            # No pod of the member while its handover was in flight; none under two computes;
            # each node moved at most once.
            assert not sightings.between(m2, first_job_at, cancelled_at), "a pod of the member ran mid-handover"
            twice, node = watch.longest_listed_twice()
            assert node is None, f"node {node} listed under two computes for {twice:.1f}s"
            for n in on_m2:
                seen = [s.hosts[n] for s in watch.samples if s.hosts[n]]
                assert sum(1 for a, b in zip(seen, seen[1:]) if a != b) == (1 if n in moved else 0), (n, seen)
            (event,) = events(client, ns, "HandoverCancelled")
            assert f"keeps its {len(stayed)} nodes with instances" in event["message"]
            section = get_pool(client, ns, pool)["status"].get("handover") or {}
            assert not section.get("sources"), section
            # Instances work: every server of the member's nodes, each one handed over and each one
            # it kept, accepts os-stop and its Ironic node powers off through its nova-compute.
            for node in on_m2:
                code, text = nova_stack.server_action(instances[node], {"os-stop": None})
                assert code == 202, (node, code, text)
            wait(lambda: all(power(n) == "power off" for n in on_m2), timeout=120, interval=0.5,
                 what="every moved and every kept node powered off by its nova-compute")

            # Member 2's return (the same Nova service) needed no host mapping: its one Job was at
            # the start, as a new host (the handover scenarios map new members the same way).
            created = [e["message"] for e in events(client, ns, "HostMappingJobCreated")]
            assert len([m for m in created if m2 in m]) == 1, created
            print(f"cancel scenario: {len(moved)} of {len(on_m2)} instance nodes moved before the scale-back, "
                  f"{len(stayed)} stayed; cancelled {cancelled_at - first_job_at:.1f}s after the first Job; "
                  f"whole scenario {time.monotonic() - started:.0f}s")
        finally:
            handover_pool.report_and_delete(kube_api, ns, pool, operator)
