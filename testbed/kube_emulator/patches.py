"""Patches: the patch types a real server accepts for PATCH requests, applied to an object as
served (merge patch RFC 7386, JSON patch RFC 6902 with `test`, and strategic merge patch for
built-in kinds, steered by their real OpenAPI schema), and the checks of a server-side apply
request (`applied_config`). A patch that cannot apply raises the ApiError the server answers with.
"""
import copy
from typing import Any

from testbed.kube_emulator.builtin_schema import resolve
from testbed.kube_emulator.errors import ApiError, bad_request, unprocessable

APPLY_PATCH = 'application/apply-patch+yaml'


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge, null deletes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch. A failed `test` or a bad path raises (the server answers 422)."""
    if not isinstance(operations, list):
        raise bad_request('json patch must be a list of operations')
    doc = copy.deepcopy(doc)

    def walk(path: str) -> tuple[Any, str | int]:
        if not path.startswith('/'):
            raise unprocessable(f'invalid JSON pointer {path!r}')
        tokens = [t.replace('~1', '/').replace('~0', '~') for t in path[1:].split('/')]
        parent = doc
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        return parent, (last if isinstance(parent, dict) or last == '-' else int(last))

    for op in operations:
        try:
            kind, path = op['op'], op['path']
            if kind in ('move', 'copy'):
                source_parent, source_key = walk(op['from'])
                value = copy.deepcopy(source_parent[source_key])
                if kind == 'move':
                    del source_parent[source_key]
            else:
                value = copy.deepcopy(op.get('value'))
            if path == '':
                if kind == 'test' and doc != value:
                    raise unprocessable('testing value failed')
                doc = value if kind in ('add', 'replace', 'move', 'copy') else doc
                continue
            parent, key = walk(path)
            if kind == 'test':
                if parent[key] != value:
                    raise unprocessable(f'the server rejected our request due to an error in our request: '
                                        f'testing value {path} failed')
            elif kind == 'remove':
                del parent[key]
            elif kind == 'replace':
                parent[key]  # noqa: B018 -- must exist
                parent[key] = value
            elif kind in ('add', 'move', 'copy'):
                if isinstance(parent, list):
                    parent.insert(len(parent) if key == '-' else key, value)
                else:
                    parent[key] = value
            else:
                raise bad_request(f'unknown JSON patch operation {kind!r}')
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise unprocessable(f'jsonpatch {op.get("op")} operation does not apply: {e!r}') from e
    return doc


def strategic_merge_patch(target: Any, patch: Any, schema: dict[str, Any]) -> Any:
    """Strategic merge patch as a real server applies it to built-in kinds.

    Lists whose schema says `x-kubernetes-patch-strategy: merge` are merged by their merge key
    (primitive lists as sets); other lists are replaced. The directives $patch (replace/delete),
    $retainKeys, $deleteFromPrimitiveList/<field> and $setElementOrder/<field> are honoured.
    """
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not k.startswith('$')}
        return [strip(v) for v in value] if isinstance(value, list) else value

    def merge(old: Any, new: Any, node: Any) -> Any:
        node = resolve(node)
        if not isinstance(new, dict):
            return strip(new)
        if new.get('$patch') == 'replace' or not isinstance(old, dict):
            return strip(new)
        result = dict(old)
        for key, value in new.items():
            if key.startswith('$deleteFromPrimitiveList/'):
                field = key.split('/', 1)[1]
                result[field] = [item for item in result.get(field) or [] if item not in value]
            elif key.startswith('$'):
                continue
            elif value is None or (isinstance(value, dict) and value.get('$patch') == 'delete'):
                result.pop(key, None)
            else:
                properties = node.get('properties') or {}
                child = resolve(properties.get(key, node.get('additionalProperties')))
                if isinstance(value, list) and 'merge' in child.get('x-kubernetes-patch-strategy', ''):
                    result[key] = merge_list(result.get(key) or [], value, child)
                else:
                    result[key] = merge(result.get(key), value, child)
        if '$retainKeys' in new:
            result = {k: v for k, v in result.items() if k in new['$retainKeys']}
        return result

    def merge_list(old: list[Any], new: list[Any], node: dict[str, Any]) -> list[Any]:
        key = node.get('x-kubernetes-patch-merge-key')
        if any(isinstance(item, dict) and item.get('$patch') == 'replace' for item in new):
            return strip([item for item in new if not (isinstance(item, dict) and '$patch' in item)])
        if key is None:
            return list(old) + [item for item in new if item not in old]
        result = list(old)
        for item in new:
            index = next((i for i, o in enumerate(result) if o.get(key) == item.get(key)), None)
            if item.get('$patch') == 'delete':
                if index is not None:
                    del result[index]
            elif index is None:
                result.append(strip(item))
            else:
                result[index] = merge(result[index], item, node.get('items'))
        return result

    return merge(target, patch, schema)


def applied_config(data: Any, api_version: str, name: str, params: dict[str, str]) -> dict[str, Any]:
    """The object of a server-side apply request (PATCH application/apply-patch+yaml), after the
    checks a real server makes before it merges (metav1 validation.ValidatePatchOptions, the
    field manager's Apply, the patch handler's checkName): fieldManager given (422), a YAML
    object (400), the URL's apiVersion (400), no managedFields (400), the URL's name (400)."""
    if not params.get('fieldManager'):
        raise ApiError(422, 'Invalid', 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                                       'is required for apply patch',
                       {'group': 'meta.k8s.io', 'kind': 'PatchOptions',
                        'causes': [{'reason': 'FieldValueRequired', 'message': 'Required value: is required for apply patch',
                                    'field': 'fieldManager'}]})
    if not isinstance(data, dict):
        raise bad_request('error decoding YAML: the apply patch is not an object')
    if data.get('apiVersion') != api_version:
        raise bad_request(f'Incorrect version specified in apply patch. Specified patch version: '
                          f'{data.get("apiVersion") or ""}, expected: {api_version}')
    meta = data.get('metadata') or {}
    if meta.get('managedFields') is not None:
        raise bad_request('metadata.managedFields must be nil')
    if meta.get('name', '') != name:
        raise bad_request(f'the name of the object ({meta.get("name", "")}) does not match the name on the URL ({name})')
    return copy.deepcopy(data)


def contained_in(applied: Any, live: Any) -> bool:
    """Whether applying `applied` to `live` would change no value: every field it sets is in
    `live` with the same value (lists item by item, in order: stricter than a real server's
    merge of associative lists by key, never kinder)."""
    if isinstance(applied, dict):
        return isinstance(live, dict) and all(key in live and contained_in(value, live[key])
                                              for key, value in applied.items())
    if isinstance(applied, list):
        return (isinstance(live, list) and len(applied) == len(live)
                and all(contained_in(a, b) for a, b in zip(applied, live)))
    return applied == live
