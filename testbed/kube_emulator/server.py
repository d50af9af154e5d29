"""The FAKE Kubernetes API server itself (FakeKubeAPI): the in-memory store of objects, their
resourceVersions and watch history, the handling of every request, and the controllers that act
on the store. The other modules of this package are its stateless parts (see __init__.py).

It is `kmock` (kmock.KubernetesScaffold served by kmock.Server) plus the smallest additions that
make it answer like a real kube-apiserver (v1.32) where our operator, kopf and kubectl depend on it:

- metadata: uid, creationTimestamp, a global monotonic resourceVersion, generation (CRs and CRDs;
  moves only when something outside metadata and status changes), generateName;
- namespaces that must exist (NamespaceLifecycle), deletion that drains them; cluster-scoped kinds;
- list (List kinds, list resourceVersion, limit/continue) and watch (JSON lines, resourceVersion,
  410 Expired, sendInitialEvents, bookmarks tolerated, timeoutSeconds) with label selectors
  (=, ==, !=, in, notin, exists, !exists) and the field selectors a real server accepts per kind;
- the status subresource (status writes change only .status; main writes never change .status),
  the scale subresource of CRDs (autoscaling/v1 Scale), pods/binding and pods/log (pod_logs.py:
  text/plain, container, tailLines, limitBytes, the errors of a container not started; the fake
  kubelets hand the output in over a test-only route);
- apps/v1 Deployments and policy/v1 PodDisruptionBudgets (workloads.py: defaults, refusals, the
  immutable selector); Deployments are stored only: no Deployment controller, so no ReplicaSets,
  no pods, and their status stays as created;
- the disruption controller (each PodDisruptionBudget's status) and the pods/eviction
  subresource (disruption.py: 429 while a budget allows no disruption, worded as a real one);
- server-side apply (`kubectl apply --server-side`, Helm 4's default) of an object that does not
  exist yet (201) or that already holds every value applied (unchanged), after the request's
  checks (fieldManager, apiVersion, name, managedFields);
- batch/v1 Jobs (jobs.py: the registry's defaults, generated selector and labels, refusals and
  immutable fields) and their controller (job_controller.py: pods from the template with the
  job-tracking finalizer, counts, backoff, BackoffLimitExceeded, DeadlineExceeded, Complete);
  deleting a Job without a propagationPolicy orphans its pods, as batch/v1 does;
- merge patch, JSON patch (with `test`), strategic merge patch for built-in kinds (merge keys taken
  from the real OpenAPI schema shipped with kubernetes-validate), PUT with resourceVersion -> 409;
- DELETE with finalizers, grace periods (bound pods wait for their kubelet), preconditions,
  propagationPolicy Background/Foreground/Orphan and owner-reference garbage collection;
- CRDs: applying one serves its resource (discovery, schema pruning/defaulting/validation and
  its CEL rules via cel-python, status and scale subresources, printer columns); deleting one
  deletes its objects;
- built-in kinds validated against their real schema (kubernetes-validate), unknown fields dropped
  (refused under fieldValidation=Strict, as kubectl asks), the API defaults of pods, the pod-spec
  immutability rule, PriorityClass admission;
- discovery, /version, and just enough /openapi/v2 + /openapi/v3 for kubectl apply/get/scale;
- server-side Table output for `kubectl get` (CRD printer columns; pods READY/STATUS).

What it does not do (answered with a clear error where a client could ask for it):
- server-side apply that would change an existing object (415: no field ownership is kept), protobuf bodies other
  than the Namespace/ConfigMap/Secret that kubectl's `create` generators send and the
  DeleteOptions of a DELETE, deletecollection, the
  `/finalize`, exec/attach/portforward subresources, `follow`/`previous`/`sinceTime`
  of pods/log (400), the Warning header of a Job deleted with the default policy;
- of Jobs: Indexed completion, podFailurePolicy, successPolicy, backoffLimitPerIndex, suspend
  beyond "no new pods", ttlSecondsAfterFinished, adoption by selector; the controller's backoff
  and period are compressed (job_controller.py), like the pod GC's;
- CRD conversion webhooks (all versions share one stored object), messageExpression of CEL rules
  (their message is used), admission webhooks, managedFields, the event TTL, watch bookmarks other
  than the initial-events-end one;
- core v1 Events and events.k8s.io/v1 Events are separate stores here (one store, two views on a
  real server); only the kinds listed in BUILTIN_TYPES (resources.py) are served (of apps/v1 only
  Deployments);
- no controllers but the garbage collector, the namespace and CRD cleanup, the pod garbage
  collector (pod_gc.py: pods of deleted nodes, terminating pods of out-of-service nodes), the
  disruption controller (disruption.py) and the Job controller (job_controller.py): no scheduler, no kubelet (testbed/kubelet.py plays both;
  testbed/process_kubelet.py runs nova-compute and Job pods' nova-manage for real), no node
  lifecycle or taint eviction, no Deployment controller (a `default` ServiceAccount per namespace).

Who may do what, as a real server decides it: a bearer token is checked (authn.py: issued by
TokenRequest, bound to a ServiceAccount) and its holder authorized by RBAC over the stored Roles,
ClusterRoles and bindings (authz.py, with the bootstrap policy a real server creates); a request
without credentials is the cluster administrator's and may do anything.
"""
import asyncio
import base64
import contextvars
import contextlib
import copy
import dataclasses
import datetime
import json
import random
import re
import traceback
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml

from testbed.kube_emulator import discovery, tables
from testbed.kube_emulator.admission import admit, pod_quota_refusal
from testbed.kube_emulator.authn import Authenticator, IssuedToken
from testbed.kube_emulator.authz import RBAC_GROUP, Authorizer, bootstrap_policy
from testbed.kube_emulator.builtin_schema import definition_of
from testbed.kube_emulator.disruption import (
    EVICTION_CONDITION, DisruptionController, can_ignore_budgets, eviction_target, selects, take_from_budget)
from testbed.kube_emulator.errors import (
    ApiError, already_exists, bad_request, conflict, invalid, not_found, status_details, unknown_resource)
from testbed.kube_emulator.patches import (
    APPLY_PATCH, applied_config, contained_in, json_patch, merge_patch, strategic_merge_patch)
from testbed.kube_emulator.paths import ApiPath, LabelSelector, dig, field_selector, matches, set_at
from testbed.kube_emulator.job_controller import JobController, JobStore
from testbed.kube_emulator.pod_gc import PodGarbageCollector
from testbed.kube_emulator.pod_logs import UPLOAD_ROUTE, PodLogs
from testbed.kube_emulator.protobuf import decode_protobuf
from testbed.kube_emulator.resources import (
    BUILTIN_TYPES, CRD_CLEANUP_FINALIZER, INITIAL_NAMESPACES, ResourceType, custom_resource_types)

JSON = {'Content-Type': 'application/json'}
HISTORY_KEPT = 5_000  # watch events kept for resuming watches; older ones answer 410 Expired
# kmock keeps every served request for assertions, and routes a request by scanning them all:
# its cost grows with the requests served. This fake keeps only the request being routed (routing
# is synchronous up to the first await, and no reaction here declines a request it matched).
REQUESTS_KEPT = 1
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024  # a real server's limit of a request body
# Set by a request answered 201 outside kmock's CREATE route: a server-side apply that created its
# object (see _apply), an eviction (see _evict).
_ANSWER_CREATED: contextvars.ContextVar[bool] = contextvars.ContextVar('answer_created', default=False)


def now_timestamp(delay_seconds: float = 0) -> str:
    """Now (plus a delay) as Kubernetes writes timestamps: UTC, whole seconds."""
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=delay_seconds)
    return moment.strftime('%Y-%m-%dT%H:%M:%SZ')


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    """What generation tracks: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ('metadata', 'status', 'apiVersion', 'kind')}


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    resource_version: int
    store_key: tuple[str, str]
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]
    old: dict[str, Any] | None  # the previous state, to see label-selector transitions


@attrs.define(kw_only=True)
class FakeKubeAPI(kmock.KubernetesScaffold):
    """A FAKE kube-apiserver: kmock's scaffold plus an in-memory store with real-server semantics.

    Invariants: every write gets the next global resourceVersion and exactly one watch event;
    stored objects are never mutated in place (watch events and responses can share them);
    an object is removed only when it carries no finalizers.
    """
    _types: dict[tuple[str, str, str], ResourceType] = attrs.field(factory=dict, init=False)
    _objects: dict[tuple[str, str, str, str], dict[str, Any]] = attrs.field(factory=dict, init=False)
    _history: list[WatchEvent] = attrs.field(factory=list, init=False)
    _resource_version: int = attrs.field(default=1, init=False)
    _changed: asyncio.Event = attrs.field(factory=asyncio.Event, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _background: set[asyncio.Task[None]] = attrs.field(factory=set, init=False)
    authn: Authenticator = attrs.field(factory=Authenticator, init=False)
    authz: Authorizer = attrs.field(init=False)
    pod_gc: PodGarbageCollector = attrs.field(init=False)
    disruption: DisruptionController = attrs.field(init=False)
    job_controller: JobController = attrs.field(init=False)
    pod_logs: PodLogs = attrs.field(factory=PodLogs, init=False)
    # The stored RBAC objects by (plural, namespace, name), kept by _commit: authz reads them per request.
    _rbac: dict[tuple[str, str, str], dict[str, Any]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()  # kmock's catch-all 404 for unknown URLs
        self.authz = Authorizer(self._rbac_objects)
        self.pod_gc = PodGarbageCollector(lambda: self._all('', 'pods'), lambda: self._all('', 'nodes'),
                                          self._fail_and_force_delete)
        self.disruption = DisruptionController(lambda: self._all('policy', 'poddisruptionbudgets'),
                                               lambda: self._all('', 'pods'), self._scale_of,
                                               self._status_writer('policy', 'poddisruptionbudgets'))
        self.job_controller = JobController(JobStore(
            version=lambda: self._resource_version, jobs=lambda: self._all('batch', 'jobs'),
            pods=lambda: self._all('', 'pods'), create_pod=self._create_job_pod, delete_pod=self._delete_job_pod,
            remove_finalizer=self._remove_finalizer_now, write_status=self._status_writer('batch', 'jobs'),
            record_event=self._record_event))
        for rt in BUILTIN_TYPES:
            self._types[rt.group, rt.version, rt.plural] = rt
        for name in INITIAL_NAMESPACES:
            self._create(self._type('', 'v1', 'namespaces'), None, {'metadata': {'name': name}}, {})
        for plural, obj in bootstrap_policy():
            self._create(self._type(RBAC_GROUP, 'v1', plural), None, obj, {})
        # Routes, in order: the first matching reaction serves a request.
        self['get', re.compile(r'/(healthz|livez|readyz)')] << b'ok'
        self['get /version'] << self._serve_version
        self['get /api'] << (lambda: {'kind': 'APIVersions', 'versions': ['v1'],
                                      'serverAddressByClientCIDRs': []})
        self['get /apis'] << self._serve_group_list
        self['get', re.compile(r'/api/v1/?|/apis/[^/]+/[^/]+/?')] << self._serve_resource_list
        self['get', re.compile(r'/apis/[^/]+/?')] << self._serve_group
        self['get', re.compile(r'/openapi/v2')] << self._serve_openapi_v2
        self['get', re.compile(r'/openapi/v3/?')] << self._serve_openapi_v3_index
        self['get', re.compile(r'/openapi/v3/.+')] << self._serve_openapi_v3
        self[kmock.action.WATCH] << JSON << self._serve_watch
        self[kmock.action.CREATE] << 201 << self._serve_resource
        self[re.compile(r'/apis?/.+')] << self._serve_resource

    # -- kmock plumbing --------------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Serve one HTTP request, as kmock's RawHandler does, but with our own URL parser.

        kmock 0.8 cannot parse the namespace collection URL (/api/v1/namespaces), and its routing
        slows down with every request it keeps (see REQUESTS_KEPT). Every error that reaches here
        comes before a response started: a watch tells its own errors once it streams
        (_watch_lines), so each is answered as a whole response.
        """
        user: IssuedToken | None = None
        try:
            user = self.authn.authenticate(raw_request.headers.get('Authorization'), self._uid_of)
            self.authz.authorize(user, raw_request.method, raw_request.path, dict(raw_request.query))
            logs = await self._serve_pod_logs(raw_request)
            if logs is not None:
                self.authn.record(user, raw_request.method, raw_request.path_qs, logs.status)
                return logs
            request = await self._parse_request(raw_request)
            self._requests.append(request)
            del self._requests[:-REQUESTS_KEPT]
            for reaction in self._payloads:
                del reaction._requests[:-REQUESTS_KEPT]
            _ANSWER_CREATED.set(False)
            response = await self._handle(request)
            if _ANSWER_CREATED.get():
                response.set_status(201)
        except Exception as e:
            response = await self._render_error(e)
        self.authn.record(user, raw_request.method, raw_request.path_qs, response.status)
        return response

    async def _serve_pod_logs(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.Response | None:
        """A pod's log (GET pods/NAME/log, text/plain) or a fake kubelet handing one in (the
        test-only UPLOAD_ROUTE); None for every other request (see pod_logs.py)."""
        upload = UPLOAD_ROUTE.fullmatch(raw.path)
        if upload is not None and raw.method == 'PUT':
            body = json.loads(await raw.read() or b'{}')
            self.pod_logs.put(upload['uid'], upload['container'], str(body.get('log', '')).encode())
            return aiohttp.web.json_response({})
        path = ApiPath.parse(raw.path)
        if path is None or (path.group, path.plural, path.subresource) != ('', 'pods', 'log') or raw.method != 'GET':
            return None
        rt = self._type('', 'v1', 'pods')
        pod = self._get(rt, path.namespace, path.name or '')
        text = self.pod_logs.read(pod, dict(raw.query), rt)
        return aiohttp.web.Response(body=text, content_type='text/plain', charset='utf-8')

    async def __aenter__(self) -> 'FakeKubeAPI':
        await super().__aenter__()
        self._spawn(self.pod_gc.run())  # the controllers that run on their own, until close()
        self._spawn(self.disruption.run())
        self._spawn(self.job_controller.run())
        return self

    def _rbac_objects(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        """The stored RBAC objects of `plural` in `namespace` ('' : cluster-scoped; None: all)."""
        return [obj for (p, ns, _), obj in self._rbac.items()
                if p == plural and (namespace is None or ns == namespace)]

    def _all(self, group: str, plural: str) -> list[dict[str, Any]]:
        return [obj for (g, p, _, _), obj in list(self._objects.items()) if (g, p) == (group, plural)]

    def _uid_of(self, plural: str, namespace: str, name: str) -> str | None:
        """The uid of a core/v1 object now (None: there is none), for token checks (authn.py)."""
        obj = self._objects.get(('', plural, namespace, name))
        return obj['metadata']['uid'] if obj is not None else None

    async def _parse_request(self, raw: aiohttp.web.BaseRequest) -> kmock.Request:
        # A real server takes bodies up to 3 MiB (MaxRequestBodyBytes); aiohttp's own read()
        # would stop at 1 MiB, before a Secret of 1 MiB + 1 could be refused as too long.
        body = await raw.content.read()
        if len(body) > MAX_REQUEST_BODY_BYTES:
            raise ApiError(413, 'RequestEntityTooLarge',
                           f'Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}', {})
        content_type = raw.headers.get('Content-Type', '')
        data = None
        if body and 'protobuf' in content_type:
            data = decode_protobuf(body)
        elif body:
            try:
                data = yaml.safe_load(body) if 'yaml' in content_type else json.loads(body)
            except (ValueError, yaml.YAMLError) as e:
                raise bad_request(f'the request body is not valid {content_type or "JSON"}: {e}') from e
        path = ApiPath.parse(raw.path)
        query = dict(raw.query)
        action = None
        if path is not None:
            watching = raw.method == 'GET' and query.get('watch') in ('true', '1')
            action = (kmock.action.WATCH if watching else
                      {('GET', False): kmock.action.LIST, ('GET', True): kmock.action.FETCH,
                       ('POST', False): kmock.action.CREATE, ('PATCH', True): kmock.action.UPDATE,
                       ('DELETE', True): kmock.action.DELETE}.get((raw.method, path.name is not None)))
        return kmock.Request(
            raw_request=raw, url=raw.url, method=raw.method, params=query, headers=dict(raw.headers),
            body=body, text=body.decode(errors='replace'), data=data, action=action,
            resource=kmock.resource(path.group, path.version, path.plural) if path else None,
            namespace=path.namespace if path else None, name=path.name if path else None,
            subresource=path.subresource if path else None)

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        if isinstance(exc, ApiError):
            retry_after = (exc.details or {}).get('retryAfterSeconds')  # as responsewriters.ErrorNegotiated
            return aiohttp.web.json_response(exc.status_body(), status=exc.status,
                                             headers={'Retry-After': str(retry_after)} if retry_after else None)
        if isinstance(exc, kmock.KubernetesError):  # kmock's own 404 for unknown URLs
            return aiohttp.web.json_response(unknown_resource().status_body(), status=404)
        return await super()._render_error(exc)

    async def close(self) -> None:
        """End all watch streams and background work, so that the server can stop at once."""
        self._closing = True
        self._notify()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- discovery (the documents are built by discovery.py) -------------------------------

    def _type(self, group: str, version: str, plural: str) -> ResourceType:
        try:
            return self._types[group, version, plural]
        except KeyError:
            raise unknown_resource() from None

    async def _serve_version(self) -> dict[str, Any]:
        return discovery.version_info()

    async def _serve_group_list(self) -> dict[str, Any]:
        return discovery.group_list(self._types.values())

    async def _serve_group(self, request: kmock.Request) -> dict[str, Any]:
        return discovery.api_group(self._types.values(), request.url.path)

    async def _serve_resource_list(self, request: kmock.Request) -> dict[str, Any]:
        return discovery.resource_list(self._types.values(), request.url.path)

    async def _serve_openapi_v2(self, request: kmock.Request) -> bytes | dict[str, Any]:
        return discovery.openapi_v2(request.headers.get('Accept', ''))

    async def _serve_openapi_v3_index(self) -> dict[str, Any]:
        return discovery.openapi_v3_index(self._types.values())

    async def _serve_openapi_v3(self, request: kmock.Request) -> dict[str, Any]:
        return discovery.openapi_v3(self._types.values(), request.url.path)

    # -- resource requests -----------------------------------------------------------------

    async def _serve_resource(self, request: kmock.Request) -> Any:
        path = ApiPath.parse(request.url.path)
        if path is None:
            raise unknown_resource()
        rt = self._type(path.group, path.version, path.plural)
        if path.namespace is not None and not rt.namespaced:
            raise unknown_resource()
        if path.subresource is not None and path.subresource not in rt.subresources:
            raise unknown_resource()
        if path.subresource == 'log':  # a GET is served by _serve_pod_logs
            raise ApiError(405, 'MethodNotAllowed', f'the server does not allow this method on {rt.qualified}/log', {})
        namespace = path.namespace if rt.namespaced else None
        method, params, data = request.method.value, request.params, request.data
        dry_run = 'dryRun' in params
        if path.name is None:
            if method == 'GET':
                return self._list(rt, namespace, params, request.headers.get('Accept', ''))
            if method == 'POST':
                return self._create(rt, namespace, data, params, dry_run=dry_run)
            raise ApiError(405, 'MethodNotAllowed', f'the server does not allow this method on {rt.qualified}', {})
        if method == 'GET':
            obj = self._get(rt, namespace, path.name)
            if path.subresource == 'scale':
                return self._scale_view(rt, obj)
            return self._table(rt, [obj], request.headers.get('Accept', '')) or self._view(rt, obj)
        if method == 'POST' and path.subresource == 'binding':
            return self._bind(rt, namespace, path.name, data)
        if method == 'POST' and path.subresource == 'eviction':
            return self._evict(rt, namespace, path.name, data, params)
        if method == 'POST' and path.subresource == 'token':
            return self.authn.issue(namespace or '', self._get(rt, namespace, path.name), data, self._uid_of)
        if method in ('PUT', 'PATCH'):
            content_type = request.headers.get('Content-Type', 'application/json').split(';')[0]
            if method == 'PATCH' and content_type == APPLY_PATCH and path.subresource is None:
                return self._apply(rt, namespace, path.name, data, params, dry_run=dry_run)
            return self._write(rt, namespace, path.name, path.subresource, method, content_type, data,
                               params, dry_run=dry_run)
        if method == 'DELETE' and path.subresource is None:
            return self._delete(rt, namespace, path.name, data or {}, params, dry_run=dry_run)
        raise ApiError(405, 'MethodNotAllowed', f'the server does not allow this method on {rt.qualified}', {})

    def _view(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """An object as served through one version of its resource."""
        return obj if obj.get('apiVersion') == rt.api_version else dict(obj, apiVersion=rt.api_version)

    def _get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        try:
            return self._objects[rt.group, rt.plural, namespace or '', name]
        except KeyError:
            raise not_found(rt, name) from None

    def _selected(self, rt: ResourceType, namespace: str | None, params: dict[str, str]) -> Iterator[dict[str, Any]]:
        labels = LabelSelector.parse(params.get('labelSelector', ''))
        fields = field_selector(rt, params.get('fieldSelector', ''))
        for (group, plural, ns, _), obj in sorted(self._objects.items()):
            if (group, plural) == rt.store_key and (namespace is None or ns == namespace):
                if matches(obj, labels, fields):
                    yield obj

    def _list(self, rt: ResourceType, namespace: str | None, params: dict[str, str], accept: str) -> dict[str, Any]:
        items = list(self._selected(rt, namespace, params))
        metadata: dict[str, Any] = {'resourceVersion': str(self._resource_version)}
        try:
            start = int(base64.b64decode(params['continue']).decode()) if params.get('continue') else 0
        except ValueError:
            raise ApiError(410, 'Expired', 'the provided continue parameter is too old or malformed', {}) from None
        limit = int(params.get('limit') or 0)
        if limit and start + limit < len(items):
            metadata['continue'] = base64.b64encode(str(start + limit).encode()).decode()
            metadata['remainingItemCount'] = len(items) - start - limit
            items = items[start:start + limit]
        else:
            items = items[start:]
        table = self._table(rt, items, accept, metadata)
        if table is not None:
            return table
        if rt.is_custom:
            served = [self._view(rt, obj) for obj in items]
        else:  # lists of built-in kinds carry no apiVersion/kind per item
            served = [{k: v for k, v in obj.items() if k not in ('apiVersion', 'kind')} for obj in items]
        return {'kind': f'{rt.kind}List', 'apiVersion': rt.api_version, 'metadata': metadata, 'items': served}

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[bytes | dict[str, Any]]:
        """A watch: refused with an error response while nothing is sent (unknown resource, bad
        selector), else a stream of JSON lines of ADDED/MODIFIED/DELETED (+ BOOKMARK, ERROR) events."""
        path = ApiPath.parse(request.url.path)
        if path is None:
            raise unknown_resource()
        rt = self._type(path.group, path.version, path.plural)
        namespace = path.namespace if rt.namespaced else None
        params = dict(request.params)
        if path.name:  # the deprecated per-object watch URL
            params['fieldSelector'] = ','.join(filter(None, [params.get('fieldSelector'), f'metadata.name={path.name}']))
        labels = LabelSelector.parse(params.get('labelSelector', ''))
        fields = field_selector(rt, params.get('fieldSelector', ''))
        timeout = float(params['timeoutSeconds']) if params.get('timeoutSeconds') else None
        return self._watch_lines(self._watch_events(request, rt, namespace, params, labels, fields, timeout))

    @staticmethod
    async def _watch_lines(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes | dict[str, Any]]:
        """What a started watch sends: its headers at once (the stream is open even while nothing
        happens), then `events`. Once the headers are out, a failure can only be told in the stream,
        as a real API server does: a last ERROR event carrying the Status (a bug of this fake: its
        traceback, as kmock writes one)."""
        yield b''
        try:
            async for event in events:
                yield event
        except ApiError as e:
            yield {'type': 'ERROR', 'object': e.status_body()}
        except Exception as e:
            yield ''.join(traceback.format_exception(e)).encode()

    async def _watch_events(self, request: kmock.Request, rt: ResourceType, namespace: str | None,
                            params: dict[str, str], labels: LabelSelector,
                            fields: list[tuple[str, bool, str]],
                            timeout: float | None) -> AsyncIterator[dict[str, Any]]:
        """The events of one watch, from its resourceVersion on, until its timeout or the client leaves."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        since = params.get('resourceVersion') or ''
        if params.get('sendInitialEvents') == 'true' or since in ('', '0'):
            for obj in list(self._selected(rt, namespace, params)):
                yield {'type': 'ADDED', 'object': self._view(rt, obj)}
            cursor = self._resource_version
            if params.get('sendInitialEvents') == 'true' and params.get('allowWatchBookmarks') == 'true':
                yield {'type': 'BOOKMARK', 'object': {
                    'kind': rt.kind, 'apiVersion': rt.api_version,
                    'metadata': {'resourceVersion': str(cursor),
                                 'annotations': {'k8s.io/initial-events-end': 'true'}}}}
        else:
            try:
                cursor = int(since)
            except ValueError:
                raise bad_request(f'invalid resourceVersion {since!r}') from None
            oldest = self._history[0].resource_version if self._history else self._resource_version
            if cursor < oldest - 1:
                yield {'type': 'ERROR', 'object': ApiError(
                    410, 'Expired', f'too old resource version: {cursor} ({oldest - 1})', {}).status_body()}
                return

        while not self._closing:
            changed = self._changed  # taken before reading the history: no event can be missed
            for event in self._events_since(cursor):
                cursor = event.resource_version
                if event.store_key != rt.store_key:
                    continue
                if namespace is not None and event.obj['metadata'].get('namespace') != namespace:
                    continue
                now_in = matches(event.obj, labels, fields)
                was_in = event.old is not None and matches(event.old, labels, fields)
                kind, obj = event.type, event.obj
                if kind == 'MODIFIED' and now_in != was_in:  # entered or left the selection
                    kind, obj = ('ADDED', obj) if now_in else ('DELETED', event.old)
                elif not now_in:
                    continue
                yield {'type': kind, 'object': self._view(rt, obj)}
            transport = request._raw_request.transport if request._raw_request is not None else None
            if transport is None or transport.is_closing():
                return  # the client went away
            remaining = deadline - loop.time() if deadline is not None else 5.0
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=min(remaining, 5.0))

    def _events_since(self, resource_version: int) -> list[WatchEvent]:
        if not self._history:
            return []
        start = resource_version - self._history[0].resource_version + 1
        return self._history[max(start, 0):]

    # -- writes ----------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _commit(self, rt: ResourceType, event_type: str, new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        """Store one change: next resourceVersion, one watch event, waiting watchers woken up."""
        self._resource_version += 1
        new = dict(new, metadata=dict(new['metadata'], resourceVersion=str(self._resource_version)))
        key = (rt.group, rt.plural, new['metadata'].get('namespace') or '', new['metadata']['name'])
        if event_type == 'DELETED':
            self._objects.pop(key, None)
        else:
            self._objects[key] = new
        if rt.group == RBAC_GROUP:
            rbac_key = key[1:]
            if event_type == 'DELETED':
                self._rbac.pop(rbac_key, None)
            else:
                self._rbac[rbac_key] = new
        self._history.append(WatchEvent(self._resource_version, rt.store_key, event_type, new, old))
        if len(self._history) > HISTORY_KEPT:
            del self._history[:HISTORY_KEPT // 2]
        self._notify()
        if event_type == 'DELETED':
            self._after_removal(rt, new)
        return new

    def _create(self, rt: ResourceType, namespace: str | None, data: Any, params: dict[str, str],
                *, dry_run: bool = False) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise bad_request('the body of the request was in an unknown format')
        obj = copy.deepcopy(data)
        meta = obj.setdefault('metadata', {})
        if rt.namespaced:
            if meta.get('namespace') and namespace and meta['namespace'] != namespace:
                raise bad_request('the namespace of the provided object does not match the namespace sent on the request')
            namespace = namespace or meta.get('namespace')
            if not namespace:
                raise bad_request('the namespace of the object is required for a namespaced resource')
            self._check_namespace_open(namespace)
            meta['namespace'] = namespace
        else:
            meta.pop('namespace', None)
        if not meta.get('name') and meta.get('generateName'):
            meta['name'] = meta['generateName'] + ''.join(random.choices('bcdfghjklmnpqrstvwxz2456789', k=5))
        name = meta.get('name')
        if not name:
            raise invalid(rt, '', [('metadata.name', 'Required value: name or generateName is required')])
        if (rt.group, rt.plural, namespace or '', name) in self._objects:
            raise already_exists(rt, name)
        obj['apiVersion'], obj['kind'] = rt.api_version, rt.kind
        for field in ('resourceVersion', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'managedFields'):
            meta.pop(field, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_timestamp())
        if rt.tracks_generation:
            meta['generation'] = 1
        if 'status' in rt.subresources and rt.kind != 'Node':  # a kubelet registers its node with status
            obj.pop('status', None)
        if rt.kind == 'Pod' and rt.group == '':
            self._admit_pod_priority(obj)
        obj = admit(rt, obj, None, params)
        if rt.kind == 'Pod' and rt.group == '':
            self._admit_pod_quota(obj)
        if dry_run:
            return obj
        created = self._commit(rt, 'ADDED', obj, None)
        self._after_creation(rt, created)
        return created

    def _admit_pod_priority(self, pod: dict[str, Any]) -> None:
        """The Priority admission plugin: a pod's priorityClassName must exist; it sets spec.priority."""
        spec = pod.setdefault('spec', {})
        class_name = spec.get('priorityClassName')
        if not class_name:
            return
        priority_class = self._objects.get(('scheduling.k8s.io', 'priorityclasses', '', class_name))
        if priority_class is None:
            raise ApiError(403, 'Forbidden', f'pods "{pod["metadata"]["name"]}" is forbidden: no PriorityClass '
                           f'with name {class_name} was found', status_details(self._type('', 'v1', 'pods'), pod['metadata']['name']))
        spec['priority'] = priority_class.get('value', 0)
        spec.setdefault('preemptionPolicy', priority_class.get('preemptionPolicy', 'PreemptLowerPriority'))

    def _admit_pod_quota(self, pod: dict[str, Any]) -> None:
        """The ResourceQuota admission plugin, on the pods count (admission.pod_quota_refusal)."""
        namespace = pod['metadata']['namespace']
        refusal = pod_quota_refusal(
            pod, [q for q in self._all('', 'resourcequotas') if q['metadata']['namespace'] == namespace],
            [p for p in self._all('', 'pods') if p['metadata']['namespace'] == namespace],
            datetime.datetime.now(datetime.UTC))
        if refusal is not None:
            raise refusal

    def _check_namespace_open(self, namespace: str | None) -> None:
        ns_type = self._type('', 'v1', 'namespaces')
        ns = self._objects.get(('', 'namespaces', '', namespace or ''))
        if ns is None:
            raise not_found(ns_type, namespace or '')
        if ns['metadata'].get('deletionTimestamp'):
            raise ApiError(403, 'Forbidden', f'unable to create new content in namespace {namespace} '
                           f'because it is being terminated', status_details(ns_type, namespace))

    def _write(self, rt: ResourceType, namespace: str | None, name: str, subresource: str | None,
               method: str, content_type: str, data: Any, params: dict[str, str],
               *, dry_run: bool = False) -> dict[str, Any]:
        """PUT or PATCH of an object, its status, or its scale."""
        old = self._get(rt, namespace, name)
        current = self._scale_view(rt, old) if subresource == 'scale' else self._view(rt, old)
        if method == 'PUT':
            if not isinstance(data, dict):
                raise bad_request('the body of the request was in an unknown format')
            wanted = copy.deepcopy(data)
            if not (wanted.get('metadata') or {}).get('resourceVersion') and rt.is_custom and subresource is None:
                raise invalid(rt, name, [('metadata.resourceVersion', 'Invalid value: 0: must be specified for an update')])
        elif content_type == 'application/merge-patch+json':
            wanted = merge_patch(current, data)
        elif content_type == 'application/json-patch+json':
            wanted = json_patch(current, data)
        elif content_type == 'application/strategic-merge-patch+json' and not rt.is_custom:
            schema = definition_of(rt) if subresource != 'scale' else {}
            wanted = strategic_merge_patch(copy.deepcopy(current), data, schema)
        else:
            raise ApiError(415, 'UnsupportedMediaType',
                           f'the body of the request was in an unknown format - accepted media types include: '
                           f'application/json-patch+json, application/merge-patch+json'
                           + ('' if rt.is_custom else ', application/strategic-merge-patch+json'), {})
        if not isinstance(wanted, dict):
            raise bad_request('the patched object is not a JSON object')
        wanted_meta = wanted.get('metadata') or {}
        if wanted_meta.get('name', name) != name:
            raise bad_request(f'the name of the object ({wanted_meta["name"]}) does not match the name on the URL ({name})')
        if wanted_meta.get('uid') and wanted_meta['uid'] != old['metadata']['uid']:
            if method == 'PUT':  # a uid in the body is a precondition of an update...
                raise conflict(rt, name, f'Precondition failed: UID in precondition: {wanted_meta["uid"]}, '
                                         f'UID in object meta: {old["metadata"]["uid"]}')
            raise invalid(rt, name, [('metadata.uid', f'Invalid value: "{wanted_meta["uid"]}": field is immutable')])
        wanted_rv = wanted_meta.get('resourceVersion')
        if wanted_rv and wanted_rv != old['metadata']['resourceVersion']:
            raise conflict(rt, name, 'the object has been modified; please apply your changes to the latest version and try again')

        if subresource == 'scale':
            replicas = (wanted.get('spec') or {}).get('replicas')
            if not isinstance(replicas, int) or replicas < 0:
                raise invalid(rt, name, [('spec.replicas', 'Invalid value: must be a non-negative integer')])
            new = copy.deepcopy(old)
            set_at(new, (rt.scale or {})['specReplicasPath'], replicas)
        elif subresource == 'status':
            new = copy.deepcopy(old)
            if 'status' in wanted:
                new['status'] = wanted['status']
            else:
                new.pop('status', None)
        else:
            new = wanted
            new['metadata'] = self._kept_metadata(rt, old, wanted_meta)
            if 'status' in rt.subresources:
                if 'status' in old:
                    new['status'] = copy.deepcopy(old['status'])
                else:
                    new.pop('status', None)
        new['apiVersion'], new['kind'] = old['apiVersion'], rt.kind
        new['metadata']['resourceVersion'] = old['metadata']['resourceVersion']
        new = admit(rt, new, old, params)
        if rt.tracks_generation and _spec_part(new) != _spec_part(old):
            new['metadata']['generation'] = old['metadata'].get('generation', 1) + 1
        if new == old or dry_run:
            stored = old if new == old else new
        elif (new['metadata'].get('deletionTimestamp') and new['metadata'].get('deletionGracePeriodSeconds') == 0
              and not self._blocking_finalizers(rt, new)):
            stored = self._commit(rt, 'DELETED', new, old)  # the last finalizer is gone
        else:
            stored = self._commit(rt, 'MODIFIED', new, old)
            if rt.kind == 'CustomResourceDefinition' and rt.group == 'apiextensions.k8s.io':
                self._register_crd(stored)
        return self._scale_view(rt, stored) if subresource == 'scale' else self._view(rt, stored)

    def _apply(self, rt: ResourceType, namespace: str | None, name: str, data: Any, params: dict[str, str],
               *, dry_run: bool = False) -> kmock.Response:
        """Server-side apply after the request checks (patches.applied_config): an object that
        does not exist yet is created from the applied configuration, answered 201 as a real
        server does; an existing object that already holds every value applied is answered as it
        is (a real server only adds the manager to managedFields, which this fake does not keep).
        Any other apply to an existing object needs field ownership to merge and to find
        conflicts: refused with 415 rather than merged in some other way."""
        config = applied_config(data, rt.api_version, name, params)
        existing = self._objects.get((rt.group, rt.plural, namespace or '', name))
        if existing is not None and contained_in({k: v for k, v in config.items() if k != 'status'}, existing):
            return self._view(rt, existing)
        if existing is not None:
            raise ApiError(415, 'UnsupportedMediaType',
                           f'server-side apply to an existing object ({rt.qualified} "{name}") is not emulated by this '
                           f'fake API server (it keeps no managedFields); accepted media types include: '
                           f'application/json-patch+json, application/merge-patch+json'
                           + ('' if rt.is_custom else ', application/strategic-merge-patch+json'), {})
        created = self._create(rt, namespace, config, params, dry_run=dry_run)
        # Answered 201 by __call__: a kmock.Response(status=201) returned here would stay the
        # status of every later answer of this reaction (all PATCHes and PUTs turned 201).
        _ANSWER_CREATED.set(True)
        return created

    def _kept_metadata(self, rt: ResourceType, old: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
        """Metadata after a write: system fields stay, finalizers cannot grow on deleting objects."""
        meta = copy.deepcopy(wanted)
        old_meta = old['metadata']
        for field in ('uid', 'creationTimestamp', 'deletionTimestamp', 'deletionGracePeriodSeconds',
                      'generation', 'namespace', 'name'):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        if old_meta.get('deletionTimestamp'):
            added = set(meta.get('finalizers') or []) - set(old_meta.get('finalizers') or [])
            if added:
                raise invalid(rt, old_meta['name'], [('metadata.finalizers', f'Forbidden: no new finalizers can be '
                                                      f'added if the object is being deleted, found new finalizers {sorted(added)}')])
        return meta

    def _scale_view(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        scale = rt.scale or {}
        meta = obj['metadata']
        status: dict[str, Any] = {'replicas': dig(obj, scale.get('statusReplicasPath', '')) or 0}
        if scale.get('labelSelectorPath') and dig(obj, scale['labelSelectorPath']):
            status['selector'] = dig(obj, scale['labelSelectorPath'])
        return {'kind': 'Scale', 'apiVersion': 'autoscaling/v1',
                'metadata': {key: meta[key] for key in ('name', 'namespace', 'uid', 'resourceVersion', 'creationTimestamp') if key in meta},
                'spec': {'replicas': dig(obj, scale['specReplicasPath']) or 0}, 'status': status}

    def _bind(self, rt: ResourceType, namespace: str | None, name: str, data: Any) -> dict[str, Any]:
        """pods/binding: what a scheduler does to put a pod on a node."""
        pod = self._get(rt, namespace, name)
        node = ((data or {}).get('target') or {}).get('name')
        if not node:
            raise invalid(rt, name, [('target.name', 'Required value')])
        if pod['metadata'].get('deletionTimestamp'):
            raise conflict(rt, name, 'pod is being deleted, cannot be assigned to a host')
        if pod['spec'].get('nodeName'):
            raise conflict(rt, name, f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
        new = copy.deepcopy(pod)
        new['spec']['nodeName'] = node
        conditions = [c for c in new.setdefault('status', {}).get('conditions', []) if c['type'] != 'PodScheduled']
        new['status']['conditions'] = conditions + [{'type': 'PodScheduled', 'status': 'True',
                                                     'lastProbeTime': None, 'lastTransitionTime': now_timestamp()}]
        self._commit(rt, 'MODIFIED', new, pod)
        return {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success', 'code': 201}

    # -- evictions and the disruption controller (disruption.py) ---------------------------

    def _evict(self, rt: ResourceType, namespace: str | None, name: str, data: Any,
               params: dict[str, str]) -> dict[str, Any]:
        """POST pods/NAME/eviction: the pod deleted if no budget forbids it (disruption.py)."""
        eviction_target(data, name)
        pod = self._get(rt, namespace, name)
        if not can_ignore_budgets(pod):
            budget_type = self._type('policy', 'v1', 'poddisruptionbudgets')
            budgets = [b for b in self._all('policy', 'poddisruptionbudgets') if selects(b, pod)]
            taken = take_from_budget(pod, budgets, datetime.datetime.now(datetime.UTC))
            if taken is not None:
                self._commit(budget_type, 'MODIFIED', dict(budgets[0], status=taken), budgets[0])
            new = copy.deepcopy(pod)
            status = new.setdefault('status', {})
            status['conditions'] = [c for c in status.get('conditions') or [] if c['type'] != 'DisruptionTarget'] + [
                dict(EVICTION_CONDITION, lastProbeTime=None, lastTransitionTime=now_timestamp())]
            pod = self._commit(rt, 'MODIFIED', new, pod)
        self._delete(rt, namespace, name, (data or {}).get('deleteOptions') or {}, params)
        # The controller reacts to the pod's deletion as a real one does to its watch event: the
        # pod leaves disruptedPods (by name: a replacement of the same name must not inherit it).
        self.disruption.sync()
        _ANSWER_CREATED.set(True)
        return {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success', 'code': 201}

    def _scale_of(self, namespace: str, ref: dict[str, Any]) -> int:
        """The scale of a pod's controller (disruption.ScaleOf): a custom resource's, at its
        CRD's specReplicasPath; LookupError when it cannot be read."""
        group, _, version = str(ref.get('apiVersion', '')).rpartition('/')
        rt = next((t for t in self._types.values() if (t.group, t.version, t.kind) == (group, version, ref.get('kind'))
                   and t.scale), None)
        owner = self._objects.get((rt.group, rt.plural, namespace, ref.get('name', ''))) if rt else None
        if rt is None or owner is None or owner['metadata']['uid'] != ref.get('uid'):
            raise LookupError('')  # found no controllers for the pod
        replicas = dig(owner, rt.scale['specReplicasPath'])
        if not isinstance(replicas, int):  # the scale subresource answers an error then
            raise LookupError(f'{rt.qualified} "{owner["metadata"]["name"]}": no value at '
                              f'{rt.scale["specReplicasPath"]}')
        return replicas

    # -- deletion and garbage collection ---------------------------------------------------

    def _blocking_finalizers(self, rt: ResourceType, obj: dict[str, Any]) -> list[str]:
        blocking = list(obj['metadata'].get('finalizers') or [])
        if rt.kind == 'Namespace':
            blocking += (obj.get('spec') or {}).get('finalizers') or []
        return blocking

    def _delete(self, rt: ResourceType, namespace: str | None, name: str, options: dict[str, Any],
                params: dict[str, str], *, dry_run: bool = False) -> dict[str, Any]:
        """DELETE: at once, or mark (deletionTimestamp) and wait for finalizers or the kubelet."""
        obj = self._get(rt, namespace, name)
        meta = obj['metadata']
        preconditions = options.get('preconditions') or {}
        for field, said in (('uid', 'UID'), ('resourceVersion', 'ResourceVersion')):  # storage.Preconditions.Check
            if preconditions.get(field) and preconditions[field] != meta[field]:
                raise conflict(rt, name, f'Precondition failed: {said} in precondition: {preconditions[field]}, '
                                         f'{said} in object meta: {meta[field]}')
        grace = options.get('gracePeriodSeconds', params.get('gracePeriodSeconds'))
        grace = int(grace) if grace is not None else None
        # batch/v1 Jobs orphan their pods unless asked otherwise (the Job strategy's
        # DefaultGarbageCollectionPolicy; a real server also sends a Warning header then).
        default_policy = 'Orphan' if (rt.group, rt.plural) == ('batch', 'jobs') else 'Background'
        policy = options.get('propagationPolicy') or params.get('propagationPolicy') or default_policy
        if dry_run:
            return obj
        if policy == 'Orphan':
            self._orphan_dependents(meta['uid'])

        if meta.get('deletionTimestamp'):
            # Already being deleted: only a force deletion (grace 0) can shorten the wait.
            if grace != 0 or meta.get('deletionGracePeriodSeconds') == 0:
                return obj
            if not self._blocking_finalizers(rt, obj):
                return self._commit(rt, 'DELETED', obj, obj)
            new = copy.deepcopy(obj)
            new['metadata'].update(deletionTimestamp=now_timestamp(), deletionGracePeriodSeconds=0)
            return self._commit(rt, 'MODIFIED', new, obj)

        finalizers = list(meta.get('finalizers') or [])
        if policy == 'Foreground':
            finalizers.append('foregroundDeletion')
        graceful = False
        if rt.kind == 'Pod' and rt.group == '':
            # A pod on a node waits for its kubelet, unless it never ran or has already ended.
            grace = obj['spec'].get('terminationGracePeriodSeconds', 30) if grace is None else grace
            ended = (obj.get('status') or {}).get('phase') in ('Failed', 'Succeeded')
            graceful = bool(obj['spec'].get('nodeName')) and not ended and grace > 0
        if not graceful and not finalizers and not self._blocking_finalizers(rt, obj):
            return self._commit(rt, 'DELETED', obj, obj)

        new = copy.deepcopy(obj)
        new_meta = new['metadata']
        new_meta['deletionTimestamp'] = now_timestamp(grace if graceful else 0)
        new_meta['deletionGracePeriodSeconds'] = grace if graceful else 0
        if 'generation' in new_meta:
            new_meta['generation'] += 1
        if finalizers:
            new_meta['finalizers'] = finalizers
        if rt.kind == 'Namespace' and rt.group == '':
            new['status'] = dict(new.get('status') or {}, phase='Terminating')
        stored = self._commit(rt, 'MODIFIED', new, obj)
        if rt.kind == 'Namespace' and rt.group == '':
            self._spawn(self._drain_namespace(name))
        if rt.kind == 'CustomResourceDefinition' and rt.group == 'apiextensions.k8s.io':
            self._spawn(self._drain_crd(stored))
        if 'foregroundDeletion' in finalizers:
            self._spawn(self._delete_foreground(rt, stored))
        return stored

    def _after_removal(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt.kind == 'Pod' and rt.group == '':
            self.pod_logs.forget(obj['metadata']['uid'])
        if rt.kind == 'CustomResourceDefinition' and rt.group == 'apiextensions.k8s.io':
            for key in [k for k, t in self._types.items() if t.is_custom and t.store_key == (obj['spec']['group'], obj['spec']['names']['plural'])]:
                del self._types[key]
        self._spawn(self._collect_dependents(obj['metadata']['uid']))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _dependents(self, owner_uid: str) -> list[tuple[ResourceType, dict[str, Any]]]:
        found = []
        for (group, plural, _, _), obj in list(self._objects.items()):
            refs = obj['metadata'].get('ownerReferences') or []
            if any(ref.get('uid') == owner_uid for ref in refs):
                rt = next(t for t in self._types.values() if t.store_key == (group, plural))
                found.append((rt, obj))
        return found

    def _uid_alive(self, uid: str) -> bool:
        return any(obj['metadata']['uid'] == uid for obj in self._objects.values())

    def _without_owner(self, rt: ResourceType, obj: dict[str, Any], owner_uid: str) -> None:
        new = copy.deepcopy(obj)
        refs = [ref for ref in new['metadata']['ownerReferences'] if ref.get('uid') != owner_uid]
        new['metadata']['ownerReferences'] = refs
        if not refs:
            del new['metadata']['ownerReferences']
        self._commit(rt, 'MODIFIED', new, obj)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for rt, obj in self._dependents(owner_uid):
            self._without_owner(rt, obj, owner_uid)

    async def _collect_dependents(self, owner_uid: str) -> None:
        """The garbage collector: dependents of a removed owner go too, unless another owner lives."""
        await asyncio.sleep(0.05)  # a real GC is asynchronous; never rely on it being instant
        for rt, obj in self._dependents(owner_uid):
            meta = obj['metadata']
            others = [ref for ref in meta['ownerReferences'] if ref.get('uid') != owner_uid]
            if any(self._uid_alive(ref.get('uid')) for ref in others):
                self._without_owner(rt, obj, owner_uid)
            elif (rt.group, rt.plural, meta.get('namespace') or '', meta['name']) in self._objects:
                with contextlib.suppress(ApiError):
                    self._delete(rt, meta.get('namespace'), meta['name'], {}, {})

    async def _delete_foreground(self, rt: ResourceType, owner: dict[str, Any]) -> None:
        uid = owner['metadata']['uid']
        for dep_rt, dep in self._dependents(uid):
            with contextlib.suppress(ApiError):
                self._delete(dep_rt, dep['metadata'].get('namespace'), dep['metadata']['name'], {}, {})
        while self._dependents(uid):
            await asyncio.sleep(0.1)
        await self._remove_finalizer(rt, owner, 'foregroundDeletion')

    async def _remove_finalizer(self, rt: ResourceType, obj: dict[str, Any], finalizer: str) -> None:
        meta = obj['metadata']
        key = (rt.group, rt.plural, meta.get('namespace') or '', meta['name'])
        current = self._objects.get(key)
        if current is None or current['metadata']['uid'] != meta['uid']:
            return
        new = copy.deepcopy(current)
        new['metadata']['finalizers'] = [f for f in new['metadata'].get('finalizers') or [] if f != finalizer]
        if rt.kind == 'Namespace':
            new['spec']['finalizers'] = [f for f in new['spec'].get('finalizers') or [] if f != finalizer]
        gone = not self._blocking_finalizers(rt, new)
        self._commit(rt, 'DELETED' if gone else 'MODIFIED', new, current)

    async def _drain_namespace(self, namespace: str) -> None:
        """The namespace controller: delete everything inside, then let the namespace go."""
        ns_type = self._type('', 'v1', 'namespaces')
        asked: set[str] = set()
        while True:
            contents = [(rt, obj) for (g, p, ns, _), obj in list(self._objects.items()) if ns == namespace
                        for rt in [next(t for t in self._types.values() if t.store_key == (g, p))]]
            if not contents:
                break
            for rt, obj in contents:
                if obj['metadata']['uid'] not in asked:
                    asked.add(obj['metadata']['uid'])
                    with contextlib.suppress(ApiError):
                        self._delete(rt, namespace, obj['metadata']['name'], {}, {})
            await asyncio.sleep(0.1)
        ns = self._objects.get(('', 'namespaces', '', namespace))
        if ns is not None:
            await self._remove_finalizer(ns_type, ns, 'kubernetes')

    async def _drain_crd(self, crd: dict[str, Any]) -> None:
        """The CRD cleanup controller: delete all objects of the resource, then the CRD."""
        crd_type = self._type('apiextensions.k8s.io', 'v1', 'customresourcedefinitions')
        store_key = (crd['spec']['group'], crd['spec']['names']['plural'])
        asked: set[str] = set()
        while True:
            contents = [obj for (g, p, _, _), obj in list(self._objects.items()) if (g, p) == store_key]
            if not contents:
                break
            rt = next(t for t in self._types.values() if t.store_key == store_key)
            for obj in contents:
                if obj['metadata']['uid'] not in asked:
                    asked.add(obj['metadata']['uid'])
                    with contextlib.suppress(ApiError):
                        self._delete(rt, obj['metadata'].get('namespace'), obj['metadata']['name'], {}, {})
            await asyncio.sleep(0.1)
        await self._remove_finalizer(crd_type, crd, CRD_CLEANUP_FINALIZER)

    def _fail_and_force_delete(self, pod: dict[str, Any], condition: dict[str, Any] | None) -> None:
        """What the pod garbage collector does to a pod (pod_gc.py): phase Failed (plus `condition`)
        unless it has ended, then a deletion with grace period 0."""
        rt = self._type('', 'v1', 'pods')
        meta = pod['metadata']
        current = self._objects.get(('', 'pods', meta['namespace'], meta['name']))
        if current is None or current['metadata']['uid'] != meta['uid']:
            return
        if (current.get('status') or {}).get('phase') not in ('Succeeded', 'Failed'):
            new = copy.deepcopy(current)
            status = new.setdefault('status', {})
            status['phase'] = 'Failed'
            if condition is not None:
                kept = [c for c in status.get('conditions') or [] if c['type'] != condition['type']]
                status['conditions'] = kept + [condition]
            self._commit(rt, 'MODIFIED', new, current)
        with contextlib.suppress(ApiError):
            self._delete(rt, meta['namespace'], meta['name'], {'gracePeriodSeconds': 0}, {})

    # -- the Job controller's writes (job_controller.py) -------------------------------------

    def _create_job_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        return self._create(self._type('', 'v1', 'pods'), namespace, pod, {})

    def _delete_job_pod(self, pod: dict[str, Any]) -> None:
        with contextlib.suppress(ApiError):
            self._delete(self._type('', 'v1', 'pods'), pod['metadata']['namespace'], pod['metadata']['name'],
                         {'preconditions': {'uid': pod['metadata']['uid']}, 'propagationPolicy': 'Background'}, {})

    def _remove_finalizer_now(self, obj: dict[str, Any], finalizer: str) -> None:
        """A finalizer removed by a controller: the object goes if it was waiting only for that."""
        meta = obj['metadata']
        rt = self._type('', 'v1', 'pods') if obj.get('kind', 'Pod') == 'Pod' else self._type('batch', 'v1', 'jobs')
        current = self._objects.get((rt.group, rt.plural, meta.get('namespace') or '', meta['name']))
        if current is None or current['metadata']['uid'] != meta['uid'] \
                or finalizer not in (current['metadata'].get('finalizers') or []):
            return
        new = copy.deepcopy(current)
        new['metadata']['finalizers'] = [f for f in new['metadata']['finalizers'] if f != finalizer]
        if not new['metadata']['finalizers']:
            del new['metadata']['finalizers']
        gone = new['metadata'].get('deletionTimestamp') and new['metadata'].get('deletionGracePeriodSeconds') == 0 \
            and not self._blocking_finalizers(rt, new)
        self._commit(rt, 'DELETED' if gone else 'MODIFIED', new, current)

    def _status_writer(self, group: str, plural: str) -> Callable[[dict[str, Any], dict[str, Any]], None]:
        """A controller's status write of a `group`/`plural` object (the Job controller's, the
        disruption controller's): only while it is the same object, and only when it changes."""
        def write(obj: dict[str, Any], status: dict[str, Any]) -> None:
            meta = obj['metadata']
            current = self._objects.get((group, plural, meta['namespace'], meta['name']))
            if current is not None and current['metadata']['uid'] == meta['uid'] and current.get('status') != status:
                rt = next(t for t in self._types.values() if t.store_key == (group, plural))
                self._commit(rt, 'MODIFIED', dict(current, status=status), current)
        return write

    def _record_event(self, involved: dict[str, Any], kind: str, reason: str, message: str) -> None:
        """A core/v1 Event about `involved`, as a controller of kube-controller-manager posts it."""
        meta, now = involved['metadata'], now_timestamp()
        event = {'metadata': {'name': f'{meta["name"]}.{uuid.uuid4().hex[:16]}', 'namespace': meta['namespace']},
                 'involvedObject': {'kind': involved.get('kind', 'Job'), 'namespace': meta['namespace'],
                                    'name': meta['name'], 'uid': meta['uid'],
                                    'apiVersion': involved.get('apiVersion', 'batch/v1'),
                                    'resourceVersion': meta.get('resourceVersion', '')},
                 'reason': reason, 'message': message, 'type': kind, 'count': 1,
                 'source': {'component': 'job-controller'}, 'reportingComponent': 'job-controller',
                 'reportingInstance': '', 'firstTimestamp': now, 'lastTimestamp': now}
        with contextlib.suppress(ApiError):  # e.g. the namespace is being deleted
            self._create(self._type('', 'v1', 'events'), meta['namespace'], event, {})

    # -- controllers that react to creations -----------------------------------------------

    def _after_creation(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt.kind == 'Namespace' and rt.group == '':
            sa_type = self._type('', 'v1', 'serviceaccounts')
            self._create(sa_type, obj['metadata']['name'], {'metadata': {'name': 'default'}}, {})
        if rt.kind == 'CustomResourceDefinition' and rt.group == 'apiextensions.k8s.io':
            self._register_crd(obj)

    def _register_crd(self, crd: dict[str, Any]) -> None:
        """What the CRD controllers do: serve the resource, then report it Established."""
        spec = crd['spec']
        store_key = (spec['group'], spec['names']['plural'])
        if crd['metadata'].get('deletionTimestamp'):
            return
        for key in [k for k, t in self._types.items() if t.is_custom and t.store_key == store_key]:
            del self._types[key]
        for rt in custom_resource_types(crd):
            self._types[rt.group, rt.version, rt.plural] = rt
        names = spec['names']
        accepted = {key: names[key] for key in ('plural', 'singular', 'kind', 'listKind', 'shortNames', 'categories') if key in names}
        accepted.setdefault('singular', names['kind'].lower())
        accepted.setdefault('listKind', names['kind'] + 'List')
        now = now_timestamp()
        status = {'acceptedNames': accepted, 'storedVersions': [v['name'] for v in spec['versions'] if v.get('storage')],
                  'conditions': [
                      {'type': 'NamesAccepted', 'status': 'True', 'reason': 'NoConflicts',
                       'message': 'no conflicts found', 'lastTransitionTime': now},
                      {'type': 'Established', 'status': 'True', 'reason': 'InitialNamesAccepted',
                       'message': 'the initial names have been accepted', 'lastTransitionTime': now}]}
        old_conditions = {c['type']: c for c in (crd.get('status') or {}).get('conditions', [])}
        for condition in status['conditions']:  # transition times move only on transitions
            if old_conditions.get(condition['type'], {}).get('status') == condition['status']:
                condition['lastTransitionTime'] = old_conditions[condition['type']]['lastTransitionTime']
        new = copy.deepcopy(crd)
        new['status'] = status
        finalizers = new['metadata'].setdefault('finalizers', [])
        if CRD_CLEANUP_FINALIZER not in finalizers:
            finalizers.append(CRD_CLEANUP_FINALIZER)
        if new != crd:
            self._commit(self._type('apiextensions.k8s.io', 'v1', 'customresourcedefinitions'), 'MODIFIED', new, crd)

    # -- server-side printing for kubectl get ----------------------------------------------

    def _table(self, rt: ResourceType, items: list[dict[str, Any]], accept: str,
               metadata: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """A meta.k8s.io/v1 Table when kubectl asks for one (`Accept: ...;as=Table`)."""
        if 'as=Table' not in accept:
            return None
        return tables.table(rt, items, metadata or {'resourceVersion': str(self._resource_version)})
