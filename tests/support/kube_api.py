"""The Kubernetes API server the integration tests talk to (a pytest plugin).

Register it in the root conftest: `pytest_plugins = ["tests.support.kube_api"]`.

- If KUBECONFIG is set when the session starts, the tests use that cluster (kind or any real
  API server) and start nothing.
- Otherwise the session starts the FAKE API server of tests/support/kube_emulator/ in a
  background thread, writes a kubeconfig for it into a temp dir, and stops it at the end
  (no thread, port or process left).

Fixtures:
- `kube_api` (session): a `KubeAPI` -- `kubeconfig`, `is_emulator`, `client` (plain HTTP),
  `env` (for subprocesses such as `kopf run`), `kubectl(...)`, `create_namespace(...)`,
  `has_kubelets`, `wait_for(...)`.
- `kube_namespace` (function): a fresh namespace, deleted after the test.
- `kubelet` (function): the fake kubelet (tests/support/kubelet.py) for `kube_namespace`,
  started and stopped around the test; the test is skipped where real kubelets run pods.
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import kopf
import pytest

from tests.support.kube_emulator import EmulatorThread, kubeconfig_text

T = TypeVar('T')
FAKE_NODE_LABEL = 'kube-api.tests.ironicshards.io/fake-kubelet'  # nodes made by tests/support/kubelet.py
PATCH_TYPES = {'merge': 'application/merge-patch+json', 'json': 'application/json-patch+json',
               'strategic': 'application/strategic-merge-patch+json'}


class KubeAPIError(Exception):
    """An API request answered with an error: `status` (HTTP), `reason` (the Status reason)."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body if isinstance(body, dict) else {}
        self.reason = self.body.get('reason', '')
        super().__init__(f'{status} {self.reason}: {self.body.get("message", body)}')


def resource_path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None,
                  subresource: str | None = None) -> str:
    """The URL path of a collection or object: ('v1', 'pods', 'ns', 'p', 'status') ->
    /api/v1/namespaces/ns/pods/p/status."""
    path = f'/api/{api_version}' if '/' not in api_version else f'/apis/{api_version}'
    if namespace:
        path += f'/namespaces/{namespace}'
    return '/'.join([path, plural] + [part for part in (name, subresource) if part])


class WatchStream:
    """The events of one watch request, until the server ends it (timeoutSeconds) or close()."""

    def __init__(self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self._connection = connection
        self._response = response

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in self._response:
                if line.strip():
                    yield json.loads(line)
        except (OSError, ValueError, http.client.HTTPException):
            if self._connection.sock is not None:
                raise  # a real failure, not our own close()
        finally:
            self._connection.close()

    def close(self) -> None:
        """End the stream from another thread: the reading loop stops at once."""
        sock = self._connection.sock
        self._connection.sock = None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class KubeClient:
    """A small synchronous client for the Kubernetes API (stdlib HTTP), for tests and the fake
    kubelet. Credentials come from kopf's kubeconfig login, as for the operator."""

    def __init__(self, kubeconfig: Path) -> None:
        with mock.patch.dict(os.environ, {'KUBECONFIG': str(kubeconfig)}):
            info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
        if info is None or not info.server:
            raise ValueError(f'{kubeconfig}: no server in the current context')
        url = urllib.parse.urlsplit(info.server)
        self.server = info.server
        self._https = url.scheme == 'https'
        self._host, self._port = url.hostname or 'localhost', url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip('/')
        self._headers = info.as_http_headers()
        self._ssl: ssl.SSLContext | None = None
        if self._https:
            self._ssl = ssl._create_unverified_context() if info.insecure else info.as_ssl_context()

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _url(self, path: str, params: dict[str, Any] | None) -> str:
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        return f'{self._prefix}{path}' + (f'?{query}' if query else '')

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, Any] | None = None,
                content_type: str = 'application/json', timeout: float = 30.0) -> Any:
        """One request; the decoded JSON answer, or KubeAPIError for an error status."""
        connection = self._connect(timeout)
        try:
            headers = dict(self._headers, Accept='application/json', **{'Content-Type': content_type})
            connection.request(method, self._url(path, params),
                               body=None if body is None else json.dumps(body), headers=headers)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        try:
            payload = json.loads(data) if data else None
        except ValueError:
            payload = data.decode(errors='replace')
        if response.status >= 400:
            raise KubeAPIError(response.status, payload)
        return payload

    def get(self, path: str, **params: Any) -> Any:
        return self.request('GET', path, params=params)

    def create(self, path: str, obj: dict[str, Any], **params: Any) -> Any:
        return self.request('POST', path, obj, params=params)

    def replace(self, path: str, obj: dict[str, Any]) -> Any:
        return self.request('PUT', path, obj)

    def patch(self, path: str, patch: Any, patch_type: str = 'merge') -> Any:
        return self.request('PATCH', path, patch, content_type=PATCH_TYPES[patch_type])

    def delete(self, path: str, **options: Any) -> Any:
        """DELETE with DeleteOptions (gracePeriodSeconds, propagationPolicy, preconditions)."""
        return self.request('DELETE', path, dict(options, kind='DeleteOptions', apiVersion='v1') if options else None)

    def watch(self, path: str, *, timeout_seconds: int = 60, **params: Any) -> WatchStream:
        connection = self._connect(timeout=timeout_seconds + 15)
        params = dict(params, watch='true', timeoutSeconds=str(timeout_seconds))
        connection.request('GET', self._url(path, params), headers=dict(self._headers, Accept='application/json'))
        response = connection.getresponse()
        if response.status >= 400:
            body = response.read()
            connection.close()
            raise KubeAPIError(response.status, json.loads(body) if body.startswith(b'{') else body)
        return WatchStream(connection, response)


# Every wait's timeout is multiplied by this. hack/test.sh sets it to 2 because it runs the
# tests on two workers that share CI's two cores. A timeout only bounds how long a test waits
# for something that must happen. It does not assert speed (the benchmarks in bench/ do that).
DEADLINE_SCALE = float(os.environ.get('TEST_DEADLINE_SCALE') or 1)


def wait_for(check: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.2, what: str = '') -> T:
    """Poll `check` until it returns a truthy value, and return that value; fail after
    `timeout` seconds (times DEADLINE_SCALE)."""
    timeout *= DEADLINE_SCALE
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'not within {timeout:.0f} s: {what or check}')
        time.sleep(interval)


@dataclasses.dataclass
class KubeAPI:
    """One API server for the session: the given cluster, or the fake."""
    kubeconfig: Path
    is_emulator: bool
    client: KubeClient
    workdir: Path
    namespaces: list[str] = dataclasses.field(default_factory=list)

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
        self.client.create('/api/v1/namespaces', {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': name}})
        self.namespaces.append(name)

        def default_service_account() -> bool:
            try:
                return bool(self.client.get(f'/api/v1/namespaces/{name}/serviceaccounts/default'))
            except KubeAPIError as e:
                if e.status == 404:
                    return False
                raise
        # A real cluster's controller-manager adds it a moment later; pods are refused until then.
        wait_for(default_service_account, timeout=30, what=f'the default service account of {name}')
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
        yield KubeAPI(kubeconfig, True, KubeClient(kubeconfig), workdir)


@pytest.fixture
def kube_namespace(kube_api: KubeAPI) -> Iterator[str]:
    name = kube_api.create_namespace()
    yield name
    kube_api.delete_namespace(name)
    kube_api.namespaces.remove(name)


@pytest.fixture
def kubelet(kube_api: KubeAPI, kube_namespace: str) -> Iterator[Any]:
    from tests.support.kubelet import FakeKubelet
    if kube_api.has_kubelets:
        pytest.skip('real kubelets run the pods of this cluster: the fake kubelet cannot drive pod status here')
    with FakeKubelet(kube_api.client, kube_namespace) as fake:
        yield fake
