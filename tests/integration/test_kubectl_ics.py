"""`kubectl ics` typed as a user types it: the real kubectl finds the `kubectl-ics` plugin on
PATH and runs it with the user's kubeconfig (here the test session's API server). `status`
shows one screen; `pause`/`resume` change spec.paused and nothing else; `preflight` checks
the pool's Secrets against the real Ironic; the read-only commands write nothing."""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from testbed import service_account_tokens as tokens
from testbed.ironic_service import IronicService, enrol_nodes, unique_resource_class
from testbed.operator_objects import create_secrets, install_crd
from testbed.ports import free_port
from tests.support.kube_api import KubeAPI
from tests.support.operator_rbac import helm as project_helm
from tests.support.operator_harness import (
    POOLS, REPO, OperatorProcess, get_pool, http_get, lease_holder, pool_manifest)

pytestmark = pytest.mark.integration

POOL = "rack-k"
NOVA_CONF = """[DEFAULT]
compute_driver = ironic.IronicDriver
[ironic]
auth_type = http_basic
username = nova
password = pw
"""


def kubectl_ics(api: KubeAPI, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl ics ARGS` with the plugin's directory first on PATH, as after `pip install`."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH: the plugin is run through the real kubectl")
    plugin_dir = Path(sys.executable).parent
    assert (plugin_dir / "kubectl-ics").exists(), "the package's console script kubectl-ics is not installed"
    env = dict(api.env, PATH=f"{plugin_dir}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(["kubectl", "ics", *args], capture_output=True, text=True, env=env, timeout=120)


def versions(api: KubeAPI, ns: str) -> dict[str, str]:
    """resourceVersion of the pool and its Secrets: what a write would change."""
    client = api.client
    return {"pool": client.get(f"{POOLS.format(ns=ns)}/{POOL}")["metadata"]["resourceVersion"],
            **{name: client.get(f"/api/v1/namespaces/{ns}/secrets/{name}")["metadata"]["resourceVersion"]
               for name in ("nova-config", "openstack-cloud")}}


def test_status_pause_resume_and_preflight_as_a_user_types_them(
        kube_api: KubeAPI, kube_namespace: str, ironic_service: IronicService) -> None:
    client, ns = kube_api.client, kube_namespace
    install_crd(client)
    create_secrets(client, ns, ironic_service.clouds_yaml, NOVA_CONF)
    resource_class = unique_resource_class("kubectl-ics")
    enrol_nodes(ironic_service, 1, resource_class=resource_class)
    client.create(POOLS.format(ns=ns), pool_manifest(POOL, cloud_name=ironic_service.cloud_name,
                                                     resource_class=resource_class, replicas=2))
    # The status an operator would have written, and one of its Events.
    client.patch(f"{POOLS.format(ns=ns)}/{POOL}/status", {"status": {
        "readyReplicas": 1, "desiredReplicas": 2, "desiredReason": "spec.replicas: 2",
        "members": [{"name": f"{POOL}-0", "ready": True, "phase": "Ready", "nodes": 1, "pinnedNodes": 0},
                    {"name": f"{POOL}-1", "ready": False, "phase": "Replacing", "nodes": 0, "pinnedNodes": 0}],
        "nodes": {"total": 1, "free": 1, "pinned": 0, "unassigned": 0, "pendingMoves": 0, "misplaced": 0},
        "nova": {"state": "Enabled", "message": "in sync", "findings": {}, "forcedDown": [f"{POOL}-0", f"{POOL}-1"],
                 "waiting": [], "retired": [], "clearWhenReady": [f"{POOL}-1"]}}})
    pool_uid = client.get(f"{POOLS.format(ns=ns)}/{POOL}")["metadata"]["uid"]
    client.create(f"/api/v1/namespaces/{ns}/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{POOL}.moved"}, "type": "Normal",
        "reason": "MovedNodes", "message": "Set the Ironic shard of 1 of 1 nodes (1 to rack-k-0)",
        "involvedObject": {"apiVersion": "ironicshards.io/v1alpha1", "kind": "IronicComputeShard",
                           "name": POOL, "namespace": ns, "uid": pool_uid},
        "lastTimestamp": "2026-01-01T00:00:00Z", "source": {"component": "ironic-shard-operator"}})
    before = versions(kube_api, ns)

    shown = kubectl_ics(kube_api, "status", POOL, "-n", ns)
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith(f"{POOL}-1"))
    assert row.split()[:6] == [f"{POOL}-1", "no", "Replacing", "0", "0", "yes"]  # forced down in Nova
    ready_row = next(line for line in shown.stdout.splitlines() if line.startswith(f"{POOL}-0"))
    assert ready_row.split()[:7] == [f"{POOL}-0", "yes", "Ready", "1", "0", "yes", "(kept)"]  # someone else's flag
    assert "Set the Ironic shard of 1 of 1 nodes" in shown.stdout.split("LAST MOVES")[1]

    checked = kubectl_ics(kube_api, "preflight", POOL, "-n", ns, "--skip-image")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "PASS    ironic-shard-update" in checked.stdout
    assert versions(kube_api, ns) == before  # status and preflight wrote nothing

    spec_before = client.get(f"{POOLS.format(ns=ns)}/{POOL}")["spec"]
    paused = kubectl_ics(kube_api, "pause", POOL, "-n", ns)
    assert paused.returncode == 0 and "paused" in paused.stdout, paused.stderr
    spec = client.get(f"{POOLS.format(ns=ns)}/{POOL}")["spec"]
    assert spec["paused"] is True
    assert {k: v for k, v in spec.items() if k != "paused"} == {k: v for k, v in spec_before.items() if k != "paused"}
    assert "PAUSED" in kubectl_ics(kube_api, "status", POOL, "-n", ns).stdout.splitlines()[0]
    resumed = kubectl_ics(kube_api, "resume", POOL, "-n", ns)
    assert resumed.returncode == 0 and client.get(f"{POOLS.format(ns=ns)}/{POOL}")["spec"]["paused"] is False

    missing = kubectl_ics(kube_api, "status", "no-such-pool", "-n", ns)
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_preflight_of_a_pool_whose_secret_has_a_bad_nova_conf_fails(
        kube_api: KubeAPI, kube_namespace: str, ironic_service: IronicService) -> None:
    client, ns = kube_api.client, kube_namespace
    install_crd(client)
    create_secrets(client, ns, ironic_service.clouds_yaml, NOVA_CONF.replace("ironic.IronicDriver", "fake.FakeDriver"))
    client.create(POOLS.format(ns=ns), pool_manifest(POOL, cloud_name=ironic_service.cloud_name,
                                                     resource_class=unique_resource_class("kubectl-ics")))
    checked = kubectl_ics(kube_api, "preflight", POOL, "-n", ns, "--skip-image")
    assert checked.returncode == 1
    assert "FAIL    nova-conf-driver" in checked.stdout and "fix: set compute_driver" in checked.stdout
    # The same through the operator's own command and --pool.
    done = subprocess.run([sys.executable, "-m", "ironic_shard_operator.cli", "preflight", "--pool", f"{ns}/{POOL}",
                           "--skip-image"], capture_output=True, text=True, env=kube_api.env, timeout=120)
    assert done.returncode == 1 and "FAIL    nova-conf-driver" in done.stdout, done.stderr
    assert base64.b64encode(b"pw").decode() not in done.stdout


def quick_start() -> list[str]:
    """The README's quick-start commands, in order: `helm install` (its continued lines joined)
    and the `kubectl` lines (`pip install` of the plugin is this venv's)."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Install and operate", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    return [line.split(" # ", 1)[0].strip() for line in lines if line.startswith(("helm ", "kubectl "))]


def deployment_pods(kube_api: KubeAPI, deployment: dict, log_dir: Path) -> list[tuple[OperatorProcess, int]]:
    """The operator processes a Deployment's pods would run, here where no image runs: one per
    replica, as the pod template's ServiceAccount (a token of its own, as the kubelet mounts
    one), with the container's env (fieldRefs resolved as the kubelet resolves them) and args.
    Each pod has its own network namespace, so the ports the env names are mapped to free ones;
    each process comes with its health port."""
    template = deployment["spec"]["template"]
    container = template["spec"]["containers"][0]
    assert container.get("args") == ["run"]  # the image's ENTRYPOINT is ironic-shard-operator
    namespace = deployment["metadata"]["namespace"]
    pods = []
    for index in range(deployment["spec"]["replicas"]):
        pod = f"{deployment['metadata']['name']}-7d4b9c6f5-{index}x{uuid.uuid4().hex[:3]}"
        fields = {"metadata.namespace": namespace, "metadata.name": pod}
        env = {e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
               for e in container.get("env") or []}
        health_port = free_port()
        env.update(METRICS_PORT=str(free_port()), HEALTH_PORT=str(health_port))
        token = tokens.issue(kube_api.client, namespace, template["spec"]["serviceAccountName"])
        kubeconfig = log_dir / f"kubeconfig-{pod}"
        tokens.write_kubeconfig(kubeconfig, kube_api.kubeconfig, token)
        pods.append((OperatorProcess(kube_api, namespace, pod, log_dir, KUBECONFIG=str(kubeconfig), **env), health_port))
    return pods


def test_the_readme_quick_start_as_a_user_types_it(
        kube_api: KubeAPI, kube_namespace: str, kubelet, tmp_path: Path) -> None:
    """helm install (the real helm and the chart, against the session's API server), then the
    operator's pods as the rendered Deployment runs them, the Secrets as the user edits them
    (a real Ironic of their own, cloud 'ironic'), preflight, the pool, its status; helm uninstall
    at the end leaves nothing of what the chart made."""
    import yaml

    from testbed.ironic_service import running_ironic

    commands = quick_start()
    assert [c.split()[:3] for c in commands] == [["helm", "install", "iso"], ["kubectl", "apply", "-f"],
                                                 ["kubectl", "ics", "preflight"], ["kubectl", "apply", "-f"],
                                                 ["kubectl", "ics", "status"]]
    helm = str(project_helm())  # the project's helm (hack/tools.sh installs it once), as CI has it
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kube_api.kubeconfig.read_text())
    env = dict(kube_api.env, KUBECONFIG=str(kubeconfig), HELM_CACHE_HOME=str(tmp_path / "helm-cache"),
               HELM_CONFIG_HOME=str(tmp_path / "helm-config"), HELM_DATA_HOME=str(tmp_path / "helm-data"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{Path(helm).parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(["kubectl", "config", "set-context", "--current", f"--namespace={kube_namespace}"],
                   env=env, check=True, capture_output=True)
    client, release_ns = kube_api.client, "iso-system"

    def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        args = shlex.split(command.replace("{default}", f"{{{kube_namespace}}}"))  # the user's namespace
        return subprocess.run(args + (["--skip-image"] if "preflight" in command else []),
                              cwd=cwd, env=env, capture_output=True, text=True, timeout=180)

    installed = run(commands[0], REPO)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    pods: list[OperatorProcess] = []
    try:
        deployment = client.get(f"/apis/apps/v1/namespaces/{release_ns}/deployments/iso-ironic-shard-operator")
        started = [(pod.start(), port) for pod, port in deployment_pods(kube_api, deployment, tmp_path)]
        pods = [pod for pod, _ in started]
        probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]
        kube_api.wait_for(lambda: all(http_get(port, probe) for _, port in started),
                          timeout=60, what=f"each operator pod answering its readinessProbe {probe}")
        with running_ironic(tmp_path / "ironic", auth="http_basic") as ironic:
            enrol_nodes(ironic, 3, resource_class="baremetal")
            secrets = list(yaml.safe_load_all((REPO / "examples" / "secrets.yaml").read_text()))
            secrets[0]["stringData"]["nova.conf"] = NOVA_CONF  # the user's edits
            secrets[1]["stringData"]["clouds.yaml"] = yaml.safe_dump({"clouds": {"ironic": ironic.cloud}})
            (tmp_path / "examples").mkdir()
            (tmp_path / "examples" / "secrets.yaml").write_text(yaml.safe_dump_all(secrets))
            shutil.copy(REPO / "examples" / "minimal.yaml", tmp_path / "examples" / "minimal.yaml")

            applied = run(commands[1], tmp_path)
            assert applied.returncode == 0, applied.stderr
            checked = run(commands[2], tmp_path)
            assert checked.returncode == 0, checked.stdout + checked.stderr
            assert "PASS    ironic-shard-update" in checked.stdout and "FAIL" not in checked.stdout
            assert run(commands[3], tmp_path).returncode == 0
            kube_api.wait_for(lambda: (get_pool(client, kube_namespace, "rack-a").get("status") or {})
                              .get("readyReplicas") == 3, timeout=90, what="3 ready members")
            shown = run(commands[4], tmp_path)
        assert shown.returncode == 0, shown.stderr
        rows = [line.split() for line in shown.stdout.splitlines() if line.startswith("rack-a-")]
        assert [r[:2] for r in rows] == [["rack-a-0", "yes"], ["rack-a-1", "yes"], ["rack-a-2", "yes"]]
        assert sum(int(r[3]) for r in rows) == 3  # every node owned by a member
        holder = lease_holder(client, release_ns)
        assert holder in {pod.identity for pod in pods}  # the leader is one of the Deployment's pods
        assert not [message for pod in pods for message in authz_refusals(kube_api, pod)], "RBAC refused the chart's SA"
    finally:
        uninstalled = subprocess.run([helm, "uninstall", "iso", "--namespace", release_ns], env=env,
                                     capture_output=True, text=True, timeout=180)
        for pod in pods:  # the Deployment is gone: its pods end
            pod.stop()
    assert uninstalled.returncode == 0, uninstalled.stderr
    left = [f"{kind} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
            for kind, path in CHART_KINDS for obj in client.get(path, labelSelector="app.kubernetes.io/instance=iso")["items"]]
    left += [s["metadata"]["name"] for s in client.get(f"/api/v1/namespaces/{release_ns}/secrets",
                                                       labelSelector="owner=helm")["items"]]
    assert left == []  # nothing of the chart's, no release record
    client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/ironiccomputeshards.ironicshards.io")  # kept
    client.delete(f"/api/v1/namespaces/{release_ns}")  # the README's last step: the Lease goes with it


CHART_KINDS = [(kind, path) for kind, path in (
    ("Deployment", "/apis/apps/v1/deployments"), ("PodDisruptionBudget", "/apis/policy/v1/poddisruptionbudgets"),
    ("ServiceAccount", "/api/v1/serviceaccounts"), ("Service", "/api/v1/services"),
    ("ConfigMap", "/api/v1/configmaps"),
    ("Role", "/apis/rbac.authorization.k8s.io/v1/roles"),
    ("RoleBinding", "/apis/rbac.authorization.k8s.io/v1/rolebindings"),
    ("ClusterRole", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),
    ("ClusterRoleBinding", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"))]


def authz_refusals(kube_api: KubeAPI, pod: OperatorProcess) -> list[str]:
    """What the fake API server refused this pod's ServiceAccount ([] on a real cluster)."""
    if kube_api.authz is None:
        return []
    user = f"system:serviceaccount:{pod.namespace}:iso-ironic-shard-operator"
    return [decision.message for decision in kube_api.authz.refused(user)]
