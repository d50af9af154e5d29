"""Reads of the store as a real server answers them: list pages (limit and continue, Tables for
`kubectl get`), the Scale view of an object, and watches: from a resourceVersion on, with label
and field selectors, until their timeout or the client leaves.

A watch never misses an event: it takes the store's `changed` before reading the history.
"""
import asyncio
import base64
import contextlib
import traceback
from collections.abc import AsyncIterator
from typing import Any

import kmock

from testbed.kube_emulator import tables
from testbed.kube_emulator.errors import ApiError, bad_request, unknown_resource
from testbed.kube_emulator.paths import ApiPath, LabelSelector, dig, field_selector, matches
from testbed.kube_emulator.resources import ResourceType
from testbed.kube_emulator.store import Store


def table(store: Store, rt: ResourceType, items: list[dict[str, Any]], accept: str,
          metadata: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A meta.k8s.io/v1 Table when kubectl asks for one (`Accept: ...;as=Table`)."""
    if 'as=Table' not in accept:
        return None
    return tables.table(rt, items, metadata or {'resourceVersion': str(store.resource_version)})


def list_page(store: Store, rt: ResourceType, namespace: str | None, params: dict[str, str],
              accept: str) -> dict[str, Any]:
    items = list(store.selected(rt, namespace, params))
    metadata: dict[str, Any] = {'resourceVersion': str(store.resource_version)}
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
    served_table = table(store, rt, items, accept, metadata)
    if served_table is not None:
        return served_table
    if rt.is_custom:
        served = [store.view(rt, obj) for obj in items]
    else:  # lists of built-in kinds carry no apiVersion/kind per item
        served = [{k: v for k, v in obj.items() if k not in ('apiVersion', 'kind')} for obj in items]
    return {'kind': f'{rt.kind}List', 'apiVersion': rt.api_version, 'metadata': metadata, 'items': served}


def scale_view(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The object's autoscaling/v1 Scale (its CRD's scale subresource paths)."""
    scale = rt.scale or {}
    meta = obj['metadata']
    status: dict[str, Any] = {'replicas': dig(obj, scale.get('statusReplicasPath', '')) or 0}
    if scale.get('labelSelectorPath') and dig(obj, scale['labelSelectorPath']):
        status['selector'] = dig(obj, scale['labelSelectorPath'])
    return {'kind': 'Scale', 'apiVersion': 'autoscaling/v1',
            'metadata': {key: meta[key] for key in ('name', 'namespace', 'uid', 'resourceVersion', 'creationTimestamp') if key in meta},
            'spec': {'replicas': dig(obj, scale['specReplicasPath']) or 0}, 'status': status}


def watch(store: Store, request: kmock.Request) -> AsyncIterator[bytes | dict[str, Any]]:
    """A watch: refused with an error response while nothing is sent (unknown resource, bad
    selector), else a stream of JSON lines of ADDED/MODIFIED/DELETED (+ BOOKMARK, ERROR) events."""
    path = ApiPath.parse(request.url.path)
    if path is None:
        raise unknown_resource()
    rt = store.type(path.group, path.version, path.plural)
    namespace = path.namespace if rt.namespaced else None
    params = dict(request.params)
    if path.name:  # the deprecated per-object watch URL
        params['fieldSelector'] = ','.join(filter(None, [params.get('fieldSelector'), f'metadata.name={path.name}']))
    labels = LabelSelector.parse(params.get('labelSelector', ''))
    fields = field_selector(rt, params.get('fieldSelector', ''))
    timeout = float(params['timeoutSeconds']) if params.get('timeoutSeconds') else None
    return _watch_lines(_watch_events(store, request, rt, namespace, params, labels, fields, timeout))


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


async def _watch_events(store: Store, request: kmock.Request, rt: ResourceType, namespace: str | None,
                        params: dict[str, str], labels: LabelSelector,
                        fields: list[tuple[str, bool, str]],
                        timeout: float | None) -> AsyncIterator[dict[str, Any]]:
    """The events of one watch, from its resourceVersion on, until its timeout or the client leaves."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout else None
    since = params.get('resourceVersion') or ''
    if params.get('sendInitialEvents') == 'true' or since in ('', '0'):
        for obj in list(store.selected(rt, namespace, params)):
            yield {'type': 'ADDED', 'object': store.view(rt, obj)}
        cursor = store.resource_version
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
        oldest = store.history[0].resource_version if store.history else store.resource_version
        if cursor < oldest - 1:
            yield {'type': 'ERROR', 'object': ApiError(
                410, 'Expired', f'too old resource version: {cursor} ({oldest - 1})', {}).status_body()}
            return

    while not store.closing:
        changed = store.changed  # taken before reading the history: no event can be missed
        for event in store.events_since(cursor):
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
            yield {'type': kind, 'object': store.view(rt, obj)}
        transport = request._raw_request.transport if request._raw_request is not None else None
        if transport is None or transport.is_closing():
            return  # the client went away
        remaining = deadline - loop.time() if deadline is not None else 5.0
        if remaining <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout=min(remaining, 5.0))
