"""A FAKE kubelet whose member pods run as REAL nova-compute processes, and whose Job pods run
their nova-manage or shell script for real (task_pods.py); FakeKubelet still schedules and writes
the statuses. A pod is Running once its process starts, and Ready while its process lives, its
Nova service heartbeats and its exec readinessProbe (run for real) passes. A pod object outlives
its process (the finalizer FINALIZER), so a replacement of the same name never runs beside it.
Every process started here is stopped by `stop()`. Details: README.md, "The process kubelet"."""

from __future__ import annotations

import base64
import datetime
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keystoneauth1.exceptions import ClientException

from testbed import nova_starter
from testbed.kube_client import KubeAPIError, KubeClient
from testbed.kubelet import (
    TERMINAL_STATES, FakeKubelet, PodState, confirm_deletion, ended_status, pod_status, restarted_status,
    runs_to_completion, remove_finalizer, state_of)
from testbed.nova_stack import ComputeProcess, NovaStack
from testbed.nova_starter import StackError
from testbed.task_pods import TaskProcess, is_task, map_mount_paths, start_task

PROCESS_IMAGE = "nova-compute:process"
FINALIZER = "process-kubelet.tests.ironicshards.io/container"
POLL_SECONDS = 1.0
# A kubelet's grace when a pod names none (the API's default terminationGracePeriodSeconds), and
# the least it gives a container between SIGTERM and SIGKILL (kubelet's minimumGracePeriodInSeconds).
DEFAULT_GRACE_SECONDS = 30
MIN_GRACE_SECONDS = 2


def stop_grace(pod: dict[str, Any]) -> int:
    """How long a kubelet lets the containers of `pod` run after SIGTERM before SIGKILL: the
    deletion's grace (metadata.deletionGracePeriodSeconds: the DeleteOptions' gracePeriodSeconds,
    else the pod's own), else spec.terminationGracePeriodSeconds, else 30 s; never under 2 s."""
    chosen = pod["metadata"].get("deletionGracePeriodSeconds")
    if chosen is None:
        chosen = pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    return max(int(chosen), MIN_GRACE_SECONDS)


class NotYet(Exception):
    """The container cannot start yet (a volume's Secret or ConfigMap is missing)."""


class CannotRun(Exception):
    """The pod's container is not something this kubelet can run (its message says why)."""


@dataclass
class Container:
    """The process of one pod (by pod uid): its nova-compute, or one run of its task."""

    pod_name: str
    pod_uid: str
    process: ComputeProcess | TaskProcess
    started_at: float  # epoch seconds
    stopping: threading.Thread | None = None
    stopped: bool = False
    killed_with: int | None = None  # the signal kill() sent
    exit_code: int | None = None
    failure_reported: bool = False
    ready_since: float | None = None
    grace: int = DEFAULT_GRACE_SECONDS  # stop_grace() of the pod when it started (used if its object goes)
    files: tuple[Path, ...] = field(default_factory=tuple)
    probe_passing: bool = False  # its readinessProbe, if any: passed last, fewer failures than the threshold since
    probe_failures: int = 0
    probed_at: float | None = None  # time.monotonic() of the last run of its readinessProbe

    def ended(self) -> bool:
        return self.stopped or not self.process.alive()


class ProcessKubelet:
    """Runs the pods of `namespace` that use `image` as real nova-compute processes of `stack`.

    Use as a context manager (or start()/stop()). Config files are written under `workdir`.
    Commands for tests: `hold(name)`/`release(name)` (keep pods of that name from starting,
    like a slow image pull), `kill(name)` (crash the container), `container(name)`.
    """

    def __init__(self, client: KubeClient, namespace: str, stack: NovaStack, workdir: Path, *,
                 nodes: int = 3, image: str = PROCESS_IMAGE) -> None:
        self.client = client
        self.namespace = namespace
        self.stack = stack
        self.workdir = Path(workdir)
        self.image = image
        self.fake = FakeKubelet(client, namespace, nodes=nodes, default_state=PodState.PENDING,
                                runs_elsewhere=self._ours, log_of=self._log_of, deleted_elsewhere=True)
        self._containers: dict[str, Container] = {}  # by pod uid
        self._held: set[str] = set()
        self._unrunnable: set[str] = set()  # pod uids whose container this kubelet cannot run
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-kubelet", daemon=True)
        self.errors: list[BaseException] = []

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> ProcessKubelet:
        self.fake.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop every process started here, release the pods, stop the FakeKubelet."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        with self._lock:
            containers = list(self._containers.values())
        for container in containers:
            if container.stopping is not None:
                container.stopping.join(timeout=60)
        names = sorted({c.pod_name for c in containers if not c.stopped and isinstance(c.process, ComputeProcess)})
        nova_starter.terminate(self.stack.run_dir, names, sig=signal.SIGTERM)
        for container in containers:
            if isinstance(container.process, TaskProcess) and container.process.alive():
                container.process.terminate(grace=10.0)
        try:
            for pod in self._pods():
                self._remove_finalizer(pod)
                if pod["metadata"].get("deletionTimestamp") and self._ours(pod):
                    confirm_deletion(self.client, pod)  # its process is gone: nothing waits for it
        finally:
            self.fake.stop()
        if self.errors:
            raise RuntimeError(f"the process kubelet failed: {self.errors[0]!r}") from self.errors[0]

    def __enter__(self) -> ProcessKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- commands -----------------------------------------------------------------------------

    def hold(self, pod_name: str) -> None:
        """Pods with this name (now and replacements) do not start until `release(pod_name)`."""
        with self._lock:
            self._held.add(pod_name)

    def release(self, pod_name: str) -> None:
        with self._lock:
            self._held.discard(pod_name)

    def set_node_reachable(self, node: str, reachable: bool) -> None:
        """Take a Kubernetes node's kubelet away (or bring it back), as a partition would
        (FakeKubelet.set_node_reachable: taints, Ready Unknown, its pods NotReady). While it is
        away, this kubelet neither reports, starts nor stops the pods bound to it, and never
        removes their finalizer: a pod deleted meanwhile stays until the node is back."""
        self.fake.set_node_reachable(node, reachable)

    def kill(self, pod_name: str) -> Container:
        """Crash the container of pod `pod_name`: SIGKILL its process (no graceful shutdown)."""
        container = self.container(pod_name)
        if container is None:
            raise ValueError(f"pod {pod_name} runs no process")
        container.killed_with = signal.SIGKILL
        if isinstance(container.process, TaskProcess):  # its exit code says 137 itself
            container.process.kill()
            return container
        container.process.kill()
        return container

    def container(self, pod_name: str) -> Container | None:
        """The running (or last) process of the current pod named `pod_name`, if any."""
        with self._lock:
            found = [c for c in self._containers.values() if c.pod_name == pod_name]
        return max(found, key=lambda c: c.started_at) if found else None

    # -- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._tend_all()
            except BaseException as error:  # reported by stop()
                self.errors.append(error)
                return
            self._stopping.wait(POLL_SECONDS)

    def _pods(self) -> list[dict[str, Any]]:
        return self.client.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]

    def _tend_all(self) -> None:
        pods = self._pods()
        with self._lock:
            live = any(not c.ended() for c in self._containers.values())
        services: dict[str, dict] | None = {}
        if live:
            try:
                services = self.stack.compute_services()
            except (StackError, ClientException):  # Nova's API hiccuped: no readiness news now
                services = None
        seen = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            try:
                self._tend(pod, services)
            except KubeAPIError as error:
                if error.status not in (404, 409, 422):  # the pod changed or went meanwhile
                    raise
        with self._lock:  # pod objects gone (e.g. force-deleted): their processes go too
            for uid, container in list(self._containers.items()):
                if uid not in seen:
                    self._stop_process(container, container.grace)
                    if container.stopped:
                        del self._containers[uid]

    def _ours(self, pod: dict[str, Any]) -> bool:
        return any(c.get("image") == self.image for c in pod["spec"]["containers"])

    def _tend(self, pod: dict[str, Any], services: dict[str, dict] | None) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        name, uid = meta["name"], meta["uid"]
        if not self._ours(pod):
            if spec.get("nodeName") in self.fake.nodes and not meta.get("deletionTimestamp") \
                    and state_of(pod) == PodState.PENDING and not runs_to_completion(pod):
                self.fake.ready(name)  # FakeKubelet's usual policy for everything else
            return
        if spec.get("nodeName") in self.fake.nodes and not self.fake.reachable(spec["nodeName"]):
            return  # this node's kubelet is away: nothing of its pods is seen or done
        with self._lock:
            container = self._containers.get(uid)
        if meta.get("deletionTimestamp"):
            if container is not None:
                self._stop_process(container, stop_grace(pod))
            if container is None or container.stopped:
                if container is not None and state_of(pod) not in TERMINAL_STATES:
                    self._report_end(pod, container)  # its terminal phase first, as kubelets since 1.27
                self._remove_finalizer(pod)
                confirm_deletion(self.client, pod)  # (the FakeKubelet leaves this to us: the grace is ours)
            return
        if spec.get("nodeName") not in self.fake.nodes:
            return  # not scheduled yet (FakeKubelet binds it), or another kubelet's pod
        if FINALIZER not in (meta.get("finalizers") or []):
            self.client.patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}", {"metadata": {
                "finalizers": list(meta.get("finalizers") or []) + [FINALIZER],
                "resourceVersion": meta["resourceVersion"]}})
            return  # start on the next round, from the object that carries the finalizer
        if state_of(pod) in TERMINAL_STATES:
            return
        if container is None:
            self._start(pod)
            return
        if isinstance(container.process, TaskProcess):
            self._tend_task(pod, container)
            return
        self._collect_exit(container)
        if container.ended():
            self._report_failure(pod, container)
            return
        if services is None:
            return
        ready = self._reports_in(container, services.get(name)) and self._probe_passes(pod, container)
        state = state_of(pod)
        if ready and state != PodState.READY:
            self.fake.ready(name)
        elif not ready and state == PodState.READY:
            self.fake.not_ready(name)

    # -- starting -------------------------------------------------------------------------------

    def _start(self, pod: dict[str, Any]) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        with self._lock:
            if name in self._held:
                return
            if uid in self._unrunnable or any(
                    c.pod_name == name and (not c.ended() or (c.stopping and c.stopping.is_alive()))
                    for c in self._containers.values()):
                return  # the old pod's process is still there: never two with one identity
        if is_task(self._container_spec(pod)):
            self._start_task(pod)
            return
        try:
            files = self._config_files(pod)
        except NotYet:
            return
        except CannotRun as error:  # the pod stays Pending; stop() reports it
            self._unrunnable.add(uid)
            self.errors.append(error)
            return
        started_at = time.time()
        process = self.stack.start_compute(name, list(files))
        with self._lock:
            self._containers[uid] = Container(name, uid, process, started_at, files=files, grace=stop_grace(pod))
        self.fake.not_ready(name)  # its container started: Running, Ready once it reports in

    def _log_of(self, pod: dict[str, Any], container_name: str) -> str | None:
        """What the pod's process has printed (its current run), for the kubelet API."""
        with self._lock:
            container = self._containers.get(pod["metadata"]["uid"])
        if container is None:
            return None
        if isinstance(container.process, TaskProcess):
            return container.process.output()
        log = container.process.log_path
        return log.read_text(errors="replace") if log.exists() else ""

    def _container_spec(self, pod: dict[str, Any]) -> dict[str, Any]:
        return next(c for c in pod["spec"]["containers"] if c.get("image") == self.image)

    # -- task pods (testbed/task_pods.py) ---------------------------------------------------------

    def _start_task(self, pod: dict[str, Any], restarts: int = 0) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        spec = self._container_spec(pod)
        target = self.workdir / f"{name}-{uid[:8]}"
        try:
            mounts = self._materialise_mounts(pod, spec, target / "volumes")
        except NotYet:
            return
        except CannotRun as error:
            self._unrunnable.add(uid)
            self.errors.append(error)
            return
        argv = map_mount_paths(list(spec.get("command") or []) + list(spec.get("args") or []), mounts)
        process = start_task(argv, Path(self.stack.state["venv"]) / "bin", target / f"run-{restarts}.log", target)
        with self._lock:
            self._containers[uid] = Container(name, uid, process, time.time(), grace=stop_grace(pod))
        self.fake.ready(name)

    def _materialise_mounts(self, pod: dict[str, Any], container: dict[str, Any], target: Path) -> dict[str, Path]:
        """Every volume mount of `container` as local files: {mount path: local path}."""
        mounts = {}
        for index, mount in enumerate(container.get("volumeMounts") or []):
            volume = next(v for v in pod["spec"].get("volumes") or [] if v["name"] == mount["name"])
            local = target / f"{index}-{mount['name']}"
            if mount.get("subPath"):
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_bytes(self._volume_item(volume, mount["subPath"], pod["metadata"]["name"]))
            else:
                local.mkdir(parents=True, exist_ok=True)
                for item in self._volume_paths(volume, pod["metadata"]["name"]):
                    (local / item).parent.mkdir(parents=True, exist_ok=True)
                    (local / item).write_bytes(self._volume_item(volume, item, pod["metadata"]["name"]))
            mounts[mount["mountPath"]] = local
        return mounts

    def _volume_paths(self, volume: dict[str, Any], pod_name: str) -> list[str]:
        """The file names a Secret or ConfigMap volume shows (its `items`, else every key)."""
        source = volume.get("secret") or volume.get("configMap")
        if source is None:
            raise CannotRun(f"pod {pod_name}: volume {volume['name']} is neither a Secret nor a ConfigMap")
        if source.get("items"):
            return [item["path"] for item in source["items"]]
        kind, name = ("secrets", source["secretName"]) if "secret" in volume else ("configmaps", source["name"])
        try:
            obj = self.client.get(f"/api/v1/namespaces/{self.namespace}/{kind}/{name}")
        except KubeAPIError as error:
            if error.status == 404:
                raise NotYet(f"{kind} {name}") from None
            raise
        return sorted(obj.get("data") or {})

    def _tend_task(self, pod: dict[str, Any], container: Container) -> None:
        """Hand in the task's output; once it has ended, report the end (or restart it)."""
        process = container.process
        assert isinstance(process, TaskProcess)
        code = process.exit_code()
        if code is None or container.failure_reported:
            return
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}/status"
        if code != 0 and pod["spec"].get("restartPolicy") == "OnFailure":
            self.client.patch(path, {"metadata": {"uid": container.pod_uid}, "status": restarted_status(pod, code)})
            restarts = 1 + max((c.get("restartCount", 0) for c in (pod.get("status") or {}).get("containerStatuses") or []),
                               default=0)
            self._start_task(pod, restarts)
            return
        self.client.patch(path, {"metadata": {"uid": container.pod_uid}, "status": ended_status(pod, code)})
        container.failure_reported = True

    def _config_files(self, pod: dict[str, Any]) -> tuple[Path, ...]:
        """The pod's `--config-file` paths, materialised from its volumes, in argument order."""
        container = next(c for c in pod["spec"]["containers"] if c.get("image") == self.image)
        argv = list(container.get("command") or []) + list(container.get("args") or [])
        if not argv or Path(argv[0]).name != "nova-compute":
            raise CannotRun(f"pod {pod['metadata']['name']}: the container command {argv} does not "
                            "start nova-compute; the process kubelet runs only nova-compute")
        paths, rest = [], argv[1:]
        while rest:
            argument = rest.pop(0)
            if argument == "--config-file" and rest:
                paths.append(rest.pop(0))
            elif argument.startswith("--config-file="):
                paths.append(argument.partition("=")[2])
            else:
                raise CannotRun(f"pod {pod['metadata']['name']}: argument {argument!r} is not "
                                "understood (only --config-file PATH)")
        target = self.workdir / f"{pod['metadata']['name']}-{pod['metadata']['uid'][:8]}"
        target.mkdir(parents=True, exist_ok=True)
        files = []
        for index, path in enumerate(paths):
            local = target / f"{index}-{Path(path).name}"
            local.write_bytes(self._volume_file(pod, container, path))
            files.append(local)
        return tuple(files)

    def _volume_file(self, pod: dict[str, Any], container: dict[str, Any], path: str) -> bytes:
        """The content a container would see at `path` (a Secret or ConfigMap volume)."""
        for mount in container.get("volumeMounts") or []:
            mount_path = mount["mountPath"].rstrip("/")
            if mount.get("subPath"):
                item = mount["subPath"] if path == mount_path else None
            else:
                item = path[len(mount_path) + 1:] if path.startswith(mount_path + "/") else None
            if item is None:
                continue
            volume = next(v for v in pod["spec"].get("volumes") or [] if v["name"] == mount["name"])
            return self._volume_item(volume, item, pod["metadata"]["name"])
        raise CannotRun(f"pod {pod['metadata']['name']}: no volume is mounted at {path}")

    def _volume_item(self, volume: dict[str, Any], item: str, pod_name: str) -> bytes:
        if "secret" in volume:
            kind, source, name = "secrets", volume["secret"], volume["secret"]["secretName"]
        elif "configMap" in volume:
            kind, source, name = "configmaps", volume["configMap"], volume["configMap"]["name"]
        else:
            raise CannotRun(f"pod {pod_name}: volume {volume['name']} is neither a Secret nor a ConfigMap")
        try:
            obj = self.client.get(f"/api/v1/namespaces/{self.namespace}/{kind}/{name}")
        except KubeAPIError as error:
            if error.status == 404:
                raise NotYet(f"{kind} {name}") from None
            raise
        items = source.get("items") or [{"key": key, "path": key} for key in obj.get("data") or {}]
        key = next((i["key"] for i in items if i["path"] == item), None)
        value = (obj.get("data") or {}).get(key) if key else None
        if value is None:
            raise NotYet(f"{kind} {name} has no item {item}")
        return base64.b64decode(value) if kind == "secrets" else value.encode()

    # -- readiness and failure ------------------------------------------------------------------

    def _reports_in(self, container: Container, service: dict | None) -> bool:
        """A heartbeat in Nova since this process started, younger than service_down_time."""
        if not service or not service.get("updated_at"):
            return False
        beat = datetime.datetime.fromisoformat(service["updated_at"]).replace(
            tzinfo=datetime.UTC).timestamp()
        fresh = time.time() - beat <= self.stack.timings["service_down_time"]
        return beat >= int(container.started_at) and fresh

    def _probe_passes(self, pod: dict[str, Any], container: Container) -> bool:
        """The container's exec readinessProbe (module doc); True without one."""
        probe = self._container_spec(pod).get("readinessProbe") or {}
        command = (probe.get("exec") or {}).get("command")
        if not command:
            return True
        now = time.monotonic()
        if container.probed_at is not None and now - container.probed_at < probe.get("periodSeconds", 10):
            return container.probe_passing
        try:
            passed = subprocess.run(command, env={**os.environ, "HOSTNAME": pod["metadata"]["name"]},
                                    capture_output=True, timeout=probe.get("timeoutSeconds", 1)).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            passed = False
        container.probed_at = now
        container.probe_failures = 0 if passed else container.probe_failures + 1
        if passed or container.probe_failures >= probe.get("failureThreshold", 3):
            container.probe_passing = passed
        return container.probe_passing

    def _report_failure(self, pod: dict[str, Any], container: Container) -> None:
        """The container ended on its own (or by kill()): the pod turns Failed, exit code kept."""
        if container.failure_reported:
            return
        code = self._exit_code(container)
        status = pod_status(pod, PodState.FAILED)
        for item in status["containerStatuses"]:
            item["state"]["terminated"].update(exitCode=code, reason="Error")
        status["message"] = f"container nova-compute exited with code {code} (process kubelet)"
        self.client.patch(f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}/status",
                          {"metadata": {"uid": container.pod_uid}, "status": status})
        container.failure_reported = True

    def _report_end(self, pod: dict[str, Any], container: Container) -> None:
        """The container of a pod being deleted has stopped: the pod's terminal phase, with the
        exit code (a task's output handed in first)."""
        if container.failure_reported:
            return
        if isinstance(container.process, TaskProcess):
            code = container.process.exit_code()
        else:
            self._collect_exit(container)
            code = self._exit_code(container)
        try:
            self.client.patch(f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}/status",
                              {"metadata": {"uid": container.pod_uid},
                               "status": ended_status(pod, 128 + signal.SIGKILL if code is None else code)})
        except KubeAPIError as error:
            if error.status not in (404, 409, 422):
                raise
        container.failure_reported = True

    @staticmethod
    def _collect_exit(container: Container) -> None:
        """Record the process's exit code if it has ended (before anything else reaps it)."""
        if container.exit_code is not None:
            return
        try:
            pid, status = os.waitpid(container.process.pid, os.WNOHANG)
        except ChildProcessError:  # not ours to collect any more: the code is unknown
            return
        if pid:
            code = os.waitstatus_to_exitcode(status)
            container.exit_code = 128 - code if code < 0 else code  # signal N: 128 + N

    @staticmethod
    def _exit_code(container: Container) -> int:
        if container.killed_with is not None:
            return 128 + container.killed_with
        return container.exit_code if container.exit_code is not None else 1

    # -- stopping -------------------------------------------------------------------------------

    def _stop_process(self, container: Container, grace: float) -> None:
        """Stop the process in the background as a kubelet does: SIGTERM, SIGKILL once `grace`
        seconds have passed (then the pod reports exit code 137); a process that ends on SIGTERM
        sooner is not waited for."""
        with self._lock:
            if container.stopped or container.stopping is not None:
                if container.stopping is not None and not container.stopping.is_alive():
                    container.stopped = True
                return
            if not container.process.alive():
                container.stopped = True
                return

            process = container.process

            def stop() -> None:
                if isinstance(process, TaskProcess):
                    process.terminate(grace=float(grace))  # a SIGKILL after it sets its exit code 137
                    return
                deadline = time.monotonic() + grace
                try:
                    os.killpg(process.pid, signal.SIGTERM)  # its group leader (its own session)
                except ProcessLookupError:
                    pass
                while process.alive() and time.monotonic() < deadline:
                    time.sleep(0.1)
                if process.alive() and container.killed_with is None:
                    container.killed_with = signal.SIGKILL  # it outlived its grace: exit code 137
                # What is left of its group goes now, as a container's processes go with its PID 1.
                nova_starter.terminate(self.stack.run_dir, container.pod_name, sig=signal.SIGKILL)

            container.stopping = threading.Thread(target=stop, name=f"stop-{container.pod_name}",
                                                  daemon=True)
            container.stopping.start()

    def _remove_finalizer(self, pod: dict[str, Any]) -> None:
        remove_finalizer(self.client, pod, FINALIZER)
