"""The Kubernetes API the integration tests run against behaves as a real API server does where
our operator, kopf and kubectl depend on it.

Every test is written against the Kubernetes API contract, never against the fake: run with
KUBECONFIG pointing at a real cluster (kind, or any API server) and the same tests must pass.
Without KUBECONFIG they run against the test bed's real control plane (testbed/control_plane.py).
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.kube_client import KubeAPIError, resource_path, restricted_container
from testbed.kubelet import FakeKubelet, PodState, state_of
from testbed.waiting import wait_for
from tests.support.kube_api import KubeAPI

REPO = Path(__file__).resolve().parents[2]
PROJECT_CRD = REPO / 'crds' / 'ironicshards.io_ironiccomputeshards.yaml'
GROUP = 'kube-api.tests.ironicshards.io'
WIDGETS = f'{GROUP}/v1'
WIDGET_CRD = {
    'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
    'metadata': {'name': f'widgets.{GROUP}'},
    'spec': {
        'group': GROUP, 'scope': 'Namespaced',
        'names': {'plural': 'widgets', 'singular': 'widget', 'kind': 'Widget', 'shortNames': ['wdg']},
        'versions': [{
            'name': 'v1', 'served': True, 'storage': True,
            'subresources': {'status': {}, 'scale': {'specReplicasPath': '.spec.replicas',
                                                     'statusReplicasPath': '.status.replicas'}},
            'additionalPrinterColumns': [{'name': 'Replicas', 'type': 'integer', 'jsonPath': '.spec.replicas'},
                                         {'name': 'Age', 'type': 'date', 'jsonPath': '.metadata.creationTimestamp'}],
            'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
                'spec': {'type': 'object', 'properties': {
                    'replicas': {'type': 'integer', 'minimum': 0, 'default': 1},
                    'size': {'type': 'string', 'enum': ['small', 'large']},
                    'tags': {'type': 'array', 'x-kubernetes-list-type': 'set', 'items': {'type': 'string'}},
                    'ports': {'type': 'array', 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['name'],
                              'items': {'type': 'object', 'required': ['name'], 'properties': {
                                  'name': {'type': 'string'}, 'port': {'type': 'integer'}}}}}},
                'status': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}},
        }],
    },
}


def configmap(name: str, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': name, 'labels': labels or {}},
            'data': {'key': 'value'}, **extra}


def pod(name: str, **metadata: Any) -> dict[str, Any]:
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name, **metadata},
            'spec': {'containers': [restricted_container('main', 'registry.k8s.io/pause:3.10')],
                     'terminationGracePeriodSeconds': 5}}


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {'apiVersion': WIDGETS, 'kind': 'Widget', 'metadata': {'name': name}, 'spec': spec}


@pytest.fixture(scope='module')
def widgets(kube_api: KubeAPI) -> Iterator[str]:
    """A throwaway CRD with status and scale subresources; deleted after the module."""
    client = kube_api.client
    try:
        client.create('/apis/apiextensions.k8s.io/v1/customresourcedefinitions', WIDGET_CRD)
    except KubeAPIError as e:
        if e.status != 409:  # left by an interrupted run against a real cluster
            raise

    def established() -> bool:
        crd = client.get(f'/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{GROUP}')
        return any(c['type'] == 'Established' and c['status'] == 'True'
                   for c in (crd.get('status') or {}).get('conditions') or [])
    wait_for(established, what='the Widget CRD to be Established')
    wait_for(lambda: any(r['name'] == 'widgets' for r in client.get(f'/apis/{WIDGETS}')['resources']),
             what='the Widget resource in discovery')
    yield 'widgets'
    client.delete(f'/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{GROUP}')


# -- objects, metadata, errors ---------------------------------------------------------------

def test_writes_stamp_metadata_and_noop_writes_change_nothing(kube_api: KubeAPI, kube_namespace: str) -> None:
    client = kube_api.client
    path = resource_path('v1', 'configmaps', kube_namespace)
    created = client.create(path, configmap('stamped'))
    meta = created['metadata']
    assert meta['uid'] and meta['creationTimestamp'] and int(meta['resourceVersion']) > 0

    changed = client.patch(f'{path}/stamped', {'data': {'key': 'other'}})
    assert int(changed['metadata']['resourceVersion']) > int(meta['resourceVersion'])
    assert changed['metadata']['uid'] == meta['uid']
    assert changed['metadata']['creationTimestamp'] == meta['creationTimestamp']

    unchanged = client.patch(f'{path}/stamped', {'data': {'key': 'other'}})
    assert unchanged['metadata']['resourceVersion'] == changed['metadata']['resourceVersion']


def test_errors_are_status_objects_with_the_real_reasons(kube_api: KubeAPI, kube_namespace: str) -> None:
    client = kube_api.client
    path = resource_path('v1', 'configmaps', kube_namespace)
    first = client.create(path, configmap('only-once'))

    with pytest.raises(KubeAPIError) as exists:
        client.create(path, configmap('only-once'))
    assert (exists.value.status, exists.value.reason) == (409, 'AlreadyExists')

    with pytest.raises(KubeAPIError) as missing:
        client.get(f'{path}/never-made')
    assert (missing.value.status, missing.value.reason) == (404, 'NotFound')
    assert missing.value.body['kind'] == 'Status'
    assert missing.value.body['details'] == {'name': 'never-made', 'kind': 'configmaps'}

    client.patch(f'{path}/only-once', {'data': {'key': 'moved on'}})
    stale = dict(first, data={'key': 'stale write'})
    with pytest.raises(KubeAPIError) as conflict:
        client.replace(f'{path}/only-once', stale)
    assert (conflict.value.status, conflict.value.reason) == (409, 'Conflict')
    assert client.get(f'{path}/only-once')['data'] == {'key': 'moved on'}

    with pytest.raises(KubeAPIError) as no_namespace:
        client.create(resource_path('v1', 'configmaps', 'no-such-namespace-here'), configmap('orphan'))
    assert (no_namespace.value.status, no_namespace.value.reason) == (404, 'NotFound')


def test_unknown_fields_are_dropped_or_refused_when_strict(kube_api: KubeAPI, kube_namespace: str) -> None:
    client = kube_api.client
    path = resource_path('v1', 'configmaps', kube_namespace)
    created = client.create(path, configmap('loose', dta={'typo': 'here'}))
    assert 'dta' not in created and 'dta' not in client.get(f'{path}/loose')

    with pytest.raises(KubeAPIError) as strict:
        client.create(path, configmap('strict', dta={'typo': 'here'}), fieldValidation='Strict')
    assert strict.value.status == 400 and 'unknown field "dta"' in strict.value.body['message']
    typo = yaml.safe_dump(configmap('typo', dta={'a': 'b'}))
    refused = kube_api.kubectl('apply', '-f', '-', '--namespace', kube_namespace, input=typo, check=False)
    assert refused.returncode != 0 and 'unknown field "dta"' in refused.stderr


def test_lists_select_by_labels_and_fields(kube_api: KubeAPI, kube_namespace: str) -> None:
    client = kube_api.client
    path = resource_path('v1', 'configmaps', kube_namespace)
    client.create(path, configmap('a', {'pool': 'rack-a', 'member': '0'}))
    client.create(path, configmap('b', {'pool': 'rack-a', 'member': '1'}))
    client.create(path, configmap('c', {'pool': 'rack-b'}))

    def names(**params: str) -> list[str]:
        listing = client.get(path, **params)
        assert listing['kind'] == 'ConfigMapList' and listing['metadata']['resourceVersion']
        return sorted(item['metadata']['name'] for item in listing['items'] if item['metadata']['name'] != 'kube-root-ca.crt')

    assert names(labelSelector='pool=rack-a') == ['a', 'b']
    assert names(labelSelector='pool!=rack-a') == ['c']
    assert names(labelSelector='pool in (rack-a,rack-b),member notin (1)') == ['a', 'c']
    assert names(labelSelector='member') == ['a', 'b']
    assert names(labelSelector='!member,pool') == ['c']
    assert names(fieldSelector='metadata.name=b') == ['b']
    assert names(labelSelector='pool=rack-a', fieldSelector='metadata.name!=a') == ['b']


def test_watch_streams_changes_after_a_resource_version(kube_api: KubeAPI, kube_namespace: str) -> None:
    client = kube_api.client
    path = resource_path('v1', 'configmaps', kube_namespace)
    since = client.get(path)['metadata']['resourceVersion']
    client.create(path, configmap('watched', {'pool': 'rack-a'}))
    client.patch(f'{path}/watched', {'data': {'key': 'changed'}})
    client.patch(f'{path}/watched', {'metadata': {'labels': {'pool': 'rack-b'}}})  # leaves the selection
    client.delete(f'{path}/watched')

    everything = [(e['type'], e['object']['metadata']['name']) for e in
                  client.watch(path, timeout_seconds=2, resourceVersion=since, allowWatchBookmarks='true')
                  if e['type'] != 'BOOKMARK']
    assert everything == [('ADDED', 'watched'), ('MODIFIED', 'watched'), ('MODIFIED', 'watched'), ('DELETED', 'watched')]

    selected = [e['type'] for e in client.watch(path, timeout_seconds=2, resourceVersion=since,
                                                  labelSelector='pool=rack-a') if e['type'] != 'BOOKMARK']
    assert selected == ['ADDED', 'MODIFIED', 'DELETED']  # relabelled away: gone from this watch


# -- custom resources: status, generation, scale, patches -------------------------------------

def test_status_subresource_separates_spec_from_status(kube_api: KubeAPI, kube_namespace: str, widgets: str) -> None:
    client = kube_api.client
    path = resource_path(WIDGETS, widgets, kube_namespace)
    created = client.create(path, dict(widget('w', size='small'), status={'phase': 'made up'}))
    assert 'status' not in created  # status is written through /status only
    assert created['spec'] == {'size': 'small', 'replicas': 1}  # the schema's default
    assert created['metadata']['generation'] == 1

    status = client.patch(f'{path}/w/status', {'spec': {'size': 'large'}, 'status': {'phase': 'Ready'}})
    assert status['status'] == {'phase': 'Ready'} and status['spec']['size'] == 'small'
    assert status['metadata']['generation'] == 1

    main = client.patch(f'{path}/w', {'spec': {'size': 'large'}, 'status': {'phase': 'ignored'}})
    assert main['status'] == {'phase': 'Ready'} and main['spec']['size'] == 'large'
    assert main['metadata']['generation'] == 2

    labelled = client.patch(f'{path}/w', {'metadata': {'labels': {'a': 'b'}}})
    assert labelled['metadata']['generation'] == 2


def test_patch_kinds_and_their_failures(kube_api: KubeAPI, kube_namespace: str, widgets: str) -> None:
    client = kube_api.client
    path = resource_path(WIDGETS, widgets, kube_namespace)
    made = client.create(path, widget('p', size='small', replicas=2))

    merged = client.patch(f'{path}/p', {'spec': {'size': None}})
    assert merged['spec'] == {'replicas': 2}

    rv = merged['metadata']['resourceVersion']
    patched = client.patch(f'{path}/p', [{'op': 'test', 'path': '/metadata/resourceVersion', 'value': rv},
                                         {'op': 'add', 'path': '/metadata/finalizers', 'value': ['x.io/hold']}], 'json')
    assert patched['metadata']['finalizers'] == ['x.io/hold']
    with pytest.raises(KubeAPIError) as stale:  # kopf relies on this being 422
        client.patch(f'{path}/p', [{'op': 'test', 'path': '/metadata/resourceVersion', 'value': rv},
                                   {'op': 'remove', 'path': '/metadata/finalizers'}], 'json')
    assert stale.value.status == 422

    with pytest.raises(KubeAPIError) as invalid:
        client.patch(f'{path}/p', {'spec': {'size': 'enormous'}})
    assert (invalid.value.status, invalid.value.reason) == (422, 'Invalid')
    with pytest.raises(KubeAPIError) as unsupported:  # custom resources have no strategic merge
        client.patch(f'{path}/p', {'spec': {'size': 'large'}}, 'strategic')
    assert unsupported.value.status == 415
    client.patch(f'{path}/p', [{'op': 'remove', 'path': '/metadata/finalizers'}], 'json')
    assert made['metadata']['uid'] == client.get(f'{path}/p')['metadata']['uid']


def test_set_and_map_lists_refuse_an_item_twice(kube_api: KubeAPI, kube_namespace: str, widgets: str) -> None:
    """`x-kubernetes-list-type: set` and `map` lists are checked as a real server checks them."""
    client = kube_api.client
    path = resource_path(WIDGETS, widgets, kube_namespace)
    client.create(path, widget('lists', tags=['a', 'b'], ports=[{'name': 'http', 'port': 80}, {'name': 'https'}]))
    for name, spec, field, value in (
            ('twice', {'tags': ['a', 'b', 'a']}, 'spec.tags[2]', 'Duplicate value: "a"'),
            ('ports', {'ports': [{'name': 'http', 'port': 80}, {'name': 'http', 'port': 8080}]}, 'spec.ports[1]',
             'Duplicate value: {"name":"http"}')):
        with pytest.raises(KubeAPIError) as refused:
            client.create(path, widget(name, **spec))
        assert (refused.value.status, refused.value.reason) == (422, 'Invalid')
        assert f'{field}: {value}' in refused.value.body['message']


def test_scale_subresource_reads_and_writes_the_replicas(kube_api: KubeAPI, kube_namespace: str, widgets: str) -> None:
    client = kube_api.client
    path = resource_path(WIDGETS, widgets, kube_namespace)
    client.create(path, widget('s', replicas=3))
    client.patch(f'{path}/s/status', {'status': {'replicas': 2}})

    scale = client.get(f'{path}/s/scale')
    assert (scale['apiVersion'], scale['kind']) == ('autoscaling/v1', 'Scale')
    assert (scale['spec']['replicas'], scale['status']['replicas']) == (3, 2)

    client.patch(f'{path}/s/scale', {'spec': {'replicas': 5}})
    scaled = client.get(f'{path}/s')
    assert scaled['spec']['replicas'] == 5 and scaled['metadata']['generation'] == 2


def test_strategic_merge_patch_merges_built_in_lists_by_key(kube_api: KubeAPI, kube_namespace: str) -> None:
    client = kube_api.client
    path = resource_path('v1', 'pods', kube_namespace)
    made = pod('smp')
    made['spec']['containers'].append(restricted_container('side', 'registry.k8s.io/pause:3.9'))
    client.create(path, made)

    patched = client.patch(f'{path}/smp', {'spec': {'containers': [restricted_container('side', 'registry.k8s.io/pause:3.10')]}},
                           'strategic')
    images = {c['name']: c['image'] for c in patched['spec']['containers']}
    assert images == {'main': 'registry.k8s.io/pause:3.10', 'side': 'registry.k8s.io/pause:3.10'}

    with pytest.raises(KubeAPIError) as forbidden:  # a pod's spec is immutable but for images
        client.patch(f'{path}/smp', {'spec': {'restartPolicy': 'Never'}}, 'strategic')
    assert (forbidden.value.status, forbidden.value.reason) == (422, 'Invalid')


# -- deletion: finalizers, garbage collection, namespaces -------------------------------------

def test_finalizers_hold_a_deletion_until_they_are_removed(kube_api: KubeAPI, kube_namespace: str, widgets: str) -> None:
    client = kube_api.client
    path = resource_path(WIDGETS, widgets, kube_namespace)
    client.create(path, dict(widget('held'), metadata={'name': 'held', 'finalizers': ['x.io/hold']}))

    client.delete(f'{path}/held')
    held = client.get(f'{path}/held')
    assert held['metadata']['deletionTimestamp'] and held['metadata']['finalizers'] == ['x.io/hold']
    with pytest.raises(KubeAPIError) as refused:
        client.patch(f'{path}/held', {'metadata': {'finalizers': ['x.io/hold', 'x.io/another']}})
    assert refused.value.status == 422

    client.patch(f'{path}/held', {'metadata': {'finalizers': None}})
    wait_for(lambda: not client.exists(f'{path}/held'), what='the widget to go once unblocked')


def test_deleting_an_owner_collects_its_dependents(kube_api: KubeAPI, kube_namespace: str, widgets: str) -> None:
    client = kube_api.client
    owners = resource_path(WIDGETS, widgets, kube_namespace)
    owner = client.create(owners, widget('owner'))
    keeper = client.create(owners, widget('keeper'))

    def ref(obj: dict[str, Any]) -> dict[str, Any]:
        return {'apiVersion': WIDGETS, 'kind': 'Widget', 'name': obj['metadata']['name'], 'uid': obj['metadata']['uid']}
    pods = resource_path('v1', 'pods', kube_namespace)
    configmaps = resource_path('v1', 'configmaps', kube_namespace)
    client.create(pods, pod('dependent-pod', ownerReferences=[ref(owner)]))
    client.create(configmaps, dict(configmap('dependent-cm'), metadata={'name': 'dependent-cm', 'ownerReferences': [ref(owner)]}))
    client.create(configmaps, dict(configmap('shared-cm'), metadata={'name': 'shared-cm', 'ownerReferences': [ref(owner), ref(keeper)]}))

    client.delete(f'{owners}/owner', propagationPolicy='Background')
    wait_for(lambda: not client.exists(f'{pods}/dependent-pod') and not client.exists(f'{configmaps}/dependent-cm'),
             what='the dependents of the deleted owner to be collected')
    shared = wait_for(lambda: (lambda cm: cm if len(cm['metadata']['ownerReferences']) == 1 else None)(
        client.get(f'{configmaps}/shared-cm')), what='the dangling owner reference to be dropped')
    assert shared['metadata']['ownerReferences'][0]['uid'] == keeper['metadata']['uid']


def test_deleting_a_namespace_deletes_what_it_holds(kube_api: KubeAPI) -> None:
    client = kube_api.client
    namespace = kube_api.create_namespace('drained')
    configmaps = resource_path('v1', 'configmaps', namespace)
    client.create(configmaps, dict(configmap('held'), metadata={'name': 'held', 'finalizers': ['x.io/hold']}))
    client.create(resource_path('v1', 'pods', namespace), pod('inside'))

    kube_api.delete_namespace(namespace)
    wait_for(lambda: client.get(f'{configmaps}/held')['metadata'].get('deletionTimestamp'),
             what='the namespace controller to delete its contents')
    assert client.get(f'/api/v1/namespaces/{namespace}')['status']['phase'] == 'Terminating'
    with pytest.raises(KubeAPIError) as refused:
        client.create(configmaps, configmap('late'))
    assert refused.value.status == 403

    client.patch(f'{configmaps}/held', {'metadata': {'finalizers': None}})  # the last thing holding it
    wait_for(lambda: not client.exists(f'/api/v1/namespaces/{namespace}'), timeout=120, what='the namespace to be drained')


# -- pods and the fake kubelet -----------------------------------------------------------------

def test_kubelet_binds_runs_readies_and_finishes_deleted_pods(kube_api: KubeAPI, kube_namespace: str,
                                                              kubelet: FakeKubelet) -> None:
    client = kube_api.client
    path = resource_path('v1', 'pods', kube_namespace)
    spread = {'podAntiAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': [{
        'labelSelector': {'matchLabels': {'app': 'member'}}, 'topologyKey': 'kubernetes.io/hostname'}]}}
    for i in range(3):
        member = pod(f'member-{i}', labels={'app': 'member'})
        member['spec']['affinity'] = spread
        client.create(path, member)

    def ready_pods() -> list[dict[str, Any]] | None:
        ready = [p for p in client.get(path)['items'] if state_of(p) == PodState.READY]
        return ready if len(ready) == 3 else None
    running = wait_for(ready_pods, what='three Ready pods')
    assert sorted(p['spec']['nodeName'] for p in running) == sorted(kubelet.nodes)  # the scheduler honoured the anti-affinity
    conditions = {c['type']: c for c in running[0]['status']['conditions']}
    assert {k: c['status'] for k, c in conditions.items()} == {
        'PodScheduled': 'True', 'Initialized': 'True', 'ContainersReady': 'True', 'Ready': 'True'}
    assert conditions['Ready']['lastTransitionTime']
    assert running[0]['status']['phase'] == 'Running' and running[0]['status']['containerStatuses'][0]['ready']

    client.delete(f'{path}/member-0')
    wait_for(lambda: not client.exists(f'{path}/member-0'), what='the kubelet to finish the graceful deletion')


def test_kubelet_commands_change_only_pod_status(kube_api: KubeAPI, kube_namespace: str, kubelet: FakeKubelet) -> None:
    client = kube_api.client
    path = resource_path('v1', 'pods', kube_namespace)
    kubelet.hold('late')
    for name in ('failing', 'flaky', 'crashing', 'late'):
        client.create(path, pod(name))
    wait_for(lambda: all(state_of(client.get(f'{path}/{n}')) == PodState.READY for n in ('failing', 'flaky', 'crashing')),
             what='pods Ready by policy')
    spec_before = client.get(f'{path}/failing')['spec']

    failed = kubelet.fail('failing')
    assert failed['status']['phase'] == 'Failed' and state_of(failed) == PodState.FAILED
    assert failed['spec'] == spec_before
    assert state_of(kubelet.not_ready('flaky')) == PodState.NOT_READY
    crashing = kubelet.crash_loop('crashing')
    assert crashing['status']['containerStatuses'][0]['restartCount'] == 1
    assert state_of(client.get(f'{path}/late')) == PodState.PENDING
    assert state_of(kubelet.ready('late')) == PodState.READY
    assert state_of(kubelet.ready('flaky')) == PodState.READY

    client.delete(f'{path}/failing')  # a failed pod goes at once: no kubelet needed
    assert not client.exists(f'{path}/failing')


def test_an_unreachable_node_keeps_its_pods_until_forced(kube_api: KubeAPI, kube_namespace: str,
                                                         kubelet: FakeKubelet) -> None:
    client = kube_api.client
    path = resource_path('v1', 'pods', kube_namespace)
    client.create(path, pod('stranded'))
    node = wait_for(lambda: state_of(client.get(f'{path}/stranded')) == PodState.READY
                    and client.get(f'{path}/stranded')['spec']['nodeName'], what='a Ready pod')

    kubelet.set_node_reachable(node, False)
    taints = {(t['key'], t['effect']) for t in client.get(f'/api/v1/nodes/{node}')['spec']['taints']}
    assert {('node.kubernetes.io/unreachable', 'NoSchedule'), ('node.kubernetes.io/unreachable', 'NoExecute')} <= taints
    assert state_of(client.get(f'{path}/stranded')) == PodState.NOT_READY
    client.delete(f'{path}/stranded')
    assert client.get(f'{path}/stranded')['metadata']['deletionTimestamp']  # nobody finishes it

    client.delete(f'{path}/stranded', gracePeriodSeconds=0)  # a force deletion, as fencing does
    assert not client.exists(f'{path}/stranded')


# -- discovery, kubectl, kopf --------------------------------------------------------------------

def test_discovery_serves_the_kinds_the_operator_uses(kube_api: KubeAPI, widgets: str) -> None:
    client = kube_api.client
    assert int(client.get('/version')['major']) == 1
    assert 'v1' in client.get('/api')['versions']
    core = {r['name'] for r in client.get('/api/v1')['resources']}
    assert {'pods', 'pods/status', 'pods/binding', 'configmaps', 'secrets', 'events', 'namespaces',
            'nodes', 'nodes/status', 'services'} <= core
    groups = {g['name'] for g in client.get('/apis')['groups']}
    assert {'coordination.k8s.io', 'events.k8s.io', 'apiextensions.k8s.io', GROUP} <= groups
    assert 'leases' in {r['name'] for r in client.get('/apis/coordination.k8s.io/v1')['resources']}
    served = {r['name']: r for r in client.get(f'/apis/{WIDGETS}')['resources']}
    assert {'widgets', 'widgets/status', 'widgets/scale'} <= set(served)
    assert (served['widgets/scale']['group'], served['widgets/scale']['kind']) == ('autoscaling', 'Scale')


def test_kubectl_manages_built_in_kinds(kube_api: KubeAPI, kube_namespace: str) -> None:
    ns = ['--namespace', kube_namespace]
    kube_api.kubectl('create', 'secret', 'generic', 'nova-config', '--from-literal=nova.conf=[DEFAULT]', *ns)
    kube_api.kubectl('create', 'configmap', 'overlay', '--from-literal=a=b', *ns)
    kube_api.kubectl('label', 'configmap', 'overlay', 'pool=rack-a', *ns)
    listed = kube_api.kubectl('get', 'configmaps', '-l', 'pool=rack-a', '-o', 'name', *ns).stdout.split()
    assert listed == ['configmap/overlay']
    secret = json.loads(kube_api.kubectl('get', 'secret', 'nova-config', '-o', 'json', *ns).stdout)
    assert secret['data'] == {'nova.conf': 'W0RFRkFVTFRd'}  # base64 of "[DEFAULT]"

    manifest = yaml.safe_dump(pod('applied'))
    kube_api.kubectl('apply', '-f', '-', *ns, input=manifest)
    kube_api.kubectl('apply', '-f', '-', *ns, input=manifest)  # unchanged: a no-op
    assert 'applied' in kube_api.kubectl('get', 'pods', *ns).stdout
    kube_api.kubectl('delete', 'configmap', 'overlay', *ns)
    refused = kube_api.kubectl('get', 'configmap', 'overlay', *ns, check=False)
    assert refused.returncode != 0 and 'NotFound' in refused.stderr


def test_kubectl_applies_gets_scales_and_deletes_custom_resources(kube_api: KubeAPI, kube_namespace: str,
                                                                  widgets: str) -> None:
    ns = ['--namespace', kube_namespace]
    kube_api.kubectl('apply', '-f', '-', *ns, input=yaml.safe_dump(widget('k', size='small', replicas=2)))
    table = kube_api.kubectl('get', 'wdg', *ns).stdout
    assert table.split('\n')[0].split() == ['NAME', 'REPLICAS', 'AGE'] and 'k' in table

    kube_api.kubectl('scale', 'widget/k', '--replicas=4', *ns)
    got = json.loads(kube_api.kubectl('get', 'widget', 'k', '-o', 'json', *ns).stdout)
    assert got['spec']['replicas'] == 4 and got['metadata']['generation'] == 2

    refused = kube_api.kubectl('apply', '-f', '-', *ns, check=False,
                               input=yaml.safe_dump(widget('k', size='enormous', replicas=2)))
    assert refused.returncode != 0 and 'size' in refused.stderr

    kube_api.kubectl('delete', 'widget', 'k', *ns)
    assert 'k' not in kube_api.kubectl('get', 'widgets', '-o', 'name', *ns).stdout


@pytest.mark.skipif(not PROJECT_CRD.exists(), reason=f'{PROJECT_CRD.name} is not in the repository yet')
def test_project_crd_serves_its_resource_with_status_and_scale(kube_api: KubeAPI, kube_namespace: str) -> None:
    """Left installed afterwards: it is the product's own CRD, which the operator tests use too."""
    kube_api.kubectl('apply', '-f', str(PROJECT_CRD))
    kube_api.kubectl('wait', '--for=condition=Established', '--timeout=60s',
                     'crd/ironiccomputeshards.ironicshards.io')
    served = {r['name'] for r in kube_api.client.get('/apis/ironicshards.io/v1alpha1')['resources']}
    assert {'ironiccomputeshards', 'ironiccomputeshards/status', 'ironiccomputeshards/scale'} <= served

    ns = ['--namespace', kube_namespace]
    kube_api.kubectl('apply', '-f', str(REPO / 'examples' / 'minimal.yaml'), *ns)
    kube_api.kubectl('scale', 'ics/rack-a', '--replicas=5', *ns)
    got = json.loads(kube_api.kubectl('get', 'ics', 'rack-a', '-o', 'json', *ns).stdout)
    assert got['spec']['replicas'] == 5

    both = kube_api.kubectl('patch', 'ics', 'rack-a', '--type=merge', '-p', '{"spec":{"autoscale":{}}}', *ns, check=False)
    assert both.returncode != 0 and 'mutually exclusive' in both.stderr  # a CEL rule of the CRD


KOPF_OPERATOR = f'''
import kopf

@kopf.on.create("{GROUP}", "v1", "widgets")
def created(spec, body, patch, **_):
    patch.status["size"] = spec.get("size")
    kopf.event(body, type="Normal", reason="Sized", message=f"size is {{spec.get('size')}}")

@kopf.on.update("{GROUP}", "v1", "widgets", field="spec.size")
def resized(new, patch, **_):
    patch.status["size"] = new

@kopf.on.delete("{GROUP}", "v1", "widgets")
def deleted(**_):
    pass
'''


def test_a_kopf_operator_runs_against_it(kube_api: KubeAPI, kube_namespace: str, widgets: str, tmp_path: Path) -> None:
    """A throwaway kopf operator (`kopf run`, as our operator runs) watches, patches status,
    adds and removes its finalizer, and posts events."""
    client = kube_api.client
    path = resource_path(WIDGETS, widgets, kube_namespace)
    (tmp_path / 'operator.py').write_text(KOPF_OPERATOR)
    log = (tmp_path / 'kopf.log').open('w')
    operator = subprocess.Popen([sys.executable, '-m', 'kopf', 'run', '--standalone', '--namespace', kube_namespace,
                                 str(tmp_path / 'operator.py')], env=kube_api.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        client.create(path, widget('handled', size='small'))
        handled = wait_for(lambda: (client.get(f'{path}/handled').get('status') or {}).get('size') == 'small'
                           and client.get(f'{path}/handled'), what='kopf to set the status')
        assert handled['metadata']['finalizers'] == ['kopf.zalando.org/KopfFinalizerMarker']

        events = resource_path('v1', 'events', kube_namespace)
        posted = wait_for(lambda: client.get(events, fieldSelector='involvedObject.name=handled,reason=Sized')['items'],
                          what='the event kopf posts')
        assert posted[0]['message'] == 'size is small' and posted[0]['type'] == 'Normal'

        client.patch(f'{path}/handled', {'spec': {'size': 'large'}})
        wait_for(lambda: client.get(f'{path}/handled')['status']['size'] == 'large', what='kopf to see the update')

        client.delete(f'{path}/handled')
        wait_for(lambda: not client.exists(f'{path}/handled'), what='kopf to release its finalizer')
    finally:
        operator.send_signal(signal.SIGTERM)
        code = operator.wait(timeout=60)
        log.close()
    output = (tmp_path / 'kopf.log').read_text()
    assert code == 0, output
    assert 'Traceback' not in output, output
