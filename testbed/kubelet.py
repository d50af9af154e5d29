"""The test bed's node agent: a kubelet without a container runtime, for the real control plane
(testbed/control_plane.py). It registers Nodes, renews their Leases, serves the kubelet API the
API server reads logs from (kubelet_server.py), and writes the status of the pods the real
scheduler binds to its Nodes, as a kubelet does: pods/status, and the last DELETE of a pod being
deleted. Tests steer its pods (not ready, crash loop, failed, the outcome of a run-to-completion
pod) and Nodes (lost: heartbeats stop, the node lifecycle controller does the rest).
Details: README.md, "The node agent"."""
from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from pathlib import Path

from testbed.kube_client import NODE_NAMESPACE_LABEL, KubeAPIError, KubeClient
from testbed.kubelet_server import KubeletServer, LogRefused
from testbed.waiting import wait_for

FAKE_NODE_LABEL = 'kube-api.tests.ironicshards.io/fake-kubelet'  # on every Node this node agent makes
LEASE_SECONDS = 40
# A kubelet renews its Lease every 10 s (a quarter of 40); here every 5 s, so that the node
# lifecycle controller's shortened grace (testbed/control_plane.py) never sees a live Node late.
HEARTBEAT_SECONDS = 5
UNREACHABLE_TAINT = 'node.kubernetes.io/unreachable'
# Every Node of every node agent has this address: its kubelet API listens on 127.0.0.1, each
# agent on its own port (the Node's daemonEndpoints).
NODE_IP = '127.0.0.1'
KUBELET_VERSION = (Path(__file__).resolve().parents[1] / 'hack' / 'kube' / 'KUBE_VERSION').read_text().strip()
LOST_NODE_TIMEOUT_SECONDS = 180.0  # the node lifecycle controller's grace plus its passes, with room


def condition_true(obj: dict[str, Any], kind: str) -> bool:
    """The object's condition `kind` has status "True" (False, Unknown and missing do not)."""
    return any(c.get('type') == kind and c.get('status') == 'True'
               for c in (obj.get('status') or {}).get('conditions') or ())


def pod_ready(pod: dict[str, Any]) -> bool:
    """podutil.IsPodReady: the pod's Ready condition is True (a pod being deleted may still be)."""
    return condition_true(pod, 'Ready')


class PodState(enum.Enum):
    """What the fake kubelet makes of a pod."""
    PENDING = 'Pending'  # bound, containers not started (ContainerCreating)
    READY = 'Ready'  # Running, all containers ready
    NOT_READY = 'NotReady'  # Running, readiness probe failing
    CRASH_LOOP = 'CrashLoopBackOff'  # Running, container restarting
    FAILED = 'Failed'  # terminal: phase Failed
    SUCCEEDED = 'Succeeded'  # terminal: phase Succeeded (a run-to-completion pod's container exited 0)


TERMINAL_STATES = (PodState.FAILED, PodState.SUCCEEDED)
JOB_NAME_LABEL = 'batch.kubernetes.io/job-name'
# The exit code of a container a kubelet stopped with SIGTERM (128 + 15).
STOPPED_EXIT_CODE = 143


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """How the container of a run-to-completion pod ends: its exit code (None: it keeps running
    until `FakeKubelet.finish`) and what it printed."""
    exit_code: int | None = 0
    log: str = ''


def runs_to_completion(pod: dict[str, Any]) -> bool:
    """A pod whose containers are not restarted once they succeed (a Job's pod)."""
    return pod['spec'].get('restartPolicy') in ('Never', 'OnFailure')


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')


def _micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')


def state_of(pod: dict[str, Any]) -> PodState:
    """The state a pod's status shows, in the fake kubelet's terms."""
    status = pod.get('status') or {}
    if status.get('phase') == 'Failed':
        return PodState.FAILED
    if status.get('phase') == 'Succeeded':
        return PodState.SUCCEEDED
    if status.get('phase') != 'Running':
        return PodState.PENDING
    containers = status.get('containerStatuses') or []
    if any(((c.get('state') or {}).get('waiting') or {}).get('reason') == 'CrashLoopBackOff' for c in containers):
        return PodState.CRASH_LOOP
    return PodState.READY if pod_ready(pod) else PodState.NOT_READY


def pod_status(pod: dict[str, Any], state: PodState) -> dict[str, Any]:
    """The status a kubelet would write for `pod` in `state` (transition times kept if unchanged)."""
    now = _now()
    old = pod.get('status') or {}
    old_conditions = {c['type']: c for c in old.get('conditions') or []}
    running = state in (PodState.READY, PodState.NOT_READY, PodState.CRASH_LOOP)
    ready = state == PodState.READY

    def condition(kind: str, value: bool, reason: str | None = None) -> dict[str, Any]:
        status = 'True' if value else 'False'
        previous = old_conditions.get(kind) or {}
        since = previous['lastTransitionTime'] if previous.get('status') == status else now
        result = {'type': kind, 'status': status, 'lastProbeTime': None, 'lastTransitionTime': since}
        if reason and not value:
            result['reason'] = reason
        return result

    old_containers = {c['name']: c for c in old.get('containerStatuses') or []}
    containers = []
    for spec in pod['spec']['containers']:
        previous = old_containers.get(spec['name']) or {}
        digest = hashlib.sha256(f'{pod["metadata"]["uid"]}/{spec["name"]}'.encode()).hexdigest()
        started_at = ((previous.get('state') or {}).get('running') or {}).get('startedAt') or now
        item: dict[str, Any] = {
            'name': spec['name'], 'image': spec['image'], 'imageID': f'fake-kubelet://{spec["image"]}',
            'containerID': f'containerd://{digest}', 'ready': ready, 'started': running and state != PodState.CRASH_LOOP,
            'restartCount': previous.get('restartCount', 0)}
        if state == PodState.PENDING:
            item['state'] = {'waiting': {'reason': 'ContainerCreating'}}
            del item['containerID']
        elif state == PodState.FAILED:
            item['state'] = {'terminated': {'exitCode': 1, 'reason': 'Error', 'startedAt': started_at,
                                            'finishedAt': now, 'containerID': item['containerID']}}
        elif state == PodState.CRASH_LOOP:
            item['restartCount'] += 0 if state_of(pod) == PodState.CRASH_LOOP else 1
            item['state'] = {'waiting': {'reason': 'CrashLoopBackOff',
                                         'message': f'back-off restarting failed container {spec["name"]}'}}
            item['lastState'] = {'terminated': {'exitCode': 1, 'reason': 'Error', 'startedAt': started_at,
                                                'finishedAt': now, 'containerID': item['containerID']}}
        else:
            item['state'] = {'running': {'startedAt': started_at}}
        containers.append(item)

    not_ready = 'ContainersNotReady' if state != PodState.FAILED else 'PodFailed'
    status = {
        'phase': 'Failed' if state == PodState.FAILED else 'Running' if running else 'Pending',
        'conditions': [condition('PodScheduled', True), condition('Initialized', True),
                       condition('ContainersReady', ready, not_ready), condition('Ready', ready, not_ready)],
        'containerStatuses': containers,
        'startTime': old.get('startTime') or now,
        'hostIP': NODE_IP, 'hostIPs': [{'ip': NODE_IP}],
        'qosClass': old.get('qosClass', 'BestEffort'),
    }
    if state == PodState.FAILED:
        status['reason'], status['message'] = 'Error', 'a container exited with an error (fake kubelet)'
    return status


def ended_status(pod: dict[str, Any], exit_code: int) -> dict[str, Any]:
    """The status a kubelet writes when a run-to-completion pod's container exited with
    `exit_code`: phase Succeeded (0, reason Completed) or Failed (reason Error), Ready False."""
    status = pod_status(pod, PodState.FAILED)
    status.pop('reason', None)
    status.pop('message', None)
    why = 'PodCompleted' if exit_code == 0 else 'PodFailed'
    for condition in status['conditions']:
        if condition['type'] in ('Ready', 'ContainersReady'):
            condition['reason'] = why
    for item in status['containerStatuses']:
        item['state']['terminated'].update(exitCode=exit_code, reason='Completed' if exit_code == 0 else 'Error')
    status['phase'] = 'Succeeded' if exit_code == 0 else 'Failed'
    return status


def restarted_status(pod: dict[str, Any], exit_code: int) -> dict[str, Any]:
    """The status after a container of a restartPolicy OnFailure pod exited with `exit_code`
    and was restarted in place: Running again, restartCount + 1, lastState terminated."""
    status = pod_status(pod, PodState.READY)
    now = _now()
    for item in status['containerStatuses']:
        started = item['state']['running']['startedAt']
        item['lastState'] = {'terminated': {'exitCode': exit_code, 'reason': 'Error', 'startedAt': started,
                                            'finishedAt': now, 'containerID': item['containerID']}}
        item['restartCount'] += 1
        item['state'] = {'running': {'startedAt': now}}
    return status


def remove_finalizer(client: KubeClient, pod: dict[str, Any], finalizer: str) -> None:
    """Take `finalizer` (one the caller added) off `pod`, conditional on the version seen; a pod
    gone or changed meanwhile is left as it is (the next look at it tries again)."""
    meta = pod['metadata']
    if finalizer not in (meta.get('finalizers') or []):
        return
    try:
        client.patch(f'/api/v1/namespaces/{meta["namespace"]}/pods/{meta["name"]}', {'metadata': {
            'finalizers': [f for f in meta['finalizers'] if f != finalizer],
            'resourceVersion': meta['resourceVersion']}})
    except KubeAPIError as error:
        if error.status not in (404, 409):
            raise


def confirm_deletion(client: KubeClient, pod: dict[str, Any]) -> None:
    """The kubelet's last word on a pod being deleted, once its containers have ended: DELETE
    with grace period 0 (the object goes once no finalizer is left), conditional on its uid."""
    meta = pod['metadata']
    try:
        client.delete(f'/api/v1/namespaces/{meta["namespace"]}/pods/{meta["name"]}', gracePeriodSeconds=0,
                      preconditions={'uid': meta['uid']})
    except KubeAPIError as e:
        if e.status not in (404, 409):
            raise


class FakeKubelet:
    """The kubelet of `nodes` Nodes that the pods of one namespace are scheduled to (the
    namespace's node selector, testbed/kube_client.py `create_namespace`, names their label).

    By policy, every pod becomes Running and Ready (`default_state`); commands change one pod
    and return once its status is written. Pods keep a commanded state until they are
    replaced: a new pod with the same name starts from the policy again (see `hold`).
    """

    def __init__(self, client: KubeClient, namespace: str, *, nodes: int = 3,
                 default_state: PodState = PodState.READY,
                 runs_elsewhere: Callable[[dict[str, Any]], bool] = lambda pod: False,
                 log_of: Callable[[dict[str, Any], str], str | None] = lambda pod, container: None,
                 deleted_elsewhere: bool = False) -> None:
        """`runs_elsewhere(pod)`: pods whose containers another component runs (the process
        kubelet's): this one only writes the states it is commanded to. `log_of(pod, container)`:
        what that component's container printed (None: what this agent knows, see `set_log`).
        `deleted_elsewhere`: that component also confirms those pods' deletions (once their
        processes ended within the pods' grace); else this one confirms them at once."""
        self.client = client
        self._runs_elsewhere = runs_elsewhere
        self._deleted_elsewhere = deleted_elsewhere
        self._log_elsewhere = log_of
        self.namespace = namespace
        self.default_state = default_state
        self.nodes = [f'node-{namespace}-{i}' for i in range(nodes)]
        self._reachable = {node: True for node in self.nodes}
        self._wanted: dict[str, PodState] = {}  # by pod uid: commanded states
        self._held: set[str] = set()  # pod names kept Pending
        self._pods: dict[str, dict[str, Any]] = {}  # by uid: the latest seen pods
        self._outcomes: dict[str, deque[RunOutcome]] = {}  # by Job name: for its pods not yet seen
        self._runs: dict[str, deque[RunOutcome]] = {}  # by pod uid: what its container does next
        self._logs: dict[str, str] = {}  # by pod uid: what its container printed so far
        self._server = KubeletServer(self._log_of)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._stream: Any = None
        self._threads = [threading.Thread(target=self._watch_pods, name='fake-kubelet-pods', daemon=True),
                         threading.Thread(target=self._heartbeat, name='fake-kubelet-heartbeat', daemon=True)]
        self.errors: list[BaseException] = []  # anything the background threads failed with

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        self._server.start()
        for node in self.nodes:
            self._register_node(node)
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._stream is not None:
            self._stream.close()
        for thread in self._threads:
            thread.join(timeout=30)
        for pod in self._list_pods():  # as the pod GC does for pods on deleted nodes
            if pod['spec'].get('nodeName') in self.nodes:
                self._finish_deletion(pod)
        for node in self.nodes:
            try:
                self.client.delete(f'/api/v1/nodes/{node}')  # its Lease goes with it (owner reference)
            except KubeAPIError as e:
                if e.status != 404:
                    raise
        self._server.stop()
        if self.errors:
            raise RuntimeError(f'the node agent failed: {self.errors[0]!r}') from self.errors[0]

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- commands --------------------------------------------------------------------------

    def fail(self, pod_name: str) -> dict[str, Any]:
        """The pod's container exits with an error: phase Failed, Ready False (terminal)."""
        return self._command(pod_name, PodState.FAILED)

    def not_ready(self, pod_name: str) -> dict[str, Any]:
        """The pod keeps running but its readiness probe fails: Ready False."""
        return self._command(pod_name, PodState.NOT_READY)

    def crash_loop(self, pod_name: str) -> dict[str, Any]:
        """The pod's container keeps crashing: waiting CrashLoopBackOff, restarts counted."""
        return self._command(pod_name, PodState.CRASH_LOOP)

    def ready(self, pod_name: str) -> dict[str, Any]:
        """The pod runs and is Ready (again); also releases a `hold`."""
        with self._lock:
            self._held.discard(pod_name)
        return self._command(pod_name, PodState.READY)

    def run_outcomes(self, job_name: str, *outcomes: RunOutcome) -> None:
        """How the containers of the next pods of Job `job_name` end, one outcome per pod (for a
        restartPolicy OnFailure pod, one per run of its container); after them, exit 0."""
        with self._lock:
            self._outcomes.setdefault(job_name, deque()).extend(outcomes)

    def finish(self, pod_name: str, exit_code: int, log: str = '') -> dict[str, Any]:
        """End the running container of run-to-completion pod `pod_name` (held by an outcome with
        exit_code None) with `exit_code`, having printed `log`."""
        pod = self.client.get(f'/api/v1/namespaces/{self.namespace}/pods/{pod_name}')
        with self._lock:
            self._runs.setdefault(pod['metadata']['uid'], deque()).appendleft(RunOutcome(exit_code, log))
            return self._reconcile(pod) or pod

    def hold(self, pod_name: str) -> None:
        """Pods with this name (now and replacements) stay Pending until `ready(pod_name)`."""
        with self._lock:
            self._held.add(pod_name)

    def reachable(self, node: str) -> bool:
        """Whether `node`'s kubelet is there (see `set_node_reachable`)."""
        with self._lock:
            return self._reachable[node]

    def set_node_reachable(self, node: str, reachable: bool, *, wait: bool = True) -> None:
        """Take a Node's kubelet away (or bring it back), as a lost host or a network partition
        would: its Lease and status are no longer renewed and its pods' statuses no longer
        written; their processes, if any, are the caller's to stop. What follows is the real
        node lifecycle controller's: after its grace the Node turns Unknown, is tainted
        unreachable (NoSchedule and NoExecute) and its pods not Ready. `wait`: return once it
        has (or, when brought back, once the Node is Ready and untainted again)."""
        with self._lock:
            self._reachable[node] = reachable
        if reachable:
            self._write_node_status(node)
            self._renew_lease(node)
            for pod in self._list_pods():
                self._reconcile(pod)
        if not wait:
            return

        def settled() -> bool:
            obj = self.client.get(f'/api/v1/nodes/{node}')
            taints = {(t['key'], t['effect']) for t in obj['spec'].get('taints') or [] if t['key'] == UNREACHABLE_TAINT}
            if reachable:
                return condition_true(obj, 'Ready') and not taints
            marked = all(not pod_ready(p) for p in self._list_pods() if p['spec'].get('nodeName') == node)
            return taints == {(UNREACHABLE_TAINT, 'NoSchedule'), (UNREACHABLE_TAINT, 'NoExecute')} and marked
        wait_for(settled, timeout=LOST_NODE_TIMEOUT_SECONDS, interval=0.5,
                 what=f'the node lifecycle controller to see Node {node} {"back" if reachable else "lost"}')

    def set_log(self, pod_name: str, text: str) -> None:
        """What the container of pod `pod_name` (as it is now) has printed so far."""
        pod = self.client.get(f'/api/v1/namespaces/{self.namespace}/pods/{pod_name}')
        with self._lock:
            self._logs[pod['metadata']['uid']] = text

    def _log_of(self, namespace: str, pod_name: str, container: str) -> str | None:
        """The kubelet API's answer for a container log (kubelet_server.py)."""
        with self._lock:
            pod = next((p for p in self._pods.values() if p['metadata']['name'] == pod_name
                        and p['metadata']['namespace'] == namespace and p['spec'].get('nodeName') in self.nodes
                        ), None)
            if pod is None or container not in [c['name'] for c in pod['spec']['containers']]:
                return None
            if state_of(pod) == PodState.PENDING:
                raise LogRefused(f'container "{container}" in pod "{pod_name}" is waiting to start: ContainerCreating')
            elsewhere = self._log_elsewhere(pod, container) if self._runs_elsewhere(pod) else None
            return elsewhere if elsewhere is not None else self._logs.get(pod['metadata']['uid'], '')

    def _command(self, pod_name: str, state: PodState) -> dict[str, Any]:
        pod = self.client.get(f'/api/v1/namespaces/{self.namespace}/pods/{pod_name}')
        if state_of(pod) in TERMINAL_STATES and state != state_of(pod):
            raise ValueError(f'pod {pod_name} has ended: an ended pod never runs again, it is replaced')
        with self._lock:
            self._wanted[pod['metadata']['uid']] = state
            return self._reconcile(pod) or pod

    # -- the kubelet's work ----------------------------------------------------------------

    def _list_pods(self) -> list[dict[str, Any]]:
        return self.client.get(f'/api/v1/namespaces/{self.namespace}/pods')['items']

    def _watch_pods(self) -> None:
        """List, then watch from the list's resourceVersion; relist when it has expired."""
        try:
            while not self._stopping.is_set():
                listing = self.client.get(f'/api/v1/namespaces/{self.namespace}/pods')
                for pod in listing['items']:
                    self._reconcile(pod)
                since = listing['metadata']['resourceVersion']
                while since and not self._stopping.is_set():
                    self._stream = self.client.watch(f'/api/v1/namespaces/{self.namespace}/pods',
                                                     timeout_seconds=60, resourceVersion=since)
                    if self._stopping.is_set():
                        self._stream.close()
                    try:
                        for event in self._stream:
                            since = event['object']['metadata']['resourceVersion']
                            if event['type'] == 'DELETED':
                                with self._lock:
                                    uid = event['object']['metadata']['uid']
                                    for known in (self._pods, self._wanted, self._runs, self._logs):
                                        known.pop(uid, None)
                            elif event['type'] in ('ADDED', 'MODIFIED'):
                                self._reconcile(event['object'])
                    except KubeAPIError as e:  # the stream's ERROR event
                        if e.status != 410:
                            raise
                        since = ''  # 410 Expired: start over with a new list
        except BaseException as e:  # reported by stop()
            if not self._stopping.is_set():
                self.errors.append(e)

    def _reconcile(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """Bring one pod to the state the policy or a command wants; the written pod, if any."""
        with self._lock:
            meta, spec = pod['metadata'], pod['spec']
            self._pods[meta['uid']] = pod
            node = spec.get('nodeName') or None
            if node is not None and (node not in self.nodes or not self._reachable[node]):
                return None  # another kubelet's pod, or this node's kubelet is gone
            if meta.get('deletionTimestamp'):
                if node is not None:
                    self._finish_deletion(pod)
                return None
            if node is None:
                return None  # the scheduler has not bound it yet
            wanted = self._wanted.get(meta['uid'])
            if wanted is None:
                wanted = PodState.PENDING if meta['name'] in self._held else self.default_state
            current = state_of(pod)
            if current in TERMINAL_STATES:
                return None
            if runs_to_completion(pod) and not self._runs_elsewhere(pod) and meta['name'] not in self._held \
                    and meta['uid'] not in self._wanted:
                return self._run_to_completion(pod, current)
            if current == wanted:
                return None
            return self._patch_status(pod, pod_status(pod, wanted))

    def _run_to_completion(self, pod: dict[str, Any], current: PodState) -> dict[str, Any] | None:
        """Start the container (Running), then end it as its next RunOutcome says."""
        uid = pod['metadata']['uid']
        if current != PodState.READY:
            return self._patch_status(pod, pod_status(pod, PodState.READY))
        runs = self._runs.get(uid)
        if runs is None:
            job = (pod['metadata'].get('labels') or {}).get(JOB_NAME_LABEL, '')
            queued = self._outcomes.get(job)
            runs = self._runs[uid] = deque([queued.popleft()] if queued else [])
        outcome = runs[0] if runs else RunOutcome()
        if outcome.exit_code is None:
            return None  # keeps running until finish()
        if runs:
            runs.popleft()
        self._logs[uid] = self._logs.get(uid, '') + outcome.log
        if outcome.exit_code != 0 and pod['spec'].get('restartPolicy') == 'OnFailure':
            job = (pod['metadata'].get('labels') or {}).get(JOB_NAME_LABEL, '')
            queued = self._outcomes.get(job)
            if queued and not runs:
                runs.append(queued.popleft())
            return self._patch_status(pod, restarted_status(pod, outcome.exit_code))
        return self._patch_status(pod, ended_status(pod, outcome.exit_code))

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        path = f'/api/v1/namespaces/{self.namespace}/pods/{pod["metadata"]["name"]}/status'
        patch = {'metadata': {'uid': pod['metadata']['uid']}, 'status': status}
        try:
            return self.client.patch(path, patch)  # the uid makes it fail on a replacement pod
        except KubeAPIError as e:
            if e.status == 404 or (e.status == 422 and self._replaced(pod)):
                return None
            raise

    def _replaced(self, pod: dict[str, Any]) -> bool:
        try:
            current = self.client.get(f'/api/v1/namespaces/{self.namespace}/pods/{pod["metadata"]["name"]}')
        except KubeAPIError as e:
            if e.status == 404:
                return True
            raise
        return current['metadata']['uid'] != pod['metadata']['uid']

    def _finish_deletion(self, pod: dict[str, Any]) -> None:
        """Stop the pod's containers and let its object go, as a kubelet does: a pod that had
        not ended gets its terminal phase first (Failed, the container ended by SIGTERM: exit
        143; kubelets do so since Kubernetes 1.27, which the Job controller's podReplacementPolicy
        Failed and job tracking rely on), then the deletion is confirmed (grace period 0). Its
        containers are no processes: they end on SIGTERM at once, so no grace is waited out. A
        pod whose containers run elsewhere ends as that component says; with `deleted_elsewhere`
        (the process kubelet) it also confirms the deletion, once it stopped them within the
        pod's grace (confirming it here would cut the grace the pod carries,
        metadata.deletionGracePeriodSeconds, to 0)."""
        elsewhere = self._runs_elsewhere(pod)
        if elsewhere and self._deleted_elsewhere:
            return
        if state_of(pod) not in TERMINAL_STATES and pod.get('status', {}).get('containerStatuses') \
                and not elsewhere:  # (whoever runs its containers says when they ended)
            self._patch_status(pod, ended_status(pod, STOPPED_EXIT_CODE))
        confirm_deletion(self.client, pod)

    # -- nodes -----------------------------------------------------------------------------

    def _register_node(self, node: str) -> None:
        """Register the Node as a kubelet does, labelled with its host name and zone (one zone a
        Node: spread rules over zones mean something) and the namespace whose pods it takes."""
        labels = {'kubernetes.io/hostname': node, 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64',
                  'topology.kubernetes.io/zone': f'zone-{node.rsplit("-", 1)[-1]}',
                  NODE_NAMESPACE_LABEL: self.namespace, FAKE_NODE_LABEL: 'true'}
        body = {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': node, 'labels': labels}, 'spec': {}}
        try:
            self.client.create('/api/v1/nodes', body)
        except KubeAPIError as e:
            existing = self.client.get(f'/api/v1/nodes/{node}') if e.status == 409 else {}
            if FAKE_NODE_LABEL not in (existing.get('metadata', {}).get('labels') or {}):
                raise
        self._write_node_status(node)
        self._renew_lease(node)

    def _write_node_status(self, node: str) -> None:
        now = _now()
        ready = self._reachable[node]
        conditions = [{'type': kind, 'status': 'False', 'reason': f'KubeletHas{reason}', 'message': f'fake kubelet has {reason}',
                       'lastHeartbeatTime': now, 'lastTransitionTime': now}
                      for kind, reason in (('MemoryPressure', 'SufficientMemory'), ('DiskPressure', 'NoDiskPressure'),
                                           ('PIDPressure', 'SufficientPID'))]
        conditions.append({'type': 'Ready', 'status': 'True' if ready else 'Unknown',
                           'reason': 'KubeletReady' if ready else 'NodeStatusUnknown',
                           'message': 'fake kubelet is posting ready status' if ready else 'Kubelet stopped posting node status.',
                           'lastHeartbeatTime': now, 'lastTransitionTime': now})
        capacity = {'cpu': '8', 'memory': '32Gi', 'pods': '110'}
        info = {key: 'fake' for key in ('machineID', 'systemUUID', 'bootID', 'kernelVersion', 'osImage')}
        info.update(containerRuntimeVersion='testbed://1.0', kubeletVersion=KUBELET_VERSION,
                    kubeProxyVersion=KUBELET_VERSION, operatingSystem='linux', architecture='amd64')
        status = {'conditions': conditions, 'capacity': capacity, 'allocatable': capacity, 'nodeInfo': info,
                  'addresses': [{'type': 'InternalIP', 'address': NODE_IP}, {'type': 'Hostname', 'address': node}],
                  'daemonEndpoints': {'kubeletEndpoint': {'Port': self._server.port}}}
        self.client.patch(f'/api/v1/nodes/{node}/status', {'status': status})

    def _renew_lease(self, node: str) -> None:
        path = f'/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}'
        spec = {'holderIdentity': node, 'leaseDurationSeconds': LEASE_SECONDS, 'renewTime': _micro_now()}
        try:
            self.client.patch(path, {'spec': spec})
        except KubeAPIError as e:
            if e.status != 404:
                raise
            owner = self.client.get(f'/api/v1/nodes/{node}')
            lease = {'apiVersion': 'coordination.k8s.io/v1', 'kind': 'Lease', 'spec': spec, 'metadata': {
                'name': node, 'ownerReferences': [{'apiVersion': 'v1', 'kind': 'Node', 'name': node,
                                                   'uid': owner['metadata']['uid']}]}}
            self.client.create('/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', lease)

    def _heartbeat(self) -> None:
        try:
            while not self._stopping.wait(HEARTBEAT_SECONDS):
                for node in self.nodes:
                    if self._reachable[node]:
                        self._renew_lease(node)
        except BaseException as e:
            if not self._stopping.is_set():
                self.errors.append(e)
