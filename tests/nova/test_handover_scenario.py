"""Retire with handover, as Nova sees it: the real operator, real Ironic, the real Nova stack,
member pods run as REAL nova-compute processes and the handover Job's pod as a REAL
`nova-manage db ironic_compute_node_move` with the mounted config (testbed/process_kubelet.py).

3 members, 30 nodes of which half carry instances (seeded through Nova's objects, then recorded
in Ironic, as a boot does). Scale to 2: the retired member's free nodes move, its pod goes, its
service is forced down, every instance node is moved in Nova and then re-sharded, and Nova's
hypervisor list shows each under its new owner; each server's host is the new owner, the old
service is deleted, and pinned nodes per kept member differ by at most one. The operator is
killed while the first Job runs and restarted: the end is the same, and a sampler of Nova
shows that no node ever moved twice and none was listed under two computes.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from testbed.ironic_service import IronicService, shards_of, unique_resource_class
from testbed.nova_stack import NovaStack
from testbed.operator_objects import create_secrets, install_crd
from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
from tests.nova.nova_watch import NovaWatch
from tests.nova.sharded_pool import available_nodes
from tests.nova.test_failover_scenario import CLOUD, clouds_yaml, ironic  # noqa: F401 - the module's Ironic
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, condition, events, get_pool, member_pods, patch_spec, pool_manifest, ready_members,
)

pytestmark = pytest.mark.nova

GRACE = 30
POLL = 5
NODES = 30


def test_retire_hands_over_every_instance_node_in_nova_then_ironic(
        kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack, ironic: IronicService,  # noqa: F811
        tmp_path: Path) -> None:
    if not kube_api.is_emulator:
        pytest.skip("the handover Job's pod runs on the process kubelet (the fake API server only)")
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    started = time.monotonic()
    interval = nova_stack.timings["update_resources_interval"]
    pool = f"ho{uuid.uuid4().hex[:6]}"
    m0, m1, m2 = (f"{pool}-{i}" for i in range(3))
    install_crd(client)
    resource_class = unique_resource_class("handover")
    nodes = available_nodes(ironic, NODES, resource_class)

    def shards() -> dict[str, str | None]:
        return shards_of(ironic, resource_class)

    def nova_agrees() -> bool:
        listed = nova_stack.hypervisor_hosts()
        return all(listed.get(node, []) == [shard] for node, shard in shards().items())

    def server_host(server: str, hosts: tuple[str, ...]) -> str | None:
        """The host Nova places `server` on (the summary list filtered by host: the seeded
        instances have no network cache, which the detail view needs)."""
        found = [h for h in hosts if any(s["id"] == server for s in nova_stack._get_all(
            f"/servers?all_tenants=1&host={h}", "servers"))]
        return found[0] if len(found) == 1 else None

    with ProcessKubelet(client, ns, nova_stack, tmp_path / "kubelet") as _kubelet:
        operator = OperatorProcess(kube_api, ns, "op-handover", tmp_path).start()
        create_secrets(client, ns, clouds_yaml(nova_stack, ironic, nova_stack.compute_url),
                       nova_conf=nova_stack.compute_conf(ironic.cloud))
        client.create(f"/api/v1/namespaces/{ns}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "nova-manage"},
            "data": {"nova.conf": base64.b64encode(nova_stack.nova_conf.read_bytes()).decode()}})
        try:
            client.create(POOLS.format(ns=ns), pool_manifest(
                pool, cloud_name=CLOUD, resource_class=resource_class, image=PROCESS_IMAGE,
                failover={"rebalanceAfterSeconds": GRACE}, ironic={"pollIntervalSeconds": POLL},
                handover={"novaManageConfig": {"secretRef": {"name": "nova-manage"}}, "maxConcurrent": 3}))
            wait(lambda: all(nova_stack.compute_services().get(m, {}).get("state") == "up"
                             for m in (m0, m1, m2)), timeout=120, interval=1, what="three nova-compute services up")
            nova_stack.discover_hosts()
            wait(lambda: ready_members(client, ns, pool) == [m0, m1, m2], timeout=60, what="three Ready members")
            wait(lambda: set(shards().values()) == {m0, m1, m2}, timeout=60, what="nodes adopted")
            wait(nova_agrees, timeout=6 * interval, interval=1, what="every node listed under its shard's compute")

            # Half the nodes carry an instance (Nova first, then Ironic, as a boot records it).
            owners = shards()
            instances = {}
            for member in (m0, m1, m2):
                for node in sorted(n for n, o in owners.items() if o == member)[:5]:
                    instances[node] = nova_stack.seed_instance(member, node)
                    ironic.request("PATCH", f"/nodes/{node}", json=[
                        {"op": "add", "path": "/instance_uuid", "value": instances[node]}])
            on_m2 = {n for n in instances if owners[n] == m2}
            servers_of = {instances[n]: n for n in instances}

            with NovaWatch(nova_stack, set(nodes), {m0, m1, m2}, period=0.5) as watch:
                retire_at = time.monotonic()
                patch_spec(client, ns, pool, {"replicas": 2})
                wait(lambda: events(client, ns, "HandoverJobCreated"), timeout=GRACE + 6 * POLL, interval=0.5,
                     what="the first handover Job")
                first_job_at = time.monotonic()
                operator.kill()  # mid-batch: the Job runs on, the next operator derives the rest
                operator = OperatorProcess(kube_api, ns, "op-handover-2", tmp_path).start()

                wait(lambda: {shards()[n] for n in on_m2} <= {m0, m1}, timeout=180, interval=1,
                     what="every instance node of the retired member re-sharded")
                resharded_at = time.monotonic()
                wait(nova_agrees, timeout=3 * interval, interval=1, what="Nova agreeing with Ironic")
                wait(lambda: m2 not in nova_stack.compute_services(), timeout=60 + 3 * interval, interval=1,
                     what="the retired member's service deleted")
                gone_at = time.monotonic()
            # Each server's host is its node's new owner.
            final = shards()
            assert {s: server_host(s, (m0, m1, m2)) for s in servers_of} == \
                {s: final[n] for s, n in servers_of.items()}
            assert {p for p in member_pods(client, ns, pool) if p in (m0, m1, m2)} == {m0, m1}
            pinned = Counter(final[n] for n in instances)
            assert set(pinned) == {m0, m1} and abs(pinned[m0] - pinned[m1]) <= 1, pinned
            # Nova the whole time: never a node under two computes, each moved node moved once.
            assert not watch.errors, watch.errors[:3]
            twice, node = watch.longest_listed_twice()
            assert node is None, f"node {node} listed under two computes for {twice:.1f}s"
            for n in on_m2:
                seen = [s.hosts[n] for s in watch.samples if s.hosts[n]]
                changes = sum(1 for a, b in zip(seen, seen[1:]) if a != b)
                assert changes == 1 and seen[0] == (m2,) and seen[-1] == (final[n],), (n, seen)
            forced = watch.forced_down_times(m2)
            assert forced, "the retired member's service was forced down before its nodes moved"
            moved_at = {n: watch.first(lambda s, n=n: s.hosts[n] and s.hosts[n] != (m2,)) for n in on_m2}
            assert min(forced) <= min(moved_at.values())
            for reason in ("HandoverForcedDown", "HandoverJobCreated", "HandedOverNodes", "DeletedNovaService"):
                assert events(client, ns, reason), f"no {reason} Event"
            blocked = condition(get_pool(client, ns, pool), "ScaleDownBlocked")
            assert blocked["status"] == "False"
            per_node = (resharded_at - first_job_at) / len(on_m2)
            print(f"handover scenario: {len(on_m2)} instance nodes handed over; first Job "
                  f"{first_job_at - retire_at:.1f}s after the scale-down (free nodes, pod gone, forced down), "
                  f"all re-sharded {resharded_at - first_job_at:.1f}s after it ({per_node:.1f}s per node, "
                  f"Jobs of 3, operator killed once), service deleted {gone_at - resharded_at:.1f}s later; "
                  f"Ironic writes: {[e['message'] for e in events(client, ns, 'HandedOverNodes')]}; "
                  f"whole scenario {time.monotonic() - started:.0f}s")
        finally:
            print("----- status -----\n" + repr(get_pool(client, ns, pool).get("status")))
            print("----- events -----\n" + "\n".join(f"{e.get('reason')}: {e.get('message')}" for e in
                                                    client.get(f"/api/v1/namespaces/{ns}/events")["items"]))
            try:
                client.delete(f"{POOLS.format(ns=ns)}/{pool}")
                wait(lambda: not client.get(POOLS.format(ns=ns))["items"], timeout=60, what="the pool deleted")
            finally:
                print(f"----- operator -----\n{operator.log()[-20000:]}")
                operator.stop()
