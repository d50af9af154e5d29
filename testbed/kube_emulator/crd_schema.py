"""Custom resources' schemas: what a real server does with a CRD's structural openAPIV3Schema --
prune unknown fields and fill in defaults (prune_and_default), validate (crd_validator: JSON
Schema draft 4 after the OpenAPI v3.0 extensions are translated) and evaluate its CEL rules
(cel_errors, with cel-python) and refuse duplicates in `set` and `map` lists (list_type_errors). Pure functions of a schema; nothing here knows the store.
"""
import copy
import functools
import json
from typing import Any

import celpy
import jsonschema


def prune_and_default(value: Any, schema: dict[str, Any], unknown: list[str], path: str = '') -> Any:
    """Drop fields the schema does not know (listed in `unknown`), then fill in defaults."""
    if isinstance(value, list):
        items = schema.get('items') or {}
        return [prune_and_default(item, items, unknown, f'{path}[{i}]') for i, item in enumerate(value)]
    if not isinstance(value, dict):
        return value
    properties = schema.get('properties') or {}
    additional = schema.get('additionalProperties')
    keep_all = schema.get('x-kubernetes-preserve-unknown-fields') or additional not in (None, False)
    embedded = not path or schema.get('x-kubernetes-embedded-resource')
    result = {}
    for key, item in value.items():
        child = f'{path}.{key}' if path else key
        if embedded and key in ('apiVersion', 'kind', 'metadata'):
            result[key] = item  # ObjectMeta is the server's, never pruned by the CRD schema
        elif key in properties:
            result[key] = prune_and_default(item, properties[key], unknown, child)
        elif isinstance(additional, dict):
            result[key] = prune_and_default(item, additional, unknown, child)
        elif keep_all:
            result[key] = item
        else:
            unknown.append(child)
    for key, prop in properties.items():
        if key not in result and 'default' in prop:
            result[key] = prune_and_default(copy.deepcopy(prop['default']), prop, unknown, f'{path}.{key}'.lstrip('.'))
    return result


def _as_json_schema(schema: Any) -> Any:
    """OpenAPI v3.0 (as in CRDs) -> JSON Schema draft 4: nullable, int-or-string."""
    if isinstance(schema, list):
        return [_as_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: _as_json_schema(value) for key, value in schema.items()
              if not key.startswith('x-') and key not in ('nullable', 'default', 'example')}
    if schema.get('x-kubernetes-int-or-string'):
        result['anyOf'] = [{'type': 'integer'}, {'type': 'string'}]
    if schema.get('nullable') and 'type' in result:
        result['type'] = [result['type'], 'null']
    return result


def crd_validator(schema: dict[str, Any]) -> jsonschema.Draft4Validator:
    """A validator for a CRD's schema: the object without apiVersion, kind and metadata."""
    body_schema = dict(schema, properties={k: v for k, v in (schema.get('properties') or {}).items()
                                           if k not in ('apiVersion', 'kind', 'metadata')})
    return jsonschema.Draft4Validator(_as_json_schema(body_schema))


@functools.cache
def _cel_program(rule: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


def cel_errors(value: Any, old: Any, schema: dict[str, Any], path: str = '') -> list[tuple[str, str]]:
    """The CRD's x-kubernetes-validations (CEL) rules, evaluated with cel-python where a value is
    present; transition rules (using oldSelf) only on updates that had an old value there."""
    if value is None:
        return []
    errors = []
    for validation in schema.get('x-kubernetes-validations') or []:
        rule = validation['rule']
        if 'oldSelf' in rule and old is None:
            continue
        activation = {'self': celpy.json_to_cel(value)}
        if old is not None:
            activation['oldSelf'] = celpy.json_to_cel(old)
        try:
            result = _cel_program(rule).evaluate(activation)
        except celpy.CELEvalError as e:
            result = e
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            field = (path + validation.get('fieldPath', '')).lstrip('.') or '<root>'
            kind = 'object' if isinstance(value, dict) else 'array' if isinstance(value, list) else type(value).__name__
            errors.append((field, f'Invalid value: "{kind}": {validation.get("message") or f"failed rule: {rule}"}'))
    for child_path, item, old_item, child in _children(value, old, schema, path):
        errors += cel_errors(item, old_item, child, child_path)
    return errors


def _children(value: Any, old: Any, schema: dict[str, Any], path: str) -> list[tuple[str, Any, Any, dict[str, Any]]]:
    """The values inside `value` that `schema` describes: (path, value, old value, schema) of each
    property of an object and each item of a list (items have no old value: lists are atomic)."""
    if isinstance(value, dict):
        properties = schema.get('properties') or {}
        additional = schema.get('additionalProperties')
        found = []
        for key, item in value.items():
            child = properties.get(key, additional if isinstance(additional, dict) else None)
            if child:
                found.append((f'{path}.{key}', item, old.get(key) if isinstance(old, dict) else None, child))
        return found
    if isinstance(value, list) and isinstance(schema.get('items'), dict):
        return [(f'{path}[{i}]', item, None, schema['items']) for i, item in enumerate(value)]
    return []



def list_type_errors(value: Any, schema: dict[str, Any], path: str = '') -> list[tuple[str, str]]:
    """What a real server says of a list whose `x-kubernetes-list-type` is `set` or `map` and
    that holds an item twice (a set: the same value; a map: the same list-map-keys), at the
    second item: `spec.retireMembers[1]: Duplicate value: "rack-a-1"`."""
    errors: list[tuple[str, str]] = []
    kind, keys = schema.get('x-kubernetes-list-type'), schema.get('x-kubernetes-list-map-keys') or []
    if isinstance(value, list) and kind in ('set', 'map'):
        seen: list[Any] = []
        for i, item in enumerate(value):
            key = item if kind == 'set' else {k: item.get(k) for k in keys if k in item} \
                if isinstance(item, dict) else None
            if key in seen:
                shown = json.dumps(key, separators=(',', ':'))
                if kind == 'map':
                    shown = f'map[string]interface {{}}{{{shown[1:-1]}}}'
                errors.append((f'{path}[{i}]'.lstrip('.'), f'Duplicate value: {shown}'))
            seen.append(key)
    for child_path, item, _, child in _children(value, None, schema, path):
        errors += list_type_errors(item, child, child_path)
    return errors
