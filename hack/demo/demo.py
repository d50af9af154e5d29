"""The local demo: a real Ironic with a few hundred fake nodes, a Kubernetes API (the local
emulator, or the cluster in $KUBECONFIG), the operator, and a fake kubelet; then
apply -> fail a member -> replacement -> scale, with a live table and what moved.

Run through hack/demo.sh (it installs what is needed first). Everything started here is
stopped again, also on Ctrl-C or an error: the Ironic service, the operator process, the
fake kubelet and the emulator.

Parts that are fakes, and why: there is no kubelet or container runtime here, so the fake
kubelet (testbed/kubelet.py) plays the kubelet's part (pods become Running/Ready, or
fail, on command), and without a cluster the API server is the emulator
(testbed/kube_emulator/). Ironic and the operator are the real programs.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from testbed.ironic_service import running_ironic, shards_of  # noqa: E402
from testbed.kube_client import KubeAPIError, KubeClient  # noqa: E402
from testbed.kube_emulator import EmulatorThread, kubeconfig_text  # noqa: E402
from testbed.kubelet import FAKE_NODE_LABEL, FakeKubelet  # noqa: E402
from testbed.operator_objects import create_secrets, install_crd  # noqa: E402

POOL = "rack-a"
NAMESPACE = "ironic-demo"
RESOURCE_CLASS = "demo-baremetal"
POOLS = f"/apis/ironicshards.io/v1alpha1/namespaces/{NAMESPACE}/ironiccomputeshards"
GRACE = 10
started = time.monotonic()


def say(text: str) -> None:
    print(f"\n[{time.monotonic() - started:5.1f}s] {text}", flush=True)


class Demo:
    def __init__(self, client: KubeClient, ironic, kubelet) -> None:
        self.client, self.ironic, self.kubelet = client, ironic, kubelet
        self.shown = ""
        self.owners = shards_of(ironic, RESOURCE_CLASS)

    # -- what a user looks at --------------------------------------------------------

    def table(self) -> str:
        try:
            pool = self.client.get(f"{POOLS}/{POOL}")
        except KubeAPIError:
            return ""
        status = pool.get("status") or {}
        pods = {p["metadata"]["name"]: p for p in self.client.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"ironicshards.io/pool={POOL}")["items"]}
        lines = [f"  {'member':<10} {'pod':<12} {'ready':<6} {'nodes':>5} {'pinned':>6}  phase"]
        for member in status.get("members") or ():
            pod = pods.get(member["name"])
            pod_state = "-" if pod is None else (
                "Terminating" if pod["metadata"].get("deletionTimestamp") else pod.get("status", {}).get("phase", "?"))
            lines.append(f"  {member['name']:<10} {pod_state:<12} {'yes' if member['ready'] else 'no':<6} "
                         f"{member['nodes']:>5} {member['pinnedNodes']:>6}  {member['phase']}")
        nodes = status.get("nodes") or {}
        ready = next((c for c in status.get("conditions") or () if c["type"] == "Ready"), {})
        lines.append(f"  nodes {nodes.get('total', '?')}  free {nodes.get('free', '?')}  "
                     f"pinned {nodes.get('pinned', '?')}  pending moves {nodes.get('pendingMoves', '?')}  "
                     f"| Ready={ready.get('status', '?')} ({ready.get('message', '')})")
        return "\n".join(lines)

    def show(self) -> None:
        table = self.table()
        if table and table != self.shown:
            print(f"[{time.monotonic() - started:5.1f}s]\n{table}", flush=True)
            self.shown = table

    def moved(self) -> None:
        """Print which Ironic shards changed since the last call (read from Ironic itself)."""
        now = shards_of(self.ironic, RESOURCE_CLASS)
        changes = Counter((self.owners.get(n), owner) for n, owner in now.items() if self.owners.get(n) != owner)
        self.owners = now
        if not changes:
            print("  moved: nothing", flush=True)
            return
        total = sum(changes.values())
        parts = ", ".join(f"{src or '(none)'} -> {dst}: {n}" for (src, dst), n in sorted(changes.items(), key=str))
        print(f"  moved {total} nodes in Ironic: {parts}", flush=True)

    def until(self, check, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: gave up waiting for {what}")
            self.show()
            time.sleep(0.5)
        self.show()

    # -- facts for waiting -----------------------------------------------------------

    def status(self) -> dict:
        return self.client.get(f"{POOLS}/{POOL}").get("status") or {}

    def converged(self, replicas: int) -> bool:
        status = self.status()
        ready = next((c for c in status.get("conditions") or () if c["type"] == "Ready"), {})
        return status.get("readyReplicas") == replicas and ready.get("status") == "True" and \
            len(status.get("members") or ()) == replicas


def seed_ironic(ironic, count: int, with_instances: int) -> None:
    """Enrol `count` fake-hardware nodes through the API; some carry an instance already,
    owned by the members-to-be, as in a running cloud."""
    def enrol(i: int) -> None:
        body = {"driver": "fake-hardware", "resource_class": RESOURCE_CLASS, "name": f"bm-{i:04d}"}
        if i < with_instances:
            body.update(shard=f"{POOL}-{i % 3}", instance_uuid=str(uuid.uuid4()))
        ironic.request("POST", "/nodes", json=body)
    with ThreadPoolExecutor(4) as workers:
        list(workers.map(enrol, range(count)))


def apply_objects(client: KubeClient, clouds_yaml: str) -> None:
    """The CRD, the demo's namespace and the pool's Secrets, as a user would create them."""
    install_crd(client)
    client.create_namespace(NAMESPACE)
    create_secrets(client, NAMESPACE, clouds_yaml)


def pool_manifest(cloud_name: str) -> dict:
    return {"apiVersion": "ironicshards.io/v1alpha1", "kind": "IronicComputeShard",
            "metadata": {"name": POOL, "namespace": NAMESPACE},
            "spec": {"replicas": 3, "image": "registry.example/nova-compute:2024.1",
                     "novaConfig": {"secretRef": {"name": "nova-config"}},
                     "cloud": {"secretRef": {"name": "openstack-cloud"}, "cloudName": cloud_name},
                     "selector": {"resourceClass": RESOURCE_CLASS},
                     "failover": {"rebalanceAfterSeconds": GRACE},
                     "ironic": {"pollIntervalSeconds": 5}}}


def run(nodes: int, with_instances: int, workdir: Path) -> None:
    with ExitStack() as stack:
        say(f"Starting the real Ironic service (fake-hardware) and enrolling {nodes} nodes, "
            f"{with_instances} of them with an instance")
        ironic = stack.enter_context(running_ironic(workdir / "ironic", auth="noauth"))
        seed_ironic(ironic, nodes, with_instances)

        if os.environ.get("KUBECONFIG"):
            kubeconfig = Path(os.environ["KUBECONFIG"])
            say(f"Using the Kubernetes cluster of KUBECONFIG={kubeconfig}")
        else:
            emulator = stack.enter_context(EmulatorThread())
            kubeconfig = workdir / "kubeconfig"
            kubeconfig.write_text(kubeconfig_text(emulator.url))
            say(f"Started the local Kubernetes API emulator at {emulator.url} (no cluster given)")
        client = KubeClient(kubeconfig)
        real_nodes = [n["metadata"]["name"] for n in client.get("/api/v1/nodes")["items"]
                      if FAKE_NODE_LABEL not in (n["metadata"].get("labels") or {})]
        if real_nodes:
            raise SystemExit(
                f"demo: the cluster in KUBECONFIG has real nodes ({', '.join(real_nodes[:3])}); the demo's "
                "pods are played by a fake kubelet and would never run there. Unset KUBECONFIG for the "
                "local emulator, or use hack/kind-e2e.sh for a cluster with kubelets.")
        apply_objects(client, ironic.clouds_yaml)
        stack.callback(_delete_namespace, client)

        kubelet = stack.enter_context(FakeKubelet(client, NAMESPACE))
        say(f"Fake kubelet runs pods of namespace {NAMESPACE} on {len(kubelet.nodes)} fake nodes")

        log = workdir / "operator.log"
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), WATCH_NAMESPACES=NAMESPACE, POD_NAMESPACE=NAMESPACE,
                   POD_NAME="demo-operator", METRICS_PORT="0", HEALTH_PORT="0")
        with open(log, "wb") as out:
            operator = subprocess.Popen([sys.executable, "-m", "ironic_shard_operator.cli", "run"], env=env,
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        stack.callback(_stop, operator)
        stack.callback(_delete_pool, client)  # runs first: the operator drops its finalizer
        say(f"Operator started (pid {operator.pid}, log {log})")
        demo = Demo(client, ironic, kubelet)

        say(f"1. Apply IronicComputeShard {POOL}: 3 members, rebalanceAfterSeconds={GRACE}")
        client.create(POOLS, pool_manifest(ironic.cloud_name))
        demo.until(lambda: demo.converged(3), "3 ready members owning every node", timeout=90)
        demo.moved()

        say(f"2. Member {POOL}-1 fails (its container exits); its replacement is slow to start")
        kubelet.hold(f"{POOL}-1")
        kubelet.fail(f"{POOL}-1")
        demo.until(lambda: any(m["name"] == f"{POOL}-1" and not m["ready"] for m in demo.status().get("members", ())),
                   "member 1 not ready")
        say(f"   Within the {GRACE}s grace nothing moves (a restart must not shuffle nodes) ...")
        demo.until(lambda: any(m["name"] == f"{POOL}-1" and m["nodes"] == m["pinnedNodes"]
                               for m in demo.status().get("members", ())),
                   "member 1's free nodes to be re-owned after the grace", timeout=GRACE + 40)
        say("   ... after it, its FREE nodes go to the ready members; its nodes with instances stay")
        demo.until(lambda: demo.status().get("nodes", {}).get("pendingMoves") == 0, "moves written")
        demo.moved()

        say(f"3. The replacement pod (same name, {POOL}-1) becomes Ready: nodes come back")
        kubelet.ready(f"{POOL}-1")
        demo.until(lambda: demo.converged(3), "3 ready members again")
        demo.moved()

        say("4. Scale to 4 members through the scale subresource (what kubectl scale ics/rack-a --replicas=4 does)")
        client.patch(f"{POOLS}/{POOL}/scale", {"spec": {"replicas": 4}})  # the scale subresource
        demo.until(lambda: demo.converged(4), "4 ready members")
        demo.moved()

        say(f"Done. Events the operator posted on {POOL}:")
        for event in sorted(client.get(f"/api/v1/namespaces/{NAMESPACE}/events")["items"],
                            key=lambda e: (e.get("lastTimestamp") or "", e["metadata"]["name"])):
            if event.get("involvedObject", {}).get("kind") == "IronicComputeShard":
                print(f"  {event['type']:<8} {event['reason']:<14} {event['message']}")
        say("Stopping everything")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _delete_pool(client: KubeClient) -> None:
    """Delete the demo pool while the operator runs (it drops its finalizer); wait for it."""
    try:
        client.delete(f"{POOLS}/{POOL}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            client.get(f"{POOLS}/{POOL}")
            time.sleep(0.3)
    except KubeAPIError:
        pass


def _delete_namespace(client: KubeClient) -> None:
    try:
        client.delete(f"/api/v1/namespaces/{NAMESPACE}")
    except KubeAPIError:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=300, help="fake Ironic nodes (default 300)")
    parser.add_argument("--with-instances", type=int, default=60, help="of them with an instance (default 60)")
    parser.add_argument("--keep", metavar="DIR", help="keep logs and state in DIR (new or empty)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with tempfile.TemporaryDirectory(prefix="ironic-shard-demo-") as workdir:
        if args.keep:  # an empty directory that stays (operator log, Ironic state)
            workdir = args.keep
            Path(workdir).mkdir(parents=True, exist_ok=True)
        try:
            run(args.nodes, args.with_instances, Path(workdir))
        except KeyboardInterrupt:
            print("\ninterrupted: everything started was stopped", file=sys.stderr)
            return 130
    print(f"\nDemo finished in {time.monotonic() - started:.0f}s; nothing left running.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
