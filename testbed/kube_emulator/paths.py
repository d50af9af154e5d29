"""Paths and selectors: a resource URL parsed into its parts (ApiPath), label and field selectors
parsed and matched as a real server does, and the simple JSON paths (`.spec.replicas`) that
CRD printer columns, scale subresources and field selectors point with (dig, set_at).
"""
import dataclasses
import re
from typing import Any

from testbed.kube_emulator.errors import bad_request
from testbed.kube_emulator.resources import ResourceType


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


_JSONPATH_STEP = re.compile(
    r"\.(?P<key>[A-Za-z0-9_-]+)|\[(?P<index>\d+)\]"
    r"|\[\?\(@\.(?P<field>[A-Za-z0-9_.-]+)\s*==\s*(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)')\)\]")


def json_path(obj: Any, expression: str) -> list[Any]:
    """What client-go's JSONPath finds for a printer column's `jsonPath`: the dotted keys,
    `[N]` and the filter `[?(@.field=="value")]` (as `.status.conditions[?(@.type=="Ready")].status`),
    every match in order; [] when nothing matches. Other JSONPath syntax is not served (ValueError)."""
    found, position = [obj], 0
    while position < len(expression):
        step = _JSONPATH_STEP.match(expression, position)
        if step is None:
            raise ValueError(f'the fake API server does not evaluate the JSONPath {expression!r}')
        position = step.end()
        if step['key'] is not None:
            found = [item[step['key']] for item in found if isinstance(item, dict) and step['key'] in item]
        elif step['index'] is not None:
            index = int(step['index'])
            found = [item[index] for item in found if isinstance(item, list) and index < len(item)]
        else:
            wanted = step['dq'] if step['dq'] is not None else step['sq']
            found = [element for item in found if isinstance(item, list) for element in item
                     if isinstance(element, dict) and field_value(element, step['field']) == wanted]
    return found


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


def field_selector(rt: ResourceType, text: str) -> list[tuple[str, bool, str]]:
    """A parsed `fieldSelector` query: (field, equal, value); only the fields `rt` selects by."""
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


def matches(obj: dict[str, Any], labels: LabelSelector, fields: list[tuple[str, bool, str]]) -> bool:
    """Whether an object is selected by a label selector and a parsed field selector."""
    if not labels.matches(obj['metadata'].get('labels') or {}):
        return False
    return all((field_value(obj, field) == value) == equal for field, equal, value in fields)
