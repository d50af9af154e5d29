"""A Job's pod on the process kubelet runs the REAL nova-manage of the Nova stack, with the
config its Secret volume carries, as the handover Job does: its output is the pod's log,
its exit code the pod's end, and the Job controller counts that end.

Needs the fake API server's Job controller and the process kubelet: skipped on a real cluster.
"""
from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest

from testbed.kube_client import KubeClient, restricted_container
from testbed.nova_stack import NovaStack
from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
from tests.support.kube_api import KubeAPI

pytestmark = pytest.mark.nova

MOUNT = "/etc/nova-manage"


def nova_manage_job(name: str, script: str, *, backoff_limit: int = 0) -> dict[str, Any]:
    """A Job whose one container runs `script` with the Secret `nova-manage` mounted at MOUNT."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": backoff_limit, "template": {"spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,  # as the operator's Job pods: no Kubernetes token
                "containers": [restricted_container("nova-manage", PROCESS_IMAGE, command=["/bin/sh", "-c", script],
                                                    volumeMounts=[{"name": "config", "mountPath": MOUNT,
                                                                   "readOnly": True}])],
                "volumes": [{"name": "config", "secret": {"secretName": "nova-manage"}}]}}}}


def condition(job: dict[str, Any]) -> str | None:
    """The terminal condition of a Job, if it has one."""
    return next((c["type"] for c in (job.get("status") or {}).get("conditions") or []
                 if c["type"] in ("Complete", "Failed") and c["status"] == "True"), None)


def pods_of(client: KubeClient, ns: str, job: str) -> list[dict[str, Any]]:
    return client.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"batch.kubernetes.io/job-name={job}")["items"]


@pytest.fixture
def kubelet(kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack, tmp_path: Path):
    if kube_api.plane is None:
        pytest.skip("the process kubelet runs pods only where no real kubelet does (the test bed's control plane)")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "nova-manage"},
              "data": {"nova.conf": base64.b64encode(nova_stack.nova_conf.read_bytes()).decode()}}
    kube_api.client.create(f"/api/v1/namespaces/{kube_namespace}/secrets", secret)
    with ProcessKubelet(kube_api.client, kube_namespace, nova_stack, tmp_path / "kubelet") as running:
        yield running


def test_a_job_runs_real_nova_manage_with_its_mounted_config(kube_api: KubeAPI, kube_namespace: str,
                                                              kubelet: ProcessKubelet) -> None:
    client, ns = kube_api.client, kube_namespace
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    node = str(uuid.uuid4())
    client.create(jobs, nova_manage_job("lists-cells", f"set -e; nova-manage --config-file {MOUNT}/nova.conf "
                                                       "cell_v2 list_cells"))
    client.create(jobs, nova_manage_job("moves-nothing", f"set -e; nova-manage --config-file {MOUNT}/nova.conf "
                                                         f"db ironic_compute_node_move --ironic-node-uuid {node} "
                                                         "--destination-host no-such-host; echo not reached"))
    for name, end in (("lists-cells", "Complete"), ("moves-nothing", "Failed")):
        kube_api.wait_for(lambda n=name: condition(client.get(f"{jobs}/{n}")) is not None, timeout=120,
                          what=f"Job {name} ended")
        assert condition(client.get(f"{jobs}/{name}")) == end

    listed, = pods_of(client, ns, "lists-cells")
    assert listed["status"]["phase"] == "Succeeded"
    log = client.pod_log(ns, listed["metadata"]["name"])
    assert "cell1" in log  # read from the stack's API database: the mounted config was used

    refused, = pods_of(client, ns, "moves-nothing")  # backoffLimit 0: never replaced
    terminated = refused["status"]["containerStatuses"][0]["state"]["terminated"]
    assert refused["status"]["phase"] == "Failed" and terminated["exitCode"] != 0
    log = client.pod_log(ns, refused["metadata"]["name"])
    assert "no-such-host" in log and "not reached" not in log
    assert client.get(f"{jobs}/moves-nothing")["status"]["conditions"][-1]["reason"] == "BackoffLimitExceeded"


def test_a_killed_job_pod_fails_with_137_and_is_replaced(kube_api: KubeAPI, kube_namespace: str,
                                                        kubelet: ProcessKubelet) -> None:
    client, ns = kube_api.client, kube_namespace
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    client.create(jobs, nova_manage_job("batch", f"test -s {MOUNT}/nova.conf && echo started && sleep 600",
                                        backoff_limit=1))
    kube_api.wait_for(lambda: any("started" in client.pod_log(ns, p["metadata"]["name"])
                                  for p in pods_of(client, ns, "batch")
                                  if p["status"].get("phase") == "Running"), timeout=60, what="the Job's pod running")
    first, = pods_of(client, ns, "batch")
    kubelet.kill(first["metadata"]["name"])
    kube_api.wait_for(lambda: len(pods_of(client, ns, "batch")) == 2, timeout=60, what="a replacement pod")
    killed = client.get(f"/api/v1/namespaces/{ns}/pods/{first['metadata']['name']}")
    assert killed["status"]["phase"] == "Failed"
    assert killed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert client.get(f"{jobs}/batch")["status"]["failed"] == 1
