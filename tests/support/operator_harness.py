"""The harness the operator scenario tests of every tier share: a pool's CR, the operator
process, and short readers of what a user would look at (pods, status, Ironic shards). The CRD
and a pool's Secrets are created by testbed/operator_objects.py.

The operator runs as a real process (`python -m ironic_shard_operator.cli run`, what
`ironic-shard-operator run` starts) against the `kube_api` cluster, as the ServiceAccount the
Helm chart creates, with exactly the chart's RBAC (tests/support/operator_rbac.py); every
process started here is stopped again by `OperatorProcess.stop()` / the context manager.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from ironic_shard_operator.core.pods import member_readiness, read_pod
from testbed import service_account_tokens as tokens
from testbed.kube_client import KubeAPIError, KubeClient
from testbed.waiting import wait_for
from tests.support.kube_api import KubeAPI
from tests.support.operator_rbac import install_identity

REPO = Path(__file__).resolve().parents[2]
POOLS = "/apis/ironicshards.io/v1alpha1/namespaces/{ns}/ironiccomputeshards"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/ironic-shard-operator"


def pool_manifest(name: str, *, cloud_name: str, resource_class: str, **spec: Any) -> dict[str, Any]:
    body = {
        "replicas": 3,
        "image": "registry.example/nova-compute:1",
        "novaConfig": {"secretRef": {"name": "nova-config"}},
        "cloud": {"secretRef": {"name": "openstack-cloud"}, "cloudName": cloud_name},
        "selector": {"resourceClass": resource_class},
        "ironic": {"pollIntervalSeconds": 5},
    }
    body.update(spec)
    return {"apiVersion": "ironicshards.io/v1alpha1", "kind": "IronicComputeShard",
            "metadata": {"name": name}, "spec": body}


class OperatorProcess:
    """One `ironic-shard-operator run` process watching `namespace` (Lease there too).

    It authenticates as the chart's ServiceAccount with the chart's RBAC (installed in
    `namespace` at start; `chart`: more `--set` values, `watch_all`: rendered for every
    namespace), unless `KUBECONFIG` is given in `env`: then as that kubeconfig says.
    """

    def __init__(self, api: KubeAPI, namespace: str, identity: str, log_dir: Path, *,
                 chart: tuple[str, ...] = (), watch_all: bool = False, **env: str) -> None:
        self.identity = identity
        self.namespace = namespace
        self.log_path = log_dir / f"operator-{identity}.log"
        self._api = api
        self._chart_identity = "KUBECONFIG" not in env
        self._chart, self._watch_all = chart, watch_all
        self.service_account = ""  # the chart's ServiceAccount it runs as, once started
        self._env = dict(api.env, WATCH_NAMESPACES=namespace, POD_NAMESPACE=namespace,
                         POD_NAME=identity, METRICS_PORT="0", HEALTH_PORT="0",
                         PYTHONPATH=str(REPO / "operator"))
        self._env.update(env)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        if self._chart_identity:
            self.service_account = install_identity(self._api.client, self.namespace, *self._chart,
                                                    watch_all=self._watch_all)
            kubeconfig = self.log_path.with_name(f"kubeconfig-{self.identity}")
            token = tokens.issue(self._api.client, self.namespace, self.service_account)
            tokens.write_kubeconfig(kubeconfig, self._api.kubeconfig, token)
            self._env["KUBECONFIG"] = str(kubeconfig)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ironic_shard_operator.cli", "run"], env=self._env,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return self

    def kill(self) -> None:
        """SIGKILL: the operator dies mid-work, as on a node crash."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 30 s; the exit code (None if it had to be killed)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                return self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.process.returncode

    def refused(self) -> list[str]:
        """What the API server refused this operator (its 403 messages, from the test bed's audit
        log); [] on a given cluster."""
        if self._api.audit is None or not self.service_account:
            return []
        user = f"system:serviceaccount:{self.namespace}:{self.service_account}"
        return [refusal.message for refusal in self._api.audit.refused(user)]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def http_get(port: int, path: str) -> str:
    """The body of http://127.0.0.1:port/path, or "" while nothing answers there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.read().decode()
    except OSError:
        return ""


def lease_holder(client: KubeClient, namespace: str) -> str:
    try:
        return client.get(LEASE.format(ns=namespace))["spec"].get("holderIdentity") or ""
    except KubeAPIError as error:
        if error.status == 404:
            return ""
        raise


def get_pool(client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return client.get(f"{POOLS.format(ns=namespace)}/{name}")


def patch_spec(client: KubeClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    client.patch(f"{POOLS.format(ns=namespace)}/{name}", {"spec": spec})


def condition(pool: dict[str, Any], kind: str) -> dict[str, Any]:
    for item in (pool.get("status") or {}).get("conditions") or ():
        if item["type"] == kind:
            return item
    return {}


def member_pods(client: KubeClient, namespace: str, pool: str) -> dict[str, dict[str, Any]]:
    items = client.get(f"/api/v1/namespaces/{namespace}/pods",
                       labelSelector=f"ironicshards.io/pool={pool}")["items"]
    return {pod["metadata"]["name"]: pod for pod in items}


def is_ready(pod: dict[str, Any]) -> bool:
    """Whether the operator counts the pod's member ready (core/pods.py: Ready, not being deleted)."""
    view = read_pod(pod)
    return member_readiness(view.member, view, None, now=time.time()).ready


def ready_members(client: KubeClient, namespace: str, pool: str) -> list[str]:
    return sorted(name for name, pod in member_pods(client, namespace, pool).items() if is_ready(pod))


def events(client: KubeClient, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = client.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if e.get("reason") == reason]


def posted_events(client: KubeClient, namespace: str, reason: str, *, count: int = 1,
                  timeout: float = 30) -> list[dict[str, Any]]:
    """The Events of `reason` once at least `count` are posted. The operator posts a cycle's
    Events after the status write that carries their condition, so a test that has just seen
    the condition waits for its Event instead of racing it."""
    return wait_for(lambda: (found := events(client, namespace, reason)) and len(found) >= count and found,
                    timeout=timeout, what=f"{count} {reason} Event(s) in {namespace}")


def loads(owners: dict[str, str | None]) -> Counter[str | None]:
    return Counter(owners.values())


def settle(seconds: float) -> None:
    """Give the operator time to (wrongly) act, for checks that something did NOT happen."""
    time.sleep(seconds)
