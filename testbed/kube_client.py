"""The test bed's synchronous client for any Kubernetes API server (the test bed's control plane,
kind, a real cluster): the official `kubernetes` client under a path-based interface. Every answer
is parsed strictly into the official client's model of what was asked for (MalformedAnswer when it
does not fit), so an answer no real API server gives fails the test that asked.
Callers get the API's JSON as the server sent it. Details: README.md, "kube_client.py"."""
from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client.models
import pydantic
import urllib3
from kubernetes import config, watch
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse

from testbed.api_paths import ApiPath
from testbed.waiting import wait_for

PATCH_TYPES = {'merge': 'application/merge-patch+json', 'json': 'application/json-patch+json',
               'strategic': 'application/strategic-merge-patch+json'}
REQUEST_TIMEOUT_SECONDS = 30.0
# The answers of the discovery paths, as the official client's typed calls parse them
# (VersionApi.get_code, CoreApi.get_api_versions, ApisApi.get_api_versions).
# The label of a node agent's Nodes naming the namespace whose pods they run, and the namespace
# annotation the PodNodeSelector admission plugin turns into each pod's node selector.
NODE_NAMESPACE_LABEL = 'testbed.ironicshards.io/namespace'
NODE_SELECTOR_ANNOTATION = 'scheduler.alpha.kubernetes.io/node-selector'
DISCOVERY_MODELS = {'/version': 'VersionInfo', '/api': 'V1APIVersions', '/apis': 'V1APIGroupList'}
# What `kubectl get` asks for: the server's own printing of objects (the official client has no model of it).
TABLE = 'application/json;as=Table;g=meta.k8s.io;v=v1'


# What Pod Security "restricted" asks of every container (the test bed's namespaces enforce it):
# see `restricted_container`.
RESTRICTED_SECURITY_CONTEXT = {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']},
                               'runAsNonRoot': True, 'runAsUser': 65534, 'seccompProfile': {'type': 'RuntimeDefault'}}


def restricted_container(name: str, image: str, **fields: Any) -> dict[str, Any]:
    """A container a namespace enforcing Pod Security "restricted" admits (nobody, no privilege)."""
    return {'name': name, 'image': image, 'securityContext': RESTRICTED_SECURITY_CONTEXT, **fields}


class KubeAPIError(Exception):
    """An API request answered with an error: `status` (HTTP), `reason` (the Status reason)."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body if isinstance(body, dict) else {}
        self.reason = self.body.get('reason', '')
        super().__init__(f'{status} {self.reason}: {self.body.get("message", body)}')

    @classmethod
    def of(cls, error: ApiException) -> 'KubeAPIError':
        """The official client's ApiException (an error status) with its Status body decoded."""
        try:
            body = json.loads(error.body) if error.body else None
        except ValueError:
            body = error.body
        return cls(error.status, body)


class MalformedAnswer(Exception):
    """A successful answer that the official client refuses to parse (not JSON where JSON is due,
    a model's field of the wrong type or missing, a watch line that is no event): the server
    answered as a real API server does not."""


def resource_path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None,
                  subresource: str | None = None) -> str:
    """The URL path of a collection or object: ('v1', 'pods', 'ns', 'p', 'status') ->
    /api/v1/namespaces/ns/pods/p/status."""
    path = f'/api/{api_version}' if '/' not in api_version else f'/apis/{api_version}'
    if namespace:
        path += f'/namespaces/{namespace}'
    return '/'.join([path, plural] + [part for part in (name, subresource) if part])


class WatchStream:
    """The events of one watch request ({'type', 'object'}, the object as the server sent it),
    read by the official client's Watch, until the server ends the stream (timeoutSeconds) or
    close(). An ERROR event ends it with KubeAPIError (e.g. 410 Expired: list again)."""

    def __init__(self, response: RESTResponse, model: str | None) -> None:
        self._response = response.response  # the urllib3 response, its body not read yet
        self._watch = watch.Watch(return_type=model)
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._closed.is_set():
            self._response.close()
            self._response.release_conn()
            return
        # Watch.stream asks a function for the response; this one was opened in watch(), so
        # that a refused watch raises there. timeout_seconds: the stream is never resumed.
        events = self._watch.stream(lambda **_: self._response, timeout_seconds=0)
        try:
            for event in events:
                if not isinstance(event, dict):  # the official Watch yields None for a line that is no JSON
                    raise MalformedAnswer(f'a watch line that is no JSON event: {event!r}')
                yield {'type': event['type'], 'object': event['raw_object']}
        except ApiException as error:  # an ERROR event: Watch raises it with its code and "reason: message"
            if not error.status:  # status 0: the official client's own refusal of what it read
                raise MalformedAnswer(f'the official client refused a watch event: {error.reason}') from error
            reason, _, message = (error.reason or '').partition(': ')
            raise KubeAPIError(error.status, {'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure',
                                              'code': error.status, 'reason': reason, 'message': message}) from None
        except (pydantic.ValidationError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise MalformedAnswer(f'the official client refused a watch event: {error}') from error
        except (urllib3.exceptions.HTTPError, OSError):
            if not self._closed.is_set():
                raise  # a real failure, not our own close()

    def close(self) -> None:
        """End the stream from another thread: the reading loop stops at once."""
        self._closed.set()
        self._watch.stop()
        sock = getattr(getattr(self._response, 'connection', None), 'sock', None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class KubeClient:
    """The official `kubernetes` client behind a small path-based interface, for tests and the fake
    kubelets. Credentials come from `kubeconfig` (a file, or a list of files as $KUBECONFIG holds
    them), its current context, as for kubectl and `kubectl ics`."""

    def __init__(self, kubeconfig: Path | str) -> None:
        self.api: ApiClient = config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)
        self.server: str = self.api.configuration.host
        self._discovered: dict[str, dict[str, dict[str, Any]]] = {}  # group-version -> resource name -> APIResource

    # -- requests, through the official client --------------------------------------------

    def _send(self, method: str, path: str, body: Any, params: dict[str, Any] | None, content_type: str | None,
              timeout: float, accept: str = 'application/json', read: bool = True) -> RESTResponse:
        """One request as the official client sends it; the answer (read unless `read` is false),
        or KubeAPIError for an error status."""
        headers = {'Accept': accept}
        if body is not None:
            headers['Content-Type'] = content_type or 'application/json'
        query = [(key, value) for key, value in (params or {}).items() if value is not None]
        request = self.api.param_serialize(method, path, query_params=query, header_params=headers, body=body,
                                           auth_settings=['BearerToken'])
        response = self.api.call_api(*request, _request_timeout=timeout)
        if read or not 200 <= response.status <= 299:
            response.read()
        try:
            if not 200 <= response.status <= 299:  # raised as the official client raises it (404: NotFoundException)
                ApiException.from_response(http_resp=response, body=None, data=None)
        except ApiException as error:
            raise KubeAPIError.of(error) from None
        return response

    def _parsed(self, response: RESTResponse, model: str) -> Any:
        """The answer's data as the official client parses it into `model` (checking it), and
        as plain JSON for the caller."""
        try:
            self.api.response_deserialize(response, {'2XX': model})
            return self.api.response_deserialize(response, {'2XX': 'object'}).data
        except (pydantic.ValidationError, ValueError, TypeError, KeyError, ApiException) as error:
            # ApiException here has status 0: a content type the official client does not take
            raise MalformedAnswer(f'the official client refused the answer as {model}: {error}') from error

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, Any] | None = None,
                content_type: str = 'application/json', timeout: float = REQUEST_TIMEOUT_SECONDS) -> Any:
        """One request; the JSON answer, checked against the official client's model of it, or
        KubeAPIError for an error status."""
        response = self._send(method, path, body, params, content_type, timeout)
        if not response.data:
            return None
        return self._parsed(response, self._model(method, path, response))

    def pod_log(self, namespace: str, name: str, **params: Any) -> str:
        """A pod's log as text (`container`, `tailLines`, `limitBytes`), or KubeAPIError."""
        response = self._send('GET', f'/api/v1/namespaces/{namespace}/pods/{name}/log', None, params, None,
                              REQUEST_TIMEOUT_SECONDS, accept='application/json')  # as the official client asks:
        # the log comes as text all the same, and `Accept: text/plain` alone is refused (406)
        return self._parsed(response, 'str')  # CoreV1Api.read_namespaced_pod_log's answer

    def get(self, path: str, **params: Any) -> Any:
        return self.request('GET', path, params=params)

    def table(self, path: str, **params: Any) -> Any:
        """The object or collection at `path` as the server prints it for `kubectl get`: a
        meta.k8s.io/v1 Table (`columnDefinitions`, a row of `cells` per object), or KubeAPIError."""
        response = self._send('GET', path, None, params, None, REQUEST_TIMEOUT_SECONDS, accept=TABLE)
        answer = self._parsed(response, 'object')
        if not isinstance(answer, dict) or answer.get('kind') != 'Table':
            raise MalformedAnswer(f'asked for a Table, the answer is no Table: {str(answer)[:200]}')
        return answer

    def exists(self, path: str) -> bool:
        """Whether the object at `path` is there (404: not; any other error is raised)."""
        try:
            self.get(path)
        except KubeAPIError as e:
            if e.status == 404:
                return False
            raise
        return True

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

    def create_namespace(self, name: str, *, pod_security: str = 'restricted') -> None:
        """Create namespace `name`; return once it takes pods (its default service account exists:
        a real cluster's controller-manager adds it a moment later, and pods are refused until then).
        Its pods are admitted by the Pod Security level `pod_security` (enforced) and scheduled only
        to the Nodes of its own node agent (testbed/kubelet.py): the PodNodeSelector admission
        plugin adds the node selector of the annotation to each of its pods."""
        self.create('/api/v1/namespaces', {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {
            'name': name, 'labels': {'pod-security.kubernetes.io/enforce': pod_security},
            'annotations': {NODE_SELECTOR_ANNOTATION: f'{NODE_NAMESPACE_LABEL}={name}'}}})

        def default_service_account() -> bool:
            try:
                return bool(self.get(f'/api/v1/namespaces/{name}/serviceaccounts/default'))
            except KubeAPIError as e:
                if e.status == 404:
                    return False
                raise
        wait_for(default_service_account, timeout=30, what=f'the default service account of {name}')

    def watch(self, path: str, *, timeout_seconds: int = 60, **params: Any) -> WatchStream:
        """Watch the collection at `path` (KubeAPIError at once if the server refuses)."""
        params = dict(params, watch='true', timeoutSeconds=str(timeout_seconds))
        response = self._send('GET', path, None, params, None, timeout_seconds + 15.0, read=False)
        return WatchStream(response, self._model('WATCH', path, None))

    # -- which official model an answer is parsed into ------------------------------------

    def _model(self, method: str, path: str, response: RESTResponse | None) -> str:
        """The official client's model of the answer to `method` on `path` ('WATCH': of one
        watched object); 'object' (plain JSON) where it has none."""
        path = '/' + path.strip('/')
        if path in DISCOVERY_MODELS:
            return DISCOVERY_MODELS[path]
        parts = path.strip('/').split('/')
        if parts[0] == 'apis' and len(parts) == 2:
            return 'V1APIGroup'
        if (parts[0], len(parts)) in (('api', 2), ('apis', 3)):
            return 'V1APIResourceList'
        where = ApiPath.parse(path)
        if where is None:
            return 'object'  # /openapi, /healthz, the fake kubelets' own route
        group_version = f'{where.group}/{where.version}' if where.group else where.version
        name = f'{where.plural}/{where.subresource}' if where.subresource else where.plural
        resource = self._resource(group_version, name)
        if resource is None:
            return 'object'
        # A subresource may serve another group's kind (pods/eviction: policy/v1 Eviction).
        group, version = resource.get('group') or where.group, resource.get('version') or where.version
        kind = resource['kind']
        # A DELETE, and a create through a subresource (pods/binding, pods/eviction), answer the
        # object or a Status: https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-deletion
        if response is not None and (method == 'DELETE' or method == 'POST' and where.subresource) \
                and self._answer_kind(response) == 'Status':
            return 'V1Status'
        if method == 'GET' and where.name is None:
            kind += 'List'
        return self._model_of(group, version, kind)

    @staticmethod
    def _answer_kind(response: RESTResponse) -> Any:
        try:
            answer = json.loads(response.data)
        except ValueError:
            return None
        return answer.get('kind') if isinstance(answer, dict) else None

    @staticmethod
    def _model_of(group: str, version: str, kind: str) -> str:
        """The official model of a built-in kind: V1Pod, or with its API package's name when two
        packages share the kind (CoreV1Event, EventsV1Event); 'object' for custom resources."""
        if '.' in group and not group.endswith('.k8s.io'):
            return 'object'
        package = (group.split('.')[0] or 'core').capitalize()
        for name in (f'{package}{version.capitalize()}{kind}', f'{version.capitalize()}{kind}'):
            if hasattr(kubernetes.client.models, name):
                return name
        return 'object'

    def _resource(self, group_version: str, name: str) -> dict[str, Any] | None:
        """The APIResource `name` (a resource or `resource/subresource`) of `group_version` in the
        server's discovery, read again once when it is not known (a CRD added since)."""
        for fresh in (False, True):
            if fresh or group_version not in self._discovered:
                prefix = '/api/' if '/' not in group_version else '/apis/'
                try:
                    listing = self.get(prefix + group_version)
                except KubeAPIError as e:
                    if e.status == 404:
                        return None
                    raise
                self._discovered[group_version] = {r['name']: r for r in listing['resources']}
            if name in self._discovered[group_version]:
                return self._discovered[group_version][name]
        return None
