"""`kubectl ics` typed as a user types it: the real kubectl finds the `kubectl-ics` plugin on
PATH and runs it with the user's kubeconfig (here the test session's API server). `status`
shows one screen; `pause`/`resume` change spec.paused and nothing else; `preflight` checks
the pool's Secrets against the real Ironic; the read-only commands write nothing."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.ironic_service import IronicService, enrol_nodes, unique_resource_class
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import POOLS, pool_manifest

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
        "nova": {"state": "Enabled", "message": "in sync", "findings": {}, "forcedDown": [f"{POOL}-1"],
                 "waiting": [], "retired": []}}})
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
    """The README's quick-start commands after `helm install` and `pip install`, in order."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("## Install and operate", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.startswith("kubectl ")]


def test_the_readme_quick_start_as_a_user_types_it(
        kube_api: KubeAPI, kube_namespace: str, kubelet, tmp_path: Path) -> None:
    """The operator stands in for `helm install` (the kind e2e installs the chart); the user
    edits the Secrets to point at their cloud (here a real Ironic of its own, cloud 'ironic')."""
    import yaml

    from testbed.ironic_service import running_ironic
    from tests.support.operator_harness import OperatorProcess, get_pool

    commands = quick_start()
    assert [c.split()[:3] for c in commands] == [["kubectl", "apply", "-f"], ["kubectl", "ics", "preflight"],
                                                 ["kubectl", "apply", "-f"], ["kubectl", "ics", "status"]]
    repo = Path(__file__).resolve().parents[2]
    install_crd(kube_api.client)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kube_api.kubeconfig.read_text())
    env = dict(kube_api.env, KUBECONFIG=str(kubeconfig),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(["kubectl", "config", "set-context", "--current", f"--namespace={kube_namespace}"],
                   env=env, check=True, capture_output=True)
    with running_ironic(tmp_path / "ironic", auth="http_basic") as ironic:
        enrol_nodes(ironic, 3, resource_class="baremetal")
        secrets = list(yaml.safe_load_all((repo / "examples" / "secrets.yaml").read_text()))
        secrets[0]["stringData"]["nova.conf"] = NOVA_CONF  # the user's edits
        secrets[1]["stringData"]["clouds.yaml"] = yaml.safe_dump({"clouds": {"ironic": ironic.cloud}})
        (tmp_path / "examples").mkdir()
        (tmp_path / "examples" / "secrets.yaml").write_text(yaml.safe_dump_all(secrets))
        shutil.copy(repo / "examples" / "minimal.yaml", tmp_path / "examples" / "minimal.yaml")

        def run(command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(command.split() + (["--skip-image"] if "preflight" in command else []),
                                  cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

        applied = run(commands[0])
        assert applied.returncode == 0, applied.stderr
        checked = run(commands[1])
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "PASS    ironic-shard-update" in checked.stdout and "FAIL" not in checked.stdout
        with OperatorProcess(kube_api, kube_namespace, "op-a", tmp_path):
            assert run(commands[2]).returncode == 0
            kube_api.wait_for(lambda: (get_pool(kube_api.client, kube_namespace, "rack-a").get("status") or {})
                              .get("readyReplicas") == 3, timeout=90, what="3 ready members")
            shown = run(commands[3])
    assert shown.returncode == 0, shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines() if line.startswith("rack-a-")]
    assert [r[:2] for r in rows] == [["rack-a-0", "yes"], ["rack-a-1", "yes"], ["rack-a-2", "yes"]]
    assert sum(int(r[3]) for r in rows) == 3  # every node owned by a member
