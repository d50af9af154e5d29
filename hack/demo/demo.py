"""The local demo: a real Ironic with fake-hardware nodes, a real Kubernetes control plane
(testbed/control_plane.py, built from Go modules on first use; or the cluster in $KUBECONFIG),
the operator, and the test bed's node agent; then
apply -> fail a member -> replacement -> scale up -> (with Nova) scale down with a handover of
nodes with instances, with a live table and what moved.

With Nova (the default when the real Nova stack can run here: MariaDB and RabbitMQ reachable,
or installed by hack/nova/install.sh), every member pod is a REAL nova-compute process
(testbed/process_kubelet.py) and every step prints Nova's own hypervisor list per member
beside Ironic's shards, with whether they agree. Without it, the demo says why and runs with
the node agent's pods only.

Run through hack/demo.sh (it installs what is needed first). Everything started here is
stopped again, also on Ctrl-C or an error: the Ironic service, the operator process, the
node agent and the control plane.

The one stand-in, and why: there is no container runtime here, so the node agent
(testbed/kubelet.py) plays the kubelet's part (it registers Nodes, the real scheduler binds pods
to them, and it runs them: real nova-compute processes with Nova, else pods that become
Running/Ready, or fail, on command). Ironic, Kubernetes and the operator are the real programs.
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

from testbed.ironic_service import running_ironic, set_provision_state, shards_of  # noqa: E402
from testbed.kube_client import KubeAPIError, KubeClient  # noqa: E402
from testbed import control_plane  # noqa: E402
from testbed.kubelet import FAKE_NODE_LABEL, FakeKubelet  # noqa: E402
from testbed.operator_objects import create_secrets, install_crd  # noqa: E402

POOL = "rack-a"
NAMESPACE = "ironic-demo"
RESOURCE_CLASS = "demo-baremetal"
POOLS = f"/apis/ironicshards.io/v1alpha1/namespaces/{NAMESPACE}/ironiccomputeshards"
GRACE = 10
CLOUD = "demo"
started = time.monotonic()


def say(text: str) -> None:
    print(f"\n[{time.monotonic() - started:5.1f}s] {text}", flush=True)


class Demo:
    def __init__(self, client: KubeClient, ironic, kubelet, nova=None) -> None:
        self.client, self.ironic, self.kubelet, self.nova = client, ironic, kubelet, nova
        self.shown = ""
        self.owners = shards_of(ironic, RESOURCE_CLASS)
        self.servers: dict[str, str] = {}  # the instances booted in Nova: server -> its Ironic node

    # -- Nova's own view, beside Ironic's ------------------------------------------------

    def nova_agrees(self) -> bool:
        """Nova lists every node under exactly the compute whose member owns its shard."""
        listed = self.nova.hypervisor_hosts()
        return all(listed.get(node, []) == [shard] for node, shard in shards_of(self.ironic, RESOURCE_CLASS).items()
                   if shard)

    def show_nova(self, timeout: float) -> None:
        """Wait (up to `timeout`) for Nova to agree with Ironic, then print both per member:
        Ironic's shards, Nova's hypervisor list (GET /os-hypervisors/detail), the service state."""
        if self.nova is None:
            return
        deadline = time.monotonic() + timeout
        while not self.nova_agrees() and time.monotonic() < deadline:
            time.sleep(1)
        shards = shards_of(self.ironic, RESOURCE_CLASS)
        listed = self.nova.hypervisor_hosts()
        services = self.nova.compute_services()
        members = sorted({s for s in shards.values() if s} | {h for hosts in listed.values() for h in hosts
                                                             if h.startswith(f"{POOL}-")})
        print(f"  {'member':<10} {'Ironic shard':>12} {'Nova lists':>10}  {'nova-compute':<22} agree", flush=True)
        for member in members:
            mine = {n for n, s in shards.items() if s == member}
            nova = {n for n, hosts in listed.items() if member in hosts and n in shards}
            service = services.get(member) or {}
            state = (f"{service.get('state', '-')}" + (", forced_down" if service.get("forced_down") else "")) \
                if service else "no service"
            print(f"  {member:<10} {len(mine):>12} {len(nova):>10}  {state:<22} {'yes' if mine == nova else 'NO'}",
                  flush=True)
        verdict = "Nova agrees with Ironic on every node" if self.nova_agrees() else \
            f"Nova does NOT agree with Ironic yet (waited {timeout:.0f}s)"
        print(f"  {verdict}", flush=True)

    def show_servers(self, members: set[str]) -> None:
        """Each server's host as Nova lists it (GET /servers?host=, per member) beside the shard
        of its node in Ironic: the two must name the same member."""
        shards = shards_of(self.ironic, RESOURCE_CLASS)
        host_of = {server["id"]: member for member in sorted(members)
                   for server in self.nova._get_all(f"/servers?all_tenants=1&host={member}", "servers")}
        print(f"  {'server':<10} {'node':<10} {'Ironic shard':<13} {'Nova host':<10} agree", flush=True)
        for server, node in sorted(self.servers.items(), key=lambda item: (shards.get(item[1]) or "", item[1])):
            shard, host = shards.get(node) or "-", host_of.get(server, "-")
            print(f"  {server[:8]:<10} {node[:8]:<10} {shard:<13} {host:<10} {'yes' if shard == host else 'NO'}",
                  flush=True)

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


def seed_ironic(ironic, count: int, with_instances: int, available: bool = False) -> None:
    """Enrol `count` fake-hardware nodes through the API; some carry an instance already,
    owned by the members-to-be, as in a running cloud. `available`: made available
    (manage, provide), as Nova's resource tracker wants them."""
    def enrol(i: int) -> None:
        body = {"driver": "fake-hardware", "resource_class": RESOURCE_CLASS, "name": f"bm-{i:04d}"}
        if i < with_instances:
            body.update(shard=f"{POOL}-{i % 3}", instance_uuid=str(uuid.uuid4()))
        node = ironic.request("POST", "/nodes", json=body).json()["uuid"]
        if available:
            set_provision_state(ironic, node, "manage", "manageable")
            set_provision_state(ironic, node, "provide", "available")
    with ThreadPoolExecutor(4) as workers:
        list(workers.map(enrol, range(count)))


def seed_nova_instances(demo: Demo, per_member: int, members: set[str] | None = None) -> None:
    """Instances on the first free nodes of `members` (default: every member), recorded in Nova
    and then in Ironic, as a boot does (a test-bed shortcut: nothing here can boot one); each
    is remembered in demo.servers (server -> node)."""
    shards = shards_of(demo.ironic, RESOURCE_CLASS)
    for member in sorted(members or set(shards.values()) - {None}):
        for node in sorted(n for n, s in shards.items() if s == member and n not in demo.servers.values())[:per_member]:
            instance = demo.nova.seed_instance(member, node)
            demo.ironic.request("PATCH", f"/nodes/{node}", json=[
                {"op": "add", "path": "/instance_uuid", "value": instance}])
            demo.servers[instance] = node


def apply_objects(client: KubeClient, clouds_yaml: str, nova_conf: str | None = None) -> None:
    """The CRD, the demo's namespace and the pool's Secrets, as a user would create them."""
    install_crd(client)
    client.create_namespace(NAMESPACE)
    create_secrets(client, NAMESPACE, clouds_yaml, *([nova_conf] if nova_conf else []))


def start_nova(stack: ExitStack, without: str | None):
    """The real Nova stack (stopped with `stack`), or None with the reason printed plainly."""
    if without:
        say(f"Running WITHOUT Nova: {without}")
        return None
    from testbed import nova_starter
    from testbed.nova_stack import NovaStack

    say("Starting the real Nova stack (placement, nova-api, nova-conductor on MariaDB and RabbitMQ)")
    try:
        state = nova_starter.start()
    except Exception as error:  # noqa: BLE001 - any reason is said, and the demo goes on without
        say(f"Running WITHOUT Nova: its stack did not start here ({' '.join(str(error).split())[:300]})")
        return None
    stack.callback(nova_starter.stop, state)
    return NovaStack(state)


def nova_clouds_yaml(nova, ironic) -> str:
    """One cloud with Ironic's and Nova's endpoints and one token, as a Keystone catalog gives."""
    import yaml

    cloud = nova.cloud_config()
    cloud.pop("compute_api_version")
    cloud["baremetal_endpoint_override"] = ironic.url
    cloud["placement_endpoint_override"] = nova.placement_url
    return yaml.safe_dump({"clouds": {CLOUD: cloud}})


def pool_manifest(cloud_name: str, image: str = "registry.example/nova-compute:2024.1",
                  handover: bool = False) -> dict:
    """The demo's pool; `handover`: nodes with instances are handed over on a scale-down, with
    the nova.conf of Secret nova-manage (database access) for nova-manage's Jobs."""
    spec = {"replicas": 3, "image": image,
            "novaConfig": {"secretRef": {"name": "nova-config"}},
            "cloud": {"secretRef": {"name": "openstack-cloud"}, "cloudName": cloud_name},
            "selector": {"resourceClass": RESOURCE_CLASS},
            "failover": {"rebalanceAfterSeconds": GRACE},
            "ironic": {"pollIntervalSeconds": 5}}
    if handover:
        spec["handover"] = {"novaManageConfig": {"secretRef": {"name": "nova-manage"}}, "maxConcurrent": 2}
    return {"apiVersion": "ironicshards.io/v1alpha1", "kind": "IronicComputeShard",
            "metadata": {"name": POOL, "namespace": NAMESPACE}, "spec": spec}


def run(nodes: int, with_instances: int, workdir: Path, without_nova: str | None) -> None:
    with ExitStack() as stack:
        nova = start_nova(stack, without_nova)
        if nova is not None:
            nodes = min(nodes, 30)  # each node is a compute node every nova-compute's resource tracker walks
        say(f"Starting the real Ironic service (fake-hardware) and enrolling {nodes} nodes"
            + (f", {with_instances} of them with an instance" if nova is None else
               ", made available for Nova; instances are booted (recorded in Nova) once members run"))
        ironic = stack.enter_context(running_ironic(workdir / "ironic", auth="noauth"))
        seed_ironic(ironic, nodes, 0 if nova is not None else with_instances, available=nova is not None)

        if os.environ.get("KUBECONFIG"):
            kubeconfig = Path(os.environ["KUBECONFIG"])
            say(f"Using the Kubernetes cluster of KUBECONFIG={kubeconfig}")
        else:
            if control_plane.built_version() is None:
                say(f"Building the Kubernetes control plane {control_plane.KUBE_VERSION} from Go modules, once per "
                    "machine (about 25 minutes on 2 cores; hack/kube/build.sh)")
            plane = control_plane.start(workdir / "kube")
            stack.callback(control_plane.stop, workdir / "kube")
            kubeconfig = plane.kubeconfig
            say(f"Started a Kubernetes control plane {plane.version} at {plane.url} (etcd, kube-apiserver, "
                "controller-manager, scheduler; no cluster given)")
        client = KubeClient(kubeconfig)
        real_nodes = [n["metadata"]["name"] for n in client.get("/api/v1/nodes")["items"]
                      if FAKE_NODE_LABEL not in (n["metadata"].get("labels") or {})]
        if real_nodes:
            raise SystemExit(
                f"demo: the cluster in KUBECONFIG has real nodes ({', '.join(real_nodes[:3])}); the demo's "
                "pods are run by the test bed's node agent and would never run there. Unset KUBECONFIG for a "
                "local control plane, or use hack/kind-e2e.sh for a cluster with kubelets.")
        if nova is not None:
            apply_objects(client, nova_clouds_yaml(nova, ironic), nova.compute_conf(ironic.cloud))
            client.create(f"/api/v1/namespaces/{NAMESPACE}/secrets", {  # for the handover's nova-manage
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "nova-manage"},
                "stringData": {"nova.conf": nova.nova_conf.read_text()}})
        else:
            apply_objects(client, ironic.clouds_yaml)
        stack.callback(_delete_namespace, client)

        if nova is not None:
            from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet

            kubelet = stack.enter_context(ProcessKubelet(client, NAMESPACE, nova, workdir / "kubelet"))
            say(f"Kubelet of namespace {NAMESPACE}: each member pod runs a REAL nova-compute (Ironic driver)")
        else:
            kubelet = stack.enter_context(FakeKubelet(client, NAMESPACE))
            say(f"Node agent runs pods of namespace {NAMESPACE} on {len(kubelet.nodes)} Nodes (no container runtime)")

        log = workdir / "operator.log"
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), WATCH_NAMESPACES=NAMESPACE, POD_NAMESPACE=NAMESPACE,
                   POD_NAME="demo-operator", METRICS_PORT="0", HEALTH_PORT="0")
        with open(log, "wb") as out:
            operator = subprocess.Popen([sys.executable, "-m", "ironic_shard_operator.cli", "run"], env=env,
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        stack.callback(_stop, operator)
        stack.callback(_delete_pool, client)  # runs first: the operator drops its finalizer
        say(f"Operator started (pid {operator.pid}, log {log})")
        demo = Demo(client, ironic, kubelet, nova)
        # How long Nova may take to reflect a change: a resource-tracker cycle of each compute, twice.
        settle = 3 * nova.timings["update_resources_interval"] + 20 if nova is not None else 0

        say(f"1. Apply IronicComputeShard {POOL}: 3 members, rebalanceAfterSeconds={GRACE}")
        if nova is not None:
            client.create(POOLS, pool_manifest(CLOUD, image=PROCESS_IMAGE, handover=True))
            demo.until(lambda: set(nova.compute_services()) >= {f"{POOL}-{i}" for i in range(3)},
                       "three nova-compute services registered", timeout=180)
            say("   New Nova hosts: the operator maps them to a cell (a nova-manage Job, spec.handover's config),"
                " and gives a member nodes only then")
        else:
            client.create(POOLS, pool_manifest(ironic.cloud_name))
        demo.until(lambda: demo.converged(3), "3 ready members owning every node", timeout=180)
        demo.moved()
        demo.show_nova(settle)
        if nova is not None:
            say("   Booting 2 instances per member (recorded in Nova, then Ironic): those nodes are pinned")
            seed_nova_instances(demo, 2)

        say(f"2. Member {POOL}-1 fails (its container exits); its replacement is slow to start")
        kubelet.hold(f"{POOL}-1")
        if nova is not None:
            kubelet.kill(f"{POOL}-1")
        else:
            kubelet.fail(f"{POOL}-1")
        demo.until(lambda: any(m["name"] == f"{POOL}-1" and not m["ready"] for m in demo.status().get("members", ())),
                   "member 1 not ready")
        say(f"   Within the {GRACE}s grace nothing moves (a restart must not shuffle nodes) ...")
        demo.until(lambda: any(m["name"] == f"{POOL}-1" and m["nodes"] == m["pinnedNodes"]
                               for m in demo.status().get("members", ())),
                   "member 1's free nodes to be re-owned after the grace", timeout=GRACE + 40)
        say("   ... after it, its FREE nodes go to the ready members; its nodes with instances stay"
            + (", and Nova's service of the failed member is forced down" if nova is not None else ""))
        demo.until(lambda: demo.status().get("nodes", {}).get("pendingMoves") == 0, "moves written")
        demo.moved()
        demo.show_nova(settle)

        say(f"3. The replacement pod (same name, {POOL}-1) becomes Ready: nodes come back")
        if nova is not None:
            kubelet.release(f"{POOL}-1")
        else:
            kubelet.ready(f"{POOL}-1")
        demo.until(lambda: demo.converged(3), "3 ready members again", timeout=120)
        demo.moved()
        demo.show_nova(settle)

        say("4. Scale to 4 members through the scale subresource (what kubectl scale ics/rack-a --replicas=4 does)")
        client.patch(f"{POOLS}/{POOL}/scale", {"spec": {"replicas": 4}})  # the scale subresource
        if nova is not None:
            demo.until(lambda: f"{POOL}-3" in nova.compute_services(), "the fourth nova-compute registered",
                       timeout=120)  # its host mapped by the operator's Job before it gets nodes
        demo.until(lambda: demo.converged(4), "4 ready members", timeout=120)
        demo.moved()
        demo.show_nova(settle)

        if nova is not None:
            retiring = f"{POOL}-3"
            say(f"5. Scale down to 3 with a handover (spec.handover): {retiring} carries instances now ...")
            seed_nova_instances(demo, 2, {retiring})
            demo.moved()
            demo.show_nova(settle)  # before
            demo.show_servers({f"{POOL}-{i}" for i in range(4)})
            say(f"   ... its free nodes move, its pod goes, its service is forced down, a Job runs "
                f"nova-manage db ironic_compute_node_move per node (Nova first), then Ironic's shard")
            handed = {node for node in demo.servers.values() if demo.owners.get(node) == retiring}
            client.patch(f"{POOLS}/{POOL}/scale", {"spec": {"replicas": 3}})
            demo.until(lambda: all(shards_of(ironic, RESOURCE_CLASS).get(n) not in (retiring, None) for n in handed),
                       f"{retiring}'s nodes with instances handed over", timeout=180)
            demo.until(lambda: demo.converged(3) and retiring not in nova.compute_services(),
                       f"3 ready members and {retiring}'s service deleted", timeout=120)
            demo.moved()
            demo.show_nova(settle)
            demo.show_servers({f"{POOL}-{i}" for i in range(4)})
        else:
            say("5. (Scale-down with a handover of nodes with instances needs Nova: skipped without it)")

        say(f"Done. Events the operator posted on {POOL}:")
        for event in sorted(client.get(f"/api/v1/namespaces/{NAMESPACE}/events")["items"],
                            key=lambda e: (e.get("lastTimestamp") or "", e["metadata"]["name"])):
            if event.get("involvedObject", {}).get("kind") == "IronicComputeShard":
                print(f"  {event['type']:<8} {event['reason']:<16} {event['message']}")
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
    parser.add_argument("--without-nova", metavar="REASON",
                        help="run without the real Nova stack, saying REASON (hack/demo.sh passes why)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with tempfile.TemporaryDirectory(prefix="ironic-shard-demo-") as workdir:
        if args.keep:  # an empty directory that stays (operator log, Ironic state)
            workdir = args.keep
            Path(workdir).mkdir(parents=True, exist_ok=True)
        try:
            run(args.nodes, args.with_instances, Path(workdir), args.without_nova)
        except KeyboardInterrupt:
            print("\ninterrupted: everything started was stopped", file=sys.stderr)
            return 130
    print(f"\nDemo finished in {time.monotonic() - started:.0f}s; nothing left running.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
