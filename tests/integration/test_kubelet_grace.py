"""The process kubelet stops a deleted pod as a kubelet does: SIGTERM, then SIGKILL only once the
pod's grace (metadata.deletionGracePeriodSeconds, from spec.terminationGracePeriodSeconds) has
passed. A container that ignores SIGTERM runs until its grace is over, is killed then (not
later) and ends with exit code 137; one that exits on SIGTERM goes at once, whatever its grace. Both kinds of containers the
process kubelet runs are covered: a member's nova-compute (here a stand-in process, no Nova
needed) and a Job's task (`sh -c`, PID 1 of its own PID namespace, as in a container).

Needs the test bed's control plane (the process kubelet runs pods where no real kubelet does).
"""

from __future__ import annotations

import base64
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from testbed import nova_starter
from testbed.kube_client import KubeClient, restricted_container
from testbed.nova_stack import ComputeProcess
from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
from testbed.waiting import DEADLINE_SCALE
from tests.support.kube_api import KubeAPI

pytestmark = pytest.mark.integration

SHORT_GRACE = 6  # seconds a SIGTERM-ignoring container is given: the test waits them out
# How late after its grace a container may be killed: the process kubelet looks every second;
# a machine under load is slower (testbed/waiting.py stretches every bound by DEADLINE_SCALE).
KILL_SLACK = 15 * DEADLINE_SCALE
LONG_GRACE = 600  # never waited out: a container that exits on SIGTERM goes long before
# A nova-compute stand-in: it ignores SIGTERM when one of its config files says so, else
# SIGTERM ends it (the default action), as a graceful shutdown that finishes at once.
STAND_IN = """
import signal, sys, time
if any('ignore_sigterm = true' in open(path).read() for path in sys.argv[2::2]):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    time.sleep(0.2)
"""
IGNORES_TERM = "trap '' TERM; while :; do sleep 0.2; done"
EXITS_ON_TERM = "trap 'exit 143' TERM; while :; do sleep 0.2; done"


class StandInStack:
    """What ProcessKubelet needs of a NovaStack, without Nova: its nova-compute processes are
    STAND_IN, no compute service ever reports in (the pods stay Running, not Ready)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        for where in ("logs", "pids"):
            (run_dir / where).mkdir(parents=True)
        self.state = {"venv": sys.prefix}
        self.timings = {"service_down_time": 20}

    def compute_services(self) -> dict[str, dict]:
        return {}

    def start_compute(self, name: str, config_files: list[Path]) -> ComputeProcess:
        argv = [sys.executable, "-c", STAND_IN]
        for path in config_files:
            argv += ["--config-file", str(path)]
        return ComputeProcess(self, name, nova_starter.spawn(self.run_dir, name, argv), tuple(config_files))


class PodEnds:
    """Watches the namespace's pods: when each was seen gone, and the exit code its container
    ended with (its last status before it went)."""

    def __init__(self, client: KubeClient, ns: str) -> None:
        self.client, self.ns = client, ns
        self.gone: dict[str, float] = {}
        self.exit_codes: dict[str, int] = {}
        self._stream: Any = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PodEnds:
        listing = self.client.get(f"/api/v1/namespaces/{self.ns}/pods")
        self._stream = self.client.watch(f"/api/v1/namespaces/{self.ns}/pods", timeout_seconds=300,
                                         resourceVersion=listing["metadata"]["resourceVersion"])
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._stream.close()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            for event in self._stream:
                pod = event["object"]
                name = pod["metadata"]["name"]
                for status in (pod.get("status") or {}).get("containerStatuses") or ():
                    terminated = (status.get("state") or {}).get("terminated")
                    if terminated:
                        self.exit_codes[name] = terminated["exitCode"]
                if event["type"] == "DELETED":
                    self.gone[name] = time.monotonic()
        except Exception:  # the stream closed by __exit__
            if not self._stopping.is_set():
                raise


def pod(name: str, grace: int, command: list[str]) -> dict[str, Any]:
    """A pod of the process kubelet's image running `command`, with the nova.conf Secret of its
    name mounted at /etc/nova."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": grace, "restartPolicy": "Never",
                     "automountServiceAccountToken": False,
                     "containers": [restricted_container("main", PROCESS_IMAGE, command=command, volumeMounts=[
                         {"name": "conf", "mountPath": "/etc/nova", "readOnly": True}])],
                     "volumes": [{"name": "conf", "secret": {"secretName": name}}]}}


def started(kubelet: ProcessKubelet, name: str) -> bool:
    container = kubelet.container(name)
    return container is not None and container.process.alive()


def test_a_deleted_pod_is_killed_only_after_its_grace_and_one_that_exits_on_sigterm_is_not_waited_for(
        kube_api: KubeAPI, kube_namespace: str, tmp_path: Path) -> None:
    if kube_api.plane is None:
        pytest.skip("the process kubelet runs pods only where no real kubelet does (the test bed's control plane)")
    client, ns = kube_api.client, kube_namespace
    pods = {  # name: (grace, command, whether it ignores SIGTERM)
        "compute-ignores": (SHORT_GRACE, ["nova-compute", "--config-file", "/etc/nova/nova.conf"], True),
        "compute-exits": (LONG_GRACE, ["nova-compute", "--config-file", "/etc/nova/nova.conf"], False),
        "task-ignores": (SHORT_GRACE, ["/bin/sh", "-c", IGNORES_TERM], True),
        "task-exits": (LONG_GRACE, ["/bin/sh", "-c", EXITS_ON_TERM], False),
    }
    with ProcessKubelet(client, ns, StandInStack(tmp_path / "run"), tmp_path / "kubelet") as kubelet:
        for name, (grace, command, ignores) in pods.items():
            conf = f"[DEFAULT]\nignore_sigterm = {'true' if ignores else 'false'}\n"
            client.create(f"/api/v1/namespaces/{ns}/secrets", {
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                "data": {"nova.conf": base64.b64encode(conf.encode()).decode()}})
            client.create(f"/api/v1/namespaces/{ns}/pods", pod(name, grace, command))
        kube_api.wait_for(lambda: all(started(kubelet, name) for name in pods), timeout=120, interval=0.5,
                          what="every pod's process running")
        with PodEnds(client, ns) as ends:
            deleted = time.monotonic()
            for name in pods:
                client.delete(f"/api/v1/namespaces/{ns}/pods/{name}")  # the pod's own grace
            kube_api.wait_for(lambda: set(ends.gone) == set(pods), timeout=120, interval=0.5,
                              what="every deleted pod gone")
    took = {name: ends.gone[name] - deleted for name in pods}
    for name, (grace, _, ignores) in pods.items():
        if ignores:
            assert grace <= took[name] < grace + KILL_SLACK, f"{name} not killed at its grace of {grace} s: {took}"
            assert ends.exit_codes.get(name) == 137, f"{name} did not end by SIGKILL: {ends.exit_codes}"
        else:
            assert took[name] < 60, f"{name} exited on SIGTERM but its grace was waited out: {took}"
            assert ends.exit_codes.get(name) != 137, f"{name} was killed: {ends.exit_codes}"
    assert ends.exit_codes["task-exits"] == 143


def test_a_deletion_with_its_own_grace_overrides_the_pods(kube_api: KubeAPI, kube_namespace: str,
                                                          tmp_path: Path) -> None:
    """`kubectl delete pod --grace-period=N` (DeleteOptions gracePeriodSeconds) is the grace the
    kubelet gives, not the pod's spec: a SIGTERM-ignoring container with a long one is killed
    after N seconds."""
    if kube_api.plane is None:
        pytest.skip("the process kubelet runs pods only where no real kubelet does (the test bed's control plane)")
    client, ns = kube_api.client, kube_namespace
    client.create(f"/api/v1/namespaces/{ns}/secrets", {"apiVersion": "v1", "kind": "Secret",
                                                       "metadata": {"name": "stubborn"}, "data": {}})
    with ProcessKubelet(client, ns, StandInStack(tmp_path / "run"), tmp_path / "kubelet") as kubelet:
        client.create(f"/api/v1/namespaces/{ns}/pods", pod("stubborn", LONG_GRACE, ["/bin/sh", "-c", IGNORES_TERM]))
        kube_api.wait_for(lambda: started(kubelet, "stubborn"), timeout=120, interval=0.5, what="its process running")
        with PodEnds(client, ns) as ends:
            deleted = time.monotonic()
            client.delete(f"/api/v1/namespaces/{ns}/pods/stubborn", gracePeriodSeconds=SHORT_GRACE)
            kube_api.wait_for(lambda: "stubborn" in ends.gone, timeout=120, interval=0.5, what="the pod gone")
    assert SHORT_GRACE <= ends.gone["stubborn"] - deleted < SHORT_GRACE + KILL_SLACK
    assert ends.exit_codes.get("stubborn") == 137
