"""The Nova audit's two answers to a Nova that disagrees with the pool, on real Nova: the real
operator, real Ironic, the real Nova stack, member pods run as REAL nova-compute processes
(testbed/process_kubelet.py), and one more real nova-compute that is not the operator's.

1. A node whose instance and compute node name a live member while its Ironic shard names
   another member (what a build placed on a node's old owner right after a rebalance wrote its
   new shard leaves; here the shard is changed by hand, which leaves the same state) goes back to
   the member Nova and its instance name, without spec.nova.repairMisplaced, with a
   MisplacedNodeReturned Event naming the node, both shards and why, and the metric counting it.
2. A stray compute: a nova-compute with member 0's [ironic]shard under a host of its own (the
   deployment's host discovery maps it, as its periodic discovery would) takes member 0's free
   nodes in Nova. The audit names it (status.nova, Degraded NovaOutOfSync, a StrayCompute Warning,
   ironic_shard_nova_findings{kind="stray"}) with how many of the pool's nodes Nova lists under
   it, and never touches its service: enabled, not forced down, not deleted. Once it is stopped
   and Nova lists it down, it is named no more.

The stray and member 0 take the nodes' compute-node records from each other at each of their
resource passes (Nova's resource tracker drops a cached compute node another host took, and takes
it back): what share of the time Nova lists them under the stray depends on the two passes'
phases, and the audit's memory of sightings covers the unlucky ones (unit-tested). Here the
stray's update interval is 2 s, so that it holds them most of the time and the test does not
wait on the phases.

The stray here carries a member's shard, so it takes exactly that member's free nodes: a
nova-compute with no [ironic]shard at all takes a hash-ring share of every Ironic node of the
session's stack (other tests' too); the audit's rule (a host that is not the pool's, its service
up, listing the pool's nodes) is the same for both and unit-tested for both
(tests/unit/test_nova_policy.py).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.ironic_service import IronicService
from testbed.nova_stack import ComputeProcess, NovaStack
from testbed.nova_starter import render_ini
from testbed.operator_objects import create_secrets
from testbed.ports import free_port
from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
from tests.nova import handover_pool
from tests.nova.nova_watch import NovaWatch
from tests.nova.test_failover_scenario import CLOUD, clouds_yaml
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, condition, get_pool, http_get, pool_manifest, posted_events,
)

pytestmark = pytest.mark.nova

POLL = 5
NODES = 12


def test_the_audit_gives_misplaced_nodes_back_and_names_a_stray_compute_it_never_touches(
        kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack, noauth_ironic: IronicService,
        nova_computes: Callable[[str, list], ComputeProcess], tmp_path: Path) -> None:
    client, ns, wait, ironic = kube_api.client, kube_namespace, kube_api.wait_for, noauth_ironic
    started = time.monotonic()
    interval = nova_stack.timings["update_resources_interval"]
    names = handover_pool.fresh_pool(kube_api, ironic, "au", NODES)
    pool, (m0, m1, m2), shards = names.pool, names.members, names.shards
    stray = f"stray-{pool}"
    metrics_port = free_port()

    def nova_status() -> dict:
        return get_pool(client, ns, pool).get("status", {}).get("nova") or {}

    def metric(name: str, **labels: str) -> float:
        wanted = {**labels, "pool": f"{ns}/{pool}"}
        return next((sample.value for family in text_string_to_metric_families(http_get(metrics_port, "/metrics"))
                     for sample in family.samples if sample.name == name and sample.labels == wanted), 0.0)

    with ProcessKubelet(client, ns, nova_stack, tmp_path / "kubelet"):
        operator = OperatorProcess(kube_api, ns, "op-audit", tmp_path, METRICS_PORT=str(metrics_port)).start()
        create_secrets(client, ns, clouds_yaml(nova_stack, ironic, nova_stack.compute_url),
                       nova_conf=nova_stack.compute_conf(ironic.cloud))
        try:
            client.create(POOLS.format(ns=ns), pool_manifest(
                pool, cloud_name=CLOUD, resource_class=names.resource_class, image=PROCESS_IMAGE,
                ironic={"pollIntervalSeconds": POLL}))
            handover_pool.wait_for_members(kube_api, ns, nova_stack, pool, (m0, m1, m2), shards,
                                           map_hosts_by_hand=True)
            assert not get_pool(client, ns, pool)["spec"].get("nova", {}).get("repairMisplaced")
            up_at = time.monotonic()

            # 1. Nova and the instance on m0, the shard m1: given back to m0 at once.
            owners = shards()
            instances = handover_pool.seed_instances(nova_stack, ironic, owners, (m0,), 1)
            (node,) = instances
            wait(lambda: nova_stack.hypervisor_hosts().get(node) == [m0], timeout=3 * interval, interval=1,
                 what="the instance node under m0")
            ironic.request("PATCH", f"/nodes/{node}", json=[{"op": "add", "path": "/shard", "value": m1}])
            changed_at = time.monotonic()
            wait(lambda: shards()[node] == m0, timeout=6 * interval + 6 * POLL, interval=1,
                 what="the misplaced node given back to m0, where Nova and its instance are")
            returned_after = time.monotonic() - changed_at
            (event,) = posted_events(client, ns, "MisplacedNodeReturned")
            assert f"node {node} from {m1} back to {m0}" in event["message"], event
            assert f"its instance {instances[node]} is on {m0}, a live member" in event["message"], event
            assert metric("ironic_shard_nova_actions_total", action="misplaced_returned") == 1
            assert metric("ironic_shard_nova_actions_total", action="misplaced_handed_over") == 0
            assert nova_stack.hypervisor_hosts()[node] == [m0]
            wait(lambda: not any(nova_status().get("findings", {}).values()), timeout=3 * interval + 2 * POLL,
                 interval=1, what="the audit clear again")

            # 2. A stray compute with m0's shard under a host of its own.
            base = tmp_path / "stray-base.conf"
            base.write_text(nova_stack.compute_conf(ironic.cloud))
            overlay = tmp_path / "stray.conf"
            overlay.write_text(render_ini({"DEFAULT": {"host": stray, "update_resources_interval": 2},
                                           "ironic": {"shard": m0}}))
            free_of_m0 = {n for n, o in shards().items() if o == m0 and n not in instances}
            process = nova_computes(stray, [base, overlay])
            wait(lambda: nova_stack.compute_services().get(stray, {}).get("state") == "up", timeout=120,
                 interval=1, what="the stray nova-compute up")
            nova_stack.discover_hosts()  # what the deployment's periodic host discovery does
            stray_at = time.monotonic()

            def under_stray() -> set[str]:
                return {n for n, hosts in nova_stack.hypervisor_hosts().items() if stray in hosts}

            with NovaWatch(nova_stack, free_of_m0, {stray}) as watch:
                wait(lambda: under_stray() == free_of_m0, timeout=6 * interval, interval=1,
                     what="Nova listing m0's free nodes under the stray")

                status = wait(lambda: (s := nova_status()) and f"Nova compute {stray}" in s.get("message", "") and s,
                              timeout=6 * interval + 4 * POLL, interval=1, what="status.nova naming the stray")
                named_after = time.monotonic() - stray_at
                assert status["findings"]["stray"] == 1, status
                # the most of them one read has seen under it so far: the member takes them back at its passes
                most = re.search(f"Nova compute {stray} is not a member of this pool, yet Nova lists up to "
                                 r"(\d+) of the pool's nodes under it", status["message"])
                assert most and 1 <= int(most.group(1)) <= len(free_of_m0), status
                assert "stop that nova-compute, or give it an [ironic]shard no member of this pool uses" \
                    in status["message"]
                degraded = wait(lambda: (c := condition(get_pool(client, ns, pool), "Degraded")).get("reason")
                                == "NovaOutOfSync" and c, timeout=3 * POLL, interval=1, what="Degraded NovaOutOfSync")
                assert degraded["status"] == "True" and f"Nova compute {stray}" in degraded["message"]
                (warning,) = posted_events(client, ns, "StrayCompute")
                assert warning["type"] == "Warning" and f"Nova compute {stray}" in warning["message"]
                assert metric("ironic_shard_nova_findings", kind="stray") == 1

                # Stopped by its owner: once Nova lists it down, the audit names it no more. All
                # along (audits while it was up and after), its service stayed as its owner left it.
                process.stop()
                wait(lambda: nova_status().get("findings", {}).get("stray") == 0,
                     timeout=nova_stack.timings["service_down_time"] + 4 * interval + 2 * POLL, interval=1,
                     what="the stray named no more once its service is down")
                cleared_after = time.monotonic() - stray_at
            seen = [s.services[stray] for s in watch.samples if stray in s.services]
            assert len(seen) >= 10 and all(s["status"] == "enabled" and not s["forced_down"] for s in seen), seen[-3:]
            service = nova_stack.compute_services().get(stray)
            assert service is not None, "the operator deleted a service that is not its own"
            assert (service["status"], service["forced_down"]) == ("enabled", False), service
            assert len(posted_events(client, ns, "StrayCompute")) == 1, "the stray announced more than once"
            after_stop = sorted({h for n, hs in nova_stack.hypervisor_hosts().items() if n in free_of_m0 for h in hs})
            print(f"up {up_at - started:.0f}s; misplaced node given back {returned_after:.0f}s after its shard "
                  f"changed; stray named {named_after:.0f}s after it came up, no more {cleared_after:.0f}s after "
                  f"(update interval {interval}s); m0's free nodes listed under {after_stop} after it stopped")
        finally:
            handover_pool.report_and_delete(kube_api, ns, pool, operator)
