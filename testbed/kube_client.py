"""A small synchronous client for the Kubernetes API (standard-library HTTP): what the tests,
the fake kubelets and the demo use to read and write objects and to follow watches.

Credentials come from kopf's kubeconfig login, as for the operator, so the client reaches the
same clusters the operator does: the fake API server of testbed/kube_emulator/, kind, or any
real API server.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import kopf

from testbed.waiting import wait_for

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

    def _send(self, method: str, path: str, body: Any, params: dict[str, Any] | None, content_type: str,
              timeout: float) -> tuple[int, bytes]:
        connection = self._connect(timeout)
        try:
            headers = dict(self._headers, Accept='application/json', **{'Content-Type': content_type})
            connection.request(method, self._url(path, params),
                               body=None if body is None else json.dumps(body), headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    @staticmethod
    def _decoded(data: bytes) -> Any:
        try:
            return json.loads(data) if data else None
        except ValueError:
            return data.decode(errors='replace')

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, Any] | None = None,
                content_type: str = 'application/json', timeout: float = 30.0) -> Any:
        """One request; the decoded JSON answer, or KubeAPIError for an error status."""
        status, data = self._send(method, path, body, params, content_type, timeout)
        if status >= 400:
            raise KubeAPIError(status, self._decoded(data))
        return self._decoded(data)

    def pod_log(self, namespace: str, name: str, **params: Any) -> str:
        """A pod's log as text (`container`, `tailLines`, `limitBytes`), or KubeAPIError."""
        status, data = self._send('GET', f'/api/v1/namespaces/{namespace}/pods/{name}/log', None, params,
                                  'application/json', 30.0)
        if status >= 400:
            raise KubeAPIError(status, self._decoded(data))
        return data.decode(errors='replace')

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

    def create_or_replace(self, path: str, obj: dict[str, Any]) -> Any:
        """Create `obj` in the collection at `path`, or replace the object of its name that exists
        there (at that object's resourceVersion): the object is then `obj`, nothing merged."""
        try:
            return self.create(path, obj)
        except KubeAPIError as e:
            if e.status != 409:
                raise
        url = f"{path}/{obj['metadata']['name']}"
        current = self.get(url)
        metadata = dict(obj['metadata'], resourceVersion=current['metadata']['resourceVersion'])
        return self.replace(url, dict(obj, metadata=metadata))

    def create_namespace(self, name: str) -> None:
        """Create namespace `name`; return once it takes pods (its default service account exists:
        a real cluster's controller-manager adds it a moment later, and pods are refused until then)."""
        self.create('/api/v1/namespaces',
                    {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': name}})

        def default_service_account() -> bool:
            try:
                return bool(self.get(f'/api/v1/namespaces/{name}/serviceaccounts/default'))
            except KubeAPIError as e:
                if e.status == 404:
                    return False
                raise
        wait_for(default_service_account, timeout=30, what=f'the default service account of {name}')

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
