"""The Helm chart, checked with the real helm 3 and helm 4 the project installs itself.

hack/chart-check.sh is the whole offline check CI runs (lint, template, kubernetes-validate
for every schema from 1.30 on); the tests below add what a user of the chart would notice:
bad values refused with the key's name, RBAC exactly as wide as the requests the operator's
code makes (derived from the code, not listed here), Secrets never readable cluster-wide, the
namespaced mode granting nothing cluster-wide beyond reads, and the CRD shipped unchanged.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import http.server
import inspect
import os
import re
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from ironic_shard_operator.adapters.kube import Kube
from ironic_shard_operator.controller import handlers
from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.lease import LEASE_NAME
from ironic_shard_operator.core.podspec import configmap_name, render_budget, render_configmap, render_pod
from ironic_shard_operator.core.spec import GROUP, KIND, PLURAL, VERSION, read_pool
from testbed import control_plane
from testbed import service_account_tokens as tokens
from testbed.audit_log import AuditLog, service_account_user
from testbed.kube_client import KubeAPIError, KubeClient, restricted_container
from testbed.kubelet import FakeKubelet
from testbed.operator_objects import install_crd
from testbed.registry import make_certificates
from testbed.waiting import wait_for
from tests.support.kube_api import KubeAPI

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
    ("extraCABundle.key=certs/ca.crt", "extraCABundle"),
    ("extraCABundle.configMapName=Corp_CA", "extraCABundle"),
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
    (["watchNamespaces={pools-a}", "rbac.poolNamespaces={pools-b}"],
     "rbac.poolNamespaces is for watchNamespaces: [] (every namespace) only"),
    (["extraCABundle.configMapName=corp-ca", "extraCABundle.secretName=corp-ca"],
     "extraCABundle: configMapName and secretName are both set"),
    (["extraCABundle.secretName=corp-ca", "extraEnv[0].name=SSL_CERT_FILE", "extraEnv[0].value=/x"],
     "extraEnv: SSL_CERT_FILE is set by the chart itself when extraCABundle is set"),
])
def test_contradictory_values_are_refused_with_the_fix(tools, helm, settings, message):
    result = helm_template(tools, helm, *[arg for s in settings for arg in ("--set", s)])
    assert result.returncode != 0
    assert message in result.stderr


# -- RBAC: exactly what the operator's code asks Kubernetes for, derived from the code ----------
#
# The operator's own requests: every method of the Kubernetes adapter (adapters/kube.py) that the
# controllers call (found in their source), sent as a ServiceAccount to the test bed's real API
# server (testbed/control_plane.py), whose audit log records each request's API group, resource and
# verb. kopf's requests: list and watch of every resource its handlers are registered for, a patch
# of the pools that still carry the finalizer of earlier versions (handlers.LEGACY_FINALIZER: kopf
# takes it off), and its cluster observation (kopf/_core/reactor/observation.py): CRDs always,
# namespaces when given namespaces to watch.
# tests/integration/test_operator_rbac.py checks the same against the running operator.

CONTROLLERS = REPO / "operator" / "ironic_shard_operator" / "controller"
Need = tuple[str, str, str]  # (API group, resource[/subresource], verb)


def kube_methods_the_controllers_call() -> set[str]:
    public = {name for name, _ in inspect.getmembers(Kube, inspect.iscoroutinefunction)
              if not name.startswith("_")} - {"close", "request"}
    called = set()
    for source in CONTROLLERS.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in public:
                called.add(node.func.attr)
    return called


CLUSTER_ROLE_BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
POOL_BODY = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "rack-a"},
             "spec": {"image": "nova:1", "replicas": 1, "novaConfig": {"secretRef": {"name": "nova-conf"}},
                      "cloud": {"secretRef": {"name": "cloud"}}}}


async def _sample_calls(kube: Kube, admin: KubeClient, ns: str, pool: dict, node: str) -> dict[str, Any]:
    """One call of each adapter method, with what it needs set up by the (unaudited) admin; `node`:
    a Node of the node agent that runs the pods of `ns`."""
    spec = read_pool(pool)
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEASE_NAME},
             "spec": {"holderIdentity": "me"}}
    pods, configmaps = f"/api/v1/namespaces/{ns}/pods", f"/api/v1/namespaces/{ns}/configmaps"
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"

    async def delete_pod() -> None:
        uid = admin.create(pods, render_pod(spec, "rack-a-9", ""))["metadata"]["uid"]
        await kube.delete_pod(ns, "rack-a-9", uid=uid)

    async def put_configmap() -> None:  # creates, then finds it and patches it
        for _ in range(2):
            await kube.put_configmap(ns, render_configmap(spec, "rack-a-0"))

    async def delete_configmap() -> None:
        admin.create(configmaps, render_configmap(spec, "rack-a-8"))
        await kube.delete_configmap(ns, configmap_name("rack-a-8"))

    async def job_log_tail() -> None:  # the Job's pods are found by label, then one log is read
        pod = f"{pods}/rack-a-2-handover-1"
        admin.create(pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "rack-a-2-handover-1", "labels": {"batch.kubernetes.io/job-name": "rack-a-2-handover"}},
            "spec": {"containers": [restricted_container("c", "i")]}})
        # Running on a Node of the node agent: the API server reads the log from its kubelet API.
        wait_for(lambda: (admin.get(pod).get("status") or {}).get("phase") == "Running",
                 what="the sample Job pod to run")
        await kube.job_log_tail(ns, "rack-a-2-handover")

    async def create_and_delete_job() -> None:
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sample-job"},
               "spec": {"template": {"spec": {"restartPolicy": "Never",
                                              "containers": [restricted_container("c", "i")]}}}}
        await kube.create_job(ns, job)
        await kube.delete_job(ns, "sample-job")

    async def create_and_patch_budget() -> None:
        budget = render_budget(spec, 3)
        await kube.create_budget(ns, budget)
        await kube.patch_budget(ns, budget["metadata"]["name"], {"spec": {"minAvailable": 1}})

    async def replace_lease() -> None:
        admin.create(leases, dict(lease, metadata={"name": LEASE_NAME}))
        await kube.replace_lease(ns, admin.get(f"{leases}/{LEASE_NAME}"))

    return {
        "get_node": lambda: kube.get_node(node),
        "get_secret": lambda: kube.get_secret(ns, "nova-conf"),
        "list_pods": lambda: kube.list_pods(ns, "ironicshards.io/pool=rack-a"),
        "create_pod": lambda: kube.create_pod(ns, render_pod(spec, "rack-a-0", "")),
        "delete_pod": delete_pod,
        "list_configmaps": lambda: kube.list_configmaps(ns, "ironicshards.io/pool=rack-a"),
        "put_configmap": put_configmap,
        "delete_configmap": delete_configmap,
        "patch_pool_status": lambda: kube.patch_pool_status(ns, "rack-a", {"replicas": 1}),
        "post_event": lambda: kube.post_event(pool, Event("Sample", "a sample event"), "2025-01-01T00:00:00Z"),
        "get_lease": lambda: kube.get_lease(ns, LEASE_NAME),
        "create_lease": lambda: kube.create_lease("lease-" + ns, dict(lease, metadata={"name": LEASE_NAME})),
        "replace_lease": replace_lease,
        "list_jobs": lambda: kube.list_jobs(ns, "ironicshards.io/pool=rack-a"),
        "create_job": create_and_delete_job,
        "delete_job": create_and_delete_job,
        "job_log_tail": job_log_tail,
        "get_budget": lambda: kube.get_budget(ns, "rack-a"),
        "create_budget": create_and_patch_budget,
        "patch_budget": create_and_patch_budget,
    }


@pytest.fixture(scope="module")
def audited_plane(kube_api: KubeAPI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[control_plane.ControlPlane]:
    """A real control plane whose audit log this module reads: the session's (tests/support/kube_api.py),
    or, where the session uses a cluster given by KUBECONFIG (its audit log out of reach), one of its own."""
    if kube_api.plane is not None:
        yield kube_api.plane
        return
    state = tmp_path_factory.mktemp("chart-rbac-plane")
    try:
        yield control_plane.start(state)
    finally:
        control_plane.stop(state)


@pytest.fixture(scope="module")
def adapter_needs(audited_plane: control_plane.ControlPlane) -> dict[str, set[tuple[Need, bool]]]:
    """Per adapter method the controllers call: the (need, namespaced) of the requests it sends, as
    the API server's audit log records them (the objectRef and verb of each request the method's
    ServiceAccount made while the call ran)."""
    called = kube_methods_the_controllers_call()
    plane = audited_plane
    admin, audit = KubeClient(plane.kubeconfig), AuditLog(plane.audit_log)
    ns = f"ops-{uuid.uuid4().hex[:8]}"
    namespaces = (ns, f"lease-{ns}")  # create_lease's sample call writes to "lease-" + ns
    binding = f"operator-may-do-anything-{ns}"
    user = service_account_user(ns, "operator")
    spans: dict[str, tuple[float, float]] = {}  # method -> when its call began and ended (epoch seconds)
    install_crd(admin)
    try:
        for name in namespaces:
            admin.create_namespace(name)
        admin.create(f"/api/v1/namespaces/{ns}/serviceaccounts",
                     {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator"}})
        admin.create(CLUSTER_ROLE_BINDINGS, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": ns}]})
        token = tokens.issue(admin, ns, "operator").token
        pool = admin.create(f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}", POOL_BODY)
        login = kopf.ConnectionInfo(server=plane.url, token=token, ca_path=str(plane.ca))

        async def drive(node: str) -> None:
            async with Kube(lambda: login) as kube:
                calls = await _sample_calls(kube, admin, ns, pool, node)
                missing = called - set(calls)
                assert not missing, f"the controllers call Kube.{missing}: add a sample call here"
                for method in sorted(called):
                    before = time.time()
                    await calls[method]()
                    spans[method] = (before, time.time())
                await kube.get_lease(ns, "audit-sentinel")  # the last request: its event closes the log

        with FakeKubelet(admin, ns, nodes=1) as kubelet:
            asyncio.run(drive(kubelet.nodes[0]))

        def recorded() -> list[dict[str, Any]] | None:
            """The user's resource requests, once the sentinel's is among them."""
            events = [e for e in audit.by_user(user) if e.get("objectRef")]
            return events if any(e["objectRef"].get("name") == "audit-sentinel" for e in events) else None
        events = wait_for(recorded, what="the audit event of the last request")
    finally:  # what was made (a failed setup made less), namespaces not waited for
        for path in [f"{CLUSTER_ROLE_BINDINGS}/{binding}", *(f"/api/v1/namespaces/{name}" for name in namespaces)]:
            try:
                admin.delete(path)
            except KubeAPIError as error:
                if error.status != 404:
                    raise
    return {method: {audited_need(e) for e in events if before <= e["time"] <= after}
            for method, (before, after) in spans.items()}


def audited_need(event: dict[str, Any]) -> tuple[Need, bool]:
    """(API group, resource[/subresource], verb) of an audit event's request, and whether it was
    made in a namespace."""
    ref = event["objectRef"]
    resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return (ref.get("apiGroup", ""), resource, event["verb"]), bool(ref.get("namespace"))


def kopf_needs(watch_namespaces: bool) -> set[tuple[Need, bool]]:
    registry = kopf.get_default_registry()
    watched = {(h.selector.group, h.selector.any_name) for h in
               registry._watching.get_all_handlers() + registry._indexing.get_all_handlers()}
    needs = {((group, plural, verb), True) for group, plural in watched for verb in ("list", "watch")}
    assert handlers.LEGACY_FINALIZER.startswith(f"{GROUP}/")  # only pools ever carried it
    needs.add(((GROUP, PLURAL, "patch"), True))
    needs |= {(("apiextensions.k8s.io", "customresourcedefinitions", verb), False) for verb in ("list", "watch")}
    if watch_namespaces:
        needs |= {(("", "namespaces", verb), False) for verb in ("list", "watch")}
    return needs


# What a pool anywhere needs to be followed and reported on (the chart's iso.poolRules, granted
# cluster-wide when every namespace is watched): what a cycle observes (pods, ConfigMaps, Jobs by
# label), its status and its Events, and kopf's watches. Everything else a pool's namespace needs
# runs the pool (iso.workloadRules: creating pods, which may mount any Secret there; reading pods'
# logs): granted only in the namespaces named for pools, never cluster-wide.
FOLLOW_AND_REPORT = ("list_pods", "list_configmaps", "list_jobs", "patch_pool_status", "post_event")


def expected_rules(adapter_needs: dict[str, set[tuple[Need, bool]]],
                   watch_namespaces: bool) -> dict[str, set[Need]]:
    """What each of the chart's roles must grant: `cluster` (cluster-scoped reads), `pools`
    (following and reporting on pools; with watched namespaces running them too), `workloads`
    (running pools, in rbac.poolNamespaces), `secrets` and `lease` (the operator's own namespace)."""
    every = set().union(*adapter_needs.values()) | kopf_needs(watch_namespaces)
    namespaced = {need for need, in_namespace in every if in_namespace}
    follow = {need for method in FOLLOW_AND_REPORT for need, in_namespace in adapter_needs[method] if in_namespace} \
        | {need for need, in_namespace in kopf_needs(watch_namespaces) if in_namespace}
    lease = {need for need in namespaced if need[1] == "leases"}
    secrets = {need for need in namespaced if need[1] == "secrets"}
    workloads = namespaced - follow - lease - secrets
    return {
        "cluster": {need for need, in_namespace in every if not in_namespace},
        "lease": lease,
        "secrets": secrets,
        "pools": follow | workloads if watch_namespaces else follow,
        "workloads": workloads,
    }


def roles_by_suffix(documents: list[dict]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for role in by_kind(documents, "ClusterRole") + by_kind(documents, "Role"):
        found.setdefault(role["metadata"]["name"].rsplit("-", 1)[-1], []).append(role)
    return found


def test_every_adapter_method_the_controllers_call_is_derived(adapter_needs):
    assert {"list_pods", "create_pod", "patch_pool_status", "get_lease"} <= set(adapter_needs)
    assert all(adapter_needs.values()), {m: n for m, n in adapter_needs.items() if not n}
    assert adapter_needs["put_configmap"] == {(("", "configmaps", "create"), True),
                                              (("", "configmaps", "patch"), True)}


def assert_lease_role(role: dict, wanted: set[Need]) -> None:
    """Leader election: as the code needs it, and only the operator's Lease by name (a create has
    no name yet, so it cannot be limited to one)."""
    assert role["metadata"]["namespace"] == "ops"
    assert rules_as_set(role["rules"]) == wanted
    for rule in role["rules"]:
        named = rule.get("resourceNames")
        assert named == [LEASE_NAME] if "create" not in rule["verbs"] else named is None, rule


# Never cluster-wide: reading a Secret; creating a pod (it may mount any Secret of its namespace)
# or a Job (its pods alike); reading pods' logs.
NEVER_CLUSTER_WIDE = {("", "secrets", "get"), ("", "pods", "create"), ("batch", "jobs", "create"),
                      ("", "pods/log", "get")}


def assert_nothing_runs_cluster_wide(documents: list[dict]) -> None:
    for role in by_kind(documents, "ClusterRole"):
        granted = rules_as_set(role["rules"])
        assert not granted & NEVER_CLUSTER_WIDE, (role["metadata"]["name"], granted & NEVER_CLUSTER_WIDE)


@pytest.mark.parametrize("helm", HELMS)
def test_all_namespaces_mode_follows_pools_everywhere_and_runs_them_nowhere_yet(tools, helm, adapter_needs):
    """Every namespace watched, none named for pools (the default): the operator follows and
    reports on pools anywhere, and may create no pod, Job or budget and read no Secret or log:
    each pool reports its refused Secret read until its namespace is named."""
    documents = rendered(tools, helm=helm)
    wanted = expected_rules(adapter_needs, watch_namespaces=False)
    roles = roles_by_suffix(documents)
    assert set(roles) == {"cluster", "pools", "election"}, "no Secret or workload role: no namespace named"
    ((cluster,), (pools,), (lease,)) = roles["cluster"], roles["pools"], roles["election"]
    assert (cluster["kind"], pools["kind"], lease["kind"]) == ("ClusterRole", "ClusterRole", "Role")
    assert rules_as_set(cluster["rules"]) == wanted["cluster"]
    assert rules_as_set(pools["rules"]) == wanted["pools"]
    assert wanted["workloads"] and not wanted["workloads"] & rules_as_set(pools["rules"])
    assert_nothing_runs_cluster_wide(documents)
    assert_lease_role(lease, wanted["lease"])
    subjects = [s for b in by_kind(documents, "ClusterRoleBinding") + by_kind(documents, "RoleBinding")
                for s in b["subjects"]]
    assert {(s["name"], s["namespace"]) for s in subjects} == {("rel-ironic-shard-operator", "ops")}


@pytest.mark.parametrize("helm", HELMS)
def test_watched_namespaces_get_roles_and_the_cluster_gets_only_reads(tools, helm, adapter_needs):
    documents = rendered(tools, "--set", "watchNamespaces={pools-a,pools-b}",
                         "--set", "rbac.secretNames={nova-conf,ironic-cloud}", helm=helm)
    wanted = expected_rules(adapter_needs, watch_namespaces=True)
    roles = roles_by_suffix(documents)
    (cluster,) = roles["cluster"]
    assert by_kind(documents, "ClusterRole") == [cluster]
    assert rules_as_set(cluster["rules"]) == wanted["cluster"]
    assert "workloads" not in roles  # the -pools Role of each watched namespace holds them
    for suffix in ("pools", "secrets"):
        assert {role["metadata"]["namespace"] for role in roles[suffix]} == {"pools-a", "pools-b"}
        for role in roles[suffix]:
            assert rules_as_set(role["rules"]) == wanted[suffix]
    for role in roles["secrets"]:
        (secret_rule,) = role["rules"]
        assert secret_rule["resourceNames"] == ["nova-conf", "ironic-cloud"]
    assert_lease_role(*roles["election"], wanted["lease"])
    (deployment,) = by_kind(documents, "Deployment")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WATCH_NAMESPACES"]["value"] == "pools-a,pools-b"


@pytest.mark.parametrize("helm", HELMS)
def test_pools_run_and_secrets_are_read_only_in_the_namespaces_named_for_pools(tools, helm, adapter_needs):
    documents = rendered(tools, "--set", "rbac.poolNamespaces={pools-a,pools-c}", helm=helm)
    wanted = expected_rules(adapter_needs, watch_namespaces=False)
    roles = roles_by_suffix(documents)
    for suffix in ("secrets", "workloads"):
        assert [(r["kind"], r["metadata"]["namespace"]) for r in roles[suffix]] == [
            ("Role", "pools-a"), ("Role", "pools-c")]
        assert all(rules_as_set(r["rules"]) == wanted[suffix] for r in roles[suffix])
        bindings = {b["metadata"]["namespace"]: b for b in by_kind(documents, "RoleBinding")
                    if b["metadata"]["name"].endswith(f"-{suffix}")}
        assert set(bindings) == {"pools-a", "pools-c"}
        assert all(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                    "name": f"rel-ironic-shard-operator-{suffix}"} for b in bindings.values())
    assert_nothing_runs_cluster_wide(documents)


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
    assert env["LOG_FORMAT"]["value"] == "text"  # logFormat: json for one JSON object per line
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


# -- extraCABundle: a private CA the operator trusts besides the image's own -------------------

def operator_pod(documents: list[dict]) -> dict:
    (deployment,) = by_kind(documents, "Deployment")
    return deployment["spec"]["template"]["spec"]


@pytest.mark.parametrize("helm", HELMS)
def test_without_an_extra_ca_bundle_the_operator_pod_is_as_before(tools, helm):
    default = helm_template(tools, helm)
    without_the_key = helm_template(tools, helm, "--set", "extraCABundle=null")
    assert default.returncode == without_the_key.returncode == 0, default.stderr + without_the_key.stderr
    assert default.stdout == without_the_key.stdout
    pod = operator_pod([doc for doc in yaml.safe_load_all(default.stdout) if doc])
    assert "initContainers" not in pod
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert [e["name"] for e in container["env"]] == [
        "WATCH_NAMESPACES", "POD_NAMESPACE", "POD_NAME", "METRICS_PORT", "HEALTH_PORT", "LOG_FORMAT"]


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize(("setting", "source"), [
    ("extraCABundle.configMapName=corp-ca",
     {"configMap": {"name": "corp-ca", "items": [{"key": "bundle.pem", "path": "bundle.pem"}]}}),
    ("extraCABundle.secretName=corp-ca",
     {"secret": {"secretName": "corp-ca", "items": [{"key": "bundle.pem", "path": "bundle.pem"}]}}),
])
def test_an_extra_ca_bundle_reaches_the_operator_merged_read_only_and_named_in_its_env(
        tools, helm, setting, source, tmp_path):
    result = helm_template(tools, helm, "--set", setting, "--set", "extraCABundle.key=bundle.pem")
    assert result.returncode == 0, result.stderr
    documents = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    pod = operator_pod(documents)
    (init,), (container,) = pod["initContainers"], pod["containers"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    merged = env["SSL_CERT_FILE"]
    assert env["REQUESTS_CA_BUNDLE"] == merged  # openstacksdk/keystoneauth verify with requests
    # The operator reads the merged file from a read-only emptyDir the init container wrote.
    (merged_mount,) = [m for m in container["volumeMounts"] if merged.startswith(m["mountPath"] + "/")]
    assert merged_mount["readOnly"] is True
    assert "emptyDir" in volumes[merged_mount["name"]]
    init_mounts = {m["name"]: m for m in init["volumeMounts"]}
    assert init_mounts[merged_mount["name"]]["mountPath"] == merged_mount["mountPath"]
    # The bundle: only its key, read-only, in the init container alone.
    (bundle_volume,) = [v for v in pod["volumes"] if "emptyDir" not in v]
    assert {k: v for k, v in bundle_volume.items() if k != "name"} == source
    bundle_mount = init_mounts[bundle_volume["name"]]
    assert bundle_mount["readOnly"] is True
    assert bundle_volume["name"] not in {m["name"] for m in container["volumeMounts"]}
    assert init["command"][3:5] == [f"{bundle_mount['mountPath']}/bundle.pem", merged]
    # The operator's own image, as hardened as the operator.
    assert (init["image"], init["securityContext"]) == (container["image"], container["securityContext"])
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    # Valid Kubernetes (hack/chart-check.sh validates only the default and full values).
    manifests = tmp_path / "rendered.yaml"
    manifests.write_text(result.stdout)
    from kubernetes_validate.utils import all_versions, latest_version
    assert "1.30.0" in all_versions()
    for kubernetes in ("1.30.0", latest_version()):
        check = subprocess.run([str(REPO / ".venv" / "bin" / "kubernetes-validate"), "--strict", "--quiet",
                                "-k", kubernetes, str(manifests)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def run_ca_init_container(init: dict, bundle: Path, merged: Path) -> subprocess.CompletedProcess[str]:
    """The rendered init container's command, run here with its two paths swapped for local
    files: the same Python and the same Debian CA bundle (ca-certificates) as in the image."""
    command = list(init["command"])
    assert command[:2] == ["python", "-c"]
    command[0], command[3:5] = sys.executable, [str(bundle), str(merged)]
    return subprocess.run(command, capture_output=True, text=True, env=environment_without_ca_settings())


def environment_without_ca_settings(**settings: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    return base | settings


def certificates_in(pem: str) -> int:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=pem)
    return context.cert_store_stats()["x509"]


@contextlib.contextmanager
def https_registry(certificates: Path) -> Iterator[int]:
    """An HTTPS server for localhost with a certificate of the private CA in `certificates`
    (testbed.registry.make_certificates), answering 404 to everything: a registry without the
    image. Yields its port."""
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificates / "server.pem", certificates / "server.key")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


REGISTRY_CHECK = """
import sys
from ironic_shard_operator.adapters.preflight import registry_answer
answer = registry_answer(sys.argv[1], timeout=5)
print(answer.status, answer.text)
"""

REQUESTS_CHECK = """
import sys
import requests
try:
    print(requests.head(sys.argv[1], timeout=5).status_code)
except requests.exceptions.SSLError:
    print("not trusted")
"""


def test_the_merged_bundle_trusts_the_private_ca_and_every_ca_of_the_image(tools, tmp_path):
    """What the pod does, run here: the init container merges the image's CAs and the bundle;
    with the chart's env, preflight's registry check (urllib, the default SSL context) and
    requests (openstacksdk's transport) trust a registry of the private CA, which without it
    preflight warns about."""
    pod = operator_pod(rendered(tools, "--set", "extraCABundle.configMapName=corp-ca"))
    (init,), (container,) = pod["initContainers"], pod["containers"]
    make_certificates(tmp_path)  # ca.pem: a private CA; server.pem: localhost, signed by it
    merged = tmp_path / "merged" / "ca-certificates.crt"
    merged.parent.mkdir()
    result = run_ca_init_container(init, tmp_path / "ca.pem", merged)
    assert result.returncode == 0, result.stderr
    image_cas = Path(ssl.get_default_verify_paths().openssl_cafile).read_text()
    assert certificates_in(image_cas) > 0, "no CA bundle here to check the merge against"
    assert certificates_in(merged.read_text()) == certificates_in(image_cas) + 1  # public CAs kept
    assert f"the image's {certificates_in(image_cas)} CA certificates and 1 of ConfigMap corp-ca, key ca.crt" \
        in result.stdout
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    chart_env = {name: str(merged) for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
                 if env[name] == init["command"][4]}
    assert set(chart_env) == {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"}

    with https_registry(tmp_path) as port:
        def run(script: str, argument: str, env: dict[str, str]) -> str:
            answer = subprocess.run([sys.executable, "-c", script, argument], capture_output=True, text=True,
                                    env=environment_without_ca_settings(**env), timeout=60)
            assert answer.returncode == 0, answer.stderr
            return answer.stdout.strip()

        image = f"localhost:{port}/nova:1"
        assert "TLS certificate not trusted here" in run(REGISTRY_CHECK, image, {})
        assert run(REGISTRY_CHECK, image, chart_env).startswith("404 ")
        assert run(REQUESTS_CHECK, f"https://localhost:{port}/v2/", {}) == "not trusted"
        assert run(REQUESTS_CHECK, f"https://localhost:{port}/v2/", chart_env) == "404"


def test_a_bundle_without_a_certificate_stops_the_pod_with_the_reason(tools, tmp_path):
    pod = operator_pod(rendered(tools, "--set", "extraCABundle.secretName=corp-ca"))
    (init,) = pod["initContainers"]
    bundle = tmp_path / "ca.crt"
    bundle.write_text("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n")
    merged = tmp_path / "ca-certificates.crt"
    result = run_ca_init_container(init, bundle, merged)
    assert result.returncode != 0
    assert "extraCABundle: Secret corp-ca, key ca.crt holds no PEM certificate" in result.stderr
    assert not merged.exists()


OPERATING = REPO / "docs" / "operating.md"
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}


def documented_permissions() -> dict[str, set[tuple[str, str]]]:
    """docs/operating.md's permissions table as {role suffix: {(resource, verb)}}: a row's
    "where" names the role (`-pools` in the watched namespaces, `-workloads`, `-secrets`, the
    cluster, the release namespace's Lease); an empty "where" continues the row above."""
    section = OPERATING.read_text().split("### Permissions", 1)[1].split("\n\n**", 1)[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ")][1:]
    found: dict[str, set[tuple[str, str]]] = {}
    scope = ""
    for where, resources, verbs, _why in ([cell.strip() for cell in row] for row in rows if "---" not in row[0]):
        if where:
            scope = ("pools" if where.startswith("watched namespaces") else "secrets" if "`-secrets`" in where
                     else "workloads" if "`-workloads`" in where
                     else "election" if where.startswith("release namespace") else
                     "cluster" if where.startswith("cluster") else where)
        for resource in re.sub(r" \(group [^)]*\)", "", resources).replace("`", "").split(","):
            found.setdefault(scope, set()).update(
                (resource.strip(), verb) for verb in verbs.replace(";", " ").split() if verb in VERBS)
    return found


def test_the_permissions_table_of_the_operating_guide_is_the_charts_rbac(tools):
    """What docs/operating.md tells a user to grant (rbac.create=false) is what the chart grants,
    in both modes, no more and no less: with every namespace watched, the -pools ClusterRole and
    the -workloads Roles apart; with watched namespaces, both in each -pools Role."""
    documented = documented_permissions()
    granted: dict[str, set[tuple[str, str]]] = {}
    for settings in (["--set", "rbac.poolNamespaces={pools-a}"], ["--set", "watchNamespaces={pools-a}"]):
        for suffix, roles in roles_by_suffix(rendered(tools, *settings)).items():
            for role in roles:
                granted.setdefault(suffix, set()).update((resource, verb) for _, resource, verb in
                                                         rules_as_set(role["rules"]))
        if "rbac.poolNamespaces" in settings[1]:  # the cluster-wide part alone is the table's -pools rows
            assert granted["pools"] == documented["pools"]
    assert granted == {**documented, "pools": documented["pools"] | documented["workloads"]}
