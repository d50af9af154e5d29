"""The node agent of the operator's release namespace: the pods the real Deployment and
ReplicaSet controllers make from the chart, scheduled by the real scheduler to this agent's
Nodes, run as REAL `ironic-shard-operator run` processes of this venv. FakeKubelet (kubelet.py)
owns the Nodes, their Leases, the kubelet API and the status writes; this class decides each
pod's state by running it, as process_kubelet.py does for nova-compute.

Invariants:
- Ours: a pod of `namespace` with the chart's labels (`selector`) whose container runs the
  image's ENTRYPOINT (no `command`) with args ["run"]. It runs as
  `sys.executable -m ironic_shard_operator.cli run` (the ENTRYPOINT, this venv), as PID 1 of a
  PID namespace of its own (task_pods.py: a signal PID 1 has no handler for is ignored, as in
  a container), its output the container's log (`kubectl logs`). A pod that is ours but asks
  for what this agent cannot give (an init container, envFrom, an exec probe, ...) stays Pending
  and `stop()` raises the reason. Other pods of the namespace stay Pending: nothing runs them.
- Environment: the image's ENV (Dockerfile), HOSTNAME = the pod's name, then the container's
  `env` in order, resolved as a kubelet resolves it: `value` (absent: "", as the real API server
  omits an empty one), `$(VAR)` of earlier entries, fieldRef (metadata.name/namespace/uid,
  labels['k'], annotations['k'], spec.nodeName, spec.serviceAccountName, status.hostIP(s),
  status.podIP(s)), secretKeyRef and configMapKeyRef (a missing one keeps the pod Pending
  until it appears, unless optional).
- Credentials: a token of the pod's serviceAccountName from the TokenRequest API, bound to the
  Pod (name and uid), as a kubelet asks for the projected token; the API server refuses it
  once the pod object is gone.
- Running once its process started, Ready once its readinessProbe (httpGet, for real, against
  the remapped port; periodSeconds, timeoutSeconds, failureThreshold, initialDelaySeconds) has
  passed and until it fails failureThreshold times in a row. A failing livenessProbe stops the
  process (SIGTERM, SIGKILL after the grace). A process that ended on its own, or by its
  liveness, is restarted in place (a Deployment's restartPolicy Always): CrashLoopBackOff,
  the exit code in lastState, for 10 s, 20 s, ... (at most 300 s), then Running again,
  restartCount kept.
- Deletion: SIGTERM to PID 1, SIGKILL after spec.terminationGracePeriodSeconds, then the pod's
  terminal phase with the exit code (ended_status), then the object may go. FakeKubelet
  confirms every deletion at once (grace 0), so this agent holds each of its pods with
  FINALIZER from before its process starts until it has ended: no process outlives its pod
  object. `exit_codes` keeps each ended pod's code. (A shorter grace asked for in the DELETE is
  not honoured: FakeKubelet's confirmation overwrites the pod's deletionGracePeriodSeconds.)
- `stop()` ends every process started here (SIGTERM, SIGKILL after the grace), takes its
  finalizer off every pod and stops the FakeKubelet.

Stand-ins (what a container has that this process has not):
- The ServiceAccount token reaches the process as a kubeconfig (KUBECONFIG) pointing at the API
  server's own URL, not as /var/run/secrets/kubernetes.io/serviceaccount with
  KUBERNETES_SERVICE_HOST: the in-cluster `kubernetes` Service's ClusterIP routes nowhere here
  (no kube-proxy, and the control plane keeps its Endpoints empty). The token is not rotated
  (3607 s outlive every test). No service-link env vars.
- One network namespace for every process: each containerPort is remapped to a free port of
  127.0.0.1, and an env value that is a containerPort's number (the chart's METRICS_PORT and
  HEALTH_PORT) names the remapped one; a containerPort no env value names cannot be moved and
  the pod is not run. status.podIP resolves to 127.0.0.1, and no podIP is written (Endpoints
  may not hold a loopback address).
- Volumes: none is mounted; TMPDIR is a directory of the pod's own (the chart's emptyDir at
  /tmp), the root filesystem is this machine's, writable. The process runs as this user, not
  runAsUser; resources are not enforced.
"""
from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed import service_account_tokens as tokens
from testbed.kube_client import KubeAPIError, KubeClient
from testbed.kubelet import NODE_IP, TERMINAL_STATES, FakeKubelet, PodState, ended_status, remove_finalizer, state_of
from testbed.ports import free_port
from testbed.task_pods import TaskProcess

FINALIZER = "operator-pods.tests.ironicshards.io/container"
SELECTOR = {"app.kubernetes.io/name": "ironic-shard-operator", "app.kubernetes.io/component": "operator"}
ENTRYPOINT = [sys.executable, "-m", "ironic_shard_operator.cli"]  # the image's `ironic-shard-operator`
IMAGE_ENV = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
             "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}  # the Dockerfile's ENV
POD_IP = "127.0.0.1"  # where a pod's (remapped) ports are
POLL_SECONDS = 1.0
BACKOFF_SECONDS, MAX_BACKOFF_SECONDS = 10.0, 300.0
FIELD_KEY = re.compile(r"metadata\.(labels|annotations)\['(.+)'\]$")
VARIABLE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class NotYet(Exception):
    """The container cannot start yet (a Secret or ConfigMap its env names is missing)."""


class CannotRun(Exception):
    """The pod is ours but asks for something this agent cannot give (the message says what)."""


@dataclass
class Probe:
    passing: bool
    next_at: float  # time.monotonic() of its next run
    failures: int = 0


@dataclass
class Container:
    """The operator container of one pod: how it is run, and its current (or last) process."""
    pod_name: str
    spec: dict[str, Any]
    argv: list[str]
    env: dict[str, str]
    ports: dict[int, int]  # containerPort -> the 127.0.0.1 port it listens on here
    grace: float  # spec.terminationGracePeriodSeconds
    workdir: Path
    process: TaskProcess | None = None
    runs: int = 0
    probes: dict[str, Probe] = field(default_factory=dict)
    restart_at: float | None = None  # in back-off after an exit: when it starts again
    stopping: threading.Thread | None = None  # SIGTERM ... SIGKILL under way
    reported: bool = False  # its pod's terminal phase is written

    def ended(self) -> bool:
        return (self.process is None or not self.process.alive()) and not (self.stopping and self.stopping.is_alive())


class OperatorPods:
    """Runs the operator pods of `namespace` (module doc); `kubeconfig` gives the API server's
    URL and CA for the pods' kubeconfigs. Use as a context manager (or start()/stop())."""

    def __init__(self, client: KubeClient, namespace: str, kubeconfig: Path, workdir: Path, *,
                 nodes: int = 2, selector: dict[str, str] | None = None) -> None:
        self.client, self.namespace = client, namespace
        self.kubeconfig, self.workdir = Path(kubeconfig), Path(workdir)
        self.selector = dict(SELECTOR if selector is None else selector)
        self.fake = FakeKubelet(client, namespace, nodes=nodes, default_state=PodState.PENDING,
                                runs_elsewhere=self._ours, log_of=self._log_of)
        self.exit_codes: dict[str, int] = {}  # by pod name: the exit code its container ended with
        self.errors: list[BaseException] = []
        self._containers: dict[str, Container] = {}  # by pod uid
        self._unrunnable: set[str] = set()
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="operator-pods", daemon=True)

    def start(self) -> OperatorPods:
        self.fake.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        with self._lock:
            containers = list(self._containers.values())
        for container in containers:
            self._stop_process(container)
        for container in containers:
            if container.stopping is not None:
                container.stopping.join(timeout=container.grace + 30)
        try:
            for pod in self._pods():
                self._remove_finalizer(pod)
        finally:
            self.fake.stop()
        if self.errors:
            raise RuntimeError(f"the operator pods' agent failed: {self.errors[0]!r}") from self.errors[0]

    def __enter__(self) -> OperatorPods:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                for pod in self._pods():
                    try:
                        self._tend(pod)
                    except KubeAPIError as error:
                        if error.status not in (404, 409, 422):  # the pod changed or went meanwhile
                            raise
            except BaseException as error:  # reported by stop()
                self.errors.append(error)
                return
            self._stopping.wait(POLL_SECONDS)

    def _pods(self) -> list[dict[str, Any]]:
        return self.client.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]

    def _ours(self, pod: dict[str, Any]) -> bool:
        labels = pod["metadata"].get("labels") or {}
        return all(labels.get(key) == value for key, value in self.selector.items()) and any(
            c.get("args") == ["run"] and not c.get("command") for c in pod["spec"]["containers"])

    def _tend(self, pod: dict[str, Any]) -> None:
        meta, name, uid = pod["metadata"], pod["metadata"]["name"], pod["metadata"]["uid"]
        if pod["spec"].get("nodeName") not in self.fake.nodes or not self._ours(pod):
            return
        with self._lock:
            container = self._containers.get(uid)
        if meta.get("deletionTimestamp"):
            self._end(pod, container)
            return
        if FINALIZER not in (meta.get("finalizers") or []):
            self.client.patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}", {"metadata": {
                "finalizers": list(meta.get("finalizers") or []) + [FINALIZER],
                "resourceVersion": meta["resourceVersion"]}})
            return  # started on the next round, from the object that carries the finalizer
        if state_of(pod) in TERMINAL_STATES or uid in self._unrunnable:
            return
        if container is None:
            self._start(pod)
        else:
            self._keep(pod, container)

    # -- starting -------------------------------------------------------------------------------

    def _start(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        workdir = self.workdir / f"{meta['name']}-{meta['uid'][:8]}"
        try:
            spec = self._container_spec(pod)
            ports = {p["containerPort"]: free_port() for p in spec.get("ports") or []}
            env = container_env(pod, spec, ports, self._key)
            for kind in ("readinessProbe", "livenessProbe"):
                if spec.get(kind):
                    self._probe_port(spec, spec[kind], ports)
        except NotYet:
            return
        except CannotRun as error:  # the pod stays Pending; stop() reports it
            self._unrunnable.add(meta["uid"])
            self.errors.append(error)
            return
        (workdir / "tmp").mkdir(parents=True, exist_ok=True)
        kubeconfig = workdir / "kubeconfig"
        tokens.write_token_kubeconfig(kubeconfig, self.kubeconfig, tokens.issue_for_pod(self.client, pod))
        env.update(KUBECONFIG=str(kubeconfig), TMPDIR=str(workdir / "tmp"))
        args = [_expand(a, env) for a in spec.get("args") or []]
        container = Container(meta["name"], spec, ENTRYPOINT + args, env, ports,
                              float(pod["spec"].get("terminationGracePeriodSeconds", 30)), workdir)
        self._launch(container)
        with self._lock:
            self._containers[meta["uid"]] = container
        self.fake.not_ready(meta["name"])  # its container started: Running, Ready once its probe passes

    def _container_spec(self, pod: dict[str, Any]) -> dict[str, Any]:
        if pod["spec"].get("initContainers"):
            raise CannotRun(f"pod {pod['metadata']['name']}: init containers are not run here")
        others = [c["name"] for c in pod["spec"]["containers"] if c.get("args") != ["run"] or c.get("command")]
        if others:
            raise CannotRun(f"pod {pod['metadata']['name']}: containers {others} are not the operator's")
        spec = pod["spec"]["containers"][0]
        if spec.get("envFrom"):
            raise CannotRun(f"pod {pod['metadata']['name']}: envFrom is not resolved here")
        return spec

    def _key(self, source: dict[str, Any]) -> str | None:
        kind, ref = ("secrets", source["secretKeyRef"]) if "secretKeyRef" in source else \
            ("configmaps", source["configMapKeyRef"])
        try:
            data = self.client.get(f"/api/v1/namespaces/{self.namespace}/{kind}/{ref['name']}").get("data") or {}
        except KubeAPIError as error:
            if error.status != 404:
                raise
            data = {}
        if ref["key"] not in data:
            if ref.get("optional"):
                return None
            raise NotYet(f"{kind} {ref['name']} key {ref['key']}")
        value = data[ref["key"]]
        return base64.b64decode(value).decode() if kind == "secrets" else value

    def _launch(self, container: Container) -> None:
        """Start a run of the container's process as PID 1 of a PID namespace of its own."""
        container.runs += 1
        log_path = container.workdir / f"run-{container.runs}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen([shutil.which("unshare") or "unshare", "--pid", "--fork", "--kill-child", "--",
                                      *container.argv], stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, cwd=container.workdir, env=container.env,
                                     start_new_session=True)
        container.process = TaskProcess(popen, log_path)
        now = time.monotonic()
        container.probes = {kind: Probe(passing=kind == "livenessProbe",
                                        next_at=now + (container.spec.get(kind) or {}).get("initialDelaySeconds", 0))
                            for kind in ("readinessProbe", "livenessProbe")}
        container.restart_at = None

    def _log_of(self, pod: dict[str, Any], container_name: str) -> str | None:
        """What the container's current run has printed (the kubelet API's container log)."""
        with self._lock:
            container = self._containers.get(pod["metadata"]["uid"])
        if container is None or container.process is None or container.spec["name"] != container_name:
            return None
        return container.process.output()

    # -- running --------------------------------------------------------------------------------

    def _keep(self, pod: dict[str, Any], container: Container) -> None:
        """Restart an ended process (after the back-off), stop one whose liveness failed, and
        report readiness."""
        name = container.pod_name
        if not container.ended():
            if container.stopping is None and not self._probe(container, "livenessProbe"):
                self._stop_process(container)  # then restarted in place, as a kubelet does
                return
            ready = self._probe(container, "readinessProbe")
            if ready and state_of(pod) != PodState.READY:
                self.fake.ready(name)
            elif not ready and state_of(pod) == PodState.READY:
                self.fake.not_ready(name)
            return
        if container.restart_at is None:  # it has just ended: CrashLoopBackOff, its exit code kept
            code = container.process.exit_code() if container.process else None
            container.stopping = None
            container.restart_at = time.monotonic() + min(BACKOFF_SECONDS * 2 ** (container.runs - 1),
                                                          MAX_BACKOFF_SECONDS)
            statuses = self.fake.crash_loop(name)["status"]["containerStatuses"]  # exit code 1 ...
            for item in statuses:
                if item["name"] == container.spec["name"] and "lastState" in item:  # ... the real one
                    item["lastState"]["terminated"].update(exitCode=code, reason="Completed" if code == 0 else "Error")
            self.client.patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}/status", {
                "metadata": {"uid": pod["metadata"]["uid"]}, "status": {"containerStatuses": statuses}})
        elif time.monotonic() >= container.restart_at:
            self._launch(container)
            self.fake.not_ready(name)  # Running again (restartCount kept), Ready once its probe passes

    def _probe(self, container: Container, kind: str) -> bool:
        """The container's readinessProbe or livenessProbe, run when it is due (module doc);
        True where there is none."""
        spec = container.spec.get(kind)
        if not spec:
            return True
        probe, now = container.probes[kind], time.monotonic()
        if now < probe.next_at:
            return probe.passing
        probe.next_at = now + spec.get("periodSeconds", 10)
        get = spec["httpGet"]
        url = f"http://{POD_IP}:{self._probe_port(container.spec, spec, container.ports)}{get.get('path', '/')}"
        request = urllib.request.Request(url, headers={h["name"]: h["value"] for h in get.get("httpHeaders") or []})
        try:
            with urllib.request.urlopen(request, timeout=spec.get("timeoutSeconds", 1)) as answer:
                passed = 200 <= answer.status < 400
        except (urllib.error.URLError, OSError):  # HTTPError (>= 400) included
            passed = False
        probe.failures = 0 if passed else probe.failures + 1
        if passed or probe.failures >= spec.get("failureThreshold", 3):
            probe.passing = passed
        return probe.passing

    @staticmethod
    def _probe_port(spec: dict[str, Any], probe: dict[str, Any], ports: dict[int, int]) -> int:
        get = probe.get("httpGet")
        if get is None or get.get("scheme", "HTTP") != "HTTP" or get.get("host"):
            raise CannotRun(f"container {spec['name']}: only httpGet probes of the pod's own HTTP port are run here")
        port = get["port"]
        if isinstance(port, str):
            port = next((p["containerPort"] for p in spec.get("ports") or [] if p.get("name") == port), port)
        if port not in ports:
            raise CannotRun(f"container {spec['name']}: a probe's port {get['port']} is no containerPort")
        return ports[port]

    # -- ending ---------------------------------------------------------------------------------

    def _end(self, pod: dict[str, Any], container: Container | None) -> None:
        """The pod is being deleted: stop its process, write its terminal phase, let it go."""
        if container is not None:
            if not container.ended():
                self._stop_process(container)
                return
            code = container.process.exit_code() if container.process else None
            if not container.reported and state_of(pod) not in TERMINAL_STATES and code is not None:
                self.client.patch(f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}/status",
                                  {"metadata": {"uid": pod["metadata"]["uid"]}, "status": ended_status(pod, code)})
            container.reported = True
            if code is not None:
                self.exit_codes[container.pod_name] = code
        self._remove_finalizer(pod)
        if container is not None:
            with self._lock:
                self._containers.pop(pod["metadata"]["uid"], None)

    def _stop_process(self, container: Container) -> None:
        """SIGTERM to PID 1, SIGKILL after the grace period, in the background."""
        with self._lock:
            if container.stopping is not None or container.process is None or not container.process.alive():
                return
            process = container.process
            container.stopping = threading.Thread(target=lambda: process.terminate(grace=container.grace),
                                                  name=f"stop-{container.pod_name}", daemon=True)
            container.stopping.start()

    def _remove_finalizer(self, pod: dict[str, Any]) -> None:
        remove_finalizer(self.client, pod, FINALIZER)


def container_env(pod: dict[str, Any], spec: dict[str, Any], ports: dict[int, int],
                  key: Callable[[dict[str, Any]], str | None]) -> dict[str, str]:
    """The environment of container `spec` of `pod` (module doc), each env value that is a
    containerPort's number replaced by its remapped port (`ports`); `key(valueFrom)` reads a
    secretKeyRef or configMapKeyRef (None: an optional one that is missing)."""
    env = dict(IMAGE_ENV, HOSTNAME=pod["metadata"]["name"])
    named: set[int] = set()
    for item in spec.get("env") or []:
        source = item.get("valueFrom")
        if source is None:
            value = _expand(item.get("value", ""), env)  # the real API server omits an empty value
        elif "fieldRef" in source:
            value = _field(pod, source["fieldRef"]["fieldPath"])
        elif "secretKeyRef" in source or "configMapKeyRef" in source:
            value = key(source)
        else:
            raise CannotRun(f"pod {pod['metadata']['name']}: env {item['name']} from {sorted(source)}")
        if value is None:
            continue  # an optional key that is missing: the variable is not set
        if value.strip().isdigit() and int(value) in ports:
            named.add(int(value))
            value = str(ports[int(value)])
        env[item["name"]] = value
    if set(ports) - named:
        raise CannotRun(f"pod {pod['metadata']['name']}: containerPort {sorted(set(ports) - named)} is named "
                        "by no env value: where the process listens cannot be moved here")
    return env


def _field(pod: dict[str, Any], path: str) -> str:
    """A fieldRef's value, as a kubelet resolves it when the container starts."""
    meta, spec = pod["metadata"], pod["spec"]
    keyed = FIELD_KEY.match(path)
    if keyed:
        return (meta.get(keyed[1]) or {}).get(keyed[2], "")
    values = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"], "metadata.uid": meta["uid"],
              "spec.nodeName": spec.get("nodeName", ""), "spec.serviceAccountName": spec.get("serviceAccountName", ""),
              "status.hostIP": NODE_IP, "status.hostIPs": NODE_IP, "status.podIP": POD_IP, "status.podIPs": POD_IP}
    if path not in values:
        raise CannotRun(f"pod {meta['name']}: fieldRef {path} is not resolved here")
    return values[path]


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: a defined VAR's value, `$$` a `$`, anything else as is."""
    return VARIABLE.sub(lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), text)
