"""RBAC as the API server enforces it on a ServiceAccount's requests: what a Role or ClusterRole
grants through which binding, how verbs, subresources and resourceNames match, and the 403 a
client gets otherwise, word for word.

Written against the Kubernetes API contract (a real cluster given by KUBECONFIG must pass it too);
without KUBECONFIG it runs on the test bed's real control plane (testbed/control_plane.py).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testbed import service_account_tokens as tokens
from testbed.kube_client import KubeAPIError, KubeClient, restricted_container
from tests.support.kube_api import KubeAPI

pytestmark = pytest.mark.integration

RBAC = "/apis/rbac.authorization.k8s.io/v1"
ACCOUNT = "reader"


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [restricted_container("main", "registry.k8s.io/pause:3.10")]}}


def role(kind: str, name: str, rules: list[dict[str, Any]], namespace: str | None = None) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": rules}


def binding(kind: str, name: str, role_kind: str, role_name: str, account_namespace: str,
            namespace: str | None = None) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": account_namespace}]}


def refusal(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(KubeAPIError) as refused:
        call()
    assert refused.value.status == 403, refused.value
    return refused.value.body


@pytest.fixture
def account(kube_api: KubeAPI, kube_namespace: str, tmp_path: Path) -> KubeClient:
    """A client authenticated as ServiceAccount `reader` of the test namespace, granted nothing yet."""
    kube_api.client.create(f"/api/v1/namespaces/{kube_namespace}/serviceaccounts",
                           {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}})
    kubeconfig = tmp_path / "reader-kubeconfig"
    token = tokens.issue(kube_api.client, kube_namespace, ACCOUNT)
    tokens.write_kubeconfig(kubeconfig, kube_api.kubeconfig, token)
    return KubeClient(kubeconfig)


def test_a_service_account_may_do_only_what_its_role_grants(kube_api: KubeAPI, kube_namespace: str,
                                                            account: KubeClient) -> None:
    admin, ns = kube_api.client, kube_namespace
    user = f"system:serviceaccount:{ns}:{ACCOUNT}"
    pods = f"/api/v1/namespaces/{ns}/pods"
    admin.create(pods, pod("a"))
    admin.create(pods, pod("b"))

    body = refusal(lambda: account.get(pods))
    assert body["message"] == (f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" '
                               f'in the namespace "{ns}"')
    assert (body["reason"], body["details"]) == ("Forbidden", {"kind": "pods"})

    admin.create(f"{RBAC}/namespaces/{ns}/roles", role("Role", "pod-reader", [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"], "resourceNames": ["a"]}]))
    admin.create(f"{RBAC}/namespaces/{ns}/rolebindings",
                 binding("RoleBinding", "pod-reader", "Role", "pod-reader", ns))

    def granted() -> bool:
        try:
            account.get(pods)
            return True
        except KubeAPIError as error:
            if error.status == 403:
                return False  # a real server's RBAC cache catches up within a moment
            raise
    kube_api.wait_for(granted, timeout=30, what="the RoleBinding to take effect")
    assert {p["metadata"]["name"] for p in account.get(pods)["items"]} == {"a", "b"}
    assert account.get(f"{pods}/a")["metadata"]["name"] == "a"
    # resourceNames: only the named pod, for get and delete; never a create (it has no name yet).
    body = refusal(lambda: account.get(f"{pods}/b"))
    assert body["message"] == (f'pods "b" is forbidden: User "{user}" cannot get resource "pods" in API group "" '
                               f'in the namespace "{ns}"')
    assert body["details"] == {"name": "b", "kind": "pods"}
    assert "cannot create resource" in refusal(lambda: account.create(pods, pod("c")))["message"]
    # Other verbs, and subresources, are separate grants.
    assert "cannot watch resource" in refusal(lambda: account.watch(pods, timeout_seconds=1))["message"]
    labelled = {"metadata": {"labels": {"x": "y"}}}
    assert "cannot patch resource" in refusal(lambda: account.patch(f"{pods}/a", labelled))["message"]
    body = refusal(lambda: account.get(f"{pods}/a/status"))
    assert body["message"] == (f'pods "a" is forbidden: User "{user}" cannot get resource "pods/status" '
                               f'in API group "" in the namespace "{ns}"')
    # A Role grants in its own namespace only; cluster-scoped resources need a ClusterRoleBinding.
    body = refusal(lambda: account.get("/api/v1/namespaces/default/pods"))
    assert body["message"].endswith('in the namespace "default"')
    body = refusal(lambda: account.get("/api/v1/nodes/some-node"))
    assert body["message"] == (f'nodes "some-node" is forbidden: User "{user}" cannot get resource "nodes" '
                               f'in API group "" at the cluster scope')
    # Discovery is every authenticated user's (the bootstrap ClusterRole system:discovery).
    assert "v1" in account.get("/api")["versions"]
    account.delete(f"{pods}/a")


def test_a_cluster_role_grants_in_the_namespaces_of_its_role_bindings_only(
        kube_api: KubeAPI, kube_namespace: str, account: KubeClient) -> None:
    admin, ns = kube_api.client, kube_namespace
    other = kube_api.create_namespace("rbac-other")
    name = f"{ns}-configmap-reader"
    admin.create(f"{RBAC}/clusterroles", role("ClusterRole", name, [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}]))
    try:
        admin.create(f"{RBAC}/namespaces/{ns}/rolebindings", binding("RoleBinding", "cm", "ClusterRole", name, ns))
        kube_api.wait_for(lambda: _allowed(account, f"/api/v1/namespaces/{ns}/configmaps"), timeout=30,
                          what="the RoleBinding to take effect")
        body = refusal(lambda: account.get(f"/api/v1/namespaces/{other}/configmaps"))
        assert "cannot list resource" in body["message"]
        assert "at the cluster scope" in refusal(lambda: account.get("/api/v1/configmaps"))["message"]

        admin.create(f"{RBAC}/clusterrolebindings", binding("ClusterRoleBinding", name, "ClusterRole", name, ns))
        kube_api.wait_for(lambda: _allowed(account, "/api/v1/configmaps"), timeout=30,
                          what="the ClusterRoleBinding to take effect")
        assert _allowed(account, f"/api/v1/namespaces/{other}/configmaps")
        body = refusal(lambda: account.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"))
        assert body["message"].startswith("leases.coordination.k8s.io is forbidden: ")
        assert 'cannot list resource "leases" in API group "coordination.k8s.io"' in body["message"]
        assert body["details"] == {"group": "coordination.k8s.io", "kind": "leases"}
    finally:
        admin.delete(f"{RBAC}/clusterroles/{name}")
        try:
            admin.delete(f"{RBAC}/clusterrolebindings/{name}")
        except KubeAPIError as error:
            if error.status != 404:
                raise
        kube_api.delete_namespace(other)


def test_a_binding_to_a_missing_role_says_so_and_its_role_ref_cannot_change(
        kube_api: KubeAPI, kube_namespace: str, account: KubeClient) -> None:
    admin, ns = kube_api.client, kube_namespace
    path = f"{RBAC}/namespaces/{ns}/rolebindings"
    admin.create(path, binding("RoleBinding", "dangling", "Role", "missing", ns))
    # The authorizer's informers see the new binding a moment later.
    body = kube_api.wait_for(lambda: (answer := refusal(lambda: account.get(f"/api/v1/namespaces/{ns}/secrets")))
                             and "RBAC:" in answer["message"] and answer, timeout=30,
                             what="the refusal to name the missing role")
    assert body["message"].endswith(
        f'cannot list resource "secrets" in API group "" in the namespace "{ns}": '
        f'rbac: RBAC: role.rbac.authorization.k8s.io "missing" not found')
    changed = admin.get(f"{path}/dangling")
    changed["roleRef"]["name"] = "other"
    with pytest.raises(KubeAPIError) as refused:
        admin.replace(f"{path}/dangling", changed)
    assert refused.value.status == 422
    assert 'roleRef: Invalid value: {"APIGroup":"rbac.authorization.k8s.io","Kind":"Role","Name":"other"}: field is immutable' in refused.value.body["message"]


def test_the_record_tells_what_was_refused_and_which_grants_went_unused(
        kube_api: KubeAPI, kube_namespace: str, account: KubeClient) -> None:
    if kube_api.audit is None:
        pytest.skip("reads the test bed API server's audit log")
    admin, ns = kube_api.client, kube_namespace
    admin.create(f"{RBAC}/namespaces/{ns}/roles", role("Role", "mixed", [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get"]}]))
    admin.create(f"{RBAC}/namespaces/{ns}/rolebindings", binding("RoleBinding", "mixed", "Role", "mixed", ns))
    kube_api.wait_for(lambda: _allowed(account, f"/api/v1/namespaces/{ns}/configmaps"), timeout=30,
                      what="the binding in force")
    in_force = time.time()
    admin.create(f"/api/v1/namespaces/{ns}/pods", pod("p"))
    account.get(f"/api/v1/namespaces/{ns}/pods/p/status")
    refusal(lambda: account.delete(f"/api/v1/namespaces/{ns}/pods/p"))

    user = f"system:serviceaccount:{ns}:{ACCOUNT}"
    assert [r.message for r in kube_api.audit.refused(user, since=in_force)] == [
        f'pods "p" is forbidden: User "{user}" cannot delete resource "pods" in API group "" '
        f'in the namespace "{ns}"']
    prefix = f"RoleBinding {ns}/mixed -> Role mixed"
    assert kube_api.audit.unused_grants(admin, ns, ACCOUNT) == [
        f'{prefix} rule 0: get configmaps in API group ""',
        f'{prefix} rule 0: watch configmaps in API group ""',
        f'{prefix} rule 1: get pods in API group ""',
    ]


def _allowed(client: KubeClient, path: str) -> bool:
    try:
        client.get(path)
        return True
    except KubeAPIError as error:
        if error.status == 403:
            return False
        raise
