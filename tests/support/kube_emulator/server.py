"""A FAKE Kubernetes API server, for tests and the local demo where no real cluster exists.

It is `kmock` (kmock.KubernetesScaffold served by kmock.Server) plus the smallest additions that
make it answer like a real kube-apiserver (v1.32) where our operator, kopf and kubectl depend on it:

- metadata: uid, creationTimestamp, a global monotonic resourceVersion, generation (CRs and CRDs;
  moves only when something outside metadata and status changes), generateName;
- namespaces that must exist (NamespaceLifecycle), deletion that drains them; cluster-scoped kinds;
- list (List kinds, list resourceVersion, limit/continue) and watch (JSON lines, resourceVersion,
  410 Expired, sendInitialEvents, bookmarks tolerated, timeoutSeconds) with label selectors
  (=, ==, !=, in, notin, exists, !exists) and the field selectors a real server accepts per kind;
- the status subresource (status writes change only .status; main writes never change .status),
  the scale subresource of CRDs (autoscaling/v1 Scale) and pods/binding;
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
- server-side apply (`kubectl apply --server-side`: 415), protobuf bodies other than the
  Namespace/ConfigMap/Secret that kubectl's `create` generators send, deletecollection, the
  `/finalize`, eviction, exec/log/attach/portforward subresources;
- CRD conversion webhooks (all versions share one stored object), messageExpression of CEL rules
  (their message is used), admission webhooks, RBAC and authentication (anyone may do anything),
  managedFields, the event TTL, watch bookmarks other than the initial-events-end one;
- core v1 Events and events.k8s.io/v1 Events are separate stores here (one store, two views on a
  real server); only the kinds listed in BUILTIN_TYPES are served (no apps/v1, no RBAC kinds);
- no controllers but the garbage collector and the namespace and CRD cleanup: no scheduler, no
  kubelet (tests/support/kubelet.py plays both), no node lifecycle or taint eviction, no
  Deployments/ReplicaSets, no service accounts tokens (a `default` ServiceAccount per namespace).
"""
import asyncio
import base64
import contextlib
import copy
import dataclasses
import datetime
import functools
import hashlib
import importlib.resources
import json
import random
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp.web
import attrs
import celpy
import jsonschema
import kmock
import referencing
import yaml
from kmock._internal.rendering import StreamingError  # not re-exported by kmock 0.8

KUBERNETES_VERSION = '1.32'
JSON = {'Content-Type': 'application/json'}
HISTORY_KEPT = 5_000  # watch events kept for resuming watches; older ones answer 410 Expired
# kmock keeps every served request for assertions, and routes a request by scanning them all:
# its cost grows with the requests served. This fake keeps only the request being routed (routing
# is synchronous up to the first await, and no reaction here declines a request it matched).
REQUESTS_KEPT = 1


class ApiError(kmock.KubernetesError):
    """A failure answered as a Kubernetes `Status` object, exactly as a real server shapes it."""

    def status_body(self) -> dict[str, Any]:
        return {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
                'message': self.message, 'reason': self.reason, 'details': self.details or {},
                'code': self.status}


def _details(rt: 'ResourceType | None', name: str | None) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details['name'] = name
    if rt is not None:
        details['kind'] = rt.plural
        if rt.group:
            details['group'] = rt.group
    return details


def not_found(rt: 'ResourceType', name: str) -> ApiError:
    return ApiError(404, 'NotFound', f'{rt.qualified} "{name}" not found', _details(rt, name))


def already_exists(rt: 'ResourceType', name: str) -> ApiError:
    return ApiError(409, 'AlreadyExists', f'{rt.qualified} "{name}" already exists', _details(rt, name))


def conflict(rt: 'ResourceType', name: str, why: str) -> ApiError:
    return ApiError(409, 'Conflict', f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
                    _details(rt, name))


def invalid(rt: 'ResourceType', name: str, causes: list[tuple[str, str]]) -> ApiError:
    text = ', '.join(f'{field}: {message}' for field, message in causes)
    details = dict(_details(rt, name), kind=rt.kind, causes=[{'field': f, 'message': m} for f, m in causes])
    kind = f'{rt.kind}.{rt.group}' if rt.group else rt.kind
    return ApiError(422, 'Invalid', f'{kind} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, 'BadRequest', message, {})


def unprocessable(message: str) -> ApiError:
    return ApiError(422, 'UnprocessableEntity', message, {})


def unknown_resource() -> ApiError:
    return ApiError(404, 'NotFound', 'the server could not find the requested resource', {})


def now_timestamp(delay_seconds: float = 0) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=delay_seconds)
    return moment.strftime('%Y-%m-%dT%H:%M:%SZ')


# --------------------------------------------------------------------------------------------
# Resource types
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ResourceType:
    """One served group/version/plural and everything needed to serve it like a real server."""
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()  # of 'status', 'scale', 'binding'
    scale: dict[str, str] | None = None  # a CRD's subresources.scale (the replicas paths)
    schema: dict[str, Any] | None = None  # a CRD's openAPIV3Schema; None for built-in kinds
    printer_columns: tuple[dict[str, Any], ...] = ()
    field_selectors: tuple[str, ...] = ()  # beyond metadata.name and metadata.namespace
    tracks_generation: bool = False
    validator: Any = dataclasses.field(default=None, compare=False, repr=False)  # of `schema`, built once

    @property
    def api_version(self) -> str:
        return f'{self.group}/{self.version}' if self.group else self.version

    @property
    def qualified(self) -> str:
        """How a real server names the resource in messages: `pods`, `leases.coordination.k8s.io`."""
        return f'{self.plural}.{self.group}' if self.group else self.plural

    @property
    def store_key(self) -> tuple[str, str]:
        """All versions of one group/plural share their objects (CRD conversion strategy None)."""
        return self.group, self.plural

    @property
    def is_custom(self) -> bool:
        return self.schema is not None


def _builtin(group: str, version: str, plural: str, kind: str, **kwargs: Any) -> ResourceType:
    kwargs['subresources'] = frozenset(kwargs.get('subresources', ()))
    return ResourceType(group, version, plural, kind, **kwargs)


BUILTIN_TYPES = (
    _builtin('', 'v1', 'namespaces', 'Namespace', namespaced=False, short_names=('ns',),
             subresources={'status'}, field_selectors=('status.phase',)),
    _builtin('', 'v1', 'nodes', 'Node', namespaced=False, short_names=('no',),
             subresources={'status'}, field_selectors=('spec.unschedulable',)),
    _builtin('', 'v1', 'pods', 'Pod', short_names=('po',), categories=('all',),
             subresources={'status', 'binding'},
             field_selectors=('spec.nodeName', 'spec.restartPolicy', 'spec.schedulerName',
                              'spec.serviceAccountName', 'status.phase', 'status.podIP',
                              'status.nominatedNodeName')),
    _builtin('', 'v1', 'configmaps', 'ConfigMap', short_names=('cm',)),
    _builtin('', 'v1', 'secrets', 'Secret', field_selectors=('type',)),
    _builtin('', 'v1', 'serviceaccounts', 'ServiceAccount', short_names=('sa',)),
    _builtin('', 'v1', 'services', 'Service', short_names=('svc',), categories=('all',),
             subresources={'status'}),
    _builtin('', 'v1', 'events', 'Event', short_names=('ev',),
             field_selectors=('involvedObject.kind', 'involvedObject.namespace', 'involvedObject.name',
                              'involvedObject.uid', 'involvedObject.apiVersion',
                              'involvedObject.resourceVersion', 'involvedObject.fieldPath',
                              'reason', 'reportingComponent', 'source', 'type')),
    _builtin('coordination.k8s.io', 'v1', 'leases', 'Lease'),
    _builtin('scheduling.k8s.io', 'v1', 'priorityclasses', 'PriorityClass', namespaced=False, short_names=('pc',)),
    _builtin('events.k8s.io', 'v1', 'events', 'Event', short_names=('ev',)),
    _builtin('apiextensions.k8s.io', 'v1', 'customresourcedefinitions', 'CustomResourceDefinition',
             namespaced=False, short_names=('crd', 'crds'), categories=('api-extensions',),
             subresources={'status'}, tracks_generation=True),
)
INITIAL_NAMESPACES = ('default', 'kube-system', 'kube-public', 'kube-node-lease')
CRD_CLEANUP_FINALIZER = 'customresourcecleanup.apiextensions.k8s.io'
VERBS = ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch']


def custom_resource_types(crd: dict[str, Any]) -> list[ResourceType]:
    """The resource types a CRD serves: one per served version."""
    spec = crd['spec']
    names = spec['names']
    types = []
    for version in spec['versions']:
        if not version.get('served', True):
            continue
        subresources = version.get('subresources') or {}
        schema = (version.get('schema') or {}).get('openAPIV3Schema') or {'type': 'object'}
        types.append(ResourceType(
            group=spec['group'], version=version['name'], plural=names['plural'], kind=names['kind'],
            namespaced=spec.get('scope', 'Namespaced') == 'Namespaced',
            short_names=tuple(names.get('shortNames', ())),
            categories=tuple(names.get('categories', ())),
            subresources=frozenset(key for key in ('status', 'scale') if key in subresources),
            scale=subresources.get('scale'),
            schema=schema, validator=crd_validator(schema),
            printer_columns=tuple(version.get('additionalPrinterColumns', ())),
            field_selectors=tuple(f['jsonPath'].lstrip('.') for f in version.get('selectableFields', ())),
            tracks_generation=True,
        ))
    return types


# --------------------------------------------------------------------------------------------
# Paths, selectors, JSON paths
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ApiPath:
    """A resource URL: /api/v1/namespaces/NS/pods/NAME/status -> its parts."""
    group: str
    version: str
    plural: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None

    @classmethod
    def parse(cls, path: str) -> 'ApiPath | None':
        parts = [part for part in path.split('/') if part]
        if len(parts) >= 3 and parts[0] == 'api':
            group, version, rest = '', parts[1], parts[2:]
        elif len(parts) >= 4 and parts[0] == 'apis':
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = None
        own_subresource = len(rest) == 3 and rest[2] in ('status', 'finalize')  # of a namespace itself
        if len(rest) >= 3 and rest[0] == 'namespaces' and not own_subresource:  # .../namespaces/NS/PLURAL/...
            namespace, rest = rest[1], rest[2:]
        if not 1 <= len(rest) <= 3:
            return None
        return cls(group, version, rest[0], namespace, *rest[1:])


_REQUIREMENT = re.compile(
    r'\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9][-A-Za-z0-9_./]*)\s*'
    r'(?:(?P<op>==|=|!=)\s*(?P<value>[-A-Za-z0-9_.]*)|\s(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?\s*')


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    """A parsed `labelSelector` query: a conjunction of requirements."""
    requirements: tuple[tuple[str, str, frozenset[str]], ...]  # (key, operator, values)

    @classmethod
    def parse(cls, text: str) -> 'LabelSelector':
        requirements = []
        for part in re.findall(r'(?:[^,(]|\([^)]*\))+', text or ''):
            match = _REQUIREMENT.fullmatch(part)
            if not match or (match['neg'] and (match['op'] or match['setop'])):
                raise bad_request(f'unable to parse requirement: {part.strip()!r}')
            key = match['key']
            if match['neg']:
                requirements.append((key, '!exists', frozenset()))
            elif match['op']:
                requirements.append((key, '!=' if match['op'] == '!=' else '=', frozenset([match['value']])))
            elif match['setop']:
                values = frozenset(v.strip() for v in match['values'].split(',') if v.strip())
                requirements.append((key, match['setop'], values))
            else:
                requirements.append((key, 'exists', frozenset()))
        return cls(tuple(requirements))

    def matches(self, labels: dict[str, str]) -> bool:
        for key, op, values in self.requirements:
            present = key in labels
            ok = {'exists': present, '!exists': not present,
                  '=': present and labels[key] in values, 'in': present and labels[key] in values,
                  '!=': not present or labels[key] not in values,
                  'notin': not present or labels[key] not in values}[op]
            if not ok:
                return False
        return True


def dig(obj: Any, dotted: str) -> Any:
    """The value at a simple JSON path (`.spec.replicas`, `status.readyReplicas`), or None."""
    for key in [k for k in dotted.split('.') if k]:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def set_at(obj: dict[str, Any], dotted: str, value: Any) -> None:
    keys = [k for k in dotted.split('.') if k]
    for key in keys[:-1]:
        obj = obj.setdefault(key, {})
    obj[keys[-1]] = value


def field_value(obj: dict[str, Any], field: str) -> str:
    """A field's value as field selectors compare it: missing is '', booleans are lowercase."""
    value = dig(obj, field)
    if isinstance(value, bool):
        return str(value).lower()
    if field == 'source' and isinstance(value, dict):  # events: source means source.component
        value = value.get('component')
    return '' if value is None else str(value)


# --------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------

def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge, null deletes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch. A failed `test` or a bad path raises (the server answers 422)."""
    if not isinstance(operations, list):
        raise bad_request('json patch must be a list of operations')
    doc = copy.deepcopy(doc)

    def walk(path: str) -> tuple[Any, str | int]:
        if not path.startswith('/'):
            raise unprocessable(f'invalid JSON pointer {path!r}')
        tokens = [t.replace('~1', '/').replace('~0', '~') for t in path[1:].split('/')]
        parent = doc
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        return parent, (last if isinstance(parent, dict) or last == '-' else int(last))

    for op in operations:
        try:
            kind, path = op['op'], op['path']
            if kind in ('move', 'copy'):
                source_parent, source_key = walk(op['from'])
                value = copy.deepcopy(source_parent[source_key])
                if kind == 'move':
                    del source_parent[source_key]
            else:
                value = copy.deepcopy(op.get('value'))
            if path == '':
                if kind == 'test' and doc != value:
                    raise unprocessable('testing value failed')
                doc = value if kind in ('add', 'replace', 'move', 'copy') else doc
                continue
            parent, key = walk(path)
            if kind == 'test':
                if parent[key] != value:
                    raise unprocessable(f'the server rejected our request due to an error in our request: '
                                        f'testing value {path} failed')
            elif kind == 'remove':
                del parent[key]
            elif kind == 'replace':
                parent[key]  # noqa: B018 -- must exist
                parent[key] = value
            elif kind in ('add', 'move', 'copy'):
                if isinstance(parent, list):
                    parent.insert(len(parent) if key == '-' else key, value)
                else:
                    parent[key] = value
            else:
                raise bad_request(f'unknown JSON patch operation {kind!r}')
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise unprocessable(f'jsonpatch {op.get("op")} operation does not apply: {e!r}') from e
    return doc


# --------------------------------------------------------------------------------------------
# Protobuf: kubectl's typed `create namespace|secret|configmap` send it (and never fall back)
# --------------------------------------------------------------------------------------------

_OBJECT_META = {1: ('name', 'string'), 2: ('generateName', 'string'), 3: ('namespace', 'string'),
                11: ('labels', 'map'), 12: ('annotations', 'map'), 14: ('finalizers', 'strings')}
_PROTOBUF_KINDS: dict[str, dict[int, tuple[str, Any]]] = {  # field numbers of k8s.io/api generated.proto
    'Namespace': {1: ('metadata', _OBJECT_META), 2: ('spec', {1: ('finalizers', 'strings')})},
    'ConfigMap': {1: ('metadata', _OBJECT_META), 2: ('data', 'map'), 3: ('binaryData', 'bytes-map'),
                  4: ('immutable', 'bool')},
    'Secret': {1: ('metadata', _OBJECT_META), 2: ('data', 'bytes-map'), 3: ('type', 'string'),
               4: ('stringData', 'map'), 5: ('immutable', 'bool')},
}


def _protobuf_fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one protobuf message, in wire order."""
    def varint(i: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            byte = buf[i]
            result |= (byte & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if not byte & 0x80:
                return result, i
    i = 0
    while i < len(buf):
        key, i = varint(i)
        wire = key & 7
        if wire == 0:
            value, i = varint(i)
        elif wire == 2:
            size, i = varint(i)
            value, i = buf[i:i + size], i + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = buf[i:i + size], i + size
        else:
            raise bad_request(f'unsupported protobuf wire type {wire}')
        yield key >> 3, value


def _protobuf_message(buf: bytes, schema: dict[int, tuple[str, Any]]) -> dict[str, Any]:
    """Decode by schema; empty values are left out, as Go's omitempty leaves them out of JSON."""
    result: dict[str, Any] = {}
    for number, value in _protobuf_fields(buf):
        if number not in schema:
            continue
        name, kind = schema[number]
        if isinstance(kind, dict):
            if message := _protobuf_message(bytes(value), kind):
                result[name] = message
        elif kind == 'string' and value:
            result[name] = bytes(value).decode()
        elif kind == 'bool' and value:
            result[name] = True
        elif kind == 'strings':
            result.setdefault(name, []).append(bytes(value).decode())
        elif kind in ('map', 'bytes-map'):
            entry = dict(_protobuf_fields(bytes(value)))
            key, item = bytes(entry.get(1, b'')).decode(), bytes(entry.get(2, b''))
            result.setdefault(name, {})[key] = item.decode() if kind == 'map' else base64.b64encode(item).decode()
    return result


def decode_protobuf(body: bytes) -> dict[str, Any]:
    """A protobuf-encoded request body (the k8s envelope around runtime.Unknown) as JSON data."""
    if not body.startswith(b'k8s\x00'):
        raise bad_request('a protobuf body must start with the k8s envelope')
    envelope = dict(_protobuf_fields(body[4:]))
    type_meta = {number: bytes(value).decode() for number, value in _protobuf_fields(bytes(envelope.get(1, b'')))}
    api_version, kind = type_meta.get(1, ''), type_meta.get(2, '')
    if kind not in _PROTOBUF_KINDS:
        raise ApiError(415, 'UnsupportedMediaType', f'this fake Kubernetes API decodes protobuf only for '
                       f'{", ".join(_PROTOBUF_KINDS)}, not {kind!r}: send application/json', {})
    return dict(_protobuf_message(bytes(envelope.get(2, b'')), _PROTOBUF_KINDS[kind]), apiVersion=api_version, kind=kind)


# --------------------------------------------------------------------------------------------
# Built-in kinds: their real OpenAPI schema (pruning, strategic merge patch, validation)
# --------------------------------------------------------------------------------------------

@functools.cache
def _schema_file(name: str) -> dict[str, Any]:
    """One JSON schema file of the real v1.32 API, as kubernetes-validate ships them."""
    root = importlib.resources.files('kubernetes_validate') / 'kubernetes-json-schema'
    return json.loads((root / f'v{KUBERNETES_VERSION}.0-local' / name).read_text())


def _openapi_definitions() -> dict[str, Any]:
    """The real OpenAPI definitions of all built-in kinds: merge keys, GVKs, properties."""
    return _schema_file('_definitions.json')['$defs']


def _definition_of(rt: ResourceType) -> dict[str, Any]:
    return _definition_by_gvk(rt.group, rt.version, rt.kind)


@functools.cache
def _definition_by_gvk(group: str, version: str, kind: str) -> dict[str, Any]:
    for definition in _openapi_definitions().values():
        for gvk in definition.get('x-kubernetes-group-version-kind', ()):
            if (gvk['group'], gvk['version'], gvk['kind']) == (group, version, kind):
                return definition
    return {}


def _resolve(node: Any) -> dict[str, Any]:
    """A schema node of the real OpenAPI definitions with its $ref followed."""
    while isinstance(node, dict) and '$ref' in node:
        node = _openapi_definitions()[node['$ref'].rsplit('/', 1)[-1]]
    return node if isinstance(node, dict) else {}


def prune_unknown_fields(value: Any, node: Any, unknown: list[str], path: str = '') -> Any:
    """Built-in kinds: drop the fields their real schema does not declare (listed in `unknown`),
    as a real server drops them (or refuses them under fieldValidation=Strict)."""
    node = _resolve(node)
    if isinstance(value, list):
        return [prune_unknown_fields(item, node.get('items'), unknown, f'{path}[{i}]') for i, item in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if 'properties' not in node:  # a map, or a free-form field (RawExtension, JSON)
        additional = node.get('additionalProperties')
        if isinstance(additional, dict):
            return {k: prune_unknown_fields(v, additional, unknown, f'{path}.{k}') for k, v in value.items()}
        return value
    result = {}
    for key, item in value.items():
        child = f'{path}.{key}' if path else key
        if key in node['properties']:
            result[key] = prune_unknown_fields(item, node['properties'][key], unknown, child)
        else:
            unknown.append(child)
    return result


def strategic_merge_patch(target: Any, patch: Any, schema: dict[str, Any]) -> Any:
    """Strategic merge patch as a real server applies it to built-in kinds.

    Lists whose schema says `x-kubernetes-patch-strategy: merge` are merged by their merge key
    (primitive lists as sets); other lists are replaced. The directives $patch (replace/delete),
    $retainKeys, $deleteFromPrimitiveList/<field> and $setElementOrder/<field> are honoured.
    """
    resolve = _resolve

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not k.startswith('$')}
        return [strip(v) for v in value] if isinstance(value, list) else value

    def merge(old: Any, new: Any, node: Any) -> Any:
        node = resolve(node)
        if not isinstance(new, dict):
            return strip(new)
        if new.get('$patch') == 'replace' or not isinstance(old, dict):
            return strip(new)
        result = dict(old)
        for key, value in new.items():
            if key.startswith('$deleteFromPrimitiveList/'):
                field = key.split('/', 1)[1]
                result[field] = [item for item in result.get(field) or [] if item not in value]
            elif key.startswith('$'):
                continue
            elif value is None or (isinstance(value, dict) and value.get('$patch') == 'delete'):
                result.pop(key, None)
            else:
                properties = node.get('properties') or {}
                child = resolve(properties.get(key, node.get('additionalProperties')))
                if isinstance(value, list) and 'merge' in child.get('x-kubernetes-patch-strategy', ''):
                    result[key] = merge_list(result.get(key) or [], value, child)
                else:
                    result[key] = merge(result.get(key), value, child)
        if '$retainKeys' in new:
            result = {k: v for k, v in result.items() if k in new['$retainKeys']}
        return result

    def merge_list(old: list[Any], new: list[Any], node: dict[str, Any]) -> list[Any]:
        key = node.get('x-kubernetes-patch-merge-key')
        if any(isinstance(item, dict) and item.get('$patch') == 'replace' for item in new):
            return strip([item for item in new if not (isinstance(item, dict) and '$patch' in item)])
        if key is None:
            return list(old) + [item for item in new if item not in old]
        result = list(old)
        for item in new:
            index = next((i for i, o in enumerate(result) if o.get(key) == item.get(key)), None)
            if item.get('$patch') == 'delete':
                if index is not None:
                    del result[index]
            elif index is None:
                result.append(strip(item))
            else:
                result[index] = merge(result[index], item, node.get('items'))
        return result

    return merge(target, patch, schema)


# --------------------------------------------------------------------------------------------
# Schemas of custom resources: pruning, defaulting, validation (as a structural schema does)
# --------------------------------------------------------------------------------------------

def prune_and_default(value: Any, schema: dict[str, Any], unknown: list[str], path: str = '') -> Any:
    """Drop fields the schema does not know (listed in `unknown`), then fill in defaults."""
    if isinstance(value, list):
        items = schema.get('items') or {}
        return [prune_and_default(item, items, unknown, f'{path}[{i}]') for i, item in enumerate(value)]
    if not isinstance(value, dict):
        return value
    properties = schema.get('properties') or {}
    additional = schema.get('additionalProperties')
    keep_all = schema.get('x-kubernetes-preserve-unknown-fields') or additional not in (None, False)
    embedded = not path or schema.get('x-kubernetes-embedded-resource')
    result = {}
    for key, item in value.items():
        child = f'{path}.{key}' if path else key
        if embedded and key in ('apiVersion', 'kind', 'metadata'):
            result[key] = item  # ObjectMeta is the server's, never pruned by the CRD schema
        elif key in properties:
            result[key] = prune_and_default(item, properties[key], unknown, child)
        elif isinstance(additional, dict):
            result[key] = prune_and_default(item, additional, unknown, child)
        elif keep_all:
            result[key] = item
        else:
            unknown.append(child)
    for key, prop in properties.items():
        if key not in result and 'default' in prop:
            result[key] = prune_and_default(copy.deepcopy(prop['default']), prop, unknown, f'{path}.{key}'.lstrip('.'))
    return result


def _as_json_schema(schema: Any) -> Any:
    """OpenAPI v3.0 (as in CRDs) -> JSON Schema draft 4: nullable, int-or-string."""
    if isinstance(schema, list):
        return [_as_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: _as_json_schema(value) for key, value in schema.items()
              if not key.startswith('x-') and key not in ('nullable', 'default', 'example')}
    if schema.get('x-kubernetes-int-or-string'):
        result['anyOf'] = [{'type': 'integer'}, {'type': 'string'}]
    if schema.get('nullable') and 'type' in result:
        result['type'] = [result['type'], 'null']
    return result


def crd_validator(schema: dict[str, Any]) -> jsonschema.Draft4Validator:
    """A validator for a CRD's schema: the object without apiVersion, kind and metadata."""
    body_schema = dict(schema, properties={k: v for k, v in (schema.get('properties') or {}).items()
                                           if k not in ('apiVersion', 'kind', 'metadata')})
    return jsonschema.Draft4Validator(_as_json_schema(body_schema))


def validation_causes(validator: Any, instance: Any) -> list[tuple[str, str]]:
    """(field path, message) for every violation, worded as the server lists them in an Invalid Status."""
    causes = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
        path = ''.join(f'[{p}]' if isinstance(p, int) else f'.{p}' for p in error.absolute_path).lstrip('.')
        if error.validator == 'required':
            missing = re.search(r"'([^']+)' is a required", error.message)
            path, message = f'{path}.{missing[1]}'.lstrip('.') if missing else path, 'Required value'
        elif error.validator == 'enum':
            allowed = ', '.join(json.dumps(v) for v in error.validator_value)
            message = f'Unsupported value: {json.dumps(error.instance)}: supported values: {allowed}'
        elif error.validator in ('minimum', 'maximum'):
            relation = 'greater' if error.validator == 'minimum' else 'less'
            message = f'Invalid value: {json.dumps(error.instance)}: {path} in body should be {relation} than or equal to {error.validator_value}'
        elif error.validator == 'type':
            message = f'Invalid value: "{type(error.instance).__name__}": {path} in body must be of type {error.validator_value}'
        else:
            message = f'Invalid value: {json.dumps(error.instance)[:80]}: {error.message}'
        causes.append((path or '<root>', message))
    return causes


@functools.cache
def _cel_program(rule: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


def cel_errors(value: Any, old: Any, schema: dict[str, Any], path: str = '') -> list[tuple[str, str]]:
    """The CRD's x-kubernetes-validations (CEL) rules, evaluated with cel-python where a value is
    present; transition rules (using oldSelf) only on updates that had an old value there."""
    if value is None:
        return []
    errors = []
    for validation in schema.get('x-kubernetes-validations') or []:
        rule = validation['rule']
        if 'oldSelf' in rule and old is None:
            continue
        activation = {'self': celpy.json_to_cel(value)}
        if old is not None:
            activation['oldSelf'] = celpy.json_to_cel(old)
        try:
            result = _cel_program(rule).evaluate(activation)
        except celpy.CELEvalError as e:
            result = e
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            field = (path + validation.get('fieldPath', '')).lstrip('.') or '<root>'
            kind = 'object' if isinstance(value, dict) else 'array' if isinstance(value, list) else type(value).__name__
            errors.append((field, f'Invalid value: "{kind}": {validation.get("message") or f"failed rule: {rule}"}'))
    if isinstance(value, dict):
        properties = schema.get('properties') or {}
        additional = schema.get('additionalProperties')
        for key, item in value.items():
            child = properties.get(key, additional if isinstance(additional, dict) else None)
            if child:
                old_item = old.get(key) if isinstance(old, dict) else None
                errors += cel_errors(item, old_item, child, f'{path}.{key}')
    elif isinstance(value, list) and isinstance(schema.get('items'), dict):
        for i, item in enumerate(value):
            errors += cel_errors(item, None, schema['items'], f'{path}[{i}]')
    return errors


@functools.cache
def _builtin_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator | None:
    """A validator for a built-in kind's real schema (as kubernetes-validate ships it), built once."""
    file_prefix = re.sub(r'^([^./]*)(?:\.[^/]*)?/', r'\1-', api_version)  # rbac.authorization.k8s.io/v1 -> rbac-v1
    try:
        schema = _schema_file(f'{kind.lower()}-{file_prefix}.json')
    except FileNotFoundError:
        return None
    registry = referencing.Resource.from_contents(_schema_file('_definitions.json')) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def builtin_errors(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """Validation of a built-in kind against its real OpenAPI schema (types, required fields)."""
    validator = _builtin_validator(obj['apiVersion'], obj['kind'])
    return validation_causes(validator, obj) if validator is not None else []


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------

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

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()  # kmock's catch-all 404 for unknown URLs
        for rt in BUILTIN_TYPES:
            self._types[rt.group, rt.version, rt.plural] = rt
        for name in INITIAL_NAMESPACES:
            self._create(self._type('', 'v1', 'namespaces'), None, {'metadata': {'name': name}}, {})
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
        slows down with every request it keeps (see REQUESTS_KEPT).
        """
        raw_response = None
        try:
            request = await self._parse_request(raw_request)
            self._requests.append(request)
            del self._requests[:-REQUESTS_KEPT]
            for reaction in self._payloads:
                del reaction._requests[:-REQUESTS_KEPT]
            try:
                return await self._handle(request)
            except StreamingError as e:
                raw_response = e.args[0]
                raise e.__cause__ or e
        except Exception as e:
            if raw_response is None or not raw_response.prepared:
                return await self._render_error(e)
            await self._stream_error(e, raw_response)
            await raw_response.write_eof()
            return raw_response

    async def _parse_request(self, raw: aiohttp.web.BaseRequest) -> kmock.Request:
        body = await raw.read()
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
            return aiohttp.web.json_response(exc.status_body(), status=exc.status)
        if isinstance(exc, kmock.KubernetesError):  # kmock's own 404 for unknown URLs
            return aiohttp.web.json_response(unknown_resource().status_body(), status=404)
        return await super()._render_error(exc)

    async def _stream_error(self, exc: Exception, raw_response: aiohttp.web.StreamResponse) -> None:
        if isinstance(exc, ApiError):
            await raw_response.write(json.dumps({'type': 'ERROR', 'object': exc.status_body()}).encode() + b'\n')
        else:
            await super()._stream_error(exc, raw_response)

    async def close(self) -> None:
        """End all watch streams and background work, so that the server can stop at once."""
        self._closing = True
        self._notify()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- discovery -------------------------------------------------------------------------

    def _type(self, group: str, version: str, plural: str) -> ResourceType:
        try:
            return self._types[group, version, plural]
        except KeyError:
            raise unknown_resource() from None

    def _groups(self) -> dict[str, list[str]]:
        """Served groups and their versions, the preferred (newest registered) version first."""
        groups: dict[str, list[str]] = {}
        for group, version, _ in self._types:
            if group and version not in groups.setdefault(group, []):
                groups[group].append(version)
        return {group: sorted(versions, key=_version_priority) for group, versions in groups.items()}

    async def _serve_version(self) -> dict[str, Any]:
        return {'major': '1', 'minor': KUBERNETES_VERSION.split('.')[1],
                'gitVersion': f'v{KUBERNETES_VERSION}.0', 'gitCommit': 'fake-kube-api-kmock',
                'gitTreeState': 'clean', 'buildDate': '2025-01-01T00:00:00Z', 'goVersion': 'go1.23',
                'compiler': 'gc', 'platform': 'linux/amd64'}

    def _group_json(self, group: str, versions: list[str]) -> dict[str, Any]:
        entries = [{'groupVersion': f'{group}/{v}', 'version': v} for v in versions]
        return {'name': group, 'versions': entries, 'preferredVersion': entries[0]}

    async def _serve_group_list(self) -> dict[str, Any]:
        return {'kind': 'APIGroupList', 'apiVersion': 'v1',
                'groups': [self._group_json(g, vs) for g, vs in self._groups().items()]}

    async def _serve_group(self, request: kmock.Request) -> dict[str, Any]:
        group = request.url.path.strip('/').split('/')[1]
        versions = self._groups().get(group)
        if not versions:
            raise unknown_resource()
        return dict(self._group_json(group, versions), kind='APIGroup', apiVersion='v1')

    async def _serve_resource_list(self, request: kmock.Request) -> dict[str, Any]:
        parts = request.url.path.strip('/').split('/')
        group, version = ('', parts[1]) if parts[0] == 'api' else (parts[1], parts[2])
        types = [rt for (g, v, _), rt in self._types.items() if (g, v) == (group, version)]
        if not types:
            raise unknown_resource()
        resources = []
        for rt in types:
            resources.append({'name': rt.plural, 'singularName': rt.kind.lower(), 'namespaced': rt.namespaced,
                              'kind': rt.kind, 'verbs': VERBS, 'shortNames': list(rt.short_names),
                              'categories': list(rt.categories)})
            for sub in sorted(rt.subresources):
                entry = {'name': f'{rt.plural}/{sub}', 'singularName': '', 'namespaced': rt.namespaced,
                         'kind': rt.kind, 'verbs': ['get', 'patch', 'update']}
                if sub == 'scale':
                    entry.update(group='autoscaling', version='v1', kind='Scale')
                if sub == 'binding':
                    entry.update(kind='Binding', verbs=['create'])
                resources.append(entry)
        return {'kind': 'APIResourceList', 'apiVersion': 'v1',
                'groupVersion': f'{group}/{version}' if group else version, 'resources': resources}

    async def _serve_openapi_v2(self, request: kmock.Request) -> bytes | dict[str, Any]:
        # kubectl fetches this (as protobuf) for client-side validation; an empty document means
        # "no schemas known" and kubectl leaves validation to the server (see v3 below).
        if 'protobuf' in request.headers.get('Accept', ''):
            return b''
        return {'swagger': '2.0', 'info': {'title': 'fake-kube-api', 'version': 'v1.32.0'},
                'paths': {}, 'definitions': {}}

    def _openapi_docs(self) -> dict[str, list[ResourceType]]:
        docs: dict[str, list[ResourceType]] = {}
        for rt in self._types.values():
            docs.setdefault(f'apis/{rt.group}/{rt.version}' if rt.group else 'api/v1', []).append(rt)
        return docs

    async def _serve_openapi_v3_index(self) -> dict[str, Any]:
        paths = {}
        for doc, types in self._openapi_docs().items():
            digest = hashlib.sha256(repr(types).encode()).hexdigest()[:16].upper()
            paths[doc] = {'serverRelativeURL': f'/openapi/v3/{doc}?hash={digest}'}
        return {'paths': paths}

    async def _serve_openapi_v3(self, request: kmock.Request) -> dict[str, Any]:
        """Per group-version: PATCH operations that accept fieldValidation (so kubectl validates
        server-side) and, for CRDs, the schema (so `kubectl explain` works)."""
        doc = request.url.path.removeprefix('/openapi/v3/').strip('/')
        types = self._openapi_docs().get(doc)
        if not types:
            raise unknown_resource()
        paths, schemas = {}, {}
        for rt in types:
            gvk = {'group': rt.group, 'version': rt.version, 'kind': rt.kind}
            schema_name = '.'.join(reversed(rt.group.split('.'))) + f'.{rt.version}.{rt.kind}' if rt.group \
                else f'io.k8s.api.core.v1.{rt.kind}'
            prefix = f'/{doc}/namespaces/{{namespace}}' if rt.namespaced else f'/{doc}'
            operation = {'x-kubernetes-group-version-kind': gvk, 'x-kubernetes-action': 'patch',
                         'parameters': [{'name': 'fieldValidation', 'in': 'query', 'schema': {'type': 'string'}},
                                        {'name': 'dryRun', 'in': 'query', 'schema': {'type': 'string'}}],
                         'responses': {'200': {'description': 'OK'}}}
            paths[f'{prefix}/{rt.plural}/{{name}}'] = {'patch': operation}
            if rt.is_custom:
                schema = copy.deepcopy(rt.schema or {})
                schema.setdefault('properties', {}).setdefault('metadata', {'type': 'object'})
                schemas[schema_name] = dict(schema, **{'x-kubernetes-group-version-kind': [gvk]})
        return {'openapi': '3.0.0', 'info': {'title': 'fake-kube-api', 'version': 'v1.32.0'},
                'paths': paths, 'components': {'schemas': schemas}}

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
        if method in ('PUT', 'PATCH'):
            content_type = request.headers.get('Content-Type', 'application/json').split(';')[0]
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
        fields = self._field_selector(rt, params.get('fieldSelector', ''))
        for (group, plural, ns, _), obj in sorted(self._objects.items()):
            if (group, plural) == rt.store_key and (namespace is None or ns == namespace):
                if self._matches(obj, labels, fields):
                    yield obj

    def _field_selector(self, rt: ResourceType, text: str) -> list[tuple[str, bool, str]]:
        selectors = []
        for part in [p for p in text.split(',') if p.strip()]:
            match = re.fullmatch(r'\s*([\w.]+)\s*(==|=|!=)\s*(.*?)\s*', part)
            if not match:
                raise bad_request(f'invalid selector: {part!r}')
            field, op, value = match.groups()
            if field not in ('metadata.name', 'metadata.namespace') + rt.field_selectors:
                raise bad_request(f'field label not supported: {field}')
            selectors.append((field, op != '!=', value))
        return selectors

    @staticmethod
    def _matches(obj: dict[str, Any], labels: LabelSelector, fields: list[tuple[str, bool, str]]) -> bool:
        if not labels.matches(obj['metadata'].get('labels') or {}):
            return False
        return all((field_value(obj, field) == value) == equal for field, equal, value in fields)

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
        """A watch stream: JSON lines of ADDED/MODIFIED/DELETED (+ BOOKMARK, ERROR) events."""
        path = ApiPath.parse(request.url.path)
        if path is None:
            raise unknown_resource()
        rt = self._type(path.group, path.version, path.plural)
        namespace = path.namespace if rt.namespaced else None
        params = dict(request.params)
        if path.name:  # the deprecated per-object watch URL
            params['fieldSelector'] = ','.join(filter(None, [params.get('fieldSelector'), f'metadata.name={path.name}']))
        labels = LabelSelector.parse(params.get('labelSelector', ''))
        fields = self._field_selector(rt, params.get('fieldSelector', ''))
        timeout = float(params['timeoutSeconds']) if params.get('timeoutSeconds') else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        since = params.get('resourceVersion') or ''
        yield b''  # send the headers now: the stream is open even while nothing happens

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
                now_in = self._matches(event.obj, labels, fields)
                was_in = event.old is not None and self._matches(event.old, labels, fields)
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
        obj = self._admit(rt, obj, None, params)
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
                           f'with name {class_name} was found', _details(self._type('', 'v1', 'pods'), pod['metadata']['name']))
        spec['priority'] = priority_class.get('value', 0)
        spec.setdefault('preemptionPolicy', priority_class.get('preemptionPolicy', 'PreemptLowerPriority'))

    def _check_namespace_open(self, namespace: str | None) -> None:
        ns_type = self._type('', 'v1', 'namespaces')
        ns = self._objects.get(('', 'namespaces', '', namespace or ''))
        if ns is None:
            raise not_found(ns_type, namespace or '')
        if ns['metadata'].get('deletionTimestamp'):
            raise ApiError(403, 'Forbidden', f'unable to create new content in namespace {namespace} '
                           f'because it is being terminated', _details(ns_type, namespace))

    def _admit(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None,
               params: dict[str, str]) -> dict[str, Any]:
        """Defaulting and validation, as the real registry does them before storing."""
        unknown: list[str] = []
        if rt.is_custom:
            obj = prune_and_default(obj, rt.schema or {}, unknown)
        else:
            obj = prune_unknown_fields(obj, _definition_of(rt), unknown)
        if unknown and params.get('fieldValidation') == 'Strict':
            raise bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict '
                              f'decoding error: ' + ', '.join(f'unknown field "{field}"' for field in unknown))
        if rt.is_custom:
            body = {key: value for key, value in obj.items() if key not in ('apiVersion', 'kind', 'metadata')}
            errors = validation_causes(rt.validator, body) or cel_errors(obj, old, rt.schema or {})
        else:
            obj = _builtin_defaults(rt, obj, old)
            errors = builtin_errors(obj) + _builtin_rules(rt, obj, old)
        if rt.kind == 'CustomResourceDefinition' and rt.group == 'apiextensions.k8s.io':
            errors += _crd_errors(obj, old)
        if errors:
            raise invalid(rt, obj['metadata']['name'], errors)
        for field in ('labels', 'annotations', 'finalizers', 'ownerReferences'):  # Go's omitempty
            if not obj['metadata'].get(field, True):
                del obj['metadata'][field]
        return obj

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
            schema = _definition_of(rt) if subresource != 'scale' else {}
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
        new = self._admit(rt, new, old, params)
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
        for field in ('uid', 'resourceVersion'):
            if preconditions.get(field) and preconditions[field] != meta[field]:
                raise conflict(rt, name, f'Precondition failed: {field} in precondition: {preconditions[field]}, '
                                         f'{field} in object meta: {meta[field]}')
        grace = options.get('gracePeriodSeconds', params.get('gracePeriodSeconds'))
        grace = int(grace) if grace is not None else None
        policy = options.get('propagationPolicy') or params.get('propagationPolicy') or 'Background'
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
        columns = [{'name': 'Name', 'type': 'string', 'format': 'name', 'description': 'Name', 'priority': 0}]
        if rt.is_custom:
            printer = list(rt.printer_columns) or [{'name': 'Age', 'type': 'date', 'jsonPath': '.metadata.creationTimestamp'}]
            cells = [lambda obj, c=c: _age(dig(obj, c['jsonPath'])) if c.get('type') == 'date' else dig(obj, c['jsonPath'])
                     for c in printer]
            columns += [{'name': c['name'], 'type': c.get('type', 'string'), 'format': c.get('format', ''),
                         'description': c.get('description', ''), 'priority': c.get('priority', 0)} for c in printer]
        elif rt.kind == 'Node' and rt.group == '':
            cells = [_node_status, lambda obj: '<none>', lambda obj: _age(obj['metadata']['creationTimestamp']),
                     lambda obj: ((obj.get('status') or {}).get('nodeInfo') or {}).get('kubeletVersion', '')]
            columns += [{'name': n, 'type': 'string', 'format': '', 'description': n, 'priority': 0}
                        for n in ('Status', 'Roles', 'Age', 'Version')]
        elif rt.kind == 'Pod':
            cells = [_pod_ready, _pod_status, _pod_restarts, lambda obj: _age(obj['metadata']['creationTimestamp']),
                     lambda obj: obj['spec'].get('nodeName') or '<none>']
            columns += [{'name': n, 'type': t, 'format': '', 'description': n, 'priority': p}
                        for n, t, p in (('Ready', 'string', 0), ('Status', 'string', 0), ('Restarts', 'string', 0),
                                        ('Age', 'string', 0), ('Node', 'string', 1))]
        else:
            cells = [lambda obj: _age(obj['metadata']['creationTimestamp'])]
            columns.append({'name': 'Age', 'type': 'string', 'format': '', 'description': 'Age', 'priority': 0})
        rows = [{'cells': [obj['metadata']['name']] + [cell(obj) for cell in cells],
                 'object': {'kind': 'PartialObjectMetadata', 'apiVersion': 'meta.k8s.io/v1', 'metadata': obj['metadata']}}
                for obj in items]
        return {'kind': 'Table', 'apiVersion': 'meta.k8s.io/v1',
                'metadata': metadata or {'resourceVersion': str(self._resource_version)},
                'columnDefinitions': columns, 'rows': rows}


def _age(timestamp: str | None) -> str:
    """A creation timestamp as `kubectl get` shows ages (Kubernetes' HumanDuration, abridged)."""
    if not timestamp:
        return '<unknown>'
    then = datetime.datetime.strptime(timestamp, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=datetime.UTC)
    seconds = max(int((datetime.datetime.now(datetime.UTC) - then).total_seconds()), 0)
    minutes, hours = seconds // 60, seconds // 3600
    if seconds < 120:
        return f'{seconds}s'
    if minutes < 10:
        return f'{minutes}m{seconds % 60}s' if seconds % 60 else f'{minutes}m'
    if hours < 3:
        return f'{minutes}m'
    if hours < 8:
        return f'{hours}h{minutes % 60}m' if minutes % 60 else f'{hours}h'
    return f'{hours}h' if hours < 48 else f'{hours // 24}d'


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version order: GA before beta before alpha, higher numbers first."""
    match = re.fullmatch(r'v(\d+)(?:(alpha|beta)(\d+))?', version)
    if not match:
        return 3, 0, 0
    stage = {'alpha': 2, 'beta': 1, None: 0}[match[2]]
    return stage, -int(match[1]), -int(match[3] or 0)


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    """What generation tracks: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ('metadata', 'status', 'apiVersion', 'kind')}


def _pod_ready(pod: dict[str, Any]) -> str:
    statuses = (pod.get('status') or {}).get('containerStatuses') or []
    return f'{sum(1 for s in statuses if s.get("ready"))}/{len(pod["spec"].get("containers", []))}'


def _pod_status(pod: dict[str, Any]) -> str:
    if pod['metadata'].get('deletionTimestamp'):
        return 'Terminating'
    for status in (pod.get('status') or {}).get('containerStatuses') or []:
        waiting = (status.get('state') or {}).get('waiting')
        if waiting and waiting.get('reason'):
            return waiting['reason']
    return (pod.get('status') or {}).get('phase', 'Pending')


def _node_status(node: dict[str, Any]) -> str:
    ready = next((c['status'] for c in (node.get('status') or {}).get('conditions') or [] if c['type'] == 'Ready'), None)
    status = {'True': 'Ready', 'False': 'NotReady'}.get(ready or '', 'Unknown')
    return status + (',SchedulingDisabled' if node['spec'].get('unschedulable') else '')


def _pod_restarts(pod: dict[str, Any]) -> str:
    return str(sum(s.get('restartCount', 0) for s in (pod.get('status') or {}).get('containerStatuses') or []))


def _builtin_defaults(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """The API defaults a real server fills in for the built-in kinds we serve."""
    if rt.kind == 'Namespace' and rt.group == '':
        obj['metadata'].setdefault('labels', {})['kubernetes.io/metadata.name'] = obj['metadata']['name']
        if old is None:
            obj['spec'] = {'finalizers': ['kubernetes']}
            obj['status'] = {'phase': 'Active'}
    if rt.kind == 'Pod' and rt.group == '' and old is None:
        spec = obj.setdefault('spec', {})
        for key, value in (('restartPolicy', 'Always'), ('terminationGracePeriodSeconds', 30),
                           ('dnsPolicy', 'ClusterFirst'), ('schedulerName', 'default-scheduler'),
                           ('serviceAccountName', 'default'), ('serviceAccount', 'default'),
                           ('securityContext', {}), ('enableServiceLinks', True), ('priority', 0),
                           ('preemptionPolicy', 'PreemptLowerPriority')):
            spec.setdefault(key, value)
        tolerations = spec.setdefault('tolerations', [])
        for taint in ('node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable'):
            if not any(t.get('key') == taint for t in tolerations):
                tolerations.append({'key': taint, 'operator': 'Exists', 'effect': 'NoExecute', 'tolerationSeconds': 300})
        for container in spec.get('containers') or []:
            image = container.get('image') or ''
            latest = ':' not in image.rsplit('/', 1)[-1] or image.endswith(':latest')
            container.setdefault('imagePullPolicy', 'Always' if latest else 'IfNotPresent')
            container.setdefault('terminationMessagePath', '/dev/termination-log')
            container.setdefault('terminationMessagePolicy', 'File')
            container.setdefault('resources', {})
        requests = [c.get('resources') or {} for c in spec.get('containers') or []]
        qos = ('BestEffort' if not any(r.get('requests') or r.get('limits') for r in requests) else
               'Guaranteed' if all(r.get('limits') and all(r['limits'].get(k) and (r.get('requests') or r['limits']).get(k) == r['limits'][k]
                                                          for k in ('cpu', 'memory')) for r in requests) else 'Burstable')
        obj['status'] = {'phase': 'Pending', 'qosClass': qos}
    if rt.kind == 'Service' and old is None:
        obj['status'] = {'loadBalancer': {}}
    return obj


_MUTABLE_POD_SPEC = ('activeDeadlineSeconds', 'tolerations', 'schedulingGates')


def _builtin_rules(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The few semantic rules of built-in kinds that our tests could trip over."""
    errors: list[tuple[str, str]] = []
    if rt.kind == 'Pod' and rt.group == '':
        containers = obj['spec'].get('containers') or []
        if not containers:
            errors.append(('spec.containers', 'Required value'))
        for i, container in enumerate(containers):
            if not container.get('image'):
                errors.append((f'spec.containers[{i}].image', 'Required value'))
        if old is not None:
            def frozen(spec: dict[str, Any]) -> dict[str, Any]:
                spec = {k: v for k, v in spec.items() if k not in _MUTABLE_POD_SPEC}
                for key in ('containers', 'initContainers'):
                    spec[key] = [{k: v for k, v in c.items() if k != 'image'} for c in spec.get(key) or []]
                return spec
            if frozen(obj['spec']) != frozen(old['spec']):
                errors.append(('spec', 'Forbidden: pod updates may not change fields other than '
                                       '`spec.containers[*].image`, `spec.initContainers[*].image`, '
                                       '`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to '
                                       'existing tolerations), `spec.terminationGracePeriodSeconds`'))
    if rt.kind == 'ConfigMap' and old is not None and old.get('immutable') and (
            obj.get('data') != old.get('data') or obj.get('binaryData') != old.get('binaryData')):
        errors.append(('data', 'Forbidden: field is immutable when `immutable` is set'))
    return errors


def _crd_errors(crd: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    spec = crd.get('spec') or {}
    names = spec.get('names') or {}
    errors = []
    for field in ('group', 'scope'):
        if not spec.get(field):
            errors.append((f'spec.{field}', 'Required value'))
    for field in ('plural', 'kind'):
        if not names.get(field):
            errors.append((f'spec.names.{field}', 'Required value'))
    if not spec.get('versions'):
        errors.append(('spec.versions', 'Required value'))
    elif sum(1 for v in spec['versions'] if v.get('storage')) != 1:
        errors.append(('spec.versions', 'Invalid value: must have exactly one version marked as storage version'))
    if names.get('plural') and spec.get('group') and crd['metadata']['name'] != f'{names["plural"]}.{spec["group"]}':
        errors.append(('metadata.name', f'Invalid value: "{crd["metadata"]["name"]}": must be spec.names.plural+"."+spec.group'))
    if old is not None:
        for field in ('group', 'scope'):
            if spec.get(field) != old['spec'].get(field):
                errors.append((f'spec.{field}', 'Invalid value: field is immutable'))
    return errors


# --------------------------------------------------------------------------------------------
# Running it: in a background thread (tests), or in the foreground (hack/kube-emulator.py)
# --------------------------------------------------------------------------------------------

def kubeconfig_text(url: str) -> str:
    """A kubeconfig for the fake: plain HTTP on localhost, no credentials."""
    return yaml.safe_dump({
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'fake-kube-api',
        'clusters': [{'name': 'fake-kube-api', 'cluster': {'server': url}}],
        'users': [{'name': 'fake-kube-api', 'user': {}}],
        'contexts': [{'name': 'fake-kube-api',
                      'context': {'cluster': 'fake-kube-api', 'user': 'fake-kube-api', 'namespace': 'default'}}],
    })


async def serve(port: int = 0, started: Any = None, stop: asyncio.Event | None = None) -> None:
    """Run the fake on 127.0.0.1:port until `stop` is set; `started(url)` is called once listening."""
    stop = stop or asyncio.Event()
    async with FakeKubeAPI() as api, kmock.Server(api, port=port or None) as server:
        if started is not None:
            started(f'http://{server.host}:{server.port}')
        try:
            await stop.wait()
        finally:
            await api.close()


class EmulatorThread:
    """The fake served from a daemon thread with its own event loop, so that blocking test code
    (kubectl subprocesses, sync HTTP) never starves it. `stop()` leaves no thread or port behind."""

    def __init__(self, port: int = 0) -> None:
        self.url = ''
        self._port = port
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name='fake-kube-api', daemon=True)

    def start(self) -> 'EmulatorThread':
        self._thread.start()
        if not self._ready.wait(timeout=30) or self._error is not None:
            raise RuntimeError(f'the fake Kubernetes API did not start: {self._error!r}')
        return self

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def started(url: str) -> None:
                self.url = url
                self._ready.set()
            await serve(self._port, started, self._stop)
        try:
            asyncio.run(main())
        except BaseException as e:  # reported by start() if it happens before listening
            self._error = e
            self._ready.set()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        if self._thread.is_alive():
            raise RuntimeError('the fake Kubernetes API thread did not stop')

    def __enter__(self) -> 'EmulatorThread':
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
