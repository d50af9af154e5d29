"""Tables: the server-side printing behind `kubectl get` (asked for with `Accept: ...;as=Table`) --
a meta.k8s.io/v1 Table whose columns are NAME and then a CRD's additionalPrinterColumns, the
columns a real server prints for nodes (STATUS, ROLES, AGE, VERSION) and pods (READY, STATUS,
RESTARTS, AGE, and NODE under -o wide), or AGE for every other kind.
"""
import datetime
from typing import Any

from testbed.kube_emulator.paths import json_path
from testbed.kube_emulator.resources import ResourceType


def table(rt: ResourceType, items: list[dict[str, Any]], metadata: dict[str, Any]) -> dict[str, Any]:
    """The Table of `items` (objects of `rt`), its list metadata as given."""
    columns = [{'name': 'Name', 'type': 'string', 'format': 'name', 'description': 'Name', 'priority': 0}]
    if rt.is_custom:
        printer = list(rt.printer_columns) or [{'name': 'Age', 'type': 'date', 'jsonPath': '.metadata.creationTimestamp'}]
        cells = [lambda obj, c=c: _age(_column(obj, c)) if c.get('type') == 'date' else _column(obj, c)
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
    return {'kind': 'Table', 'apiVersion': 'meta.k8s.io/v1', 'metadata': metadata,
            'columnDefinitions': columns, 'rows': rows}


def _column(obj: dict[str, Any], column: dict[str, Any]) -> Any:
    """A printer column's cell: the first value its JSONPath finds (None when it finds none, which
    kubectl prints as an empty cell), as the apiextensions server's table convertor takes it."""
    found = json_path(obj, column['jsonPath'])
    return found[0] if found else None


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

