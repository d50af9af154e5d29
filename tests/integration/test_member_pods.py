"""Member pods a real cluster accepts, and a node drain that takes one member at a time.

A pool's pod settings (registry credentials, security contexts, a CA bundle volume) reach every
member pod, and the API server admits them (its schema validation of Pods is the real one). The
pool's PodDisruptionBudget, created and owned by the operator, lets an eviction (what `kubectl
drain` sends) take one member; the next is refused with the API server's 429 until the first
one's replacement, same identity, is Ready; the budget follows the member count and goes with
the pool. Real operator process (as the chart's ServiceAccount, with its RBAC), the session's
real Ironic, the fake kubelet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, unique_resource_class
from testbed.kube_client import KubeAPIError, KubeClient
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, member_pods, patch_spec, pool_manifest, ready_members,
)

pytestmark = pytest.mark.integration

POOL = "rack-d"
MEMBERS = [f"{POOL}-{i}" for i in range(3)]
BUDGETS = "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 42436, "seccompProfile": {"type": "RuntimeDefault"}}


def evict(client: KubeClient, ns: str, name: str) -> Any:
    return client.create(f"/api/v1/namespaces/{ns}/pods/{name}/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}})


def budget_of(client: KubeClient, ns: str) -> dict[str, Any] | None:
    try:
        return client.get(f"{BUDGETS.format(ns=ns)}/{POOL}")
    except KubeAPIError as error:
        if error.status == 404:
            return None
        raise


def test_a_drain_evicts_one_member_at_a_time(kube_api: KubeAPI, kube_namespace: str, kubelet, tmp_path: Path,
                                             ironic_service: IronicService) -> None:
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(client)
    resource_class = unique_resource_class(POOL)
    seed_nodes_directly_in_db(ironic_service, 6, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    with OperatorProcess(kube_api, ns, "op-a", tmp_path) as operator:
        client.create(POOLS.format(ns=ns), pool_manifest(
            POOL, cloud_name=ironic_service.cloud_name, resource_class=resource_class, replicas=3,
            imagePullSecrets=[{"name": "registry-credentials"}], podSecurityContext=RESTRICTED,
            volumes=[{"name": "private-ca", "configMap": {"name": "private-ca", "optional": True}}],
            volumeMounts=[{"name": "private-ca", "mountPath": "/etc/pki/private-ca", "readOnly": True}]))
        wait(lambda: ready_members(client, ns, POOL) == MEMBERS or None, timeout=90, what="three Ready members")

        # What the pool asked for is in every member pod, as the API server stored it.
        for pod in member_pods(client, ns, POOL).values():
            spec, (container,) = pod["spec"], pod["spec"]["containers"]
            assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
            assert spec["securityContext"] == RESTRICTED
            assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
            assert {"name": "private-ca", "mountPath": "/etc/pki/private-ca", "readOnly": True} in container["volumeMounts"]
            assert spec["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"

        # The pool's budget: owned by the pool, over its member pods, one of three may go.
        budget = wait(lambda: budget_of(client, ns), timeout=30, what="the pool's PodDisruptionBudget")
        (owner,) = budget["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("IronicComputeShard", POOL, True)
        assert budget["spec"]["minAvailable"] == 2
        assert budget["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "nova-compute",
                                                              "ironicshards.io/pool": POOL}}
        wait(lambda: (budget_of(client, ns) or {}).get("status", {}).get("disruptionsAllowed") == 1 or None,
             timeout=30, what="the budget to allow one disruption")

        # A drain: the first member goes; the second is refused until the first is back, Ready.
        first = member_pods(client, ns, POOL)[MEMBERS[0]]["metadata"]["uid"]
        assert evict(client, ns, MEMBERS[0])["status"] == "Success"
        with pytest.raises(KubeAPIError) as refused:
            evict(client, ns, MEMBERS[1])
        assert refused.value.status == 429
        assert refused.value.body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
        assert refused.value.body["details"]["causes"][0]["reason"] == "DisruptionBudget"
        wait(lambda: (p := member_pods(client, ns, POOL).get(MEMBERS[0])) and p["metadata"]["uid"] != first
             and ready_members(client, ns, POOL) == MEMBERS or None, timeout=90,
             what=f"{MEMBERS[0]} replaced (same identity) and Ready")
        wait(lambda: (budget_of(client, ns) or {}).get("status", {}).get("disruptionsAllowed") == 1 or None,
             timeout=30, what="one disruption allowed again")
        assert evict(client, ns, MEMBERS[1])["status"] == "Success"

        # The budget follows the member count, and goes with the pool.
        patch_spec(client, ns, POOL, {"replicas": 4})
        wait(lambda: (budget_of(client, ns) or {}).get("spec", {}).get("minAvailable") == 3 or None,
             timeout=60, what="the budget for four members")
        client.delete(f"{POOLS.format(ns=ns)}/{POOL}")
        wait(lambda: budget_of(client, ns) is None or None, timeout=60, what="the budget garbage-collected")
        assert not operator.refused()


def test_a_privileged_override_is_refused_by_pod_security_and_the_pool_says_so(
        kube_api: KubeAPI, kube_namespace: str, kubelet, tmp_path: Path, ironic_service: IronicService) -> None:
    """The namespace enforces Pod Security "restricted" (as every test namespace does): the
    chart's defaults are admitted, a user's privileged securityContext is not, and the pool's
    Degraded condition and a Warning Event name the refusal and its cause."""
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    assert client.get(f"/api/v1/namespaces/{ns}")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    install_crd(client)
    resource_class = unique_resource_class("priv")
    seed_nodes_directly_in_db(ironic_service, 2, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    with OperatorProcess(kube_api, ns, "op-a", tmp_path) as operator:
        client.create(POOLS.format(ns=ns), pool_manifest(
            "priv", cloud_name=ironic_service.cloud_name, resource_class=resource_class, replicas=1,
            securityContext={"privileged": True}))

        def degraded() -> dict[str, Any] | None:
            pool = client.get(f"{POOLS.format(ns=ns)}/priv")
            return next((c for c in (pool.get("status") or {}).get("conditions") or []
                         if c["type"] == "Degraded" and c["status"] == "True"
                         and c["reason"] == "PodCreateRefused"), None)
        condition = wait(degraded, timeout=60, what="Degraded PodCreateRefused")
        assert 'violates PodSecurity "restricted:' in condition["message"] and "privileged" in condition["message"], \
            condition["message"]
        assert member_pods(client, ns, "priv") == {}
        events = client.get(f"/api/v1/namespaces/{ns}/events",
                            fieldSelector="involvedObject.name=priv,reason=PodCreateRefused")["items"]
        assert events and events[0]["type"] == "Warning" and "PodSecurity" in events[0]["message"]

        patch_spec(client, ns, "priv", {"securityContext": None})  # back to the chart's defaults: admitted
        wait(lambda: ready_members(client, ns, "priv") == ["priv-0"], timeout=60, what="the member admitted and Ready")
    assert operator.refused() == []
