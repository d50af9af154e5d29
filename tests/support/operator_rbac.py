"""The operator's identity in a test cluster, as the Helm chart installs it: its ServiceAccount and
the chart's RENDERED Roles, ClusterRoles and bindings (real `helm template`), created as `helm
install` creates them; the operator process then authenticates with a TokenRequest token of that
ServiceAccount, as the kubelet projects one into the operator's pod.

The harness (operator_harness.OperatorProcess) runs every operator process that way. So the
operator under test may do exactly what the chart grants it, and the API server (the test
bed's real one, testbed/control_plane.py) refuses anything else with 403.

The chart is rendered per test namespace as `helm template NS charts/ironic-shard-operator
--namespace NS --set watchNamespaces={NS}`: the operator then runs as its harness starts it
(WATCH_NAMESPACES and POD_NAMESPACE both NS); `watch_all` renders it as for every namespace
(ClusterRoles; pools run only in the namespaces of rbac.poolNamespaces). Its cluster-scoped objects (ClusterRole,
ClusterRoleBinding) are owned by the Namespace object, so they are garbage-collected with it.
"""
from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import yaml

from testbed.kube_client import KubeAPIError, KubeClient

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ironic-shard-operator"
HELM = REPO / ".tools" / "bin" / "helm"
# What the chart renders that the operator's identity consists of (the rest is its Deployment).
IDENTITY_TEMPLATES = ("templates/serviceaccount.yaml", "templates/rbac.yaml")
PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}

_lock = threading.Lock()
_tools_checked = False


def helm() -> Path:
    """The real helm binary of the project (hack/tools.sh installs it, once)."""
    global _tools_checked
    with _lock:
        if not _tools_checked:
            result = subprocess.run(["bash", "hack/tools.sh"], cwd=REPO, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"hack/tools.sh failed:\n{result.stdout}{result.stderr}")
            _tools_checked = True
    return HELM


def render_identity(namespace: str, *settings: str, watch_all: bool = False) -> list[dict[str, Any]]:
    """The ServiceAccount and RBAC objects the chart renders for an operator in `namespace`
    watching `namespace` (release name = namespace), or with `watch_all` every namespace;
    `settings` are more `--set` values."""
    args = [str(helm()), "template", namespace, str(CHART), "--namespace", namespace,
            *(() if watch_all else ("--set", f"watchNamespaces={{{namespace}}}"))]
    for setting in settings:
        args += ["--set", setting]
    for template in IDENTITY_TEMPLATES:
        args += ["--show-only", template]
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"helm template failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def service_account_name(documents: list[dict[str, Any]]) -> str:
    (account,) = [doc for doc in documents if doc["kind"] == "ServiceAccount"]
    return account["metadata"]["name"]


def install_identity(client: KubeClient, namespace: str, *settings: str, watch_all: bool = False) -> str:
    """Create (or update) the operator's ServiceAccount and RBAC for `namespace` as the chart
    renders them (`watch_all`: for every namespace); return the ServiceAccount's name."""
    documents = render_identity(namespace, *settings, watch_all=watch_all)
    owner = client.get(f"/api/v1/namespaces/{namespace}")["metadata"]
    for doc in documents:
        kind, name = doc["kind"], doc["metadata"]["name"]
        path = PATHS[kind].format(ns=doc["metadata"].get("namespace") or namespace)
        if kind.startswith("Cluster"):  # goes with the test namespace
            doc["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Namespace",
                                                   "name": owner["name"], "uid": owner["uid"]}]
        try:
            client.create(path, doc)
        except KubeAPIError as error:
            if error.status != 409:
                raise
            current = client.get(f"{path}/{name}")
            if kind.endswith("Binding") and current.get("roleRef") != doc.get("roleRef"):
                client.delete(f"{path}/{name}")  # roleRef is immutable
                client.create(path, doc)
                continue
            doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            client.replace(f"{path}/{name}", doc)
    return service_account_name(documents)


# The grants only a handover of nodes with instances uses: its Jobs and their logs.
# The Nova-less RBAC scenario (tests/integration/test_operator_rbac.py) cannot use them; the
# real-Nova handover scenario must.
HANDOVER_GRANTS = (' jobs in API group "batch"', ' pods/log in API group ""')


def is_handover_grant(grant: str) -> bool:
    """Whether an entry of authz.unused_grants() is one of HANDOVER_GRANTS."""
    return any(grant.endswith(suffix) for suffix in HANDOVER_GRANTS)
