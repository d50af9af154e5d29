"""The REAL Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, built from Go modules by hack/kube/build.sh (once per machine, into a
versioned cache outside the tree). No kubelet: testbed/kubelet.py is the node agent.

Invariants:
- Everything a control plane is lives in its STATE_DIR (certificates, kubeconfigs, logs, pid
  files) but etcd's data, which is on tmpfs (/dev/shm) with `--unsafe-no-fsync`, named in
  STATE_DIR/etcd-data; `stop` ends the four process groups and removes that data.
- The API server authorizes with Node,RBAC and admits with its defaults plus NodeRestriction,
  PodNodeSelector (a namespace's pods go to its own Nodes: see testbed/kubelet.py) and PodSecurity
  (on by default); ServiceAccount tokens are signed with a key of this control plane.
- The controller-manager runs every default controller (Job, garbage collector, disruption,
  node lifecycle, namespace, service accounts, pod GC, ...), each with its own ServiceAccount's
  credentials, as a cluster built by kubeadm does.
- Ports are free ports of 127.0.0.1 chosen at start; several control planes (one per pytest
  worker) run side by side.
- A control plane whose owner (the process that started it) has died is stale: `reap_stale`
  stops it. Reaping is done under a lock, one reaper at a time, and "already gone" is success.

Run as `.venv/bin/python -m testbed.control_plane start|stop|status STATE_DIR` (it needs the
venv's `cryptography`); `start` prints (eval-able) KUBECONFIG=..., KUBE_APISERVER_URL=...,
KUBE_VERSION=....
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from testbed.certificates import CertificateAuthority, rsa_key_pair
from testbed.ports import free_port
from testbed.procgroup import start_time_of
from testbed.service_process import ServiceError, ServiceProcess, command_line, last_lines, stop_all

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "hack" / "kube" / "build.sh"
KUBE_VERSION = (REPO / "hack" / "kube" / "KUBE_VERSION").read_text().strip()
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
SERVICE_CIDR = "10.0.0.0/24"  # ClusterIPs are allocated from it; nothing here routes to them
ISSUER = "https://kubernetes.default.svc.cluster.local"
START_TIMEOUT_SECONDS = 120.0
# How long the node lifecycle controller waits for a Node's heartbeat before it marks the Node
# Unknown and taints it (Kubernetes' default is 50 s; the node agent renews its Leases every 5 s).
NODE_MONITOR_GRACE_SECONDS = 20
USER = "testbed-user"
# The API server's audit log (STATE_DIR/audit.log, one JSON event a line, read by
# testbed/audit_log.py) records every request but the control plane's own, the node agents' and
# the test bed's admin (its fixtures), so `testbed-user` (user_kubeconfig) and every ServiceAccount are:
# who asked, what, with which credential, and the answer's code (a 403 is a refusal by RBAC or the
# Node authorizer).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "users": ["kubernetes-admin", "system:kube-controller-manager", "system:kube-scheduler",
                                    "system:apiserver"]},
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system", "system:nodes"]},
        {"level": "Metadata"},
    ],
}
STALE_ROOT = Path(tempfile.gettempdir()) / "ironic-shard-operator-control-planes"


class ControlPlaneError(ServiceError):
    """The control plane could not be built, started or stopped."""


@dataclass(frozen=True)
class ControlPlane:
    """A running control plane: its admin kubeconfig, its URL and the files a test may need."""
    state: Path
    url: str
    version: str

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (user kubernetes-admin in group system:masters)."""
        return self.state / "admin.kubeconfig"

    @property
    def user_kubeconfig(self) -> Path:
        """A person's kubeconfig (user `testbed-user`, group system:masters): as mighty as the
        admin, but the audit log records its requests (what `kubectl ics` asked, for instance)."""
        return self.state / "user.kubeconfig"

    @property
    def ca(self) -> Path:
        return self.state / "ca.pem"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (testbed/audit_log.py reads it)."""
        return self.state / "audit.log"

    @property
    def logs(self) -> list[Path]:
        return [self.state / f"{component}.log" for component in COMPONENTS]

    def resident_bytes(self, field: str = "VmRSS") -> dict[str, int]:
        """The resident memory of each of its four components (procgroup.resident_bytes:
        now, or with field "VmHWM" each one's peak so far)."""
        from testbed.procgroup import resident_bytes

        return {component: resident_bytes(pid, field) for component, service in zip(COMPONENTS, _services(self.state))
                if (pid := service.running_pid()) is not None}


def built_version() -> str | None:
    """`kube-apiserver --version`'s version of the built binaries (e.g. v1.37.2); None when they
    are not built yet (nothing is built here)."""
    result = subprocess.run(["bash", str(BUILD), "--built"], stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        return None
    version = subprocess.run([str(Path(result.stdout.strip()) / "kube-apiserver"), "--version"],
                             capture_output=True, text=True)
    return version.stdout.split()[-1] if version.returncode == 0 else None


def binaries() -> Path:
    """The directory of the four binaries, built first when missing (hack/kube/build.sh)."""
    result = subprocess.run(["bash", str(BUILD)], stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise ControlPlaneError(f"hack/kube/build.sh failed ({result.returncode}): see its output above")
    return Path(result.stdout.strip().splitlines()[-1])


def start(state: Path, *, node_monitor_grace_seconds: int = NODE_MONITOR_GRACE_SECONDS,
          owned: bool = True) -> ControlPlane:
    """Start a control plane in `state` (a new or empty directory) and return once its API
    server is ready, its controllers and scheduler run (the `default` ServiceAccount exists).
    `owned`: it belongs to this process, and is stale (see `reap_stale`) once this process is
    gone; a command-line start is not owned (its caller stops it)."""
    bin_dir = binaries()
    state.mkdir(parents=True, exist_ok=True)
    reap_stale()
    if owned:
        _register_owner(state)
    ports = {name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "scheduler")}
    _make_credentials(state)
    url = f"https://127.0.0.1:{ports['apiserver']}"
    for user in ("admin", "user", "controller-manager", "scheduler"):
        _write_kubeconfig(state / f"{user}.kubeconfig", url, state / "ca.pem", state / f"{user}.pem",
                          state / f"{user}.key")
    data = Path(tempfile.mkdtemp(prefix="etcd-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    (state / "etcd-data").write_text(str(data))
    services = dict(zip(COMPONENTS, _services(state)))
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    argv = {
        "etcd": [str(bin_dir / "etcd"), "--name", "testbed", "--data-dir", str(data),
                 "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                 "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                 "--initial-cluster", f"testbed={peer_url}", "--unsafe-no-fsync",
                 "--log-level", "warn"],
        "kube-apiserver": [
            str(bin_dir / "kube-apiserver"), f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={state / 'apiserver.pem'}", f"--tls-private-key-file={state / 'apiserver.key'}",
            f"--client-ca-file={state / 'ca.pem'}",
            f"--service-account-issuer={ISSUER}", f"--service-account-key-file={state / 'service-accounts.pub'}",
            f"--service-account-signing-key-file={state / 'service-accounts.key'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,PodNodeSelector",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Endpoints may not hold a loopback address: the `kubernetes` Service gets none.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",  # privileged pods are PodSecurity's to refuse, per namespace
            f"--kubelet-client-certificate={state / 'apiserver-kubelet-client.pem'}",
            f"--kubelet-client-key={state / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--audit-policy-file={state / 'audit-policy.json'}", f"--audit-log-path={state / 'audit.log'}",
            "--audit-log-format=json", "--audit-log-mode=blocking",
            "--profiling=false", "--v=1"],
        "kube-controller-manager": [
            str(bin_dir / "kube-controller-manager"), f"--kubeconfig={state / 'controller-manager.kubeconfig'}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={state / 'service-accounts.key'}",
            f"--root-ca-file={state / 'ca.pem'}",
            f"--cluster-signing-cert-file={state / 'ca.pem'}", f"--cluster-signing-key-file={state / 'ca.key'}",
            "--leader-elect=false", "--secure-port=0", "--controllers=*",
            f"--node-monitor-grace-period={node_monitor_grace_seconds}s", "--node-monitor-period=2s",
            "--profiling=false", "--v=1"],
        "kube-scheduler": [
            str(bin_dir / "kube-scheduler"), f"--kubeconfig={state / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={state / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={state / 'scheduler.kubeconfig'}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={ports['scheduler']}",
            "--profiling=false", "--v=1"],
    }
    plane = ControlPlane(state, url, KUBE_VERSION)
    try:
        for component in COMPONENTS:
            log = state / f"{component}.log"
            process = services[component].start(argv[component], log)
            ready = {"etcd": lambda: _answers(f"{etcd_url}/health"),
                     "kube-apiserver": lambda: _answers(f"{url}/readyz", plane),
                     "kube-controller-manager": lambda: True,
                     "kube-scheduler": lambda: _answers(f"https://127.0.0.1:{ports['scheduler']}/healthz",
                                                        verify=False)}[component]
            services[component].await_ready(
                process, ready, timeout=START_TIMEOUT_SECONDS, interval=0.2,
                exited=lambda code, c=component: f"{c} exited ({code}) while starting:\n"
                                                 f"{last_lines(state / f'{c}.log', 30)}",
                timed_out=lambda c=component: f"{c} did not become ready within {START_TIMEOUT_SECONDS:.0f} s:\n"
                                              f"{last_lines(state / f'{c}.log', 30)}")
        _await_controllers(plane)
    except BaseException:
        stop(state)
        raise
    (state / "coordinates.json").write_text(json.dumps({"url": url, "version": KUBE_VERSION}))
    return plane


def running(state: Path) -> ControlPlane | None:
    """The control plane of `state` if all four of its components run, else None."""
    coordinates = state / "coordinates.json"
    if not coordinates.exists() or any(s.running_pid() is None for s in _services(state)):
        return None
    known = json.loads(coordinates.read_text())
    return ControlPlane(state, known["url"], known["version"])


def stop(state: Path) -> None:
    """End every component (all at once: SIGTERM, SIGKILL after a bound) and remove etcd's data;
    idempotent."""
    stop_all(_services(state))
    marker = state / "etcd-data"
    if marker.exists():
        shutil.rmtree(marker.read_text().strip(), ignore_errors=True)
        marker.unlink()
    (state / "coordinates.json").unlink(missing_ok=True)
    owner = _owner_link(state)
    if owner.is_symlink():
        owner.unlink()


def reap_stale() -> list[Path]:
    """Stop the control planes whose owning process has died (an interrupted run); the state
    directories reaped. One reaper at a time (a lock file); a plane already gone is success."""
    STALE_ROOT.mkdir(parents=True, exist_ok=True)
    reaped = []
    with open(STALE_ROOT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for link in STALE_ROOT.iterdir():
            if not link.is_symlink():
                continue
            pid, _, start_time = link.name.partition("@")
            if start_time_of(int(pid)) == start_time.split("-")[0]:
                continue  # its owner lives
            state = Path(os.readlink(link))
            if state.is_dir():
                stop(state)
                reaped.append(state)
            link.unlink(missing_ok=True)
    return reaped


def _owner_link(state: Path) -> Path:
    digest = hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:12]
    return STALE_ROOT / f"{os.getpid()}@{start_time_of(os.getpid())}-{digest}"


def _register_owner(state: Path) -> None:
    link = _owner_link(state)
    link.unlink(missing_ok=True)
    link.symlink_to(state.resolve())


def _services(state: Path) -> list[ServiceProcess]:
    return [ServiceProcess(state / f"{component}.pid", component, ControlPlaneError) for component in COMPONENTS]


def _make_credentials(state: Path) -> None:
    """The CA, the API server's serving certificate, the clients' certificates (admin, the
    controller-manager, the scheduler, the API server towards kubelets) and the ServiceAccount
    signing keys."""
    ca = CertificateAuthority.create(state, "ironic-shard-operator testbed kubernetes CA")
    ca.issue(state, "apiserver", "kube-apiserver", server=True,
             hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local", "10.0.0.1"))
    ca.issue(state, "admin", "kubernetes-admin", organizations=("system:masters",), client=True)
    ca.issue(state, "user", USER, organizations=("system:masters",), client=True)
    ca.issue(state, "controller-manager", "system:kube-controller-manager", client=True)
    ca.issue(state, "scheduler", "system:kube-scheduler", client=True)
    ca.issue(state, "apiserver-kubelet-client", "kube-apiserver-kubelet-client",
             organizations=("kubeadm:cluster-admins",), client=True)
    rsa_key_pair(state, "service-accounts")
    (state / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY, indent=1))


def _write_kubeconfig(path: Path, url: str, ca: Path, cert: Path, key: Path) -> None:
    """A kubeconfig (JSON, which every YAML reader takes) for one client-certificate user."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "testbed",
        "clusters": [{"name": "testbed", "cluster": {"server": url, "certificate-authority": str(ca)}}],
        "users": [{"name": "testbed", "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "testbed"}}],
    }
    path.write_text(json.dumps(config, indent=1))
    path.chmod(0o600)


def _answers(url: str, plane: ControlPlane | None = None, *, verify: bool = True) -> bool:
    """Whether `url` answers 200 (as the admin when `plane` is given)."""
    context = None
    if url.startswith("https"):
        context = ssl.create_default_context(cafile=str(plane.ca)) if plane and verify else \
            ssl._create_unverified_context()  # noqa: S323 (the scheduler's self-signed health port)
        if plane is not None:
            context.load_cert_chain(plane.state / "admin.pem", plane.state / "admin.key")
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as reply:
            return reply.status == 200
    except OSError:
        return False


def _await_controllers(plane: ControlPlane) -> None:
    """Return once the controller-manager serves: its ServiceAccount controller has made the
    `default` ServiceAccount of namespace `default`."""
    url = f"{plane.url}/api/v1/namespaces/default/serviceaccounts/default"
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not _answers(url, plane):
        service = _services(plane.state)[2]
        if service.running_pid() is None:
            raise ControlPlaneError(f"kube-controller-manager exited:\n{last_lines(plane.state / 'kube-controller-manager.log', 30)}")
        if time.monotonic() > deadline:
            raise ControlPlaneError("the controller-manager made no `default` ServiceAccount within "
                                    f"{START_TIMEOUT_SECONDS:.0f} s:\n"
                                    f"{last_lines(plane.state / 'kube-controller-manager.log', 30)}")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    def start_command(args: argparse.Namespace) -> dict[str, str]:
        plane = running(args.state_dir.resolve()) or start(args.state_dir.resolve(), owned=False)
        return {"KUBECONFIG": str(plane.kubeconfig), "KUBE_APISERVER_URL": plane.url,
                "KUBE_VERSION": plane.version}

    return command_line(argv, "control_plane", __doc__.splitlines()[0],
                        install=binaries, install_help="build the binaries (hack/kube/build.sh)",
                        start_help="start a control plane in STATE_DIR", start_options=lambda parser: None,
                        start=start_command, stop=stop, up=lambda state: running(state) is not None)


if __name__ == "__main__":
    raise SystemExit(main())
