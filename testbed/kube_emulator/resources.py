"""Resource types: what the fake serves. One ResourceType per group/version/plural (its scope,
names, subresources, field selectors and, for custom resources, schema), the built-in kinds
served from the start (BUILTIN_TYPES, and no others: no ReplicaSets or StatefulSets, no CronJobs), the types a CRD
adds (custom_resource_types), and the few constants of a fresh server (its Kubernetes release,
initial namespaces, the CRD cleanup finalizer, the verbs discovery lists).
"""
import dataclasses
from typing import Any

from testbed.kube_emulator.crd_schema import crd_validator

KUBERNETES_VERSION = '1.32'  # the release the fake answers as, and whose built-in schemas it uses


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
    subresources: frozenset[str] = frozenset()  # of 'status', 'scale', 'binding', 'log', 'token', 'eviction'
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
             subresources={'status', 'binding', 'log', 'eviction'},
             field_selectors=('spec.nodeName', 'spec.restartPolicy', 'spec.schedulerName',
                              'spec.serviceAccountName', 'status.phase', 'status.podIP',
                              'status.nominatedNodeName')),
    _builtin('', 'v1', 'configmaps', 'ConfigMap', short_names=('cm',)),
    _builtin('', 'v1', 'resourcequotas', 'ResourceQuota', short_names=('quota',), subresources={'status'}),
    _builtin('', 'v1', 'secrets', 'Secret', field_selectors=('type',)),
    _builtin('', 'v1', 'serviceaccounts', 'ServiceAccount', short_names=('sa',), subresources={'token'}),
    _builtin('', 'v1', 'services', 'Service', short_names=('svc',), categories=('all',),
             subresources={'status'}),
    _builtin('', 'v1', 'events', 'Event', short_names=('ev',),
             field_selectors=('involvedObject.kind', 'involvedObject.namespace', 'involvedObject.name',
                              'involvedObject.uid', 'involvedObject.apiVersion',
                              'involvedObject.resourceVersion', 'involvedObject.fieldPath',
                              'reason', 'reportingComponent', 'source', 'type')),
    _builtin('coordination.k8s.io', 'v1', 'leases', 'Lease'),
    _builtin('batch', 'v1', 'jobs', 'Job', categories=('all',), subresources={'status'},
             field_selectors=('status.successful',), tracks_generation=True),
    _builtin('apps', 'v1', 'deployments', 'Deployment', short_names=('deploy',), categories=('all',),
             subresources={'status'}, tracks_generation=True),
    _builtin('policy', 'v1', 'poddisruptionbudgets', 'PodDisruptionBudget', short_names=('pdb',),
             subresources={'status'}, tracks_generation=True),
    _builtin('scheduling.k8s.io', 'v1', 'priorityclasses', 'PriorityClass', namespaced=False, short_names=('pc',)),
    _builtin('events.k8s.io', 'v1', 'events', 'Event', short_names=('ev',)),
    _builtin('rbac.authorization.k8s.io', 'v1', 'roles', 'Role'),
    _builtin('rbac.authorization.k8s.io', 'v1', 'rolebindings', 'RoleBinding'),
    _builtin('rbac.authorization.k8s.io', 'v1', 'clusterroles', 'ClusterRole', namespaced=False),
    _builtin('rbac.authorization.k8s.io', 'v1', 'clusterrolebindings', 'ClusterRoleBinding', namespaced=False),
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
