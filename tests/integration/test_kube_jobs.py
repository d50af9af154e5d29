"""batch/v1 Jobs and pod logs as a real cluster serves them (the handover runs
`nova-manage` in a Job and reads its log): what the API server refuses and defaults, what the
Job controller does with its pods' ends (success, failure, backoff, a deleted pod), how deleting
a Job treats its pods, and who may read a pod's log.

Written against the Kubernetes API contract. The Job pods' ends are chosen through the fake
kubelet (testbed/kubelet.py `run_outcomes`), so those tests skip where real kubelets run pods;
the refusals and defaults hold on any cluster.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed import service_account_tokens as tokens
from testbed.kube_client import KubeAPIError, KubeClient, restricted_container
from testbed.kubelet import FakeKubelet, RunOutcome
from tests.support.kube_api import KubeAPI

pytestmark = pytest.mark.integration


def job(name: str, *, restart_policy: str | None = "Never", backoff_limit: int | None = None,
        containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": containers if containers is not None
                                else [restricted_container("main", "registry.k8s.io/busybox:1.36",
                                                           command=["sh", "-c", "echo done"])]}
    if restart_policy:
        pod_spec["restartPolicy"] = restart_policy
    spec: dict[str, Any] = {"template": {"spec": pod_spec}}
    if backoff_limit is not None:
        spec["backoffLimit"] = backoff_limit
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def refused(call: Any) -> KubeAPIError:
    with pytest.raises(KubeAPIError) as error:
        call()
    return error.value


def causes(error: KubeAPIError) -> dict[str, str]:
    assert error.status == 422, error
    return {c["field"]: c["message"] for c in error.body["details"]["causes"]}


def ended(kube_api: KubeAPI, path: str) -> dict[str, Any]:
    """The Job at `path` once it has its terminal condition (Complete or Failed)."""
    found: dict[str, Any] = {}

    def terminal() -> bool:
        found.update(kube_api.client.get(path))
        return any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                   for c in (found.get("status") or {}).get("conditions") or [])
    kube_api.wait_for(terminal, timeout=60, what=f"{path} ended")
    return found


def pods_of(client: KubeClient, ns: str, name: str) -> list[dict[str, Any]]:
    return client.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"batch.kubernetes.io/job-name={name}")["items"]


def test_jobs_are_served_and_bad_ones_refused(kube_api: KubeAPI, kube_namespace: str) -> None:
    client, jobs = kube_api.client, f"/apis/batch/v1/namespaces/{kube_namespace}/jobs"
    served = {r["name"]: r for r in client.get("/apis/batch/v1")["resources"]}
    assert {"jobs", "jobs/status"} <= set(served) and served["jobs"]["namespaced"]

    unset = causes(refused(lambda: client.create(jobs, job("always", restart_policy=None))))
    assert unset["spec.template.spec.restartPolicy"] == 'Required value: valid values: "OnFailure", "Never"'
    assert "spec.template.spec.restartPolicy" in causes(refused(
        lambda: client.create(jobs, job("always", restart_policy="Always"))))
    assert "spec.template.spec.containers" in causes(refused(lambda: client.create(jobs, job("empty", containers=[]))))
    assert "metadata.name" in causes(refused(lambda: client.create(jobs, job("Not_A_Name"))))
    assert client.get(jobs)["items"] == []  # nothing of them stored

    created = client.create(jobs, job("fine"))
    with pytest.raises(KubeAPIError) as changed:
        client.patch(f"{jobs}/fine", {"spec": {"template": {"spec": {"containers": [
            restricted_container("main", "registry.k8s.io/busybox:1.37")]}}}}, "strategic")
    assert "spec.template" in causes(changed.value)
    changed_selector = refused(lambda: client.patch(f"{jobs}/fine", {"spec": {"selector": {"matchLabels": {"a": "b"}}}}))
    assert "spec.selector" in causes(changed_selector)
    assert client.get(f"{jobs}/fine")["spec"] == created["spec"]


def test_a_created_job_carries_the_servers_defaults(kube_api: KubeAPI, kube_namespace: str) -> None:
    created = kube_api.client.create(f"/apis/batch/v1/namespaces/{kube_namespace}/jobs", job("defaults"))
    spec, uid = created["spec"], created["metadata"]["uid"]
    assert {key: spec[key] for key in ("backoffLimit", "completions", "parallelism", "completionMode", "suspend",
                                       "podReplacementPolicy")} == {
        "backoffLimit": 6, "completions": 1, "parallelism": 1, "completionMode": "NonIndexed", "suspend": False,
        "podReplacementPolicy": "TerminatingOrFailed"}
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
        "batch.kubernetes.io/job-name": "defaults", "job-name": "defaults"}


def test_the_job_controller_counts_failures_replaces_pods_and_completes(
        kube_api: KubeAPI, kube_namespace: str, kubelet: FakeKubelet) -> None:
    client, ns = kube_api.client, kube_namespace
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    kubelet.run_outcomes("retried", RunOutcome(2, "move refused\n"), RunOutcome(0, "moved 1\nmoved 2\nmoved 3\n"))
    client.create(jobs, job("retried", backoff_limit=1))
    done = ended(kube_api, f"{jobs}/retried")
    types = [c["type"] for c in done["status"]["conditions"]]
    assert types == ["SuccessCriteriaMet", "Complete"]
    assert (done["status"]["succeeded"], done["status"]["failed"], done["status"].get("active")) == (1, 1, None)
    assert done["status"]["startTime"] and done["status"]["completionTime"]

    pods = {p["status"]["phase"]: p for p in pods_of(client, ns, "retried")}
    assert set(pods) == {"Failed", "Succeeded"}
    for pod in pods.values():
        ref, = pod["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
            "Job", done["metadata"]["uid"], True, True)
        assert pod["metadata"]["name"].startswith("retried-") and len(pod["metadata"]["name"]) == len("retried-") + 5
        assert not pod["metadata"].get("finalizers")  # counted: the job-tracking finalizer is gone
    failed = pods["Failed"]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert failed["exitCode"] == 2
    name = pods["Succeeded"]["metadata"]["name"]
    assert client.pod_log(ns, name) == "moved 1\nmoved 2\nmoved 3\n"
    assert client.pod_log(ns, name, tailLines=2) == "moved 2\nmoved 3\n"
    assert client.pod_log(ns, pods["Failed"]["metadata"]["name"]) == "move refused\n"


def test_a_job_fails_once_its_backoff_limit_is_exceeded(kube_api: KubeAPI, kube_namespace: str,
                                                       kubelet: FakeKubelet) -> None:
    client, ns = kube_api.client, kube_namespace
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    kubelet.run_outcomes("hopeless", *[RunOutcome(1, "Source service is not yet forced down!\n")] * 3)
    client.create(jobs, job("hopeless", backoff_limit=1))
    done = ended(kube_api, f"{jobs}/hopeless")
    failed = [c for c in done["status"]["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "BackoffLimitExceeded"
    assert done["status"]["failed"] == 2 and "succeeded" not in done["status"]
    assert len(pods_of(client, ns, "hopeless")) == 2  # backoffLimit 1: one retry, no more
    reasons = {e["reason"] for e in client.get(f"/api/v1/namespaces/{ns}/events")["items"]
               if e["involvedObject"]["name"] == "hopeless"}
    assert {"SuccessfulCreate", "BackoffLimitExceeded"} <= reasons


def test_a_running_job_pod_that_is_deleted_counts_as_failed_and_is_replaced(
        kube_api: KubeAPI, kube_namespace: str, kubelet: FakeKubelet) -> None:
    client, ns = kube_api.client, kube_namespace
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    kubelet.run_outcomes("interrupted", RunOutcome(None))  # the first pod runs until deleted
    client.create(jobs, job("interrupted", backoff_limit=2))
    kube_api.wait_for(lambda: [p["status"]["phase"] for p in pods_of(client, ns, "interrupted")] == ["Running"],
                      what="the first pod running")
    first, = pods_of(client, ns, "interrupted")
    client.delete(f"/api/v1/namespaces/{ns}/pods/{first['metadata']['name']}")
    done = ended(kube_api, f"{jobs}/interrupted")
    assert (done["status"]["failed"], done["status"]["succeeded"]) == (1, 1)


def test_with_pod_replacement_policy_failed_no_pod_runs_beside_one_still_terminating(
        kube_api: KubeAPI, kube_namespace: str, kubelet: FakeKubelet) -> None:
    """A handover Job's pod being deleted may still be running nova-manage (its kubelet is cut
    off, or its grace period runs): with podReplacementPolicy Failed the Job controller starts
    no second pod until that one has ended; with the default (TerminatingOrFailed) it does at once."""
    client, ns = kube_api.client, kube_namespace
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    refused_policy = causes(refused(lambda: client.create(jobs, {**job("bad-policy"), "spec": {
        **job("bad-policy")["spec"], "podReplacementPolicy": "Never"}})))
    assert refused_policy["spec.podReplacementPolicy"].startswith('Unsupported value: "Never"')
    for name, policy in (("only-failed", "Failed"), ("default-policy", None)):
        kubelet.run_outcomes(name, RunOutcome(None))  # runs until deleted
        body = job(name, backoff_limit=3)
        if policy:
            body["spec"]["podReplacementPolicy"] = policy
        client.create(jobs, body)
        kube_api.wait_for(lambda n=name: [p["status"]["phase"] for p in pods_of(client, ns, n)] == ["Running"],
                          what=f"{name}: the first pod running")
    for name in ("only-failed", "default-policy"):
        first, = pods_of(client, ns, name)
        kubelet.set_node_reachable(first["spec"]["nodeName"], False)  # its deletion cannot finish
        client.delete(f"/api/v1/namespaces/{ns}/pods/{first['metadata']['name']}")
    kube_api.wait_for(lambda: len(pods_of(client, ns, "default-policy")) == 2,
                      what="default policy: a replacement beside the terminating pod")
    kube_api.wait_for(lambda: (client.get(f"{jobs}/only-failed").get("status") or {}).get("terminating") == 1,
                      what="policy Failed: the Job controller has seen its pod terminating")
    assert [p["metadata"].get("deletionTimestamp") is not None for p in pods_of(client, ns, "only-failed")] == [True]
    for node in kubelet.nodes:
        kubelet.set_node_reachable(node, True)
    kube_api.wait_for(lambda: any(not p["metadata"].get("deletionTimestamp")
                                  for p in pods_of(client, ns, "only-failed")),
                      what="policy Failed: the replacement once the first pod has ended")


@pytest.mark.parametrize("policy, pods_kept", [(None, True), ("Orphan", True), ("Background", False)])
def test_deleting_a_job_orphans_its_pods_unless_told_otherwise(
        kube_api: KubeAPI, kube_namespace: str, kubelet: FakeKubelet, policy: str | None, pods_kept: bool) -> None:
    client, ns = kube_api.client, kube_namespace
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    kubelet.run_outcomes("deleted", RunOutcome(None))
    client.create(jobs, job("deleted"))
    kube_api.wait_for(lambda: len(pods_of(client, ns, "deleted")) == 1, what="the Job's pod")
    pod_name = pods_of(client, ns, "deleted")[0]["metadata"]["name"]
    client.delete(f"{jobs}/deleted", **({"propagationPolicy": policy} if policy else {}))

    def pod_settled() -> bool:
        left = pods_of(client, ns, "deleted")
        if not pods_kept:
            return not left
        return len(left) == 1 and not left[0]["metadata"].get("ownerReferences") \
            and not left[0]["metadata"].get("finalizers")
    kube_api.wait_for(pod_settled, what="the Job's pod orphaned" if pods_kept else "the Job's pod deleted")
    if pods_kept:
        kept, = pods_of(client, ns, "deleted")
        assert kept["metadata"]["name"] == pod_name and not kept["metadata"].get("deletionTimestamp")


def test_pod_logs_refuse_what_a_real_server_refuses(kube_api: KubeAPI, kube_namespace: str,
                                                    kubelet: FakeKubelet) -> None:
    client, ns = kube_api.client, kube_namespace
    kubelet.hold("waiting")
    client.create(f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waiting"},
                                                    "spec": {"containers": [restricted_container("a", "x:1"),
                                                                            restricted_container("b", "x:1")]}})
    kube_api.wait_for(lambda: client.get(f"/api/v1/namespaces/{ns}/pods/waiting")["spec"].get("nodeName"),
                      what="the pod bound")
    unnamed = refused(lambda: client.pod_log(ns, "waiting"))
    assert unnamed.status == 400 and "a container name must be specified for pod waiting" in str(unnamed)
    assert "is not valid for pod waiting" in str(refused(lambda: client.pod_log(ns, "waiting", container="c")))
    waiting = refused(lambda: client.pod_log(ns, "waiting", container="a"))
    assert waiting.status == 400 and 'container "a" in pod "waiting" is waiting to start' in str(waiting)
    assert refused(lambda: client.pod_log(ns, "missing")).status == 404


def test_reading_a_pod_log_needs_the_pods_log_grant(kube_api: KubeAPI, kube_namespace: str,
                                                   kubelet: FakeKubelet, tmp_path: Path) -> None:
    client, ns = kube_api.client, kube_namespace
    kubelet.run_outcomes("logged", RunOutcome(0, "secret-free output\n"))
    client.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("logged"))
    ended(kube_api, f"/apis/batch/v1/namespaces/{ns}/jobs/logged")
    pod_name = pods_of(client, ns, "logged")[0]["metadata"]["name"]
    client.create(f"/api/v1/namespaces/{ns}/serviceaccounts",
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "watcher"}})
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
             {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "create", "delete"]}]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    client.create(f"{rbac}/namespaces/{ns}/roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                                     "metadata": {"name": "watcher"}, "rules": rules})
    client.create(f"{rbac}/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "watcher"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "watcher"},
        "subjects": [{"kind": "ServiceAccount", "name": "watcher", "namespace": ns}]})
    kubeconfig = tmp_path / "watcher-kubeconfig"
    tokens.write_kubeconfig(kubeconfig, kube_api.kubeconfig, tokens.issue(client, ns, "watcher"))
    watcher = KubeClient(kubeconfig)

    assert watcher.get(f"/apis/batch/v1/namespaces/{ns}/jobs/logged")["metadata"]["name"] == "logged"
    denied = refused(lambda: watcher.pod_log(ns, pod_name))
    assert denied.status == 403 and 'cannot get resource "pods/log"' in str(denied)
    client.patch(f"{rbac}/namespaces/{ns}/roles/watcher", {"rules": rules + [
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]})

    def log_once_granted() -> str | None:  # the authorizer's informers see the new rule a moment later
        try:
            return watcher.pod_log(ns, pod_name)
        except KubeAPIError as error:
            if error.status == 403:
                return None
            raise
    assert kube_api.wait_for(log_once_granted, timeout=30, what="the log, once pods/log is granted") == \
        "secret-free output\n"
