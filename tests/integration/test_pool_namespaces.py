"""Least privilege with every namespace watched (the chart's default): the operator follows and
reports on pools anywhere, and runs them (creates pods, which may mount any Secret of their
namespace; Jobs; budgets; reads pods' logs) and reads their Secrets only in the namespaces of
`rbac.poolNamespaces`. A pool elsewhere says so: Degraded SecretReadRefused, one Warning Event,
the value to change; it runs nothing, and the operator could not if it tried. Listing its
namespace (what `helm upgrade --reuse-values --set rbac.poolNamespaces=...` does) lets it run.

The operator runs as the chart's ServiceAccount with the chart's RBAC rendered for every
namespace, against an API server that authorizes each request as a real one does (the fake's
authz.py, or a real cluster). Its process watches the test's two namespaces only, so that on a
shared real cluster it leaves other tests' pools alone; the grants are the same either way."""

from __future__ import annotations

from pathlib import Path
import pytest

from testbed import service_account_tokens as tokens
from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, unique_resource_class
from testbed.kube_client import KubeAPIError, KubeClient, restricted_container
from testbed.kubelet import FakeKubelet
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, condition, events, get_pool, member_pods, pool_manifest, ready_members,
)
from tests.support.operator_rbac import install_identity

pytestmark = pytest.mark.integration


def start_pool(client: KubeClient, ns: str, ironic: IronicService, name: str) -> None:
    resource_class = unique_resource_class(name)
    seed_nodes_directly_in_db(ironic, 4, resource_class=resource_class)
    create_secrets(client, ns, ironic.clouds_yaml)
    client.create(POOLS.format(ns=ns), pool_manifest(name, cloud_name=ironic.cloud_name,
                                                     resource_class=resource_class, replicas=2))


def listed(client: KubeClient, path: str) -> list[str]:
    return [item["metadata"]["name"] for item in client.get(path)["items"]]


def test_a_pool_outside_the_pool_namespaces_reports_the_refusal_and_runs_nothing(
        kube_api: KubeAPI, kube_namespace: str, kubelet, tmp_path: Path, ironic_service: IronicService) -> None:
    client, listed_ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(client)
    elsewhere = kube_api.create_namespace("elsewhere")
    try:
        operator = OperatorProcess(kube_api, listed_ns, "op-a", tmp_path, watch_all=True,
                                   chart=(f"rbac.poolNamespaces={{{listed_ns}}}",),
                                   WATCH_NAMESPACES=f"{listed_ns},{elsewhere}")
        with operator, FakeKubelet(client, elsewhere):  # the `kubelet` fixture runs the listed one
            start_pool(client, listed_ns, ironic_service, "rack-in")
            start_pool(client, elsewhere, ironic_service, "rack-out")
            wait(lambda: ready_members(client, listed_ns, "rack-in") == ["rack-in-0", "rack-in-1"] or None,
                 timeout=90, what="the pool in a listed namespace running")

            said = wait(lambda: (c := condition(get_pool(client, elsewhere, "rack-out"), "Degraded"))
                        .get("reason") == "SecretReadRefused" and c, timeout=60, what="rack-out's refusal reported")
            assert said["message"].startswith(
                f'the API server refused to read Secret nova-config (HTTP 403): secrets "nova-config" is forbidden: '
                f'User "system:serviceaccount:{listed_ns}:{operator.service_account}" cannot get resource '
                f'"secrets" in API group "" in the namespace "{elsewhere}"')
            assert (f"add {elsewhere} to rbac.poolNamespaces (helm upgrade --reuse-values --set "
                    f"'rbac.poolNamespaces={{...,{elsewhere}}}'), or to watchNamespaces") in said["message"]
            warned = wait(lambda: len(w := [e for e in events(client, elsewhere, "SecretReadRefused")
                                            if e["involvedObject"]["name"] == "rack-out"]) >= 2 and w,
                          timeout=30, what="rack-out's two SecretReadRefused Events")
            # One Warning Event per Secret refused (both of the pool's), each with the value to change.
            assert sorted((e["type"], e["message"].split(" (HTTP")[0]) for e in warned) == [
                ("Warning", f"the API server refused to read Secret {name}") for name in ("nova-config", "openstack-cloud")]
            assert all(f"add {elsewhere} to rbac.poolNamespaces" in e["message"] for e in warned)
            # It runs nothing there: no pod, ConfigMap, Job or budget.
            for path in ("/api/v1/namespaces/{ns}/pods", "/api/v1/namespaces/{ns}/configmaps",
                         "/apis/batch/v1/namespaces/{ns}/jobs", "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"):
                assert not [n for n in listed(client, path.format(ns=elsewhere)) if n.startswith("rack-out")], path
            # Nor could it: its ServiceAccount may not create a pod (which could mount any Secret) there.
            kubeconfig = tmp_path / "operator-kubeconfig"
            tokens.write_kubeconfig(kubeconfig, kube_api.kubeconfig,
                                    tokens.issue(client, listed_ns, operator.service_account))
            as_operator = KubeClient(kubeconfig)
            with pytest.raises(KubeAPIError) as forbidden:
                as_operator.create(f"/api/v1/namespaces/{elsewhere}/pods", {
                    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mounts-a-secret"},
                    "spec": {"containers": [restricted_container("c", "registry.k8s.io/pause:3.10")]}})
            assert forbidden.value.status == 403
            assert f'cannot create resource "pods" in API group "" in the namespace "{elsewhere}"' \
                in forbidden.value.body["message"]
            assert not [m for m in operator.refused() if f'namespace "{listed_ns}"' in m]

            # The namespace listed (as helm upgrade --reuse-values --set rbac.poolNamespaces=... does): it runs.
            install_identity(client, listed_ns, f"rbac.poolNamespaces={{{listed_ns},{elsewhere}}}", watch_all=True)
            wait(lambda: ready_members(client, elsewhere, "rack-out") == ["rack-out-0", "rack-out-1"] or None,
                 timeout=90, what="rack-out running once its namespace is listed")
            wait(lambda: condition(get_pool(client, elsewhere, "rack-out"), "Degraded").get("status") == "False"
                 or None, timeout=60, what="rack-out's Degraded cleared")
            assert set(member_pods(client, listed_ns, "rack-in")) == {"rack-in-0", "rack-in-1"}
    finally:
        for ns in (listed_ns, elsewhere):
            for name in listed(client, POOLS.format(ns=ns)):
                client.delete(f"{POOLS.format(ns=ns)}/{name}")
        kube_api.delete_namespace(elsewhere)
        kube_api.namespaces.remove(elsewhere)
