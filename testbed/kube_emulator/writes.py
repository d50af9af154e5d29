"""Writes to the store as a real server makes them: create (system metadata, generateName,
admission, the Priority and ResourceQuota plugins, open namespaces), PUT and PATCH of an object,
its status or its scale (merge, JSON and strategic merge patches; resourceVersion and uid
preconditions; generation), server-side apply of what needs no field ownership, pods/binding,
and what the CRD controllers do once a CRD is stored (serve its resource, report it Established).

A main write never changes .status and a status write changes nothing else; system metadata
(uid, creationTimestamp, deletion fields, generation) is the server's alone.
"""
import copy
import datetime
import random
import uuid
from typing import Any

from testbed.kube_emulator.admission import admit, pod_quota_refusal
from testbed.kube_emulator.builtin_schema import definition_of
from testbed.kube_emulator.errors import ApiError, already_exists, bad_request, conflict, invalid, not_found, status_details
from testbed.kube_emulator.patches import applied_config, contained_in, json_patch, merge_patch, strategic_merge_patch
from testbed.kube_emulator.paths import set_at
from testbed.kube_emulator.reads import scale_view
from testbed.kube_emulator.resources import CRD_CLEANUP_FINALIZER, ResourceType, custom_resource_types
from testbed.kube_emulator.store import Store, blocking_finalizers, now_timestamp


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    """What generation tracks: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ('metadata', 'status', 'apiVersion', 'kind')}


def create(store: Store, rt: ResourceType, namespace: str | None, data: Any, params: dict[str, str],
           *, dry_run: bool = False) -> dict[str, Any]:
    """POST: the object with its system metadata, admitted, then stored (unless `dry_run`)."""
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
        _check_namespace_open(store, namespace)
        meta['namespace'] = namespace
    else:
        meta.pop('namespace', None)
    if not meta.get('name') and meta.get('generateName'):
        meta['name'] = meta['generateName'] + ''.join(random.choices('bcdfghjklmnpqrstvwxz2456789', k=5))
    name = meta.get('name')
    if not name:
        raise invalid(rt, '', [('metadata.name', 'Required value: name or generateName is required')])
    if (rt.group, rt.plural, namespace or '', name) in store.objects:
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
        _admit_pod_priority(store, obj)
    obj = admit(rt, obj, None, params)
    if rt.kind == 'Pod' and rt.group == '':
        _admit_pod_quota(store, obj)
    if dry_run:
        return obj
    created = store.commit(rt, 'ADDED', obj, None)
    _after_creation(store, rt, created)
    return created


def _admit_pod_priority(store: Store, pod: dict[str, Any]) -> None:
    """The Priority admission plugin: a pod's priorityClassName must exist; it sets spec.priority."""
    spec = pod.setdefault('spec', {})
    class_name = spec.get('priorityClassName')
    if not class_name:
        return
    priority_class = store.objects.get(('scheduling.k8s.io', 'priorityclasses', '', class_name))
    if priority_class is None:
        raise ApiError(403, 'Forbidden', f'pods "{pod["metadata"]["name"]}" is forbidden: no PriorityClass '
                       f'with name {class_name} was found', status_details(store.type('', 'v1', 'pods'), pod['metadata']['name']))
    spec['priority'] = priority_class.get('value', 0)
    spec.setdefault('preemptionPolicy', priority_class.get('preemptionPolicy', 'PreemptLowerPriority'))


def _admit_pod_quota(store: Store, pod: dict[str, Any]) -> None:
    """The ResourceQuota admission plugin, on the pods count (admission.pod_quota_refusal)."""
    namespace = pod['metadata']['namespace']
    refusal = pod_quota_refusal(
        pod, [q for q in store.all('', 'resourcequotas') if q['metadata']['namespace'] == namespace],
        [p for p in store.all('', 'pods') if p['metadata']['namespace'] == namespace],
        datetime.datetime.now(datetime.UTC))
    if refusal is not None:
        raise refusal


def _check_namespace_open(store: Store, namespace: str | None) -> None:
    ns_type = store.type('', 'v1', 'namespaces')
    ns = store.objects.get(('', 'namespaces', '', namespace or ''))
    if ns is None:
        raise not_found(ns_type, namespace or '')
    if ns['metadata'].get('deletionTimestamp'):
        raise ApiError(403, 'Forbidden', f'unable to create new content in namespace {namespace} '
                       f'because it is being terminated', status_details(ns_type, namespace))


def write(store: Store, rt: ResourceType, namespace: str | None, name: str, subresource: str | None,
          method: str, content_type: str, data: Any, params: dict[str, str],
          *, dry_run: bool = False) -> dict[str, Any]:
    """PUT or PATCH of an object, its status, or its scale."""
    old = store.get(rt, namespace, name)
    current = scale_view(rt, old) if subresource == 'scale' else store.view(rt, old)
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
        new['metadata'] = _kept_metadata(rt, old, wanted_meta)
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
          and not blocking_finalizers(rt, new)):
        stored = store.commit(rt, 'DELETED', new, old)  # the last finalizer is gone
    else:
        stored = store.commit(rt, 'MODIFIED', new, old)
        if rt.kind == 'CustomResourceDefinition' and rt.group == 'apiextensions.k8s.io':
            register_crd(store, stored)
    return scale_view(rt, stored) if subresource == 'scale' else store.view(rt, stored)


def apply(store: Store, rt: ResourceType, namespace: str | None, name: str, data: Any, params: dict[str, str],
          *, dry_run: bool = False) -> tuple[dict[str, Any], bool]:
    """Server-side apply after the request checks (patches.applied_config), and whether it
    created the object (a real server answers 201 then): an object that does not exist yet is
    created from the applied configuration; an existing object that already holds every value
    applied is answered as it is (a real server only adds the manager to managedFields, which
    this fake does not keep). Any other apply to an existing object needs field ownership to
    merge and to find conflicts: refused with 415 rather than merged in some other way."""
    config = applied_config(data, rt.api_version, name, params)
    existing = store.objects.get((rt.group, rt.plural, namespace or '', name))
    if existing is not None and contained_in({k: v for k, v in config.items() if k != 'status'}, existing):
        return store.view(rt, existing), False
    if existing is not None:
        raise ApiError(415, 'UnsupportedMediaType',
                       f'server-side apply to an existing object ({rt.qualified} "{name}") is not emulated by this '
                       f'fake API server (it keeps no managedFields); accepted media types include: '
                       f'application/json-patch+json, application/merge-patch+json'
                       + ('' if rt.is_custom else ', application/strategic-merge-patch+json'), {})
    return create(store, rt, namespace, config, params, dry_run=dry_run), True


def _kept_metadata(rt: ResourceType, old: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
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


def bind(store: Store, rt: ResourceType, namespace: str | None, name: str, data: Any) -> dict[str, Any]:
    """pods/binding: what a scheduler does to put a pod on a node."""
    pod = store.get(rt, namespace, name)
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
    store.commit(rt, 'MODIFIED', new, pod)
    return {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success', 'code': 201}


def _after_creation(store: Store, rt: ResourceType, obj: dict[str, Any]) -> None:
    if rt.kind == 'Namespace' and rt.group == '':
        sa_type = store.type('', 'v1', 'serviceaccounts')
        create(store, sa_type, obj['metadata']['name'], {'metadata': {'name': 'default'}}, {})
    if rt.kind == 'CustomResourceDefinition' and rt.group == 'apiextensions.k8s.io':
        register_crd(store, obj)


def register_crd(store: Store, crd: dict[str, Any]) -> None:
    """What the CRD controllers do: serve the resource, then report it Established."""
    spec = crd['spec']
    store_key = (spec['group'], spec['names']['plural'])
    if crd['metadata'].get('deletionTimestamp'):
        return
    for key in [k for k, t in store.types.items() if t.is_custom and t.store_key == store_key]:
        del store.types[key]
    for rt in custom_resource_types(crd):
        store.types[rt.group, rt.version, rt.plural] = rt
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
        store.commit(store.type('apiextensions.k8s.io', 'v1', 'customresourcedefinitions'), 'MODIFIED', new, crd)

