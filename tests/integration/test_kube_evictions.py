"""Evictions (POST pods/NAME/eviction, what `kubectl drain` sends) as the API server answers them
against a PodDisruptionBudget whose status the disruption controller keeps: granted while the
budget allows a disruption, then refused with 429 and the real message, cause and Status body
until the budget's pods are healthy again; a pod that is not Ready goes when the budget says
AlwaysAllow; a pod under two budgets cannot be evicted at all (500).

Written against the Kubernetes API contract (a real cluster's controller-manager keeps the
budgets there); without KUBECONFIG it runs on the test bed's real control plane (testbed/control_plane.py).
The pods are run by the fake kubelet, so the test skips where real kubelets run pods."""
from __future__ import annotations

import re
from typing import Any

import pytest

from testbed.kube_client import KubeAPIError, KubeClient, restricted_container
from testbed.kubelet import FakeKubelet
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import is_ready

pytestmark = pytest.mark.integration

LABELS = {"app": "budgeted"}


def pod(name: str, labels: dict[str, str] = LABELS) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [restricted_container("main", "registry.k8s.io/pause:3.10")]}}


def budget(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": LABELS}, **spec}}


def evict(client: KubeClient, ns: str, name: str) -> Any:
    return client.create(f"/api/v1/namespaces/{ns}/pods/{name}/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}})


def refusal(client: KubeClient, ns: str, name: str) -> KubeAPIError:
    with pytest.raises(KubeAPIError) as refused:
        evict(client, ns, name)
    return refused.value


def ready(client: KubeClient, ns: str, names: list[str]) -> bool:
    pods = {p["metadata"]["name"]: p for p in client.get(f"/api/v1/namespaces/{ns}/pods")["items"]}
    return all(n in pods and is_ready(pods[n]) for n in names)


def budget_status(client: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return client.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}").get("status") or {}


def test_a_budget_lets_one_pod_go_at_a_time(kube_api: KubeAPI, kube_namespace: str, kubelet: FakeKubelet) -> None:
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    pods = f"/api/v1/namespaces/{ns}/pods"
    for name in ("a", "b", "c"):
        client.create(pods, pod(name))
    client.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", budget("two-of-three", minAvailable=2))
    wait(lambda: ready(client, ns, ["a", "b", "c"]) or None, timeout=30, what="three Ready pods")
    status = wait(lambda: (s := budget_status(client, ns, "two-of-three")).get("disruptionsAllowed") == 1 and s,
                  timeout=30, what="the budget to allow one disruption")
    assert (status["currentHealthy"], status["desiredHealthy"], status["expectedPods"]) == (3, 2, 3)
    assert status["observedGeneration"] == 1
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("DisruptionAllowed", "True", "SufficientPods")]

    granted = evict(client, ns, "a")
    assert (granted["kind"], granted["status"]) == ("Status", "Success")

    # At once (the eviction took the one disruption) and after the controller's next look alike.
    refused = refusal(client, ns, "b")
    assert refused.status == 429
    body = refused.body
    assert (body["kind"], body["status"], body["reason"], body["code"]) == ("Status", "Failure", "TooManyRequests", 429)
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    (cause,) = body["details"]["causes"]
    assert cause["reason"] == "DisruptionBudget"
    assert re.fullmatch(r"The disruption budget two-of-three needs 2 healthy pods and has [23] currently",
                        cause["message"]), cause
    wait(lambda: "a" not in {p["metadata"]["name"] for p in client.get(pods)["items"]} or None,
         timeout=60, what="the evicted pod gone")
    status = wait(lambda: (s := budget_status(client, ns, "two-of-three")).get("currentHealthy") == 2 and s,
                  timeout=30, what="the budget to count two healthy pods")
    assert status["disruptionsAllowed"] == 0
    assert status["conditions"][0]["reason"] == "InsufficientPods"
    assert refusal(client, ns, "b").body["details"]["causes"][0]["message"] == (
        "The disruption budget two-of-three needs 2 healthy pods and has 2 currently")

    # A replacement becomes Ready: one disruption is allowed again.
    client.create(pods, pod("a2"))
    wait(lambda: budget_status(client, ns, "two-of-three").get("disruptionsAllowed") == 1 or None,
         timeout=60, what="a disruption allowed again")
    assert evict(client, ns, "b")["status"] == "Success"


def test_a_pod_that_is_not_ready_goes_when_the_budget_says_always_allow(
        kube_api: KubeAPI, kube_namespace: str, kubelet: FakeKubelet) -> None:
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    pods = f"/api/v1/namespaces/{ns}/pods"
    for name in ("a", "b"):
        client.create(pods, pod(name))
    budgets = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    client.create(budgets, budget("strict", minAvailable=2, unhealthyPodEvictionPolicy="AlwaysAllow"))
    wait(lambda: ready(client, ns, ["a", "b"]) or None, timeout=30, what="two Ready pods")
    wait(lambda: budget_status(client, ns, "strict").get("expectedPods") == 2 or None, timeout=30,
         what="the budget's first status")
    assert refusal(client, ns, "a").status == 429  # Ready, and the budget allows none
    kubelet.not_ready("a")
    assert evict(client, ns, "a")["status"] == "Success"  # not Ready: it serves nothing


def test_a_pod_under_two_budgets_cannot_be_evicted(kube_api: KubeAPI, kube_namespace: str,
                                                   kubelet: FakeKubelet) -> None:
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    client.create(f"/api/v1/namespaces/{ns}/pods", pod("a"))
    budgets = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    client.create(budgets, budget("one", minAvailable=0))
    client.create(budgets, budget("other", minAvailable=0))
    wait(lambda: ready(client, ns, ["a"]) or None, timeout=30, what="a Ready pod")
    refused = refusal(client, ns, "a")
    assert refused.status == 500
    assert refused.body["message"] == ("This pod has more than one PodDisruptionBudget, which the eviction "
                                       "subresource does not support.")
    with pytest.raises(KubeAPIError) as mismatch:
        client.create(f"/api/v1/namespaces/{ns}/pods/a/eviction", {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "b", "namespace": ns}})
    assert (mismatch.value.status, mismatch.value.body["message"]) == (
        400, "name in URL does not match name in Eviction object")
