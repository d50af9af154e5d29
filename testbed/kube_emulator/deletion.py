"""Deletion (Deletion): DELETE as a real server does it, and the controllers that finish it --
the garbage collector (owner references: Background, Foreground, Orphan), the namespace
controller (a namespace drained, then removed) and the CRD cleanup (its objects, then the CRD).

A DELETE removes an object at once only when nothing waits for it: a finalizer (the object is
marked with deletionTimestamp until its last finalizer goes) or, for a pod bound to a node that
has not ended, its kubelet (the grace period). Dependents go after their owner, asynchronously,
unless another owner lives.
"""
import asyncio
import contextlib
import copy
from collections.abc import Callable, Coroutine
from typing import Any

from testbed.kube_emulator.errors import ApiError, conflict
from testbed.kube_emulator.resources import CRD_CLEANUP_FINALIZER, ResourceType
from testbed.kube_emulator.store import Store, blocking_finalizers, now_timestamp


class Deletion:
    """Deletions in the store; `spawn(coroutine)` runs the controllers' background work (until the
    server closes)."""

    def __init__(self, store: Store, spawn: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        self._store = store
        self._spawn = spawn

    def delete(self, rt: ResourceType, namespace: str | None, name: str, options: dict[str, Any],
               params: dict[str, str], *, dry_run: bool = False) -> dict[str, Any]:
        """DELETE: at once, or mark (deletionTimestamp) and wait for finalizers or the kubelet."""
        obj = self._store.get(rt, namespace, name)
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
            if not blocking_finalizers(rt, obj):
                return self._store.commit(rt, 'DELETED', obj, obj)
            new = copy.deepcopy(obj)
            new['metadata'].update(deletionTimestamp=now_timestamp(), deletionGracePeriodSeconds=0)
            return self._store.commit(rt, 'MODIFIED', new, obj)

        finalizers = list(meta.get('finalizers') or [])
        if policy == 'Foreground':
            finalizers.append('foregroundDeletion')
        graceful = False
        if rt.kind == 'Pod' and rt.group == '':
            # A pod on a node waits for its kubelet, unless it never ran or has already ended.
            grace = obj['spec'].get('terminationGracePeriodSeconds', 30) if grace is None else grace
            ended = (obj.get('status') or {}).get('phase') in ('Failed', 'Succeeded')
            graceful = bool(obj['spec'].get('nodeName')) and not ended and grace > 0
        if not graceful and not finalizers and not blocking_finalizers(rt, obj):
            return self._store.commit(rt, 'DELETED', obj, obj)

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
        stored = self._store.commit(rt, 'MODIFIED', new, obj)
        if rt.kind == 'Namespace' and rt.group == '':
            self._spawn(self._drain_namespace(name))
        if rt.kind == 'CustomResourceDefinition' and rt.group == 'apiextensions.k8s.io':
            self._spawn(self._drain_crd(stored))
        if 'foregroundDeletion' in finalizers:
            self._spawn(self._delete_foreground(rt, stored))
        return stored

    def _dependents(self, owner_uid: str) -> list[tuple[ResourceType, dict[str, Any]]]:
        found = []
        for (group, plural, _, _), obj in list(self._store.objects.items()):
            refs = obj['metadata'].get('ownerReferences') or []
            if any(ref.get('uid') == owner_uid for ref in refs):
                rt = self._store.type_of((group, plural))
                found.append((rt, obj))
        return found

    def _without_owner(self, rt: ResourceType, obj: dict[str, Any], owner_uid: str) -> None:
        new = copy.deepcopy(obj)
        refs = [ref for ref in new['metadata']['ownerReferences'] if ref.get('uid') != owner_uid]
        new['metadata']['ownerReferences'] = refs
        if not refs:
            del new['metadata']['ownerReferences']
        self._store.commit(rt, 'MODIFIED', new, obj)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for rt, obj in self._dependents(owner_uid):
            self._without_owner(rt, obj, owner_uid)

    async def collect_dependents(self, owner_uid: str) -> None:
        """The garbage collector: dependents of a removed owner go too, unless another owner lives."""
        await asyncio.sleep(0.05)  # a real GC is asynchronous; never rely on it being instant
        for rt, obj in self._dependents(owner_uid):
            meta = obj['metadata']
            others = [ref for ref in meta['ownerReferences'] if ref.get('uid') != owner_uid]
            if any(self._store.uid_alive(ref.get('uid')) for ref in others):
                self._without_owner(rt, obj, owner_uid)
            elif (rt.group, rt.plural, meta.get('namespace') or '', meta['name']) in self._store.objects:
                with contextlib.suppress(ApiError):
                    self.delete(rt, meta.get('namespace'), meta['name'], {}, {})

    async def _delete_foreground(self, rt: ResourceType, owner: dict[str, Any]) -> None:
        uid = owner['metadata']['uid']
        for dep_rt, dep in self._dependents(uid):
            with contextlib.suppress(ApiError):
                self.delete(dep_rt, dep['metadata'].get('namespace'), dep['metadata']['name'], {}, {})
        while self._dependents(uid):
            await asyncio.sleep(0.1)
        await self._remove_finalizer(rt, owner, 'foregroundDeletion')

    async def _remove_finalizer(self, rt: ResourceType, obj: dict[str, Any], finalizer: str) -> None:
        meta = obj['metadata']
        key = (rt.group, rt.plural, meta.get('namespace') or '', meta['name'])
        current = self._store.objects.get(key)
        if current is None or current['metadata']['uid'] != meta['uid']:
            return
        new = copy.deepcopy(current)
        new['metadata']['finalizers'] = [f for f in new['metadata'].get('finalizers') or [] if f != finalizer]
        if rt.kind == 'Namespace':
            new['spec']['finalizers'] = [f for f in new['spec'].get('finalizers') or [] if f != finalizer]
        gone = not blocking_finalizers(rt, new)
        self._store.commit(rt, 'DELETED' if gone else 'MODIFIED', new, current)

    async def _drain_namespace(self, namespace: str) -> None:
        """The namespace controller: delete everything inside, then let the namespace go."""
        ns_type = self._store.type('', 'v1', 'namespaces')
        asked: set[str] = set()
        while True:
            contents = [(rt, obj) for (g, p, ns, _), obj in list(self._store.objects.items()) if ns == namespace
                        for rt in [self._store.type_of((g, p))]]
            if not contents:
                break
            for rt, obj in contents:
                if obj['metadata']['uid'] not in asked:
                    asked.add(obj['metadata']['uid'])
                    with contextlib.suppress(ApiError):
                        self.delete(rt, namespace, obj['metadata']['name'], {}, {})
            await asyncio.sleep(0.1)
        ns = self._store.objects.get(('', 'namespaces', '', namespace))
        if ns is not None:
            await self._remove_finalizer(ns_type, ns, 'kubernetes')

    async def _drain_crd(self, crd: dict[str, Any]) -> None:
        """The CRD cleanup controller: delete all objects of the resource, then the CRD."""
        crd_type = self._store.type('apiextensions.k8s.io', 'v1', 'customresourcedefinitions')
        store_key = (crd['spec']['group'], crd['spec']['names']['plural'])
        asked: set[str] = set()
        while True:
            contents = [obj for (g, p, _, _), obj in list(self._store.objects.items()) if (g, p) == store_key]
            if not contents:
                break
            rt = self._store.type_of(store_key)
            for obj in contents:
                if obj['metadata']['uid'] not in asked:
                    asked.add(obj['metadata']['uid'])
                    with contextlib.suppress(ApiError):
                        self.delete(rt, obj['metadata'].get('namespace'), obj['metadata']['name'], {}, {})
            await asyncio.sleep(0.1)
        await self._remove_finalizer(crd_type, crd, CRD_CLEANUP_FINALIZER)

    def fail_and_force_delete(self, pod: dict[str, Any], condition: dict[str, Any] | None) -> None:
        """What the pod garbage collector does to a pod (pod_gc.py): phase Failed (plus `condition`)
        unless it has ended, then a deletion with grace period 0."""
        rt = self._store.type('', 'v1', 'pods')
        meta = pod['metadata']
        current = self._store.objects.get(('', 'pods', meta['namespace'], meta['name']))
        if current is None or current['metadata']['uid'] != meta['uid']:
            return
        if (current.get('status') or {}).get('phase') not in ('Succeeded', 'Failed'):
            new = copy.deepcopy(current)
            status = new.setdefault('status', {})
            status['phase'] = 'Failed'
            if condition is not None:
                kept = [c for c in status.get('conditions') or [] if c['type'] != condition['type']]
                status['conditions'] = kept + [condition]
            self._store.commit(rt, 'MODIFIED', new, current)
        with contextlib.suppress(ApiError):
            self.delete(rt, meta['namespace'], meta['name'], {'gracePeriodSeconds': 0}, {})

    def remove_finalizer_now(self, obj: dict[str, Any], finalizer: str) -> None:
        """A finalizer removed by a controller: the object goes if it was waiting only for that."""
        meta = obj['metadata']
        rt = self._store.type('', 'v1', 'pods') if obj.get('kind', 'Pod') == 'Pod' else self._store.type('batch', 'v1', 'jobs')
        current = self._store.objects.get((rt.group, rt.plural, meta.get('namespace') or '', meta['name']))
        if current is None or current['metadata']['uid'] != meta['uid'] \
                or finalizer not in (current['metadata'].get('finalizers') or []):
            return
        new = copy.deepcopy(current)
        new['metadata']['finalizers'] = [f for f in new['metadata']['finalizers'] if f != finalizer]
        if not new['metadata']['finalizers']:
            del new['metadata']['finalizers']
        gone = new['metadata'].get('deletionTimestamp') and new['metadata'].get('deletionGracePeriodSeconds') == 0 \
            and not blocking_finalizers(rt, new)
        self._store.commit(rt, 'DELETED' if gone else 'MODIFIED', new, current)
