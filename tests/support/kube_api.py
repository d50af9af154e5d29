"""The Kubernetes API server the integration tests talk to (a pytest plugin).

Register it in the root conftest: `pytest_plugins = ["tests.support.kube_api"]`.

- If KUBECONFIG is set when the session starts, the tests use that cluster (kind or any real
  API server) and start nothing.
- Otherwise the session (each xdist worker) starts the test bed's REAL control plane
  (testbed/control_plane.py: etcd, kube-apiserver, kube-controller-manager, kube-scheduler built
  from Go modules by hack/kube/build.sh, which the first session on a machine runs) and stops it
  at the end, also on Ctrl-C and SIGTERM; a run that was killed outright is reaped by the next.
  When a test failed, the control plane's logs are kept in test-artefacts/.

Fixtures:
- `kube_api` (session): a `KubeAPI` -- `kubeconfig`, `client` (a testbed.kube_client.KubeClient),
  `env` (for subprocesses such as `kopf run`), `kubectl(...)`, `create_namespace(...)`,
  `has_kubelets`, `wait_for(...)`, `plane` (the control plane started here, None on a given
  cluster) and `audit` (its API server's audit log, testbed/audit_log.py; None on a given cluster).
- `kube_namespace` (function): a fresh namespace (Pod Security "restricted" enforced, its pods
  scheduled to its own node agent's Nodes), deleted after the test.
- `kubelet` (function): the node agent (testbed/kubelet.py) for `kube_namespace`, started and
  stopped around the test; the test is skipped where real kubelets run pods.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import control_plane
from testbed.audit_log import AuditLog
from testbed.kube_client import KubeAPIError, KubeClient
from testbed.kubelet import FAKE_NODE_LABEL, FakeKubelet
from testbed.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
ARTEFACTS = REPO / 'test-artefacts'


def pytest_report_header(config: pytest.Config) -> str:
    """The session banner names what the suite runs against (every CI log shows it)."""
    if os.environ.get('KUBECONFIG'):
        return f'kubernetes: the cluster of KUBECONFIG={os.environ["KUBECONFIG"]}'
    built = control_plane.built_version()
    if built is None:
        return (f'kubernetes: the test bed control plane {control_plane.KUBE_VERSION} (not built yet: '
                'the first test that needs it builds it, hack/kube/build.sh)')
    return f'kubernetes: kube-apiserver {built}, etcd, controller-manager, scheduler (testbed/control_plane.py)'


@dataclasses.dataclass
class KubeAPI:
    """One API server for the session: the given cluster, or the test bed's control plane."""
    kubeconfig: Path
    client: KubeClient
    workdir: Path
    plane: control_plane.ControlPlane | None = None
    namespaces: list[str] = dataclasses.field(default_factory=list)

    @property
    def audit(self) -> AuditLog | None:
        """The audit log of the test bed's API server (None on a given cluster)."""
        return AuditLog(self.plane.audit_log) if self.plane is not None else None

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses (kubectl, kopf run): this cluster, a private kubectl cache."""
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig), KUBECACHEDIR=str(self.workdir / 'kubectl-cache'))

    @property
    def has_kubelets(self) -> bool:
        """Whether real kubelets run pods here (nodes exist that the fake kubelet did not make)."""
        nodes = self.client.get('/api/v1/nodes')['items']
        return any(FAKE_NODE_LABEL not in (node['metadata'].get('labels') or {}) for node in nodes)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this cluster; skips the test where kubectl is missing."""
        if shutil.which('kubectl') is None:
            pytest.skip('kubectl is not on PATH: the kubectl checks need the real client')
        result = subprocess.run(['kubectl', *args], input=input, capture_output=True, text=True,
                                env=self.env, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f'kubectl {" ".join(args)} failed ({result.returncode}): {result.stderr.strip()}')
        return result

    def create_namespace(self, prefix: str = 'test') -> str:
        """A new namespace with a unique name, ready for pods (its default service account exists)."""
        name = f'{prefix}-{uuid.uuid4().hex[:8]}'
        self.namespaces.append(name)  # listed first: cleaned up even if it never becomes ready
        self.client.create_namespace(name)
        return name

    def delete_namespace(self, name: str) -> None:
        try:
            self.client.delete(f'/api/v1/namespaces/{name}')
        except KubeAPIError as e:
            if e.status != 404:
                raise

    wait_for = staticmethod(wait_for)


@pytest.fixture(scope='session')
def kube_api(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[KubeAPI]:
    workdir = tmp_path_factory.mktemp('kube-api')
    given = os.environ.get('KUBECONFIG')
    if given:  # may be a list of files (a:b), as kubectl and kopf read it
        api = KubeAPI(Path(given), KubeClient(Path(given)), workdir)
        try:
            yield api
        finally:
            for name in api.namespaces:  # not waited for: a real cluster drains them on its own
                api.delete_namespace(name)
        return
    # Short: the state holds UNIX sockets' paths nowhere, but its logs are read by people.
    state = Path(tempfile.mkdtemp(prefix='kube-', dir=workdir))
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM tears down as Ctrl-C does
    try:
        plane = control_plane.start(state)
        yield KubeAPI(plane.kubeconfig, KubeClient(plane.kubeconfig), workdir, plane=plane)
    finally:
        if control_plane.running(state) is not None:  # its peak memory, for the session's summary
            peaks = control_plane.ControlPlane(state, '', '').resident_bytes('VmHWM')
            (tmp_path_factory.getbasetemp() / 'control-plane-peak.json').write_text(json.dumps(peaks))
        if request.session.testsfailed:
            _keep_logs(state)
        control_plane.stop(state)
        signal.signal(signal.SIGTERM, previous)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """One line per control plane the session (its workers) started: its components' peak RSS."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    for found in sorted(base.glob('**/control-plane-peak.json')):
        peaks = json.loads(found.read_text())
        parts = ', '.join(f'{name} {size / 2**20:.0f}' for name, size in peaks.items())
        terminalreporter.write_line(f'control plane ({found.parent.name}): peak RSS {sum(peaks.values()) / 2**20:.0f} MiB '
                                    f'({parts})')


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f'signal {signum}')


def _keep_logs(state: Path) -> None:
    """Copy the control plane's logs and audit log to test-artefacts/ (a test failed)."""
    worker = os.environ.get('PYTEST_XDIST_WORKER', 'main')
    target = ARTEFACTS / f'control-plane-{worker}'
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for log in state.glob('*.log'):
        shutil.copy2(log, target / log.name)


@pytest.fixture
def kube_namespace(kube_api: KubeAPI) -> Iterator[str]:
    name = kube_api.create_namespace()
    yield name
    kube_api.delete_namespace(name)
    kube_api.namespaces.remove(name)


@pytest.fixture
def kubelet(kube_api: KubeAPI, kube_namespace: str) -> Iterator[FakeKubelet]:
    if kube_api.has_kubelets:
        pytest.skip('real kubelets run the pods of this cluster: the fake kubelet cannot drive pod status here')
    with FakeKubelet(kube_api.client, kube_namespace) as fake:
        yield fake
