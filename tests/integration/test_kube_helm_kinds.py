"""What `helm install` and `helm uninstall` of our chart ask of an API server, as a real one
answers: apps/v1 Deployments and policy/v1 PodDisruptionBudgets with their defaults and
refusals, server-side apply creating an object (Helm 4 applies server-side by default) and the
checks it makes first, and DELETE with a protobuf DeleteOptions body (Helm's release storage).

Written against the Kubernetes API contract, so they hold on a real cluster too; the README's
quick-start test runs the real helm against the same server (test_kubectl_ics.py).
"""
from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from testbed.kube_client import restricted_container

from tests.integration.test_kube_jobs import causes, refused
from tests.support.kube_api import KubeAPI

pytestmark = pytest.mark.integration

APPLY = "application/apply-patch+yaml"


def deployment(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [restricted_container("main", "registry.k8s.io/pause:3.10")]}}}
    body.update(spec)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": body}


def test_deployments_are_defaulted_and_refused_as_apps_v1_does(kube_api: KubeAPI, kube_namespace: str) -> None:
    client, path = kube_api.client, f"/apis/apps/v1/namespaces/{kube_namespace}/deployments"
    created = client.create(path, deployment("web"))
    spec = created["spec"]
    assert (spec["replicas"], spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (1, 10, 600)
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    pod_spec = spec["template"]["spec"]
    assert (pod_spec["restartPolicy"], pod_spec["dnsPolicy"], pod_spec["terminationGracePeriodSeconds"]) == (
        "Always", "ClusterFirst", 30)
    assert pod_spec["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert created["metadata"]["generation"] == 1

    mismatched = deployment("bad-labels")
    mismatched["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    assert "`selector` does not match template `labels`" in causes(refused(
        lambda: client.create(path, mismatched)))["spec.template.metadata.labels"]
    assert causes(refused(lambda: client.create(path, dict(deployment("no-sel"), spec={
        k: v for k, v in deployment("no-sel")["spec"].items() if k != "selector"}))))["spec.selector"] == "Required value"
    never = deployment("never")
    never["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    assert 'supported values: "Always"' in causes(refused(lambda: client.create(path, never)))[
        "spec.template.spec.restartPolicy"]
    frozen = deployment("frozen", strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}})
    assert "may not be 0 when `maxSurge` is 0" in causes(refused(lambda: client.create(path, frozen)))[
        "spec.strategy.rollingUpdate.maxUnavailable"]

    moved = refused(lambda: client.patch(f"{path}/web", {"spec": {
        "selector": {"matchLabels": {"app": "web", "tier": "x"}},
        "template": {"metadata": {"labels": {"app": "web", "tier": "x"}}}}}))
    assert "field is immutable" in causes(moved)["spec.selector"]
    scaled = client.patch(f"{path}/web", {"spec": {"replicas": 3}})
    assert scaled["spec"]["replicas"] == 3 and scaled["metadata"]["generation"] == 2


def test_pod_disruption_budgets_refuse_both_bounds(kube_api: KubeAPI, kube_namespace: str) -> None:
    client, path = kube_api.client, f"/apis/policy/v1/namespaces/{kube_namespace}/poddisruptionbudgets"
    body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}
    created = client.create(path, body)
    assert created["status"]["disruptionsAllowed"] == 0 and created["spec"]["maxUnavailable"] == 1
    both = dict(body, metadata={"name": "both"}, spec=dict(body["spec"], minAvailable=1))
    assert "cannot be both set" in causes(refused(lambda: client.create(path, both)))["spec"]
    over = dict(body, metadata={"name": "over"}, spec=dict(body["spec"], maxUnavailable="120%"))
    assert "must not be greater than 100%" in causes(refused(lambda: client.create(path, over)))["spec.maxUnavailable"]


def test_server_side_apply_creates_an_absent_object_after_its_checks(kube_api: KubeAPI, kube_namespace: str) -> None:
    client = kube_api.client
    path = f"/api/v1/namespaces/{kube_namespace}/configmaps"
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "1"}}

    def apply(name: str, body: Any, **params: str) -> Any:
        return client.request("PATCH", f"{path}/{name}", body, content_type=APPLY, params=params)

    no_manager = refused(lambda: apply("applied", config))
    assert no_manager.status == 422 and "fieldManager: Required value" in no_manager.body["message"]
    wrong_version = refused(lambda: apply("applied", dict(config, apiVersion="v2"), fieldManager="t"))
    assert wrong_version.status == 400 and "invalid object type: /v2, Kind=ConfigMap" in wrong_version.body["message"]
    other_name = refused(lambda: apply("elsewhere", config, fieldManager="t"))
    assert other_name.status == 400 and "does not match the name on the URL" in other_name.body["message"]
    managed = dict(config, metadata={"name": "applied", "managedFields": [{"manager": "t"}]})
    assert "managedFields must be nil" in refused(lambda: apply("applied", managed, fieldManager="t")).body["message"]
    assert refused(lambda: client.get(f"{path}/applied")).status == 404  # nothing of the refused ones stored

    dry = apply("applied", config, fieldManager="t", dryRun="All")
    assert dry["data"] == {"a": "1"} and refused(lambda: client.get(f"{path}/applied")).status == 404
    created = apply("applied", config, fieldManager="t")
    assert created["data"] == {"a": "1"} and created["metadata"]["namespace"] == kube_namespace
    assert client.get(f"{path}/applied")["metadata"]["uid"] == created["metadata"]["uid"]
    again = apply("applied", config, fieldManager="other")  # Helm 4 applies its CRDs even when present
    assert again["data"] == {"a": "1"} and again["metadata"]["uid"] == created["metadata"]["uid"]


def test_kubectl_server_side_apply_creates_a_new_object(kube_api: KubeAPI, kube_namespace: str, tmp_path: Path) -> None:
    """`kubectl apply --server-side` of a new object answers `serverside-applied` (201)."""
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
                                    "data": {"k": "v"}}))
    applied = kube_api.kubectl("apply", "--server-side", "-n", kube_namespace, "-f", str(manifest))
    assert "serverside-applied" in applied.stdout
    assert kube_api.client.get(f"/api/v1/namespaces/{kube_namespace}/configmaps/ssa")["data"] == {"k": "v"}


def test_protobuf_delete_options_are_honoured(kube_api: KubeAPI, kube_namespace: str) -> None:
    """A DELETE whose body is a protobuf DeleteOptions (what client-go sends when it negotiates
    protobuf, as Helm's Secret storage does): its preconditions are checked, then it deletes."""
    client = kube_api.client
    path = f"/api/v1/namespaces/{kube_namespace}/secrets"
    secret = client.create(path, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "rel"}})

    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload
    options = field(2, field(1, b"not-the-uid")) + bytes([4 << 3 | 2, 10]) + b"Background"
    body = b"k8s\x00" + field(1, field(1, b"v1") + field(2, b"DeleteOptions")) + field(2, options)
    answer = delete_with_protobuf(kube_api, f"{path}/rel", body)
    assert answer["code"] == 409 and "the UID in the precondition (not-the-uid) does not match the UID in record" in answer["message"]
    options = field(2, field(1, secret["metadata"]["uid"].encode())) + bytes([4 << 3 | 2, 10]) + b"Background"
    body = b"k8s\x00" + field(1, field(1, b"v1") + field(2, b"DeleteOptions")) + field(2, options)
    deleted = delete_with_protobuf(kube_api, f"{path}/rel", body)  # a Status: a Secret goes at once
    assert (deleted["kind"], deleted["status"], deleted["details"]["name"]) == ("Status", "Success", "rel"), deleted
    assert refused(lambda: client.get(f"{path}/rel")).status == 404


def delete_with_protobuf(kube_api: KubeAPI, path: str, body: bytes) -> dict[str, Any]:
    """DELETE `path` with a protobuf body, as the test bed's admin (its client certificate); the
    JSON answer, success or Status."""
    plane = kube_api.plane
    if plane is None:
        pytest.skip("posts raw bytes with the test bed control plane's admin certificate")
    context = ssl.create_default_context(cafile=str(plane.ca))
    context.load_cert_chain(plane.state / "admin.pem", plane.state / "admin.key")
    request = urllib.request.Request(f"{plane.url}{path}", data=body, method="DELETE", headers={
        "Content-Type": "application/vnd.kubernetes.protobuf", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return json.loads(error.read())
