"""Built-in kinds' schemas: the real OpenAPI definitions of the v1.32 API, as kubernetes-validate
ships them, read once and cached. They give the merge keys of strategic merge patch
(definition_of, resolve), the fields a write of a built-in kind keeps (prune_unknown_fields),
and its validation: types and required fields (builtin_errors).
"""
import functools
import importlib.resources
import json
import re
from typing import Any

import jsonschema
import referencing

from testbed.kube_emulator.errors import validation_causes
from testbed.kube_emulator.resources import KUBERNETES_VERSION, ResourceType


@functools.cache
def _schema_file(name: str) -> dict[str, Any]:
    """One JSON schema file of the real v1.32 API, as kubernetes-validate ships them."""
    root = importlib.resources.files('kubernetes_validate') / 'kubernetes-json-schema'
    return json.loads((root / f'v{KUBERNETES_VERSION}.0-local' / name).read_text())


def _openapi_definitions() -> dict[str, Any]:
    """The real OpenAPI definitions of all built-in kinds: merge keys, GVKs, properties."""
    return _schema_file('_definitions.json')['$defs']


def definition_of(rt: ResourceType) -> dict[str, Any]:
    """The real OpenAPI definition of a built-in kind (empty for kinds it does not define)."""
    return _definition_by_gvk(rt.group, rt.version, rt.kind)


@functools.cache
def _definition_by_gvk(group: str, version: str, kind: str) -> dict[str, Any]:
    for definition in _openapi_definitions().values():
        for gvk in definition.get('x-kubernetes-group-version-kind', ()):
            if (gvk['group'], gvk['version'], gvk['kind']) == (group, version, kind):
                return definition
    return {}


def resolve(node: Any) -> dict[str, Any]:
    """A schema node of the real OpenAPI definitions with its $ref followed."""
    while isinstance(node, dict) and '$ref' in node:
        node = _openapi_definitions()[node['$ref'].rsplit('/', 1)[-1]]
    return node if isinstance(node, dict) else {}


def prune_unknown_fields(value: Any, node: Any, unknown: list[str], path: str = '') -> Any:
    """Built-in kinds: drop the fields their real schema does not declare (listed in `unknown`),
    as a real server drops them (or refuses them under fieldValidation=Strict)."""
    node = resolve(node)
    if isinstance(value, list):
        return [prune_unknown_fields(item, node.get('items'), unknown, f'{path}[{i}]') for i, item in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if 'properties' not in node:  # a map, or a free-form field (RawExtension, JSON)
        additional = node.get('additionalProperties')
        if isinstance(additional, dict):
            return {k: prune_unknown_fields(v, additional, unknown, f'{path}.{k}') for k, v in value.items()}
        return value
    result = {}
    for key, item in value.items():
        child = f'{path}.{key}' if path else key
        if key in node['properties']:
            result[key] = prune_unknown_fields(item, node['properties'][key], unknown, child)
        else:
            unknown.append(child)
    return result


@functools.cache
def _builtin_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator | None:
    """A validator for a built-in kind's real schema (as kubernetes-validate ships it), built once."""
    file_prefix = re.sub(r'^([^./]*)(?:\.[^/]*)?/', r'\1-', api_version)  # rbac.authorization.k8s.io/v1 -> rbac-v1
    try:
        schema = _schema_file(f'{kind.lower()}-{file_prefix}.json')
    except FileNotFoundError:
        return None
    registry = referencing.Resource.from_contents(_schema_file('_definitions.json')) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def builtin_errors(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """Validation of a built-in kind against its real OpenAPI schema (types, required fields)."""
    validator = _builtin_validator(obj['apiVersion'], obj['kind'])
    return validation_causes(validator, obj) if validator is not None else []
