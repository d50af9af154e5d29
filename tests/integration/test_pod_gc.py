"""The pod garbage collector of a cluster (kube-controller-manager's pod-garbage-collector) as
fencing meets it: it force-deletes a terminating pod on
a node that is not Ready and carries the `node.kubernetes.io/out-of-service` taint, and any pod
whose Node object was deleted; both are first set to phase Failed. Pods it has no reason to
touch stay.

Run on the test bed's real control plane (or the cluster of KUBECONFIG): the collector looks
every 20 s and quarantines a missing node for 40 s, so the waits are bounded generously.
"""
from __future__ import annotations

from typing import Any

import pytest

from testbed.kube_client import KubeClient, restricted_container
from testbed.kubelet import FakeKubelet, PodState, state_of
from tests.support.kube_api import KubeAPI

pytestmark = pytest.mark.integration

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
# A real collector acts within its 20 s period, 40 s more for a deleted node.
WITHIN = 90


def pod(name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [restricted_container("main", "registry.k8s.io/pause:3.10")],
                            "terminationGracePeriodSeconds": 30}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def events_of(client: KubeClient, pods: str, name: str, since: str) -> list[tuple[str, dict[str, Any]]]:
    """The watch events of pod `name` after resourceVersion `since`, until the watch goes quiet."""
    stream = client.watch(pods, timeout_seconds=2, resourceVersion=since, fieldSelector=f"metadata.name={name}")
    return [(event["type"], event["object"]) for event in stream]


def test_terminating_pods_of_an_out_of_service_node_are_force_deleted(
        kube_api: KubeAPI, kube_namespace: str, kubelet: FakeKubelet) -> None:
    client, ns = kube_api.client, kube_namespace
    pods = f"/api/v1/namespaces/{ns}/pods"
    node = kubelet.nodes[0]
    for name in ("leaving", "staying"):
        client.create(pods, pod(name, node))
        kube_api.wait_for(lambda n=name: state_of(client.get(f"{pods}/{n}")) == PodState.READY,
                          what=f"{name} Ready")
    kubelet.set_node_reachable(node, False)  # its kubelet is gone: nothing finishes a deletion
    client.delete(f"{pods}/leaving")
    since = client.get(pods)["metadata"]["resourceVersion"]

    # The administrator has powered the node off and says so. NoSchedule: no taint eviction,
    # so what happens is the collector's alone (it looks at the key, whatever the effect).
    taints = client.get(f"/api/v1/nodes/{node}")["spec"]["taints"]
    client.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": taints + [
        {"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoSchedule"}]}})
    kube_api.wait_for(lambda: not client.exists(f"{pods}/leaving"), timeout=WITHIN,
                      what="the terminating pod force-deleted")
    trail = events_of(client, pods, "leaving", since)
    assert [kind for kind, _ in trail][-2:] == ["MODIFIED", "DELETED"]
    assert trail[-2][1]["status"]["phase"] == "Failed"
    # A pod that is not being deleted is not the collector's business.
    assert client.get(f"{pods}/staying")["metadata"].get("deletionTimestamp") is None


def test_pods_of_a_deleted_node_are_deleted(kube_api: KubeAPI, kube_namespace: str, kubelet: FakeKubelet) -> None:
    client, ns = kube_api.client, kube_namespace
    pods = f"/api/v1/namespaces/{ns}/pods"
    lost, kept = kubelet.nodes[0], kubelet.nodes[1]
    client.create(pods, pod("orphan", lost))
    client.create(pods, pod("kept", kept))
    for name in ("orphan", "kept"):
        kube_api.wait_for(lambda n=name: state_of(client.get(f"{pods}/{n}")) == PodState.READY,
                          what=f"{name} Ready")
    kubelet.set_node_reachable(lost, False)
    since = client.get(pods)["metadata"]["resourceVersion"]

    client.delete(f"/api/v1/nodes/{lost}")  # the machine is gone (a cloud controller deletes its Node)
    kube_api.wait_for(lambda: not client.exists(f"{pods}/orphan"), timeout=WITHIN,
                      what="the pod of the deleted node deleted")
    trail = events_of(client, pods, "orphan", since)
    assert [kind for kind, _ in trail][-2:] == ["MODIFIED", "DELETED"]
    status = trail[-2][1]["status"]
    assert status["phase"] == "Failed"
    (disruption,) = [c for c in status["conditions"] if c["type"] == "DisruptionTarget"]
    assert (disruption["status"], disruption["reason"], disruption["message"]) == (
        "True", "DeletionByPodGC", "PodGC: node no longer exists")
    assert state_of(client.get(f"{pods}/kept")) == PodState.READY
