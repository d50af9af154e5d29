"""Admission: what the real registry does to an object before storing it -- prune unknown fields,
fill in the API defaults, validate against the schema, then the hand-written rules of the
built-in kinds and of CRD objects themselves. `admit` is the one entry point; it either
returns the object to store or raises the ApiError (400 under fieldValidation=Strict, 422
Invalid with its causes) that a real server answers with.
"""
import base64
import datetime
import re
from collections.abc import Iterable
from typing import Any

from testbed.kube_emulator.builtin_schema import builtin_errors, definition_of, prune_unknown_fields
from testbed.kube_emulator.crd_schema import cel_errors, list_type_errors, prune_and_default
from testbed.kube_emulator.errors import ApiError, bad_request, invalid, validation_causes
from testbed.kube_emulator.jobs import job_defaults, job_errors
from testbed.kube_emulator.resources import ResourceType
from testbed.kube_emulator.workloads import deployment_defaults, deployment_errors, pdb_defaults, pdb_errors


def admit(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None, params: dict[str, str]) -> dict[str, Any]:
    """Defaulting and validation, as the real registry does them before storing."""
    unknown: list[str] = []
    if rt.is_custom:
        obj = prune_and_default(obj, rt.schema or {}, unknown)
    else:
        obj = prune_unknown_fields(obj, definition_of(rt), unknown)
    if unknown and params.get('fieldValidation') == 'Strict':
        raise bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict '
                          f'decoding error: ' + ', '.join(f'unknown field "{field}"' for field in unknown))
    if rt.is_custom:
        body = {key: value for key, value in obj.items() if key not in ('apiVersion', 'kind', 'metadata')}
        errors = (validation_causes(rt.validator, body) or list_type_errors(obj, rt.schema or {})
                  or cel_errors(obj, old, rt.schema or {}))
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


def _builtin_defaults(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """The API defaults a real server fills in for the built-in kinds we serve."""
    if rt.kind == 'Namespace' and rt.group == '':
        obj['metadata'].setdefault('labels', {})['kubernetes.io/metadata.name'] = obj['metadata']['name']
        if old is None:
            obj['spec'] = {'finalizers': ['kubernetes']}
            obj['status'] = {'phase': 'Active'}
    if rt.kind == 'Pod' and rt.group == '' and old is None:
        spec = obj.setdefault('spec', {})
        _pod_spec_defaults(spec)
        for key, value in (('serviceAccountName', 'default'), ('serviceAccount', 'default'), ('priority', 0),
                           ('preemptionPolicy', 'PreemptLowerPriority')):  # admission plugins, pods only
            spec.setdefault(key, value)
        tolerations = spec.setdefault('tolerations', [])
        for taint in ('node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable'):
            if not any(t.get('key') == taint for t in tolerations):
                tolerations.append({'key': taint, 'operator': 'Exists', 'effect': 'NoExecute', 'tolerationSeconds': 300})
        requests = [c.get('resources') or {} for c in spec.get('containers') or []]
        qos = ('BestEffort' if not any(r.get('requests') or r.get('limits') for r in requests) else
               'Guaranteed' if all(r.get('limits') and all(r['limits'].get(k) and (r.get('requests') or r['limits']).get(k) == r['limits'][k]
                                                          for k in ('cpu', 'memory')) for r in requests) else 'Burstable')
        obj['status'] = {'phase': 'Pending', 'qosClass': qos}
    if rt.kind == 'Service' and old is None:
        obj['status'] = {'loadBalancer': {}}
    if rt.kind == 'Secret' and rt.group == '' and 'stringData' in obj:
        # Convert_v1_Secret_To_core_Secret: stringData is write-only; its entries land in data
        # (base64, as data is served), winning over data's entries of the same key.
        data = obj.setdefault('data', {}) or {}
        for key, text in (obj.pop('stringData') or {}).items():
            data[key] = base64.b64encode(str(text).encode()).decode()
        obj['data'] = data
    if rt.kind == 'Job' and rt.group == 'batch':
        _pod_spec_defaults(obj.setdefault('spec', {}).setdefault('template', {}).setdefault('spec', {}))
        obj = job_defaults(obj, created=old is None)
    if rt.kind == 'Deployment' and rt.group == 'apps':
        _pod_spec_defaults(obj.setdefault('spec', {}).setdefault('template', {}).setdefault('spec', {}))
        obj = deployment_defaults(obj, created=old is None)
    if rt.kind == 'PodDisruptionBudget' and rt.group == 'policy':
        obj = pdb_defaults(obj, created=old is None)
    return obj


def _pod_spec_defaults(spec: dict[str, Any]) -> None:
    """The defaults of a PodSpec (SetDefaults_PodSpec, SetDefaults_Container): pods and pod templates."""
    for key, value in (('restartPolicy', 'Always'), ('terminationGracePeriodSeconds', 30),
                       ('dnsPolicy', 'ClusterFirst'), ('schedulerName', 'default-scheduler'),
                       ('securityContext', {}), ('enableServiceLinks', True)):
        spec.setdefault(key, value)
    for container in spec.get('containers') or []:
        image = container.get('image') or ''
        latest = ':' not in image.rsplit('/', 1)[-1] or image.endswith(':latest')
        container.setdefault('imagePullPolicy', 'Always' if latest else 'IfNotPresent')
        container.setdefault('terminationMessagePath', '/dev/termination-log')
        container.setdefault('terminationMessagePolicy', 'File')
        container.setdefault('resources', {})


_MUTABLE_POD_SPEC = ('activeDeadlineSeconds', 'tolerations', 'schedulingGates')


_CONFIG_KEY = re.compile(r'[-._a-zA-Z0-9]+')
_MAX_SECRET_BYTES = 1024 * 1024


def _builtin_rules(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The few semantic rules of built-in kinds that our tests could trip over."""
    errors: list[tuple[str, str]] = []
    if rt.kind in ('Secret', 'ConfigMap') and rt.group == '':
        data = {**(obj.get('data') or {}), **(obj.get('binaryData') or {})}
        for key in data:
            if not _CONFIG_KEY.fullmatch(key) or len(key) > 253:
                errors.append((f'data[{key}]', f'Invalid value: "{key}": a valid config key must consist of '
                               "alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or "
                               "'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"))
        size = sum(len(base64.b64decode(v)) if rt.kind == 'Secret' else len(str(v).encode())
                   for v in data.values())
        if size > _MAX_SECRET_BYTES:
            errors.append(('data', f'Too long: must have at most {_MAX_SECRET_BYTES} bytes'))
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
    if rt.kind == 'Job' and rt.group == 'batch':
        errors += job_errors(obj, old)
    if rt.kind == 'Deployment' and rt.group == 'apps':
        errors += deployment_errors(obj, old)
    if rt.kind == 'PodDisruptionBudget' and rt.group == 'policy':
        errors += pdb_errors(obj)
    if rt.kind in ('RoleBinding', 'ClusterRoleBinding') and old is not None and obj.get('roleRef') != old.get('roleRef'):
        ref = obj.get('roleRef') or {}
        errors.append(('roleRef', f'Invalid value: rbac.RoleRef{{APIGroup:"{ref.get("apiGroup", "")}", '
                                  f'Kind:"{ref.get("kind", "")}", Name:"{ref.get("name", "")}"}}: cannot change roleRef'))
    if rt.kind == 'ConfigMap' and old is not None and old.get('immutable') and (
            obj.get('data') != old.get('data') or obj.get('binaryData') != old.get('binaryData')):
        errors.append(('data', 'Forbidden: field is immutable when `immutable` is set'))
    return errors


def _crd_errors(crd: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    """What the apiextensions registry refuses in a CRD object itself: missing names or versions,
    not exactly one storage version, a name other than PLURAL.GROUP, a changed group or scope."""
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


def pod_quota_refusal(pod: dict[str, Any], quotas: Iterable[dict[str, Any]],
                      pods_in_namespace: Iterable[dict[str, Any]], now: datetime.datetime) -> ApiError | None:
    """The ResourceQuota admission plugin for a pod being created, on the `pods` count only: the
    403 a real server answers when a ResourceQuota of the pod's namespace has `spec.hard.pods`
    (or `count/pods`) and the pods it counts already reach it; None when the pod is admitted.

    As the real plugin, it runs after validation (an invalid pod is refused as Invalid first) and
    counts what the quota's `status.used.pods` holds on a real server: the namespace's pods that
    are not terminal (phase Succeeded or Failed) and not stuck terminating (past their
    deletionTimestamp plus grace period). Not modelled: quotas with scopes or a scopeSelector
    (skipped), the other resources (cpu, memory, ...), and the quota's status (not written).
    """
    counted = sum(1 for other in pods_in_namespace if _charged_to_quota(other, now))
    for quota in sorted(quotas, key=lambda q: q['metadata']['name']):
        spec = quota.get('spec') or {}
        if spec.get('scopes') or spec.get('scopeSelector'):
            continue
        for resource in ('pods', 'count/pods'):
            hard = (spec.get('hard') or {}).get(resource)
            if hard is not None and counted + 1 > int(hard):
                name = pod['metadata'].get('name') or ''
                return ApiError(403, 'Forbidden',
                                f'pods "{name}" is forbidden: exceeded quota: {quota["metadata"]["name"]}, '
                                f'requested: {resource}=1, used: {resource}={counted}, limited: {resource}={hard}',
                                {'name': name, 'kind': 'pods'})
    return None


def _charged_to_quota(pod: dict[str, Any], now: datetime.datetime) -> bool:
    """Whether a pod counts towards the `pods` quota (Kubernetes' QuotaV1Pod)."""
    if (pod.get('status') or {}).get('phase') in ('Succeeded', 'Failed'):
        return False
    meta = pod['metadata']
    if meta.get('deletionTimestamp') and meta.get('deletionGracePeriodSeconds') is not None:
        deletion = datetime.datetime.fromisoformat(meta['deletionTimestamp'].replace('Z', '+00:00'))
        if now > deletion + datetime.timedelta(seconds=meta['deletionGracePeriodSeconds']):
            return False
    return True
