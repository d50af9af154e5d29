"""The Helm chart, checked with the real helm 3 and helm 4 the project installs itself.

hack/chart-check.sh is the whole offline check CI runs (lint, template, kubernetes-validate
for every schema from 1.30 on); the tests below add what a user of the chart would notice:
bad values refused with the key's name, RBAC no wider than the operator's needs, the
namespaced mode granting nothing cluster-wide beyond nodes, and the CRD shipped unchanged.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from ironic_shard_operator.core.podspec import render_configmap, render_pod
from ironic_shard_operator.core.spec import read_pool

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ironic-shard-operator"
CRD = "crds/ironicshards.io_ironiccomputeshards.yaml"
TOOLS = REPO / ".tools" / "bin"
HELMS = ("helm", "helm3")  # helm 4.x and helm 3.17, from hack/tools.sh


@pytest.fixture(scope="session")
def tools() -> Path:
    """The real helm binaries; installing them is part of the test (CI has no other way)."""
    result = subprocess.run(["bash", "hack/tools.sh"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, f"hack/tools.sh failed:\n{result.stdout}{result.stderr}"
    return TOOLS


def helm_template(tools: Path, helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools / helm), "template", "rel", str(CHART), "--namespace", "ops", *args],
        capture_output=True, text=True)


def rendered(tools: Path, *args: str, helm: str = "helm") -> list[dict]:
    result = helm_template(tools, helm, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(documents: list[dict], kind: str) -> list[dict]:
    return [doc for doc in documents if doc["kind"] == kind]


def rules_as_set(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb)
            for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_chart_check_passes(tools):
    result = subprocess.run(["bash", "hack/chart-check.sh"], cwd=REPO, capture_output=True,
                            text=True)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "manifests valid for Kubernetes 1.30" in result.stdout


def test_the_chart_ships_the_crd_unchanged():
    shipped = (CHART / CRD).read_bytes()
    source = (REPO / CRD).read_bytes()
    assert shipped == source, (
        f"charts/ironic-shard-operator/{CRD} differs from {CRD}: "
        f"cp {CRD} charts/ironic-shard-operator/crds/")


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize(("setting", "named"), [
    ("replicaCount=0", "replicaCount"),
    ("image.pullPolicy=Sometimes", "pullPolicy"),
    ("metrics.prot=9090", "prot"),
    ("watchNamespaces={Pools_A}", "watchNamespaces"),
    ("health.port=70000", "health"),
    ("metrics.serviceMonitor.interval=often", "interval"),
    ("podDisruptionBudget.maxUnavailable=0", "maxUnavailable"),
])
def test_bad_values_are_refused_naming_the_key(tools, helm, setting, named):
    result = helm_template(tools, helm, "--set", setting)
    assert result.returncode != 0, f"{setting} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize(("settings", "message"), [
    (["health.port=8080"], "metrics.port and health.port are both 8080"),
    (["extraEnv[0].name=WATCH_NAMESPACES", "extraEnv[0].value=x"],
     "extraEnv: WATCH_NAMESPACES is set by the chart itself"),
    (["metrics.serviceMonitor.enabled=true", "metrics.service.enabled=false"],
     "metrics.serviceMonitor.enabled needs metrics.service.enabled"),
])
def test_contradictory_values_are_refused_with_the_fix(tools, helm, settings, message):
    result = helm_template(tools, helm, *[arg for s in settings for arg in ("--set", s)])
    assert result.returncode != 0
    assert message in result.stderr


# What the operator's code does in Kubernetes (the lead's contract); RBAC grants exactly this.
POOL_RULES = {
    *{("ironicshards.io", "ironiccomputeshards", v) for v in ("get", "list", "watch", "patch")},
    *{("ironicshards.io", "ironiccomputeshards/status", v) for v in ("get", "patch", "update")},
    ("ironicshards.io", "ironiccomputeshards/scale", "get"),
    *{("", "pods", v) for v in ("get", "list", "watch", "create", "delete", "patch")},
    *{("", "configmaps", v)
      for v in ("get", "list", "watch", "create", "update", "patch", "delete")},
    *{(g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch")},
    ("", "secrets", "get"),
}
CLUSTER_READS = {
    *{("", "nodes", v) for v in ("get", "list", "watch")},
    *{("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")},
    *{("", "namespaces", v) for v in ("list", "watch")},
}
LEASE_RULES = {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}


@pytest.mark.parametrize("helm", HELMS)
def test_all_namespaces_mode_grants_pool_rules_cluster_wide_and_nothing_more(tools, helm):
    documents = rendered(tools, helm=helm)
    cluster = [rules_as_set(role["rules"]) for role in by_kind(documents, "ClusterRole")]
    assert sorted(cluster, key=len) == [CLUSTER_READS, POOL_RULES]
    (lease_role,) = by_kind(documents, "Role")
    assert lease_role["metadata"]["namespace"] == "ops"
    assert rules_as_set(lease_role["rules"]) == LEASE_RULES
    subjects = [s for b in by_kind(documents, "ClusterRoleBinding") + by_kind(documents, "RoleBinding")
                for s in b["subjects"]]
    assert {(s["name"], s["namespace"]) for s in subjects} == {("rel-ironic-shard-operator", "ops")}


@pytest.mark.parametrize("helm", HELMS)
def test_watched_namespaces_get_roles_and_the_cluster_gets_only_reads(tools, helm):
    documents = rendered(tools, "--set", "watchNamespaces={pools-a,pools-b}",
                         "--set", "rbac.secretNames={nova-conf,ironic-cloud}", helm=helm)
    (cluster_role,) = by_kind(documents, "ClusterRole")
    assert rules_as_set(cluster_role["rules"]) == CLUSTER_READS
    pool_roles = {role["metadata"]["namespace"]: role for role in by_kind(documents, "Role")
                  if role["metadata"]["name"].endswith("-pools")}
    assert set(pool_roles) == {"pools-a", "pools-b"}
    for role in pool_roles.values():
        assert rules_as_set(role["rules"]) == POOL_RULES
        (secret_rule,) = [r for r in role["rules"] if r["resources"] == ["secrets"]]
        assert secret_rule["resourceNames"] == ["nova-conf", "ironic-cloud"]
    (deployment,) = by_kind(documents, "Deployment")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WATCH_NAMESPACES"]["value"] == "pools-a,pools-b"


@pytest.mark.parametrize("settings", [[], ["--set", "watchNamespaces={pools-a}"]])
def test_owner_references_the_operator_writes_are_allowed_where_owner_permissions_are_enforced(
        tools, settings):
    """OwnerReferencesPermissionEnforcement refuses a pod or ConfigMap whose owner reference
    sets blockOwnerDeletion unless its creator may update the owner's `finalizers`
    subresource: whatever the operator renders, the chart's pool rules must allow."""
    pool = read_pool({"metadata": {"name": "rack-a", "namespace": "pools-a", "uid": "u"},
                      "spec": {"image": "nova:1", "replicas": 1,
                               "novaConfig": {"secretRef": {"name": "nova-conf"}},
                               "cloud": {"secretRef": {"name": "cloud"}}}})
    blocking = [(rendered["kind"], owner["kind"])
                for rendered in (render_pod(pool, "rack-a-0", ""), render_configmap(pool, "rack-a-0"))
                for owner in rendered["metadata"]["ownerReferences"] if owner.get("blockOwnerDeletion")]
    documents = rendered(tools, *settings)
    pool_rules = set().union(*(rules_as_set(role["rules"])
                               for role in by_kind(documents, "ClusterRole") + by_kind(documents, "Role")
                               if role["metadata"]["name"].endswith("-pools")))
    may_block = ("ironicshards.io", "ironiccomputeshards/finalizers", "update") in pool_rules
    assert may_block or not blocking, (
        f"{blocking}: blockOwnerDeletion without update on ironiccomputeshards/finalizers")


@pytest.mark.parametrize("helm", HELMS)
def test_the_operator_runs_hardened_with_the_contracted_environment(tools, helm):
    documents = rendered(tools, helm=helm)
    (deployment,) = by_kind(documents, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["image"] == "ironic-shard-operator:0.1.0"
    assert container["args"] == ["run"]
    env = {e["name"]: e for e in container["env"]}
    assert env["WATCH_NAMESPACES"]["value"] == ""
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert (env["METRICS_PORT"]["value"], env["HEALTH_PORT"]["value"]) == ("8080", "8081")
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    (budget,) = by_kind(documents, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    (service,) = by_kind(documents, "Service")
    assert service["spec"]["ports"][0]["port"] == 8080
    assert by_kind(documents, "ServiceMonitor") == []


@pytest.mark.parametrize("helm", HELMS)
def test_clusters_older_than_the_validated_schemas_are_refused(tools, helm):
    assert helm_template(tools, helm, "--kube-version", "1.30.0").returncode == 0
    too_old = helm_template(tools, helm, "--kube-version", "1.29.0")
    assert too_old.returncode != 0
    assert "chart requires kubeVersion: >=1.30.0-0" in too_old.stderr
