"""Discovery: the documents that tell a client what is served -- /version, /apis and each API
group, each group-version's APIResourceList, and just enough of /openapi/v2 and /openapi/v3 for
kubectl (apply, get, scale, explain, server-side field validation). Pure functions of the served
ResourceTypes (in the order they were registered) and of the request; a group, group-version or
OpenAPI document that is not served raises the 404 a real server answers.
"""
import copy
import hashlib
import re
from collections.abc import Iterable
from typing import Any

from testbed.kube_emulator.errors import unknown_resource
from testbed.kube_emulator.resources import KUBERNETES_VERSION, VERBS, ResourceType


def version_info() -> dict[str, Any]:
    """/version: the release the fake answers as (KUBERNETES_VERSION)."""
    return {'major': '1', 'minor': KUBERNETES_VERSION.split('.')[1],
            'gitVersion': f'v{KUBERNETES_VERSION}.0', 'gitCommit': 'fake-kube-api-kmock',
            'gitTreeState': 'clean', 'buildDate': '2025-01-01T00:00:00Z', 'goVersion': 'go1.23',
            'compiler': 'gc', 'platform': 'linux/amd64'}


def group_list(types: Iterable[ResourceType]) -> dict[str, Any]:
    """/apis: the APIGroupList of all served groups."""
    return {'kind': 'APIGroupList', 'apiVersion': 'v1',
            'groups': [_group_json(g, vs) for g, vs in _groups(types).items()]}


def api_group(types: Iterable[ResourceType], path: str) -> dict[str, Any]:
    """/apis/GROUP: the APIGroup of one served group."""
    group = path.strip('/').split('/')[1]
    versions = _groups(types).get(group)
    if not versions:
        raise unknown_resource()
    return dict(_group_json(group, versions), kind='APIGroup', apiVersion='v1')


def resource_list(types: Iterable[ResourceType], path: str) -> dict[str, Any]:
    """/api/v1 or /apis/GROUP/VERSION: the APIResourceList of the resources and subresources there."""
    parts = path.strip('/').split('/')
    group, version = ('', parts[1]) if parts[0] == 'api' else (parts[1], parts[2])
    served = [rt for rt in types if (rt.group, rt.version) == (group, version)]
    if not served:
        raise unknown_resource()
    resources = []
    for rt in served:
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
            if sub == 'eviction':
                entry.update(group='policy', version='v1', kind='Eviction', verbs=['create'])
            if sub == 'log':
                entry.update(verbs=['get'])
            if sub == 'token':
                entry.update(group='authentication.k8s.io', version='v1', kind='TokenRequest', verbs=['create'])
            resources.append(entry)
    return {'kind': 'APIResourceList', 'apiVersion': 'v1',
            'groupVersion': f'{group}/{version}' if group else version, 'resources': resources}


def openapi_v2(accept: str) -> bytes | dict[str, Any]:
    """/openapi/v2, empty whatever is served (`accept` is the request's Accept header)."""
    # kubectl fetches this (as protobuf) for client-side validation; an empty document means
    # "no schemas known" and kubectl leaves validation to the server (see v3 below).
    if 'protobuf' in accept:
        return b''
    return {'swagger': '2.0', 'info': {'title': 'fake-kube-api', 'version': f'v{KUBERNETES_VERSION}.0'},
            'paths': {}, 'definitions': {}}


def openapi_v3_index(types: Iterable[ResourceType]) -> dict[str, Any]:
    """/openapi/v3: one document per group-version, its URL carrying a hash of what it describes."""
    paths = {}
    for doc, doc_types in _openapi_docs(types).items():
        digest = hashlib.sha256(repr(doc_types).encode()).hexdigest()[:16].upper()
        paths[doc] = {'serverRelativeURL': f'/openapi/v3/{doc}?hash={digest}'}
    return {'paths': paths}


def openapi_v3(types: Iterable[ResourceType], path: str) -> dict[str, Any]:
    """/openapi/v3/DOC, per group-version: PATCH operations that accept fieldValidation (so kubectl
    validates server-side) and, for CRDs, the schema (so `kubectl explain` works)."""
    doc = path.removeprefix('/openapi/v3/').strip('/')
    doc_types = _openapi_docs(types).get(doc)
    if not doc_types:
        raise unknown_resource()
    paths, schemas = {}, {}
    for rt in doc_types:
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
    return {'openapi': '3.0.0', 'info': {'title': 'fake-kube-api', 'version': f'v{KUBERNETES_VERSION}.0'},
            'paths': paths, 'components': {'schemas': schemas}}


def _groups(types: Iterable[ResourceType]) -> dict[str, list[str]]:
    """Served groups and their versions, the preferred (newest registered) version first."""
    groups: dict[str, list[str]] = {}
    for rt in types:
        if rt.group and rt.version not in groups.setdefault(rt.group, []):
            groups[rt.group].append(rt.version)
    return {group: sorted(versions, key=_version_priority) for group, versions in groups.items()}


def _group_json(group: str, versions: list[str]) -> dict[str, Any]:
    entries = [{'groupVersion': f'{group}/{v}', 'version': v} for v in versions]
    return {'name': group, 'versions': entries, 'preferredVersion': entries[0]}


def _openapi_docs(types: Iterable[ResourceType]) -> dict[str, list[ResourceType]]:
    docs: dict[str, list[ResourceType]] = {}
    for rt in types:
        docs.setdefault(f'apis/{rt.group}/{rt.version}' if rt.group else 'api/v1', []).append(rt)
    return docs


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version order: GA before beta before alpha, higher numbers first."""
    match = re.fullmatch(r'v(\d+)(?:(alpha|beta)(\d+))?', version)
    if not match:
        return 3, 0, 0
    stage = {'alpha': 2, 'beta': 1, None: 0}[match[2]]
    return stage, -int(match[1]), -int(match[3] or 0)

