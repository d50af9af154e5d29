"""The kind end-to-end scenario, run by hack/kind-e2e.sh inside the cluster it created.

A user's journey, with the real helm, kubectl, API server and Ironic: install the chart,
apply the examples, and watch the operator keep its promises (docs/invariants.md, docs/operating.md):

1. every example in examples/ is accepted by the API server (CRD schema and CEL rules);
2. `helm install`: two operator replicas Ready, one holds the Lease;
3. examples/minimal.yaml applied, with our nova-compute stand-in in place of the Kolla image
   (the stand-in reads the member's config files and lists its shard from Ironic): all
   members Ready, every Ironic node owned by a ready member, and each member's own log
   lists exactly the nodes Ironic says it owns;
4. a member pod deleted: it comes back with the same name and no node changes owner
   (pinned nodes included);
5. the leader operator pod deleted: the standby takes the Lease;
6. `kubectl scale` up and down: members follow, nodes follow, retired members leave nothing;
7. the CR deleted: its pods and ConfigMaps are garbage-collected; `helm uninstall` leaves
   none of the release's objects (the CRD stays: Helm never deletes CRDs).

Environment (set by hack/kind-e2e.sh): KUBECONFIG, PATH with helm and kubectl,
OS_CLIENT_CONFIG_FILE and OS_CLOUD for the Ironic the cluster reaches.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.support.operator_harness import is_ready

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ironic-shard-operator"
RELEASE, OPERATOR_NS, POOL_NS = "iso", "iso-system", "e2e"
POOL = "rack-a"  # examples/minimal.yaml
LEASE = "ironic-shard-operator"
POOL_LABEL = "ironicshards.io/pool"
NODES = 12
STANDIN_PORT = 8090


def step(message: str) -> None:
    print(f"kind-e2e: {message}", flush=True)


# ---- talking to the cluster and to Ironic -------------------------------------------------


def run(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(args, input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def kubectl(*args: str, stdin: str | None = None) -> str:
    return run("kubectl", *args, stdin=stdin)


def kube_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json"))


def eventually(check: Callable[[], tuple[bool, str]], what: str, timeout: float = 180.0) -> float:
    """Poll `check` until it passes; return the seconds it took. Fails with its last word."""
    started = time.monotonic()
    detail = "never checked"
    while time.monotonic() - started < timeout:
        ok, detail = check()
        if ok:
            return time.monotonic() - started
        time.sleep(2)
    raise AssertionError(f"{what}: not within {timeout:.0f} s; last seen: {detail}")


class Ironic:
    """The Ironic API (microversion 1.82) with the clouds.yaml the operator also gets."""

    def __init__(self, clouds_yaml: str, cloud: str) -> None:
        entry = yaml.safe_load(clouds_yaml)["clouds"][cloud]
        self.url = entry["baremetal_endpoint_override"].rstrip("/")
        auth = entry.get("auth") or {}
        token = base64.b64encode(f"{auth['username']}:{auth['password']}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json",
                        "X-OpenStack-Ironic-API-Version": "1.82"}

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + "/v1" + path, data=data, method=method,
                                         headers=self.headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
        return json.loads(text) if text else None

    def enrol(self, count: int) -> list[str]:
        return [self.call("POST", "/nodes", {"driver": "fake-hardware"})["uuid"]
                for _ in range(count)]

    def owners(self) -> dict[str, str | None]:
        nodes = self.call("GET", "/nodes?fields=uuid,shard&limit=1000")["nodes"]
        return {n["uuid"]: n["shard"] for n in nodes}

    def claim(self, node: str) -> None:
        """Pin a node the way Nova does when it deploys an instance onto it."""
        self.call("PATCH", f"/nodes/{node}",
                  [{"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())}])


# ---- what a user looks at -----------------------------------------------------------------


def member_pods() -> dict[str, dict]:
    pods = kube_json("get", "pods", "-n", POOL_NS, "-l", POOL_LABEL + "=" + POOL)["items"]
    return {p["metadata"]["name"]: p for p in pods}




def listed_by(member: str) -> set[str] | None:
    """The nodes the member's stand-in listed last, from its own log."""
    try:
        log = kubectl("logs", "-n", POOL_NS, member, "--tail=20")
    except AssertionError:  # the pod went away between listing and reading: ask again
        return None
    lines = [line for line in log.splitlines() if " listed host=" in line]
    if not lines:
        return None
    nodes = lines[-1].rsplit("nodes=", 1)[1].strip()
    return set(nodes.split(",")) - {""}


def converged(ironic: Ironic, replicas: int) -> Callable[[], tuple[bool, str]]:
    """All `replicas` members Ready, every node owned by one, each member lists its own."""
    expected = {f"{POOL}-{i}" for i in range(replicas)}

    def check() -> tuple[bool, str]:
        pods = member_pods()
        ready = {name for name, pod in pods.items() if is_ready(pod)}
        if set(pods) != expected or ready != expected:
            return False, f"pods {sorted(pods)}, ready {sorted(ready)}"
        owners = ironic.owners()
        stray = {n: o for n, o in owners.items() if o not in expected}
        if stray:
            return False, f"{len(stray)} nodes not owned by a ready member: {stray}"
        for member in sorted(expected):
            own = {n for n, o in owners.items() if o == member}
            listed = listed_by(member)
            if listed != own:
                return False, f"{member} lists {listed}, Ironic says it owns {own}"
        status = kube_json("get", "ics", POOL, "-n", POOL_NS).get("status") or {}
        if status.get("readyReplicas") != replicas:
            return False, f"status.readyReplicas is {status.get('readyReplicas')}"
        return True, "converged"

    return check


def lease_holder() -> str | None:
    try:
        lease = kube_json("get", "lease", LEASE, "-n", OPERATOR_NS)
    except AssertionError:
        return None
    return lease["spec"].get("holderIdentity")


def operator_pods() -> dict[str, dict]:
    pods = kube_json("get", "pods", "-n", OPERATOR_NS,
                     "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    return {p["metadata"]["name"]: p for p in pods}


# ---- the scenario -------------------------------------------------------------------------


def standin_pool(image: str) -> str:
    """examples/minimal.yaml as kubectl reads it, with the stand-in as the member container."""
    pool = json.loads(kubectl("apply", "--dry-run=client", "-o", "json",
                              "-f", str(REPO / "examples" / "minimal.yaml")))
    pool["spec"].update({
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["ironic-shard-operator", "stand-in-compute"],
        "args": ["--config-file", "/etc/nova/nova.conf", "--config-file", "/etc/nova/member.conf",
                 "--interval", "2", "--health-port", str(STANDIN_PORT)],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": STANDIN_PORT},
                           "periodSeconds": 2, "failureThreshold": 2},
    })
    return json.dumps(pool)


def pool_secrets(ironic_clouds: str, cloud: str) -> str:
    """The Secrets examples/minimal.yaml names, pointing at the e2e Ironic."""
    entry = yaml.safe_load(ironic_clouds)["clouds"][cloud]
    auth = entry["auth"]
    nova_conf = (
        "[DEFAULT]\ntransport_url = rabbit://unused:unused@nowhere:5672/\n\n"
        "[ironic]\nauth_type = http_basic\n"
        f"username = {auth['username']}\npassword = {auth['password']}\n"
        f"endpoint_override = {entry['baremetal_endpoint_override']}\n")
    clouds = yaml.safe_dump({"clouds": {"ironic": entry}})
    secrets = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "nova-config"},
         "stringData": {"nova.conf": nova_conf}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "openstack-cloud"},
         "stringData": {"clouds.yaml": clouds}},
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": secrets})


def scenario(image: str) -> None:
    clouds_yaml = Path(os.environ["OS_CLIENT_CONFIG_FILE"]).read_text()
    cloud = os.environ["OS_CLOUD"]
    ironic = Ironic(clouds_yaml, cloud)
    repository, tag = image.rsplit(":", 1)

    step("helm install (the CRD comes from the chart's crds/; Secrets readable in the pool's namespace)")
    kubectl("create", "namespace", POOL_NS)
    run("helm", "install", RELEASE, str(CHART), "--namespace", OPERATOR_NS, "--create-namespace",
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", f"rbac.poolNamespaces={{{POOL_NS}}}",
        "--set", "image.pullPolicy=Never", "--wait", "--timeout", "180s")

    step("every example is accepted by the API server (schema and CEL rules)")
    kubectl("apply", "--dry-run=server", "-n", POOL_NS, "-f", str(REPO / "examples"))

    def one_leader() -> tuple[bool, str]:
        pods = operator_pods()
        ready = sorted(name for name, pod in pods.items() if is_ready(pod))
        holder = lease_holder()
        return len(ready) == 2 and holder in ready, f"ready {ready}, lease holder {holder}"
    eventually(one_leader, "two operator replicas Ready, one holding the Lease")

    step(f"{NODES} Ironic nodes, then examples/minimal.yaml with the stand-in")
    nodes = ironic.enrol(NODES)
    kubectl("apply", "-n", POOL_NS, "-f", "-", stdin=pool_secrets(clouds_yaml, cloud))
    kubectl("apply", "-n", POOL_NS, "-f", "-", stdin=standin_pool(image))
    took = eventually(converged(ironic, 3), "3 members converged")
    step(f"converged with 3 members in {took:.0f} s")

    step("metrics: the leader reports the pool")
    leader = lease_holder()
    metrics = kubectl("get", "--raw",
                      f"/api/v1/namespaces/{OPERATOR_NS}/pods/{leader}:8080/proxy/metrics")
    assert "ironic_shard_leader 1.0" in metrics, "the Lease holder does not report leader 1"
    assert any(line.startswith("ironic_shard_members_ready{") and line.endswith(" 3.0")
               for line in metrics.splitlines()), "ironic_shard_members_ready is not 3"

    step("a member pod deleted comes back with the same name; no node changes owner")
    owners = ironic.owners()
    pinned = sorted(n for n, o in owners.items() if o == f"{POOL}-0")[:2]
    for node in pinned:
        ironic.claim(node)
    old_uid = member_pods()[f"{POOL}-0"]["metadata"]["uid"]
    kubectl("delete", "pod", "-n", POOL_NS, f"{POOL}-0", "--wait=false")

    def replaced() -> tuple[bool, str]:
        now = ironic.owners()
        assert now == owners, f"owners changed during the replacement: {now} != {owners}"
        pod = member_pods().get(f"{POOL}-0")
        if pod is None or pod["metadata"]["uid"] == old_uid or not is_ready(pod):
            return False, "the replacement is not Ready yet"
        return True, "replaced"
    took = eventually(replaced, f"{POOL}-0 replaced")
    step(f"{POOL}-0 replaced and Ready in {took:.0f} s, all {NODES} owners unchanged")
    eventually(converged(ironic, 3), "3 members converged after the replacement")

    step("the leader operator pod deleted: the standby takes over")
    leader = lease_holder()
    kubectl("delete", "pod", "-n", OPERATOR_NS, leader, "--wait=false")

    def new_leader() -> tuple[bool, str]:
        holder = lease_holder()  # empty while released: not a leader yet
        return bool(holder) and holder != leader and holder in operator_pods(), f"holder {holder!r}"
    took = eventually(new_leader, "a new Lease holder", timeout=60)
    step(f"leader takeover in {took:.0f} s (docs/operating.md: within ~17 s)")

    step("kubectl scale to 4, then to 2")
    kubectl("scale", "ics", POOL, "-n", POOL_NS, "--replicas=4")
    eventually(converged(ironic, 4), "4 members converged")
    assert {n: ironic.owners()[n] for n in pinned} == {n: f"{POOL}-0" for n in pinned}
    kubectl("scale", "ics", POOL, "-n", POOL_NS, "--replicas=2")
    eventually(converged(ironic, 2), "2 members converged")

    def retired_configmaps_gone() -> tuple[bool, str]:
        names = {c["metadata"]["name"] for c in kube_json(
            "get", "configmaps", "-n", POOL_NS, "-l", f"{POOL_LABEL}={POOL}")["items"]}
        return names == {f"{POOL}-0-config", f"{POOL}-1-config"}, f"ConfigMaps {sorted(names)}"
    eventually(retired_configmaps_gone, "the retired members' ConfigMaps gone")
    assert set(ironic.owners()) == set(nodes)

    step("the pool deleted: its pods and ConfigMaps are garbage-collected")
    kubectl("delete", "ics", POOL, "-n", POOL_NS, "--wait=true", "--timeout=120s")

    def pool_gone() -> tuple[bool, str]:
        left = kubectl("get", "pods,configmaps", "-n", POOL_NS, "-l", f"{POOL_LABEL}={POOL}",
                       "-o", "name").split()
        return not left, f"left: {left}"
    eventually(pool_gone, "the pool's objects gone")

    step("helm uninstall leaves none of the release's objects")
    run("helm", "uninstall", RELEASE, "--namespace", OPERATOR_NS, "--wait", "--timeout", "120s")
    selector = f"app.kubernetes.io/instance={RELEASE}"

    def release_gone() -> tuple[bool, str]:
        left = kubectl("get", "deployments,pods,services,serviceaccounts,roles,rolebindings,"
                       "poddisruptionbudgets", "-n", OPERATOR_NS, "-l", selector, "-o", "name").split()
        left += kubectl("get", "roles,rolebindings", "-n", POOL_NS, "-l", selector, "-o", "name").split()
        left += kubectl("get", "clusterroles,clusterrolebindings", "-l", selector, "-o", "name").split()
        return not left, f"left: {left}"
    eventually(release_gone, "the release's objects gone", timeout=120)
    kubectl("get", "crd", "ironiccomputeshards.ironicshards.io")  # kept by Helm, as documented
    step("scenario passed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True, help="the operator image loaded into kind")
    args = parser.parse_args(argv)
    try:
        scenario(args.image)
    except AssertionError as error:
        print(f"kind-e2e: FAILED: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
