"""`kubectl ics` typed as a user types it: the real kubectl finds the `kubectl-ics` plugin on
PATH and runs it with the user's kubeconfig (here the test session's API server), and
`kubectl_complete-ics` for its shell completion. `status` shows one pool's screen (conditions in
full, the operator's Lease, the last cycle) or every pool, as text, JSON or YAML; `pause`/`resume`
change spec.paused and nothing else; `report` writes a debug bundle with no Secret value;
`retire`, `fence` and `unfence` are honoured by the real operator; `preflight` checks the pool's
Secrets against the real Ironic; the read-only commands write nothing."""

from __future__ import annotations

import base64
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from testbed.kube_client import KubeClient, restricted_container
import yaml

from testbed.ironic_service import IronicService, enrol_nodes, unique_resource_class
from testbed.control_plane import USER
from testbed.kubelet import RunOutcome, pod_ready
from testbed.operator_objects import create_secrets, install_crd
from testbed.operator_pods import OperatorPods
from tests.support.kube_api import KubeAPI
from tests.support.operator_rbac import helm as project_helm
from tests.support.operator_harness import (
    POOLS, REPO, OperatorProcess, get_pool, lease_holder, member_pods, pool_manifest, ready_members,
    settle)

pytestmark = pytest.mark.integration

POOL = "rack-k"
NOVA_CONF = """[DEFAULT]
compute_driver = ironic.IronicDriver
[ironic]
auth_type = http_basic
username = nova
password = pw
"""
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
A_LONG_FIX = ("Ironic at https://ironic.example.internal:6385 (cloud 'ironic') cannot be asked: the token request "
              "to Keystone at https://keystone.example.internal:5000/v3 failed: Name or service not known; is "
              "Keystone running, and is the cloud's auth_url right? (the end of the fix)")


def kubectl_ics(api: KubeAPI, *args: str, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`kubectl ics ARGS` with the plugin's directory first on PATH, as after `pip install`."""
    return _through_kubectl(api, ["ics", *args], env=env, cwd=cwd)


def _through_kubectl(api: KubeAPI, args: list[str], *, env: dict[str, str] | None = None,
                     cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH: the plugin is run through the real kubectl")
    plugin_dir = Path(sys.executable).parent
    for script in ("kubectl-ics", "kubectl_complete-ics"):
        assert (plugin_dir / script).exists(), f"the package's console script {script} is not installed"
    env = dict(env or api.env, PATH=f"{plugin_dir}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env, timeout=120, cwd=cwd)


def versions(api: KubeAPI, ns: str) -> dict[str, str]:
    """resourceVersion of the pool and its Secrets: what a write would change."""
    client = api.client
    return {"pool": client.get(f"{POOLS.format(ns=ns)}/{POOL}")["metadata"]["resourceVersion"],
            **{name: client.get(f"/api/v1/namespaces/{ns}/secrets/{name}")["metadata"]["resourceVersion"]
               for name in ("nova-config", "openstack-cloud")}}


def micro_time(seconds_ago: float = 0.0) -> str:
    """A Lease's MicroTime, as client-go writes renewTime."""
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def create_lease(api: KubeAPI, ns: str, holder: str) -> None:
    """The Lease an operator replica holds (core/lease.py), renewed just now."""
    api.client.create(LEASES.format(ns=ns), {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "ironic-shard-operator"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "acquireTime": micro_time(60),
                 "renewTime": micro_time(1), "leaseTransitions": 0}})


def pool_event(api: KubeAPI, ns: str, pool: str, name: str, reason: str, message: str, when: str) -> None:
    uid = api.client.get(f"{POOLS.format(ns=ns)}/{pool}")["metadata"]["uid"]
    api.client.create(f"/api/v1/namespaces/{ns}/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": name}, "type": "Normal",
        "reason": reason, "message": message,
        "involvedObject": {"apiVersion": "ironicshards.io/v1alpha1", "kind": "IronicComputeShard",
                           "name": pool, "namespace": ns, "uid": uid},
        "lastTimestamp": when, "source": {"component": "ironic-shard-operator"}})


def reported_status(**extra: object) -> dict:
    """A status as the operator writes it: two members, one replaced, Ironic not answering."""
    return {"observedGeneration": 1, "lastCycleTime": "2026-01-01T00:00:05Z",
            "readyReplicas": 1, "desiredReplicas": 2, "desiredReason": "spec.replicas: 2",
            "members": [{"name": f"{POOL}-0", "ready": True, "phase": "Ready", "nodes": 1, "pinnedNodes": 0},
                        {"name": f"{POOL}-1", "ready": False, "phase": "Replacing", "nodes": 0, "pinnedNodes": 0}],
            "nodes": {"total": 1, "free": 1, "pinned": 0, "unassigned": 0, "pendingMoves": 0, "misplaced": 0},
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "IronicUnavailable", "message": A_LONG_FIX,
                 "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
                {"type": "Degraded", "status": "True", "reason": "IronicUnavailable", "message": A_LONG_FIX,
                 "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
            "nova": {"state": "Enabled", "message": "in sync", "findings": {},
                     "forcedDown": [f"{POOL}-0", f"{POOL}-1"], "waiting": [], "retired": [],
                     "clearWhenReady": [f"{POOL}-1"]}, **extra}


def test_status_pause_resume_and_preflight_as_a_user_types_them(
        kube_api: KubeAPI, kube_namespace: str, ironic_service: IronicService) -> None:
    client, ns = kube_api.client, kube_namespace
    install_crd(client)
    create_secrets(client, ns, ironic_service.clouds_yaml, NOVA_CONF)
    resource_class = unique_resource_class("kubectl-ics")
    enrol_nodes(ironic_service, 1, resource_class=resource_class)
    client.create(POOLS.format(ns=ns), pool_manifest(POOL, cloud_name=ironic_service.cloud_name,
                                                     resource_class=resource_class, replicas=2))
    client.patch(f"{POOLS.format(ns=ns)}/{POOL}/status", {"status": reported_status()})
    pool_event(kube_api, ns, POOL, f"{POOL}.moved", "MovedNodes", "Set the Ironic shard of 1 of 1 nodes (1 to rack-k-0)",
               "2026-01-01T00:00:00Z")
    create_lease(kube_api, ns, "iso-ironic-shard-operator-7d4b9c6f5-x1")
    before = versions(kube_api, ns)

    shown = kubectl_ics(kube_api, "status", POOL, "-n", ns, "--operator-namespace", ns)
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith(f"{POOL}-1"))
    assert row.split()[:6] == [f"{POOL}-1", "no", "Replacing", "0", "0", "yes"]  # forced down in Nova
    ready_row = next(line for line in shown.stdout.splitlines() if line.startswith(f"{POOL}-0"))
    assert ready_row.split()[:7] == [f"{POOL}-0", "yes", "Ready", "1", "0", "yes", "(kept)"]  # someone else's flag
    assert "Set the Ironic shard of 1 of 1 nodes" in shown.stdout.split("LAST MOVES")[1]
    flat = " ".join(shown.stdout.split())
    assert flat.count(A_LONG_FIX) == 2  # Ready's and Degraded's fix, each in full
    assert f"leader iso-ironic-shard-operator-7d4b9c6f5-x1 (Lease {ns}/ironic-shard-operator, renewed" in flat
    assert "last cycle: 2026-01-01T00:00:05Z" in flat and "spec generation 1 observed" in flat

    # `kubectl get ics`, without -o wide, shows conditions Ready and Degraded.
    listed = kube_api.kubectl("get", "ics", "-n", ns).stdout.splitlines()
    header, (row,) = listed[0].split(), [line.split() for line in listed[1:]]
    assert header[:5] == ["NAME", "DESIRED", "READY", "MEMBERS", "READY"] and "DEGRADED" in header
    assert row[:5] == [POOL, "2", "1", "False", "True"]

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


def test_status_of_every_pool_as_text_json_and_yaml_with_events_selected_by_the_server(
        kube_api: KubeAPI, kube_namespace: str, tmp_path: Path) -> None:
    """No POOL: every pool of the namespace, one line each; -o json|yaml: the same facts. A
    pool's Events are selected by the API server (fieldSelector), not picked out of every Event
    of the namespace by the plugin."""
    if kube_api.plane is None:
        pytest.skip("reads what the plugin asked from the test bed API server's audit log")
    client, ns = kube_api.client, kube_namespace
    install_crd(client)
    for name in (POOL, "rack-j"):
        client.create(POOLS.format(ns=ns), pool_manifest(name, cloud_name="ironic", resource_class="gold"))
    client.patch(f"{POOLS.format(ns=ns)}/{POOL}/status", {"status": reported_status()})
    pool_event(kube_api, ns, POOL, "k.1", "MovedNodes", "moved 1 node of rack-k", "2026-01-01T00:00:01Z")
    pool_event(kube_api, ns, "rack-j", "j.1", "MovedNodes", "moved 9 nodes of rack-j", "2026-01-01T00:00:02Z")

    env = dict(kube_api.env, KUBECONFIG=str(kube_api.plane.user_kubeconfig))  # a user whose requests are audited
    every = kubectl_ics(kube_api, "status", "-n", ns, env=env)
    as_json = kubectl_ics(kube_api, "status", "-n", ns, "-o", "json", env=env)
    one = kubectl_ics(kube_api, "status", POOL, "-n", ns, "-o", "yaml", env=env)
    assert every.returncode == 0, every.stderr
    rows = {line.split()[0]: line.split() for line in every.stdout.splitlines()[1:] if line.startswith("rack-")}
    assert rows[POOL][:4] == [POOL, "False", "True", "(IronicUnavailable)"] and rows[POOL][4] == "1/2"
    assert rows["rack-j"][:3] == ["rack-j", "-", "-"] and rows["rack-j"][-2:] == ["never", "no"]  # not reported yet
    pools = {p["name"]: p for p in json.loads(as_json.stdout)["pools"]}
    assert pools[POOL]["conditions"][1]["message"] == A_LONG_FIX and pools[POOL]["lastCycleTime"]
    assert pools["rack-j"]["observedGeneration"] is None
    facts = yaml.safe_load(one.stdout)
    assert [e["message"] for e in facts["events"]] == ["moved 1 node of rack-k"]
    event_lists = [e["requestURI"] for e in kube_api.audit.by_user(USER) if f"/namespaces/{ns}/events" in e["requestURI"]]
    assert event_lists and all("fieldSelector=involvedObject.kind%3DIronicComputeShard%2CinvolvedObject.name%3D"
                               f"{POOL}" in line for line in event_lists), event_lists


def test_report_writes_a_bundle_with_what_support_needs_and_no_secret_value(
        kube_api: KubeAPI, kube_namespace: str, kubelet, tmp_path: Path) -> None:
    """`kubectl ics report POOL`: the CR, Events, member pods, handover Jobs with their logs' last
    lines, the operator leader's last log lines, the Secrets by name; no Secret value, no
    password seen in a log."""
    client, ns = kube_api.client, kube_namespace
    install_crd(client)
    password = f"pw-{uuid.uuid4().hex}"
    create_secrets(client, ns, yaml.safe_dump({"clouds": {"ironic": {"auth": {"password": password}}}}),
                   NOVA_CONF.replace("password = pw", f"password = {password}"))
    client.create(POOLS.format(ns=ns), pool_manifest(POOL, cloud_name="ironic", resource_class="gold"))
    client.patch(f"{POOLS.format(ns=ns)}/{POOL}/status", {"status": reported_status()})
    pool_event(kube_api, ns, POOL, "k.1", "MovedNodes", "moved 1 node", "2026-01-01T00:00:01Z")
    labels = {"ironicshards.io/pool": POOL, "ironicshards.io/member": f"{POOL}-0"}
    member = client.create(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{POOL}-0", "labels": labels},
        "spec": {"containers": [restricted_container("nova-compute", "registry.example/nova-compute:1")]}})
    operator_pod = client.create(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "iso-operator-0"},
        "spec": {"containers": [restricted_container("operator", "registry.example/ironic-shard-operator:1")]}})
    kube_api.wait_for(lambda: set(ready_members(client, ns, POOL)) == {f"{POOL}-0"}, timeout=30, what="member pod Ready")
    kube_api.wait_for(lambda: (p := client.get(f"/api/v1/namespaces/{ns}/pods/iso-operator-0"))
                      and p["status"].get("phase") == "Running" and p, timeout=30, what="operator pod running")
    kubelet.set_log(member["metadata"]["name"],
                    "".join(f"line {i}\n" for i in range(500)) + f"transport rabbit://nova:{password}@mq:5672/\n")
    kubelet.set_log(operator_pod["metadata"]["name"], "pool ops/rack-k: cycle done\n")
    create_lease(kube_api, ns, "iso-operator-0")
    job = f"{POOL}-handover-{POOL}-0-1"
    kubelet.run_outcomes(job, RunOutcome(1, "Destination compute is forced down!\n"))
    job_labels = {**labels, "ironicshards.io/component": "handover"}
    client.create(f"/apis/batch/v1/namespaces/{ns}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job, "labels": job_labels},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": job_labels}, "spec": {
            "restartPolicy": "Never", "containers": [restricted_container("nova-manage", "registry.example/n:1")]}}}})
    kube_api.wait_for(lambda: any(c.get("type") == "Failed" and c.get("status") == "True" for c in
                                  (client.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{job}").get("status") or {})
                                  .get("conditions") or ()), timeout=60, what="the handover Job failed")
    before = versions(kube_api, ns)

    done = kubectl_ics(kube_api, "report", POOL, "-n", ns, "--tail-lines", "50", "--operator-namespace", ns,
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (bundle,) = tmp_path.glob(f"report-ics-{POOL}-*.zip")
    assert f"wrote {bundle.name}" in done.stdout
    with zipfile.ZipFile(bundle) as archive:
        files = {Path(name).relative_to(Path(name).parts[0]).as_posix(): archive.read(name).decode()
                 for name in archive.namelist()}
    everything = "\n".join(files.values())
    assert password not in everything and base64.b64encode(password.encode()).decode()[:16] not in everything
    assert yaml.safe_load(files["pool.yaml"])["status"]["conditions"][1]["message"] == A_LONG_FIX
    assert {s["name"] for s in yaml.safe_load(files["secrets.yaml"]).values()} == {"nova-config", "openstack-cloud"}
    assert "moved 1 node" in files["events.yaml"]
    assert {p["metadata"]["name"] for p in yaml.safe_load(files["pods.yaml"])} >= {f"{POOL}-0"}
    assert [j["metadata"]["name"] for j in yaml.safe_load(files["jobs.yaml"])] == [job]
    member_log = files[f"logs/{POOL}-0.nova-compute.log"].splitlines()
    assert len(member_log) == 50 and member_log[-1] == "transport rabbit://nova:***@mq:5672/"
    job_logs = [text for name, text in files.items() if name.startswith(f"logs/{job}")]
    assert job_logs == ["Destination compute is forced down!\n"]
    assert files[f"operator/{ns}.iso-operator-0.log"] == "pool ops/rack-k: cycle done\n"
    assert "Not readable" not in files["README.txt"]
    assert versions(kube_api, ns) == before  # a report writes nothing to the cluster


def test_retire_fence_and_unfence_are_honoured_by_the_operator(
        kube_api: KubeAPI, kube_namespace: str, kubelet, ironic_service: IronicService, tmp_path: Path) -> None:
    """`kubectl ics retire rack-k-1`: rack-k-1 (not the highest ordinal) hands its nodes over and
    goes, rack-k-2 stays untouched. `fence rack-k-2`: its pod goes and stays gone, phase Fenced;
    `unfence`: it comes back. The status says when it was last written, and a quiet pool is not
    rewritten for it (invariant 6)."""
    client, ns = kube_api.client, kube_namespace
    install_crd(client)
    create_secrets(client, ns, ironic_service.clouds_yaml, NOVA_CONF)
    resource_class = unique_resource_class("kubectl-ics-retire")
    enrol_nodes(ironic_service, 6, resource_class=resource_class)
    operator = OperatorProcess(kube_api, ns, "op-a", tmp_path).start()
    try:
        client.create(POOLS.format(ns=ns), pool_manifest(POOL, cloud_name=ironic_service.cloud_name,
                                                         resource_class=resource_class,
                                                         failover={"rebalanceAfterSeconds": 5}))
        members3 = [f"{POOL}-{i}" for i in range(3)]
        kube_api.wait_for(lambda: ready_members(client, ns, POOL) == members3
                          and (get_pool(client, ns, POOL).get("status") or {}).get("readyReplicas") == 3,
                          timeout=60, what="three Ready members, reported")
        kept_uid = member_pods(client, ns, POOL)[f"{POOL}-2"]["metadata"]["uid"]

        retired = kubectl_ics(kube_api, "retire", f"{POOL}-1", "-n", ns)
        assert retired.returncode == 0, retired.stderr
        assert f"{POOL}-1 retires (spec.replicas 3 -> 2" in retired.stdout
        assert get_pool(client, ns, POOL)["spec"]["retireMembers"] == [f"{POOL}-1"]
        kube_api.wait_for(lambda: sorted(member_pods(client, ns, POOL)) == [f"{POOL}-0", f"{POOL}-2"]
                          and [m["name"] for m in get_pool(client, ns, POOL)["status"].get("members", ())]
                          == [f"{POOL}-0", f"{POOL}-2"], timeout=90, what="rack-k-1 retired, rack-k-2 kept")
        assert member_pods(client, ns, POOL)[f"{POOL}-2"]["metadata"]["uid"] == kept_uid

        fenced = kubectl_ics(kube_api, "fence", f"{POOL}-2", "-n", ns)
        assert fenced.returncode == 0 and f"{POOL}-2 fenced" in fenced.stdout, fenced.stderr
        phase = lambda: {m["name"]: m["phase"] for m in get_pool(client, ns, POOL)["status"]["members"]}.get(f"{POOL}-2")
        kube_api.wait_for(lambda: f"{POOL}-2" not in member_pods(client, ns, POOL) and phase() == "Fenced",
                          timeout=60, what="rack-k-2 stopped, phase Fenced")
        settle(6)  # more than a poll interval: still no pod
        assert f"{POOL}-2" not in member_pods(client, ns, POOL) and phase() == "Fenced"
        shown = kubectl_ics(kube_api, "status", POOL, "-n", ns, "--operator-namespace", ns)
        assert f"fenced (spec.fencedMembers): {POOL}-2" in shown.stdout and "leader op-a" in shown.stdout

        unfenced = kubectl_ics(kube_api, "unfence", f"{POOL}-2", "-n", ns)
        assert unfenced.returncode == 0, unfenced.stderr
        kube_api.wait_for(lambda: ready_members(client, ns, POOL) == [f"{POOL}-0", f"{POOL}-2"]
                          and phase() == "Ready", timeout=60, what="rack-k-2 back")

        pool = kube_api.wait_for(lambda: (p := get_pool(client, ns, POOL))
                                 and all(c["status"] == "True" for c in p["status"]["conditions"] if c["type"] == "Ready")
                                 and p["status"]["nodes"]["pendingMoves"] == 0 and p, timeout=60, what="converged")
        written = datetime.datetime.strptime(pool["status"]["lastCycleTime"], "%Y-%m-%dT%H:%M:%SZ")
        assert abs(written.replace(tzinfo=datetime.UTC).timestamp() - datetime.datetime.now(datetime.UTC).timestamp()) < 300
        settle(2)
        quiet = get_pool(client, ns, POOL)["metadata"]["resourceVersion"]
        settle(11)  # two poll intervals: the time of a cycle that changed nothing is not written
        assert get_pool(client, ns, POOL)["metadata"]["resourceVersion"] == quiet
    finally:
        pools = POOLS.format(ns=ns)
        for item in client.get(pools)["items"]:
            client.delete(f"{pools}/{item['metadata']['name']}")
        operator.stop()
        print(f"----- operator -----\n{operator.log()[-20000:]}")


def test_kubectl_completes_commands_pools_and_members_through_kubectl_complete_ics(
        kube_api: KubeAPI, kube_namespace: str) -> None:
    """kubectl's own completion (`kubectl __complete ics ...`, what a shell's kubectl completion
    runs) asks kubectl_complete-ics: commands, the namespace's pools, their members."""
    client, ns = kube_api.client, kube_namespace
    install_crd(client)
    client.create(POOLS.format(ns=ns), pool_manifest(POOL, cloud_name="ironic", resource_class="gold"))
    client.patch(f"{POOLS.format(ns=ns)}/{POOL}/status", {"status": reported_status()})

    def offered(*words: str) -> list[str]:
        done = _through_kubectl(kube_api, ["__complete", "ics", *words])
        assert done.returncode == 0, done.stderr
        return [line.split("\t")[0] for line in done.stdout.splitlines() if line and not line.startswith(":")]

    assert offered("re") == ["report", "retire", "resume"]
    assert offered("status", "-n", ns, "") == [POOL]
    assert offered("retire", "-n", ns, f"{POOL}-") == [f"{POOL}-0", f"{POOL}-1"]
    assert "--tail-lines" in offered("report", "--t")


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


RELEASE_NS = "iso-system"  # the README's --namespace
DEPLOYMENT = f"/apis/apps/v1/namespaces/{RELEASE_NS}/deployments/iso-ironic-shard-operator"
RELEASE = "app.kubernetes.io/instance=iso"


def rolled_out(client: KubeClient, agent: OperatorPods) -> dict | None:
    """The Deployment's pods once its rollout is done (kubectl rollout status): the current
    generation observed, every replica updated and Ready, no pod of an older ReplicaSet left,
    each pod running a process of the agent; None until then. {pod name: pod}."""
    deployment = client.get(DEPLOYMENT)
    status, replicas = deployment.get("status") or {}, deployment["spec"]["replicas"]
    if status.get("observedGeneration", 0) < deployment["metadata"]["generation"] or not (
            status.get("updatedReplicas") == status.get("replicas") == status.get("readyReplicas") == replicas):
        return None
    current = next(rs for rs in client.get(f"/apis/apps/v1/namespaces/{RELEASE_NS}/replicasets",
                                           labelSelector=RELEASE)["items"]
                   if rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                   == deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"])
    pods = {p["metadata"]["name"]: p for p in client.get(f"/api/v1/namespaces/{RELEASE_NS}/pods",
                                                         labelSelector=RELEASE)["items"]}
    hash_ = current["metadata"]["labels"]["pod-template-hash"]
    fine = len(pods) == replicas and all(
        p["metadata"]["labels"].get("pod-template-hash") == hash_ and pod_ready(p) and not p["metadata"].get(
            "deletionTimestamp") and p["spec"].get("nodeName") in agent.fake.nodes for p in pods.values())
    return pods if fine else None


def test_the_readme_quick_start_as_a_user_types_it(
        kube_api: KubeAPI, kube_namespace: str, kubelet, tmp_path: Path) -> None:
    """helm install (the real helm and the chart, against the session's API server); the real
    Deployment and ReplicaSet controllers make the operator's pods, the real scheduler binds
    them, and the node agent (testbed/operator_pods.py) runs each as a real operator process
    with its container's env and a token bound to the pod; one takes the Lease. The Secrets as
    the user edits them (a real Ironic of their own, cloud 'ironic'), preflight, the pool, its
    status. `helm upgrade --reuse-values --set logFormat=json` rolls the Deployment: a new
    ReplicaSet, its pods Ready and logging JSON, the old ones stopped by SIGTERM (exit 0) and
    gone, a leader among the new ones. helm uninstall at the end leaves nothing of what the
    chart made; the CRD and the pool stay."""
    import yaml

    from testbed.ironic_service import running_ironic

    commands = quick_start()
    assert [c.split()[:3] for c in commands] == [["helm", "install", "iso"], ["kubectl", "apply", "-f"],
                                                 ["kubectl", "ics", "preflight"], ["kubectl", "apply", "-f"],
                                                 ["kubectl", "ics", "status"]]
    assert f"--namespace {RELEASE_NS} --create-namespace" in commands[0]
    helm = str(project_helm())  # the project's helm (hack/tools.sh installs it once), as CI has it
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kube_api.kubeconfig.read_text())
    env = dict(kube_api.env, KUBECONFIG=str(kubeconfig), HELM_CACHE_HOME=str(tmp_path / "helm-cache"),
               HELM_CONFIG_HOME=str(tmp_path / "helm-config"), HELM_DATA_HOME=str(tmp_path / "helm-data"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{Path(helm).parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(["kubectl", "config", "set-context", "--current", f"--namespace={kube_namespace}"],
                   env=env, check=True, capture_output=True)
    client = kube_api.client

    def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        args = shlex.split(command.replace("{default}", f"{{{kube_namespace}}}"))  # the user's namespace
        return subprocess.run(args + (["--skip-image"] if "preflight" in command else []),
                              cwd=cwd, env=env, capture_output=True, text=True, timeout=180)

    # The release namespace is made before the README's `helm install ... --create-namespace`,
    # which then installs into it as it is (as on a cluster whose admin makes the namespaces):
    # made by the test bed, it carries the node selector that sends its pods to the agent's
    # Nodes (a namespace helm made would have none, and its pods could be bound to any node
    # agent's Nodes, among them those of `kubelet`, which runs nothing of another namespace),
    # and it enforces Pod Security "restricted": the chart's pod must be admitted under it.
    client.create_namespace(RELEASE_NS)
    agent = OperatorPods(client, RELEASE_NS, kube_api.kubeconfig, tmp_path / "operator-pods").start()
    left = ["(not looked at)"]
    try:
        installed = run(commands[0], REPO)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert "PodSecurity" not in installed.stderr, installed.stderr  # no warning: "restricted" admits the pods
        first = kube_api.wait_for(lambda: rolled_out(client, agent), timeout=120,
                                  what="the Deployment's pods Ready, run by the node agent")
        kube_api.wait_for(lambda: lease_holder(client, RELEASE_NS) in first, timeout=60,
                          what="a Deployment's pod holding the Lease")
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
            leader = lease_holder(client, RELEASE_NS)
            assert leader in first and f"leader {leader} (Lease {RELEASE_NS}/ironic-shard-operator" in \
                " ".join(shown.stdout.split())
            log = client.pod_log(RELEASE_NS, leader, container="operator")  # through the kubelet API
            assert log.startswith("[") and f"starting: identity {leader}, namespaces (all), Lease {RELEASE_NS}/" \
                in log  # logFormat text; POD_NAME and POD_NAMESPACE resolved from the pod

            # An upgrade that changes the pod template rolls the Deployment, one pod at a time.
            upgraded = subprocess.run([helm, "upgrade", "iso", "charts/ironic-shard-operator", "--namespace",
                                       RELEASE_NS, "--reuse-values", "--set", "logFormat=json"],
                                      cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
            assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
            second = kube_api.wait_for(lambda: (pods := rolled_out(client, agent)) and not set(pods) & set(first)
                                       and pods, timeout=180, what="the rollout of the upgrade")
            new_leader = kube_api.wait_for(lambda: (h := lease_holder(client, RELEASE_NS)) in second and h,
                                           timeout=60, what="a new pod holding the Lease")
            assert {agent.exit_codes.get(name) for name in first} == {0}  # SIGTERM: a clean stop, in the grace
            revisions = {rs["metadata"]["name"]: rs["spec"]["replicas"] for rs in client.get(
                f"/apis/apps/v1/namespaces/{RELEASE_NS}/replicasets", labelSelector=RELEASE)["items"]}
            assert sorted(revisions.values()) == [0, 2], revisions  # the old ReplicaSet scaled to 0
            for name in second:  # the new value reached the new processes
                log = client.pod_log(RELEASE_NS, name, container="operator")
                lines = [json.loads(line) for line in log.splitlines()]
                assert f"starting: identity {name}, namespaces (all)" in lines[0]["message"], lines[:1]
            kube_api.wait_for(lambda: any("holds Lease" in json.loads(line)["message"] for line in client.pod_log(
                RELEASE_NS, new_leader, container="operator").splitlines()), timeout=30, what="the new leader's log")
            assert (get_pool(client, kube_namespace, "rack-a").get("status") or {}).get("readyReplicas") == 3

        if kube_api.audit is not None:  # the chart's ServiceAccount asked only with tokens bound to the pods
            bound_to = [(e["user"].get("extra") or {}).get("authentication.kubernetes.io/pod-name", ["(none)"])[0]
                        for e in kube_api.audit.by_user(SERVICE_ACCOUNT)]
            assert bound_to and set(bound_to) <= set(first) | set(second), set(bound_to)
        # While the release is installed. (`helm uninstall` deletes the Role and bindings while the
        # pods are still stopping: a leader's last renewal and its release of the Lease may be refused.)
        assert not authz_refusals(kube_api, (RELEASE_NS, kube_namespace)), "RBAC refused the chart's ServiceAccount"
    finally:
        uninstalled = subprocess.run([helm, "uninstall", "iso", "--namespace", RELEASE_NS], env=env,
                                     capture_output=True, text=True, timeout=180)
        try:  # the Deployment is gone: the garbage collector deletes its pods, the agent stops them
            kube_api.wait_for(lambda: not client.get(f"/api/v1/namespaces/{RELEASE_NS}/pods")["items"],
                              timeout=120, what="the operator's pods gone")
            left = chart_leftovers(client)  # before the namespace goes
        finally:
            try:
                agent.stop()
            finally:
                client.delete(f"/api/v1/namespaces/{RELEASE_NS}")  # the README's last step: the Lease goes with it
                for log in sorted(agent.workdir.glob("*/run-*.log")):
                    print(f"----- {log.parent.name} {log.name} -----\n{log.read_text(errors='replace')[-5000:]}")
    assert uninstalled.returncode == 0, uninstalled.stderr
    # Every process stopped within its grace period (no SIGKILL: 137). After uninstall its exit
    # code may be 1: its RBAC may be gone before its SIGTERM comes, and a leader that cannot renew
    # leaves.
    assert set(agent.exit_codes) == set(first) | set(second) and 137 not in agent.exit_codes.values(), \
        agent.exit_codes
    assert left == []  # nothing of the chart's, no release record
    client.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/ironiccomputeshards.ironicshards.io")  # kept
    assert get_pool(client, kube_namespace, "rack-a")  # the user's pool is kept too


def chart_leftovers(client: KubeClient) -> list[str]:
    """What is left of the release's objects (CHART_KINDS, by its label) and of its records."""
    left = [f"{kind} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
            for kind, path in CHART_KINDS for obj in client.get(path, labelSelector=RELEASE)["items"]]
    return left + [s["metadata"]["name"] for s in client.get(f"/api/v1/namespaces/{RELEASE_NS}/secrets",
                                                             labelSelector="owner=helm")["items"]]


SERVICE_ACCOUNT = f"system:serviceaccount:{RELEASE_NS}:iso-ironic-shard-operator"


CHART_KINDS = [(kind, path) for kind, path in (
    ("Deployment", "/apis/apps/v1/deployments"), ("PodDisruptionBudget", "/apis/policy/v1/poddisruptionbudgets"),
    ("ServiceAccount", "/api/v1/serviceaccounts"), ("Service", "/api/v1/services"),
    ("ConfigMap", "/api/v1/configmaps"),
    ("Role", "/apis/rbac.authorization.k8s.io/v1/roles"),
    ("RoleBinding", "/apis/rbac.authorization.k8s.io/v1/rolebindings"),
    ("ClusterRole", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),
    ("ClusterRoleBinding", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"))]


def authz_refusals(kube_api: KubeAPI, namespaces: tuple[str, ...]) -> list[str]:
    """What the API server refused the chart's ServiceAccount in `namespaces` or cluster-wide
    (its audit log; [] on a given cluster). The operator watches every namespace: pools that
    earlier tests of this API server left in namespaces still being deleted are read too, and a
    refusal there is the pool's (SecretReadRefused in its status), not the chart's gap."""
    if kube_api.audit is None:
        return []
    return [refusal.message for refusal in kube_api.audit.refused(SERVICE_ACCOUNT)
            if refusal.namespace in (*namespaces, None)]
