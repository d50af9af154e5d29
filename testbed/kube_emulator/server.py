"""The FAKE Kubernetes API server (FakeKubeAPI): kmock's scaffold serving the store (store.py)
as a real kube-apiserver (v1.32) answers, where our operator, kopf, kubectl and helm depend on
it. It routes each request (after authn.py and authz.py) to the reads, writes and deletion
modules, and runs the controllers that act on the store. What it emulates, and what it does
not, is listed in README.md beside it.
"""
import asyncio
import contextlib
import contextvars
import copy
import datetime
import json
import re
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml

from testbed.kube_emulator import discovery, reads, writes
from testbed.kube_emulator.authn import Authenticator, IssuedToken
from testbed.kube_emulator.authz import RBAC_GROUP, Authorizer, bootstrap_policy
from testbed.kube_emulator.deletion import Deletion
from testbed.kube_emulator.disruption import (
    EVICTION_CONDITION, DisruptionController, can_ignore_budgets, eviction_target, selects, take_from_budget)
from testbed.kube_emulator.errors import ApiError, bad_request, unknown_resource
from testbed.kube_emulator.job_controller import JobController, JobStore
from testbed.kube_emulator.patches import APPLY_PATCH
from testbed.kube_emulator.paths import ApiPath, dig
from testbed.kube_emulator.pod_gc import PodGarbageCollector
from testbed.kube_emulator.pod_logs import UPLOAD_ROUTE, PodLogs
from testbed.kube_emulator.protobuf import decode_protobuf
from testbed.kube_emulator.resources import BUILTIN_TYPES, INITIAL_NAMESPACES, ResourceType
from testbed.kube_emulator.store import Store, now_timestamp

JSON = {'Content-Type': 'application/json'}
# kmock keeps every served request for assertions, and routes a request by scanning them all:
# its cost grows with the requests served. This fake keeps only the request being routed (routing
# is synchronous up to the first await, and no reaction here declines a request it matched).
REQUESTS_KEPT = 1
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024  # a real server's limit of a request body
# Set by a request answered 201 outside kmock's CREATE route: a server-side apply that created its
# object (see _apply), an eviction (see _evict).
_ANSWER_CREATED: contextvars.ContextVar[bool] = contextvars.ContextVar('answer_created', default=False)


@attrs.define(kw_only=True)
class FakeKubeAPI(kmock.KubernetesScaffold):
    """A FAKE kube-apiserver: kmock's scaffold plus an in-memory store with real-server semantics
    (its invariants are the store's, store.py)."""
    store: Store = attrs.field(init=False)
    deletion: Deletion = attrs.field(init=False)
    _background: set[asyncio.Task[None]] = attrs.field(factory=set, init=False)
    authn: Authenticator = attrs.field(factory=Authenticator, init=False)
    authz: Authorizer = attrs.field(init=False)
    pod_gc: PodGarbageCollector = attrs.field(init=False)
    disruption: DisruptionController = attrs.field(init=False)
    job_controller: JobController = attrs.field(init=False)
    pod_logs: PodLogs = attrs.field(factory=PodLogs, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()  # kmock's catch-all 404 for unknown URLs
        self.store = Store(on_removed=self._after_removal)
        self.deletion = Deletion(self.store, self._spawn)
        self.authz = Authorizer(self.store.rbac_objects)
        self.pod_gc = PodGarbageCollector(lambda: self.store.all('', 'pods'), lambda: self.store.all('', 'nodes'),
                                          self.deletion.fail_and_force_delete)
        self.disruption = DisruptionController(lambda: self.store.all('policy', 'poddisruptionbudgets'),
                                               lambda: self.store.all('', 'pods'), self._scale_of,
                                               self._status_writer('policy', 'poddisruptionbudgets'))
        self.job_controller = JobController(JobStore(
            version=lambda: self.store.resource_version, jobs=lambda: self.store.all('batch', 'jobs'),
            pods=lambda: self.store.all('', 'pods'), create_pod=self._create_job_pod, delete_pod=self._delete_job_pod,
            remove_finalizer=self.deletion.remove_finalizer_now, write_status=self._status_writer('batch', 'jobs'),
            record_event=self._record_event))
        for rt in BUILTIN_TYPES:
            self.store.types[rt.group, rt.version, rt.plural] = rt
        for name in INITIAL_NAMESPACES:
            writes.create(self.store, self.store.type('', 'v1', 'namespaces'), None, {'metadata': {'name': name}}, {})
        for plural, obj in bootstrap_policy():
            writes.create(self.store, self.store.type(RBAC_GROUP, 'v1', plural), None, obj, {})
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
        (reads.py), so each is answered as a whole response.
        """
        user: IssuedToken | None = None
        try:
            user = self.authn.authenticate(raw_request.headers.get('Authorization'), self.store.uid_of)
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
        rt = self.store.type('', 'v1', 'pods')
        pod = self.store.get(rt, path.namespace, path.name or '')
        text = self.pod_logs.read(pod, dict(raw.query), rt)
        return aiohttp.web.Response(body=text, content_type='text/plain', charset='utf-8')

    async def __aenter__(self) -> 'FakeKubeAPI':
        await super().__aenter__()
        self._spawn(self.pod_gc.run())  # the controllers that run on their own, until close()
        self._spawn(self.disruption.run())
        self._spawn(self.job_controller.run())
        return self

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
        self.store.close()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- discovery (the documents are built by discovery.py) -------------------------------

    async def _serve_version(self) -> dict[str, Any]:
        return discovery.version_info()

    async def _serve_group_list(self) -> dict[str, Any]:
        return discovery.group_list(self.store.types.values())

    async def _serve_group(self, request: kmock.Request) -> dict[str, Any]:
        return discovery.api_group(self.store.types.values(), request.url.path)

    async def _serve_resource_list(self, request: kmock.Request) -> dict[str, Any]:
        return discovery.resource_list(self.store.types.values(), request.url.path)

    async def _serve_openapi_v2(self, request: kmock.Request) -> bytes | dict[str, Any]:
        return discovery.openapi_v2(request.headers.get('Accept', ''))

    async def _serve_openapi_v3_index(self) -> dict[str, Any]:
        return discovery.openapi_v3_index(self.store.types.values())

    async def _serve_openapi_v3(self, request: kmock.Request) -> dict[str, Any]:
        return discovery.openapi_v3(self.store.types.values(), request.url.path)

    # -- resource requests -----------------------------------------------------------------

    async def _serve_resource(self, request: kmock.Request) -> Any:
        path = ApiPath.parse(request.url.path)
        if path is None:
            raise unknown_resource()
        rt = self.store.type(path.group, path.version, path.plural)
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
                return reads.list_page(self.store, rt, namespace, params, request.headers.get('Accept', ''))
            if method == 'POST':
                return writes.create(self.store, rt, namespace, data, params, dry_run=dry_run)
            raise ApiError(405, 'MethodNotAllowed', f'the server does not allow this method on {rt.qualified}', {})
        if method == 'GET':
            obj = self.store.get(rt, namespace, path.name)
            if path.subresource == 'scale':
                return reads.scale_view(rt, obj)
            return reads.table(self.store, rt, [obj], request.headers.get('Accept', '')) or self.store.view(rt, obj)
        if method == 'POST' and path.subresource == 'binding':
            return writes.bind(self.store, rt, namespace, path.name, data)
        if method == 'POST' and path.subresource == 'eviction':
            return self._evict(rt, namespace, path.name, data, params)
        if method == 'POST' and path.subresource == 'token':
            return self.authn.issue(namespace or '', self.store.get(rt, namespace, path.name), data, self.store.uid_of)
        if method in ('PUT', 'PATCH'):
            content_type = request.headers.get('Content-Type', 'application/json').split(';')[0]
            if method == 'PATCH' and content_type == APPLY_PATCH and path.subresource is None:
                return self._apply(rt, namespace, path.name, data, params, dry_run=dry_run)
            return writes.write(self.store, rt, namespace, path.name, path.subresource, method, content_type, data,
                                params, dry_run=dry_run)
        if method == 'DELETE' and path.subresource is None:
            return self.deletion.delete(rt, namespace, path.name, data or {}, params, dry_run=dry_run)
        raise ApiError(405, 'MethodNotAllowed', f'the server does not allow this method on {rt.qualified}', {})

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[bytes | dict[str, Any]]:
        return reads.watch(self.store, request)

    def _apply(self, rt: ResourceType, namespace: str | None, name: str, data: Any, params: dict[str, str],
               *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply (writes.apply); one that created its object is answered 201 by
        __call__: a kmock.Response(status=201) returned here would stay the status of every
        later answer of this reaction (all PATCHes and PUTs turned 201)."""
        obj, created = writes.apply(self.store, rt, namespace, name, data, params, dry_run=dry_run)
        _ANSWER_CREATED.set(created)
        return obj

    # -- evictions and the disruption controller (disruption.py) ---------------------------

    def _evict(self, rt: ResourceType, namespace: str | None, name: str, data: Any,
               params: dict[str, str]) -> dict[str, Any]:
        """POST pods/NAME/eviction: the pod deleted if no budget forbids it (disruption.py)."""
        eviction_target(data, name)
        pod = self.store.get(rt, namespace, name)
        if not can_ignore_budgets(pod):
            budget_type = self.store.type('policy', 'v1', 'poddisruptionbudgets')
            budgets = [b for b in self.store.all('policy', 'poddisruptionbudgets') if selects(b, pod)]
            taken = take_from_budget(pod, budgets, datetime.datetime.now(datetime.UTC))
            if taken is not None:
                self.store.commit(budget_type, 'MODIFIED', dict(budgets[0], status=taken), budgets[0])
            new = copy.deepcopy(pod)
            status = new.setdefault('status', {})
            status['conditions'] = [c for c in status.get('conditions') or [] if c['type'] != 'DisruptionTarget'] + [
                dict(EVICTION_CONDITION, lastProbeTime=None, lastTransitionTime=now_timestamp())]
            pod = self.store.commit(rt, 'MODIFIED', new, pod)
        self.deletion.delete(rt, namespace, name, (data or {}).get('deleteOptions') or {}, params)
        # The controller reacts to the pod's deletion as a real one does to its watch event: the
        # pod leaves disruptedPods (by name: a replacement of the same name must not inherit it).
        self.disruption.sync()
        _ANSWER_CREATED.set(True)
        return {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success', 'code': 201}

    def _scale_of(self, namespace: str, ref: dict[str, Any]) -> int:
        """The scale of a pod's controller (disruption.ScaleOf): a custom resource's, at its
        CRD's specReplicasPath; LookupError when it cannot be read."""
        group, _, version = str(ref.get('apiVersion', '')).rpartition('/')
        rt = next((t for t in self.store.types.values() if (t.group, t.version, t.kind) == (group, version, ref.get('kind'))
                   and t.scale), None)
        owner = self.store.objects.get((rt.group, rt.plural, namespace, ref.get('name', ''))) if rt else None
        if rt is None or owner is None or owner['metadata']['uid'] != ref.get('uid'):
            raise LookupError('')  # found no controllers for the pod
        replicas = dig(owner, rt.scale['specReplicasPath'])
        if not isinstance(replicas, int):  # the scale subresource answers an error then
            raise LookupError(f'{rt.qualified} "{owner["metadata"]["name"]}": no value at '
                              f'{rt.scale["specReplicasPath"]}')
        return replicas

    # -- deletion and garbage collection ---------------------------------------------------

    def _after_removal(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt.kind == 'Pod' and rt.group == '':
            self.pod_logs.forget(obj['metadata']['uid'])
        if rt.kind == 'CustomResourceDefinition' and rt.group == 'apiextensions.k8s.io':
            for key in [k for k, t in self.store.types.items() if t.is_custom and t.store_key == (obj['spec']['group'], obj['spec']['names']['plural'])]:
                del self.store.types[key]
        self._spawn(self.deletion.collect_dependents(obj['metadata']['uid']))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- the Job controller's writes (job_controller.py) -------------------------------------

    def _create_job_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        return writes.create(self.store, self.store.type('', 'v1', 'pods'), namespace, pod, {})

    def _delete_job_pod(self, pod: dict[str, Any]) -> None:
        with contextlib.suppress(ApiError):
            self.deletion.delete(self.store.type('', 'v1', 'pods'), pod['metadata']['namespace'], pod['metadata']['name'],
                                 {'preconditions': {'uid': pod['metadata']['uid']}, 'propagationPolicy': 'Background'}, {})

    def _status_writer(self, group: str, plural: str) -> Callable[[dict[str, Any], dict[str, Any]], None]:
        """A controller's status write of a `group`/`plural` object (the Job controller's, the
        disruption controller's): only while it is the same object, and only when it changes."""
        def write(obj: dict[str, Any], status: dict[str, Any]) -> None:
            meta = obj['metadata']
            current = self.store.objects.get((group, plural, meta['namespace'], meta['name']))
            if current is not None and current['metadata']['uid'] == meta['uid'] and current.get('status') != status:
                rt = self.store.type_of((group, plural))
                self.store.commit(rt, 'MODIFIED', dict(current, status=status), current)
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
            writes.create(self.store, self.store.type('', 'v1', 'events'), meta['namespace'], event, {})
