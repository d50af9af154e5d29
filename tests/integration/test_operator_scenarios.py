"""The operator end to end: real operator processes, the test bed's real Kubernetes control plane
(or the cluster of KUBECONFIG), the node agent, and the real Ironic service.

Everything is checked where a user would look: pods, the CR's status and Events, and the
shard of every Ironic node. The same tests run unchanged against a real API server given
by KUBECONFIG (where real kubelets run pods, the `kubelet` fixture skips them).
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import pytest
import yaml

from testbed.ironic_service import (
    IronicService, assign_shards_directly_in_db, claim_for_instance, seed_nodes_directly_in_db,
    shards_of, unique_resource_class,
)
from testbed.kube_client import KubeAPIError
from testbed.operator_objects import create_secrets, install_crd
from testbed.ports import free_port
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, condition, events, get_pool, http_get, is_ready, lease_holder, loads,
    member_pods, patch_spec, pool_manifest, posted_events, ready_members, settle,
)

pytestmark = pytest.mark.integration

POOL = "rack-a"
GRACE = 12  # failover.rebalanceAfterSeconds in these tests
FORCE_AFTER = 15  # failover.fencing.forceAfterSeconds (used by mode ForceAfter only)


@pytest.fixture(scope="module")
def crd(kube_api: KubeAPI) -> None:
    install_crd(kube_api.client)


@pytest.fixture
def operators(kube_api: KubeAPI, kube_namespace: str, tmp_path: Path, crd: None):
    """Start operator processes by identity; at the end, delete the namespace's pools (the
    operator removes its finalizer) and stop every process, printing their logs."""
    started: list[OperatorProcess] = []

    def start(identity: str, **env: str) -> OperatorProcess:
        process = OperatorProcess(kube_api, kube_namespace, identity, tmp_path, **env).start()
        started.append(process)
        return process

    yield start
    pools = POOLS.format(ns=kube_namespace)
    try:
        for item in kube_api.client.get(pools)["items"]:
            kube_api.client.delete(f"{pools}/{item['metadata']['name']}")
        kube_api.wait_for(lambda: not kube_api.client.get(pools)["items"], timeout=60,
                          what="the pools to be deleted")
    finally:
        for process in started:
            process.stop()
        for process in started:
            print(f"----- operator {process.identity} -----\n{process.log()[-20000:]}")


def owners_now(ironic: IronicService, resource_class: str) -> dict[str, str | None]:
    return shards_of(ironic, resource_class)


def totals(owners: dict[str, str | None]) -> dict[str | None, int]:
    return dict(loads(owners))


def test_pool_lifecycle(kube_api: KubeAPI, kube_namespace: str, kubelet, operators,
                        ironic_service: IronicService) -> None:
    """Apply -> fail a member -> scale up (operator killed mid-way) -> scale down blocked by an
    instance, then unblocked -> roll a new image -> delete the CR."""
    client, ns = kube_api.client, kube_namespace
    wait = kube_api.wait_for

    # An existing deployment: 120 nodes, 30 of them with instances on the future members.
    resource_class = unique_resource_class("operator")
    nodes = seed_nodes_directly_in_db(ironic_service, 120, resource_class=resource_class)
    pinned = {node: f"{POOL}-{i % 3}" for i, node in enumerate(nodes[:30])}
    assign_shards_directly_in_db(ironic_service, pinned)
    claim_for_instance(ironic_service, list(pinned))
    create_secrets(client, ns, ironic_service.clouds_yaml)

    def pinned_unmoved() -> None:
        now = owners_now(ironic_service, resource_class)
        assert {n: now[n] for n in pinned} == pinned, "a node with an instance changed owner"

    first, second = operators("op-a"), operators("op-b")
    holder = wait(lambda: lease_holder(client, ns), timeout=30, what="a leader")
    assert holder in (first.identity, second.identity)

    # 1. Apply: three pods, all Ready, every node owned by a ready member, balanced.
    client.create(POOLS.format(ns=ns), pool_manifest(
        POOL, cloud_name=ironic_service.cloud_name, resource_class=resource_class,
        failover={"rebalanceAfterSeconds": GRACE}))
    wait(lambda: ready_members(client, ns, POOL) == [f"{POOL}-{i}" for i in range(3)], timeout=60,
         what="three Ready members")
    balanced3 = {f"{POOL}-{i}": 40 for i in range(3)}
    wait(lambda: totals(owners_now(ironic_service, resource_class)) == balanced3, timeout=90, interval=1,
         what="120 nodes balanced over 3 members")
    pool = wait(lambda: (p := get_pool(client, ns, POOL)) and condition(p, "Ready").get("status") == "True" and p,
                timeout=30, what="condition Ready=True")
    status = pool["status"]
    assert status["observedGeneration"] == pool["metadata"]["generation"]
    assert (status["replicas"], status["readyReplicas"]) == (3, 3)
    observed_at = status["nodes"].pop("observedAt")  # when these counts were listed in full
    assert status["nodes"] == {"total": 120, "free": 90, "pinned": 30, "unassigned": 0,
                               "pendingMoves": 0, "misplaced": 0}
    listed = datetime.datetime.strptime(observed_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    assert abs(time.time() - listed.timestamp()) < 600
    assert [(m["name"], m["nodes"], m["pinnedNodes"]) for m in status["members"]] == [
        (f"{POOL}-{i}", 40, 10) for i in range(3)]
    pods = member_pods(client, ns, POOL)
    owner, = pods[f"{POOL}-0"]["metadata"]["ownerReferences"]
    assert owner["uid"] == pool["metadata"]["uid"] and owner["controller"] is True
    pinned_unmoved()

    # A quiet pool is left alone: no status rewrite, no pod touched (invariant 6).
    settle(2)
    before = (get_pool(client, ns, POOL)["metadata"]["resourceVersion"],
              {n: p["metadata"]["resourceVersion"] for n, p in member_pods(client, ns, POOL).items()})
    settle(11)  # two poll intervals
    after = (get_pool(client, ns, POOL)["metadata"]["resourceVersion"],
             {n: p["metadata"]["resourceVersion"] for n, p in member_pods(client, ns, POOL).items()})
    assert after == before

    # 2. Member 1 fails; its replacement is held Pending (a slow image pull).
    kubelet.hold(f"{POOL}-1")
    failed_at = time.monotonic()
    old_uid = kubelet.fail(f"{POOL}-1")["metadata"]["uid"]
    replacement = wait(lambda: (p := member_pods(client, ns, POOL).get(f"{POOL}-1"))
                       and p["metadata"]["uid"] != old_uid and p, timeout=30,
                       what="a new pod with the same name")
    assert replacement["metadata"]["name"] == f"{POOL}-1"
    assert posted_events(client, ns, "ReplacingPod")
    # Within the grace, nothing moves.
    settle(max(0.0, GRACE / 2 - (time.monotonic() - failed_at)))
    assert totals(owners_now(ironic_service, resource_class)) == balanced3
    # After the grace, its free nodes go to the ready members; its pinned nodes stay.
    wait(lambda: totals(owners_now(ironic_service, resource_class))
         == {f"{POOL}-0": 55, f"{POOL}-1": 10, f"{POOL}-2": 55}, timeout=60, interval=1,
         what="member 1's free nodes re-owned after the grace")
    # (Kubernetes times have whole seconds: the pod's lost-readiness time may read up to 1 s early.)
    assert time.monotonic() - failed_at >= GRACE - 1
    pinned_unmoved()
    # It comes back: free nodes return, balance again.
    kubelet.ready(f"{POOL}-1")
    wait(lambda: totals(owners_now(ironic_service, resource_class)) == balanced3, timeout=60, interval=1,
         what="balance again once member 1 is back")
    pinned_unmoved()

    # 3. Scale to 5; the leader is killed while it works; the standby takes over.
    # Through the scale subresource, as `kubectl scale ics/rack-a --replicas=5` does.
    client.patch(f"{POOLS.format(ns=ns)}/{POOL}/scale", {"spec": {"replicas": 5}})
    wait(lambda: {f"{POOL}-3", f"{POOL}-4"} <= set(member_pods(client, ns, POOL)), timeout=30,
         what="pods for the new members")
    leader = first if lease_holder(client, ns) == first.identity else second
    standby = second if leader is first else first
    killed_at = time.monotonic()
    leader.kill()
    wait(lambda: lease_holder(client, ns) == standby.identity, timeout=30, what="the standby to take over")
    takeover = time.monotonic() - killed_at
    print(f"standby took over {takeover:.1f}s after the leader was killed")
    operators("op-c")  # the restarted replica is the new standby
    wait(lambda: totals(owners_now(ironic_service, resource_class)) == {f"{POOL}-{i}": 24 for i in range(5)},
         timeout=90, interval=1, what="120 nodes balanced over 5 members")
    assert len(ready_members(client, ns, POOL)) == 5
    pinned_unmoved()

    # 4. Scale to 2: rack-a-2 owns nodes with instances and blocks; 3 and 4 go.
    patch_spec(client, ns, POOL, {"replicas": 2})
    blocked = wait(lambda: (c := condition(get_pool(client, ns, POOL), "ScaleDownBlocked"))
                   .get("status") == "True" and c, timeout=60, what="ScaleDownBlocked")
    assert f"{POOL}-2 owns 10 pinned nodes" in blocked["message"]
    wait(lambda: set(member_pods(client, ns, POOL)) == {f"{POOL}-0", f"{POOL}-1", f"{POOL}-2"},
         timeout=60, what="members 3 and 4 removed, 2 kept")
    wait(lambda: totals(owners_now(ironic_service, resource_class))
         == {f"{POOL}-0": 55, f"{POOL}-1": 55, f"{POOL}-2": 10}, timeout=60, interval=1,
         what="free nodes on the two remaining members")
    assert any(e["type"] == "Warning" for e in events(client, ns, "ScaleDownBlocked"))
    pinned_unmoved()
    # Its instances are deleted: the nodes are free, move, and the member goes.
    for node in [n for n, m in pinned.items() if m == f"{POOL}-2"]:
        ironic_service.request("PATCH", f"/nodes/{node}", json=[{"op": "remove", "path": "/instance_uuid"}])
        del pinned[node]
    wait(lambda: set(member_pods(client, ns, POOL)) == {f"{POOL}-0", f"{POOL}-1"}, timeout=60,
         what="member 2 removed once it owns nothing")
    wait(lambda: condition(get_pool(client, ns, POOL), "ScaleDownBlocked").get("status") == "False",
         timeout=30, what="ScaleDownBlocked cleared")
    assert totals(owners_now(ironic_service, resource_class)) == {f"{POOL}-0": 60, f"{POOL}-1": 60}
    pinned_unmoved()

    # 5. A new image rolls one member at a time, each Ready before the next.
    patch_spec(client, ns, POOL, {"image": "registry.example/nova-compute:2"})
    worst = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        pods = member_pods(client, ns, POOL)
        down = 2 - sum(1 for p in pods.values() if is_ready(p))
        worst = max(worst, down)
        images = {p["spec"]["containers"][0]["image"] for p in pods.values() if is_ready(p)}
        if down == 0 and images == {"registry.example/nova-compute:2"}:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the new image did not roll out within 90 s")
    assert worst == 1, "the roll took both members down at once (or none was restarted)"
    assert len(events(client, ns, "RollingUpdate")) == 2

    # 6. Delete the CR: pods and ConfigMaps go; Ironic shards are left as they were.
    shards_before = owners_now(ironic_service, resource_class)
    client.delete(f"{POOLS.format(ns=ns)}/{POOL}")
    wait(lambda: not member_pods(client, ns, POOL), timeout=60, what="pods garbage-collected")
    wait(lambda: not client.get(f"/api/v1/namespaces/{ns}/configmaps",
                                labelSelector=f"ironicshards.io/pool={POOL}")["items"],
         timeout=60, what="ConfigMaps garbage-collected")
    settle(3)
    assert owners_now(ironic_service, resource_class) == shards_before


def test_paused_and_conflicting_pools_write_nothing(kube_api: KubeAPI, kube_namespace: str, kubelet,
                                                    operators, ironic_service: IronicService) -> None:
    client, ns = kube_api.client, kube_namespace
    resource_class = unique_resource_class("guards")
    seed_nodes_directly_in_db(ironic_service, 20, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    operators("op-a")
    cloud = ironic_service.cloud_name

    # Paused: reports, creates no pod, writes no shard.
    client.create(POOLS.format(ns=ns), pool_manifest("held", cloud_name=cloud, resource_class=resource_class,
                                                     paused=True, replicas=2))
    pool = kube_api.wait_for(lambda: (p := get_pool(client, ns, "held")).get("status", {}).get("nodes") and p,
                             timeout=30, what="status of the paused pool")
    assert pool["status"]["nodes"]["total"] == 20
    assert condition(pool, "Progressing")["reason"] == "Paused"
    settle(3)
    assert not member_pods(client, ns, "held")
    assert set(shards_of(ironic_service, resource_class).values()) == {None}

    # A second pool over the same nodes, created later, is refused; the first one runs.
    client.create(POOLS.format(ns=ns), pool_manifest("late", cloud_name=cloud, resource_class=resource_class,
                                                     replicas=1))
    late = kube_api.wait_for(lambda: (p := get_pool(client, ns, "late")) and
                             condition(p, "Conflict").get("status") == "True" and p,
                             timeout=30, what="Conflict on the later pool")
    assert f"{ns}/held" in condition(late, "Conflict")["message"]
    patch_spec(client, ns, "held", {"paused": False})
    kube_api.wait_for(lambda: set(shards_of(ironic_service, resource_class).values()) == {"held-0", "held-1"},
                      timeout=60, what="the first pool adopting its nodes")
    settle(3)
    assert not member_pods(client, ns, "late")
    assert condition(get_pool(client, ns, "late"), "Conflict")["status"] == "True"


@pytest.mark.parametrize("mode", ["Wait", "OutOfServiceTaint", "ForceAfter"])
def test_member_on_an_unreachable_node_is_replaced_only_as_fencing_allows(
        mode: str, kube_api: KubeAPI, kube_namespace: str, kubelet, operators,
        ironic_service: IronicService) -> None:
    client, ns = kube_api.client, kube_namespace
    resource_class = unique_resource_class("fencing")
    seed_nodes_directly_in_db(ironic_service, 10, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    operators("op-a")
    client.create(POOLS.format(ns=ns), pool_manifest(
        "fence", cloud_name=ironic_service.cloud_name, resource_class=resource_class, replicas=2,
        failover={"fencing": {"mode": mode, "forceAfterSeconds": FORCE_AFTER} if mode == "ForceAfter"
                  else {"mode": mode}}))
    kube_api.wait_for(lambda: ready_members(client, ns, "fence") == ["fence-0", "fence-1"], timeout=60,
                      what="two Ready members")
    victim = member_pods(client, ns, "fence")["fence-1"]
    node = victim["spec"]["nodeName"]
    kubelet.set_node_reachable(node, False)
    lost_at = time.monotonic()

    # The operator deletes the pod, but nothing confirms it stopped: it is not replaced.
    kube_api.wait_for(lambda: member_pods(client, ns, "fence")["fence-1"]["metadata"].get("deletionTimestamp"),
                      timeout=30, what="the lost pod to be deleted gracefully")
    settle(6)
    pod = member_pods(client, ns, "fence")["fence-1"]
    assert pod["metadata"]["uid"] == victim["metadata"]["uid"], "replaced while the old pod may still run"
    assert condition(get_pool(client, ns, "fence"), "Degraded")["status"] == "True"
    if mode == "Wait":
        return
    if mode == "OutOfServiceTaint":
        # The administrator declares the node out of service: now it is forgotten.
        client.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]}})
    kube_api.wait_for(lambda: (p := member_pods(client, ns, "fence").get("fence-1"))
                      and p["metadata"]["uid"] != victim["metadata"]["uid"] and is_ready(p),
                      timeout=60, what="a replacement on a reachable node")
    if mode == "ForceAfter":
        assert time.monotonic() - lost_at >= FORCE_AFTER
        assert posted_events(client, ns, "FencedPod")
    # With OutOfServiceTaint the cluster's pod garbage collector force-deletes the terminating pod
    # of the out-of-service node too, mostly before the operator's next look, so who forgot the
    # old pod is a race (FencedPod only when the operator won it): test_fencing_pod_gc.py checks
    # that the identity is freed once and only then, whoever forgot the pod.


def test_an_out_of_service_taint_counts_a_not_ready_member_out_within_seconds(
        kube_api: KubeAPI, kube_namespace: str, kubelet, operators, ironic_service: IronicService) -> None:
    """A member whose Kubernetes node is lost (grace 10 minutes, poll 5 minutes) and then
    declared out of service, as after a non-graceful node shutdown: the real pod garbage collector
    force-deletes its pod, its replacement cannot start (held), and its free nodes move within
    seconds: a member within its grace is looked at every few seconds, and the taint on the node
    its pod last ran on makes its failure certain."""
    client, ns = kube_api.client, kube_namespace
    resource_class = unique_resource_class("taint")
    seed_nodes_directly_in_db(ironic_service, 10, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    operators("op-a")
    client.create(POOLS.format(ns=ns), pool_manifest(
        "taint", cloud_name=ironic_service.cloud_name, resource_class=resource_class, replicas=2,
        ironic={"pollIntervalSeconds": 300}, failover={"rebalanceAfterSeconds": 600}))
    kube_api.wait_for(lambda: set(owners_now(ironic_service, resource_class).values()) == {"taint-0", "taint-1"},
                      timeout=120, what="the nodes shared by two members")
    node = member_pods(client, ns, "taint")["taint-1"]["spec"]["nodeName"]
    kubelet.hold("taint-1")  # its replacement, once there is one, does not start
    kubelet.set_node_reachable(node, False)  # the node lifecycle controller marks the pod not Ready
    kube_api.wait_for(lambda: any(m["name"] == "taint-1" and m.get("ready") is False
                                  for m in get_pool(client, ns, "taint").get("status", {}).get("members", [])),
                      timeout=60, what="the operator to see taint-1 not Ready (its grace begins)")
    assert set(owners_now(ironic_service, resource_class).values()) == {"taint-0", "taint-1"}
    taints = client.get(f"/api/v1/nodes/{node}")["spec"].get("taints") or []
    client.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": [
        *taints, {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]}})
    kube_api.wait_for(lambda: set(owners_now(ironic_service, resource_class).values()) == {"taint-0"},
                      timeout=60, what="taint-1's nodes moved (within seconds; the poll is 300 s, the grace 600 s)")

    def counted_out() -> str | None:  # the status of the cycle that moved them follows its writes
        return next((m.get("countedOut") for m in get_pool(client, ns, "taint")["status"]["members"]
                     if m["name"] == "taint-1"), None)
    kube_api.wait_for(counted_out, timeout=30, what="status.members[taint-1].countedOut")
    assert "out-of-service" in counted_out()


def test_a_leader_that_loses_its_lease_stops_at_once(kube_api: KubeAPI, kube_namespace: str,
                                                     operators) -> None:
    client, ns = kube_api.client, kube_namespace
    health, metrics = free_port(), free_port()
    leader = operators("op-a", HEALTH_PORT=str(health), METRICS_PORT=str(metrics))
    kube_api.wait_for(lambda: lease_holder(client, ns) == "op-a", timeout=30, what="op-a leading")
    assert kube_api.wait_for(lambda: http_get(health, "/healthz"), timeout=10) == "ok leader\n"
    assert "ironic_shard_leader 1.0" in http_get(metrics, "/metrics")
    standby_health = free_port()
    operators("op-b", HEALTH_PORT=str(standby_health))
    assert kube_api.wait_for(lambda: http_get(standby_health, "/healthz"), timeout=10) == "ok standby\n"
    # Someone else writes the Lease (e.g. a replica that saw op-a's record go stale).
    path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/ironic-shard-operator"

    def take_lease() -> bool:
        lease = client.get(path)
        lease["spec"].update(holderIdentity="intruder", renewTime=datetime.datetime.now(datetime.UTC)
                             .strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        try:
            client.replace(path, lease)  # with its resourceVersion: 409 if op-a renewed meanwhile
            return True
        except KubeAPIError as error:
            if error.status != 409:
                raise
            return False
    kube_api.wait_for(take_lease, timeout=10, what="the Lease written by someone else")
    code = kube_api.wait_for(lambda: leader.process.poll(), timeout=15, what="op-a to exit")
    assert code == 1
    assert "lost leadership" in leader.log()


def test_a_failed_member_is_replaced_during_a_long_rebalance(
        kube_api: KubeAPI, kube_namespace: str, kubelet, operators, ironic_service: IronicService) -> None:
    client, ns = kube_api.client, kube_namespace
    resource_class = unique_resource_class("busy")
    seed_nodes_directly_in_db(ironic_service, 400, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    operators("op-a")
    client.create(POOLS.format(ns=ns), pool_manifest("busy", cloud_name=ironic_service.cloud_name,
                                                     resource_class=resource_class, replicas=2))

    def adopting() -> bool:
        unassigned = totals(owners_now(ironic_service, resource_class)).get(None, 0)
        return 0 < unassigned < 380
    kube_api.wait_for(adopting, timeout=60, interval=0.5, what="the adoption of 400 nodes under way")
    old_uid = kubelet.fail("busy-0")["metadata"]["uid"]
    failed_at = time.monotonic()
    kube_api.wait_for(lambda: (p := member_pods(client, ns, "busy").get("busy-0"))
                      and p["metadata"]["uid"] != old_uid, timeout=30, what="the replacement pod")
    replaced_after = time.monotonic() - failed_at
    still_unassigned = totals(owners_now(ironic_service, resource_class)).get(None, 0)
    print(f"replaced {replaced_after:.1f}s after the failure, {still_unassigned} nodes still unassigned")
    assert still_unassigned > 0, "the replacement waited for the whole rebalance"
    kube_api.wait_for(lambda: totals(owners_now(ironic_service, resource_class)) == {"busy-0": 200, "busy-1": 200},
                      timeout=120, interval=1, what="the adoption to finish")


def test_an_unreachable_ironic_is_reported_on_the_pool(kube_api: KubeAPI, kube_namespace: str, operators,
                                                       ironic_service: IronicService) -> None:
    client, ns = kube_api.client, kube_namespace
    cloud = ironic_service.cloud
    cloud["baremetal_endpoint_override"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    create_secrets(client, ns, yaml.safe_dump({"clouds": {"nowhere": cloud}}))
    operators("op-a")
    client.create(POOLS.format(ns=ns), pool_manifest("lost", cloud_name="nowhere",
                                                     resource_class=unique_resource_class("lost")))
    pool = kube_api.wait_for(lambda: (p := get_pool(client, ns, "lost")) and
                             condition(p, "Degraded").get("status") == "True" and p,
                             timeout=60, what="Degraded on the pool")
    degraded = condition(pool, "Degraded")
    assert degraded["reason"] == "IronicUnavailable"
    assert cloud["baremetal_endpoint_override"] in degraded["message"]
    assert condition(pool, "Ready")["status"] == "False"
