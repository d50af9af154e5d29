"""The store (Store): every object the fake holds, the resource types it serves, the global
resourceVersion and the history of watch events.

Invariants: every write gets the next global resourceVersion and exactly one watch event;
stored objects are never mutated in place (watch events and responses can share them); an
object is removed only when it carries no finalizers (`blocking_finalizers`).
"""
import asyncio
import dataclasses
import datetime
from collections.abc import Callable, Iterator
from typing import Any

from testbed.kube_emulator.authz import RBAC_GROUP
from testbed.kube_emulator.errors import not_found, unknown_resource
from testbed.kube_emulator.paths import LabelSelector, field_selector, matches
from testbed.kube_emulator.resources import ResourceType

HISTORY_KEPT = 5_000  # watch events kept for resuming watches; older ones answer 410 Expired


def now_timestamp(delay_seconds: float = 0) -> str:
    """Now (plus a delay) as Kubernetes writes timestamps: UTC, whole seconds."""
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=delay_seconds)
    return moment.strftime('%Y-%m-%dT%H:%M:%SZ')


def blocking_finalizers(rt: ResourceType, obj: dict[str, Any]) -> list[str]:
    """What keeps `obj` from being removed: its finalizers (and a namespace's spec.finalizers)."""
    blocking = list(obj['metadata'].get('finalizers') or [])
    if rt.kind == 'Namespace':
        blocking += (obj.get('spec') or {}).get('finalizers') or []
    return blocking


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    resource_version: int
    store_key: tuple[str, str]
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]
    old: dict[str, Any] | None  # the previous state, to see label-selector transitions


class Store:
    """The objects by (group, plural, namespace, name) and the types served by (group, version,
    plural). `on_removed(rt, obj)` runs after each removal (the server's reactions to it)."""

    def __init__(self, on_removed: Callable[[ResourceType, dict[str, Any]], None]) -> None:
        self.types: dict[tuple[str, str, str], ResourceType] = {}
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.history: list[WatchEvent] = []
        self.resource_version = 1
        self.changed = asyncio.Event()  # set (and replaced) on every change: watches wait on it
        self.closing = False  # set by close(): watches end
        # The stored RBAC objects by (plural, namespace, name), kept by commit: authz reads them per request.
        self._rbac: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._on_removed = on_removed

    def type(self, group: str, version: str, plural: str) -> ResourceType:
        try:
            return self.types[group, version, plural]
        except KeyError:
            raise unknown_resource() from None

    def type_of(self, store_key: tuple[str, str]) -> ResourceType:
        """A served type of the objects stored under `store_key` (group, plural)."""
        return next(t for t in self.types.values() if t.store_key == store_key)

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        try:
            return self.objects[rt.group, rt.plural, namespace or '', name]
        except KeyError:
            raise not_found(rt, name) from None

    def all(self, group: str, plural: str) -> list[dict[str, Any]]:
        return [obj for (g, p, _, _), obj in list(self.objects.items()) if (g, p) == (group, plural)]

    def selected(self, rt: ResourceType, namespace: str | None, params: dict[str, str]) -> Iterator[dict[str, Any]]:
        """The objects of `rt` (in `namespace`, unless None) that the request's selectors match."""
        labels = LabelSelector.parse(params.get('labelSelector', ''))
        fields = field_selector(rt, params.get('fieldSelector', ''))
        for (group, plural, ns, _), obj in sorted(self.objects.items()):
            if (group, plural) == rt.store_key and (namespace is None or ns == namespace):
                if matches(obj, labels, fields):
                    yield obj

    def uid_alive(self, uid: str) -> bool:
        return any(obj['metadata']['uid'] == uid for obj in self.objects.values())

    def uid_of(self, plural: str, namespace: str, name: str) -> str | None:
        """The uid of a core/v1 object now (None: there is none), for token checks (authn.py)."""
        obj = self.objects.get(('', plural, namespace, name))
        return obj['metadata']['uid'] if obj is not None else None

    def rbac_objects(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        """The stored RBAC objects of `plural` in `namespace` ('' : cluster-scoped; None: all)."""
        return [obj for (p, ns, _), obj in self._rbac.items()
                if p == plural and (namespace is None or ns == namespace)]

    @staticmethod
    def view(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """An object as served through one version of its resource."""
        return obj if obj.get('apiVersion') == rt.api_version else dict(obj, apiVersion=rt.api_version)

    def commit(self, rt: ResourceType, event_type: str, new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        """Store one change: next resourceVersion, one watch event, waiting watchers woken up."""
        self.resource_version += 1
        new = dict(new, metadata=dict(new['metadata'], resourceVersion=str(self.resource_version)))
        key = (rt.group, rt.plural, new['metadata'].get('namespace') or '', new['metadata']['name'])
        if event_type == 'DELETED':
            self.objects.pop(key, None)
        else:
            self.objects[key] = new
        if rt.group == RBAC_GROUP:
            rbac_key = key[1:]
            if event_type == 'DELETED':
                self._rbac.pop(rbac_key, None)
            else:
                self._rbac[rbac_key] = new
        self.history.append(WatchEvent(self.resource_version, rt.store_key, event_type, new, old))
        if len(self.history) > HISTORY_KEPT:
            del self.history[:HISTORY_KEPT // 2]
        self.notify()
        if event_type == 'DELETED':
            self._on_removed(rt, new)
        return new

    def events_since(self, resource_version: int) -> list[WatchEvent]:
        if not self.history:
            return []
        start = resource_version - self.history[0].resource_version + 1
        return self.history[max(start, 0):]

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def close(self) -> None:
        """End every watch (they stop waiting for changes)."""
        self.closing = True
        self.notify()
