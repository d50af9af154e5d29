"""The Kubernetes API server the integration tests talk to (a pytest plugin).

Register it in the root conftest: `pytest_plugins = ["tests.support.kube_api"]`.

- If KUBECONFIG is set when the session starts, the tests use that cluster (kind or any real
  API server) and start nothing.
- Otherwise the session starts the FAKE API server of testbed/kube_emulator/ in a
  background thread, writes a kubeconfig for it into a temp dir, and stops it at the end
  (no thread, port or process left).

Fixtures:
- `kube_api` (session): a `KubeAPI` -- `kubeconfig`, `is_emulator`, `client` (a
  testbed.kube_client.KubeClient), `env` (for subprocesses such as `kopf run`), `kubectl(...)`,
  `create_namespace(...)`, `has_kubelets`, `wait_for(...)`, `authn` (the fake's token checks
  and audit of writes; None on a real cluster), `authz` (the fake's RBAC decisions; None on a
  real cluster).
- `kube_namespace` (function): a fresh namespace, deleted after the test.
- `kubelet` (function): the fake kubelet (testbed/kubelet.py) for `kube_namespace`,
  started and stopped around the test; the test is skipped where real kubelets run pods.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.kube_client import KubeAPIError, KubeClient
from testbed.kube_emulator import EmulatorThread, kubeconfig_text
from testbed.kube_emulator.authn import Authenticator
from testbed.kube_emulator.authz import Authorizer
from testbed.kubelet import FAKE_NODE_LABEL, FakeKubelet
from testbed.waiting import wait_for


@dataclasses.dataclass
class KubeAPI:
    """One API server for the session: the given cluster, or the fake."""
    kubeconfig: Path
    is_emulator: bool
    client: KubeClient
    workdir: Path
    namespaces: list[str] = dataclasses.field(default_factory=list)
    authn: Authenticator | None = None
    authz: Authorizer | None = None

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
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    workdir = tmp_path_factory.mktemp('kube-api')
    given = os.environ.get('KUBECONFIG')
    if given:  # may be a list of files (a:b), as kubectl and kopf read it
        api = KubeAPI(Path(given), False, KubeClient(Path(given)), workdir)
        try:
            yield api
        finally:
            for name in api.namespaces:  # not waited for: a real cluster drains them on its own
                api.delete_namespace(name)
        return
    with EmulatorThread() as emulator:
        kubeconfig = workdir / 'kubeconfig'
        kubeconfig.write_text(kubeconfig_text(emulator.url))
        yield KubeAPI(kubeconfig, True, KubeClient(kubeconfig), workdir, authn=emulator.api.authn,
                      authz=emulator.api.authz)


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
