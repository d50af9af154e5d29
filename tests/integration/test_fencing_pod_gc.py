"""Fencing as a real cluster makes it: a member's Kubernetes node becomes unreachable, the
operator deletes the member's pod (gracefully: nobody can confirm the old process stopped), and
then the node is declared gone in one of the two ways the cluster itself acts on:

- the administrator taints it `node.kubernetes.io/out-of-service` (the machine is off), and the
  pod garbage collector force-deletes the terminating pods of that node;
- its Node object is deleted (a cloud controller saw the machine go), and the pod garbage
  collector deletes the pods bound to it.

Both happen whatever the pool's fencing mode says, also with Wait, so the operator meets a pod
that vanished under it. The invariant that must hold (invariant 5: never two live pods with one
identity): the member's replacement is created only after the node was declared gone (before
that the old pod may still run there), never on that node, and only once the old pod object is
gone; the other member is left alone.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, shards_of, unique_resource_class
from testbed.kube_client import KubeClient
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, events, get_pool, is_ready, loads, member_pods, pool_manifest, ready_members, settle,
)

pytestmark = pytest.mark.integration

POOL = "fence"
OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


class PodHistory:
    """Every watch event of the pool's pods, with the time the test received it, from a thread."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client, self.path = client, f"/api/v1/namespaces/{namespace}/pods"
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self._stopping = threading.Event()
        self._stream: Any = None
        self._since = client.get(self.path)["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._follow, name="pod-history", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self._stopping.is_set():
            self._stream = self.client.watch(self.path, timeout_seconds=30, resourceVersion=self._since,
                                             labelSelector=f"ironicshards.io/pool={POOL}")
            if self._stopping.is_set():
                self._stream.close()
            for event in self._stream:
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    self.events.append((time.time(), event["type"], event["object"]))
                    self._since = event["object"]["metadata"]["resourceVersion"]

    def stop(self) -> None:
        self._stopping.set()
        if self._stream is not None:
            self._stream.close()
        self._thread.join(timeout=30)

    def of(self, member: str) -> list[tuple[float, str, str, dict[str, Any]]]:
        """(time, type, uid, object) of the member's pods, in order."""
        return [(at, kind, obj["metadata"]["uid"], obj) for at, kind, obj in self.events
                if obj["metadata"]["name"] == member]


def declare_gone(client: KubeClient, node: str, how: str) -> None:
    if how == "out-of-service taint":
        taints = client.get(f"/api/v1/nodes/{node}")["spec"].get("taints") or []
        client.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": taints + [OUT_OF_SERVICE]}})
    else:
        client.delete(f"/api/v1/nodes/{node}")


@pytest.mark.parametrize("how", ["out-of-service taint", "Node deleted"])
@pytest.mark.parametrize("mode", ["Wait", "OutOfServiceTaint"])
def test_a_node_declared_gone_frees_the_identity_once_and_only_then(
        mode: str, how: str, kube_api: KubeAPI, kube_namespace: str, kubelet, ironic_service: IronicService,
        tmp_path: Path) -> None:
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(client)
    resource_class = unique_resource_class("podgc")
    seed_nodes_directly_in_db(ironic_service, 10, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    operator = OperatorProcess(kube_api, ns, "op-a", tmp_path).start()
    history = None
    try:
        client.create(POOLS.format(ns=ns), pool_manifest(
            POOL, cloud_name=ironic_service.cloud_name, resource_class=resource_class, replicas=2,
            failover={"fencing": {"mode": mode}}))
        wait(lambda: ready_members(client, ns, POOL) == [f"{POOL}-0", f"{POOL}-1"], timeout=60,
             what="two Ready members")
        history = PodHistory(client, ns)
        survivor = member_pods(client, ns, POOL)[f"{POOL}-0"]["metadata"]["uid"]
        victim = member_pods(client, ns, POOL)[f"{POOL}-1"]
        node = victim["spec"]["nodeName"]

        kubelet.set_node_reachable(node, False)
        wait(lambda: member_pods(client, ns, POOL)[f"{POOL}-1"]["metadata"].get("deletionTimestamp"),
             timeout=30, what="the lost pod deleted gracefully")
        settle(4)  # the old pod may still run: nothing replaces it
        assert member_pods(client, ns, POOL)[f"{POOL}-1"]["metadata"]["uid"] == victim["metadata"]["uid"]

        declared_at = time.time()
        declare_gone(client, node, how)
        replacement = wait(lambda: (p := member_pods(client, ns, POOL).get(f"{POOL}-1"))
                           and p["metadata"]["uid"] != victim["metadata"]["uid"] and is_ready(p) and p,
                           timeout=60, what="a Ready replacement")
        history.stop()
    finally:
        if history is not None:
            history.stop()
        operator.stop()
        print(f"----- operator op-a -----\n{operator.log()[-20000:]}")

    assert replacement["spec"]["nodeName"] != node
    trail = history.of(f"{POOL}-1")
    added = [(at, uid) for at, kind, uid, _ in trail if kind == "ADDED"]
    assert added and all(at >= declared_at for at, _ in added), (
        "a second pod of the member was created while the old one could still run")
    live: set[str] = set()
    for _, kind, uid, _ in trail:  # one pod object per identity at every moment
        if kind == "ADDED":
            assert not live, f"pod {uid} created while {live} still existed"
            live.add(uid)
        elif kind == "DELETED":
            live.discard(uid)
    assert live == {replacement["metadata"]["uid"]}
    assert member_pods(client, ns, POOL)[f"{POOL}-0"]["metadata"]["uid"] == survivor
    assert operator.refused() == []


GRACE_SECONDS = 3600  # failover.rebalanceAfterSeconds: an hour, so only a certain failure can move nodes within the test


@pytest.mark.parametrize("how", ["out-of-service taint", "Node deleted"])
def test_a_node_declared_gone_counts_its_member_out_and_moves_its_free_nodes_long_before_the_grace(
        how: str, kube_api: KubeAPI, kube_namespace: str, kubelet, ironic_service: IronicService,
        tmp_path: Path) -> None:
    """A member whose Kubernetes node is merely unreachable keeps its nodes for the grace
    (rebalanceAfterSeconds, an hour here: the ambiguous case). Once the node is declared gone
    (out-of-service taint, or its Node deleted), the failure is certain: the member is counted out
    (status.members[].countedOut with its kubernetesNode, a MemberCountedOut Event) and its free
    nodes move to the other member at once; the test waits for that at most 120 s, where the grace
    alone would take 3600 s. Its replacement is held Pending meanwhile: the member stays counted out
    after the garbage collector removed its old pod, and gets its share back once its pod is Ready."""
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(client)
    resource_class = unique_resource_class("counted")
    seed_nodes_directly_in_db(ironic_service, 10, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    member_0, member_1 = f"{POOL}-0", f"{POOL}-1"
    split = {member_0: 5, member_1: 5}
    operator = OperatorProcess(kube_api, ns, "op-a", tmp_path).start()
    try:
        client.create(POOLS.format(ns=ns), pool_manifest(
            POOL, cloud_name=ironic_service.cloud_name, resource_class=resource_class, replicas=2,
            failover={"rebalanceAfterSeconds": GRACE_SECONDS, "fencing": {"mode": "Wait"}}))
        wait(lambda: ready_members(client, ns, POOL) == [member_0, member_1]
             and loads(shards_of(ironic_service, resource_class)) == split, timeout=60,
             what="two Ready members with 5 nodes each")
        node = member_pods(client, ns, POOL)[member_1]["spec"]["nodeName"]
        kubelet.hold(member_1)  # its replacement stays Pending until released
        kubelet.set_node_reachable(node, False)
        wait(lambda: member_pods(client, ns, POOL)[member_1]["metadata"].get("deletionTimestamp"),
             timeout=30, what="the lost pod deleted gracefully")
        settle(4)  # unreachable only: ambiguous, the grace holds the nodes
        assert loads(shards_of(ironic_service, resource_class)) == split
        assert not (get_pool(client, ns, POOL)["status"]["members"][1]).get("countedOut")

        declare_gone(client, node, how)
        wait(lambda: loads(shards_of(ironic_service, resource_class)) == {member_0: 10}, timeout=120,
             what="the counted-out member's free nodes moved, long before the grace")
        entry = wait(lambda: next((m for m in get_pool(client, ns, POOL)["status"]["members"]
                                   if m["name"] == member_1 and m.get("countedOut")), None),
                     timeout=30, what="status.members[] says why the member is counted out")
        wait(lambda: events(client, ns, "MemberCountedOut"), timeout=30, what="the MemberCountedOut Event")

        # The replacement is created once the old pod is gone (the garbage collector's, then the
        # operator's next cycle): release it only once it exists.
        wait(lambda: (p := member_pods(client, ns, POOL).get(member_1)) and not p["metadata"].get("deletionTimestamp"),
             timeout=60, what="the replacement pod of the counted-out member created")
        kubelet.ready(member_1)
        wait(lambda: loads(shards_of(ironic_service, resource_class)) == split, timeout=60,
             what="the member back with its share once its pod is Ready")
        back = wait(lambda: next((m for m in get_pool(client, ns, POOL)["status"]["members"]
                                  if m["name"] == member_1 and m["ready"]), None),
                    timeout=30, what="status.members[] shows the member Ready")
    finally:
        operator.stop()
        print(f"----- operator op-a -----\n{operator.log()[-20000:]}")

    assert ("out-of-service" if how == "out-of-service taint" else "was deleted") in entry["countedOut"]
    assert node in entry["countedOut"] and entry["kubernetesNode"]  # where its pod runs now: the replacement's node
    assert "countedOut" not in back
    assert operator.refused() == []
