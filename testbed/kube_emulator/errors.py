"""Errors: every failure the fake answers is a Kubernetes `Status` object shaped as a real
kube-apiserver shapes it (reason, code, message wording, details and causes), since clients
(kopf, kubectl, our operator) branch on those fields, not on the HTTP status alone.
"""
import json
import re
from typing import TYPE_CHECKING, Any

import kmock

if TYPE_CHECKING:
    from testbed.kube_emulator.resources import ResourceType


class ApiError(kmock.KubernetesError):
    """A failure answered as a Kubernetes `Status` object, exactly as a real server shapes it."""

    def status_body(self) -> dict[str, Any]:
        body = {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
                'message': self.message, 'reason': self.reason, 'details': self.details or {},
                'code': self.status}
        if not self.reason:  # a Status without a reason (an eviction's 500) has none in JSON
            del body['reason'], body['details']
        return body


def status_details(rt: 'ResourceType | None', name: str | None) -> dict[str, Any]:
    """A Status's `details` about one object: its name, and its resource (the plural, as `kind`)."""
    details: dict[str, Any] = {}
    if name:
        details['name'] = name
    if rt is not None:
        details['kind'] = rt.plural
        if rt.group:
            details['group'] = rt.group
    return details


def not_found(rt: 'ResourceType', name: str) -> ApiError:
    return ApiError(404, 'NotFound', f'{rt.qualified} "{name}" not found', status_details(rt, name))


def already_exists(rt: 'ResourceType', name: str) -> ApiError:
    return ApiError(409, 'AlreadyExists', f'{rt.qualified} "{name}" already exists', status_details(rt, name))


def conflict(rt: 'ResourceType', name: str, why: str) -> ApiError:
    return ApiError(409, 'Conflict', f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
                    status_details(rt, name))


def invalid(rt: 'ResourceType', name: str, causes: list[tuple[str, str]]) -> ApiError:
    text = ', '.join(f'{field}: {message}' for field, message in causes)
    details = dict(status_details(rt, name), kind=rt.kind, causes=[{'field': f, 'message': m} for f, m in causes])
    kind = f'{rt.kind}.{rt.group}' if rt.group else rt.kind
    return ApiError(422, 'Invalid', f'{kind} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, 'BadRequest', message, {})


def unprocessable(message: str) -> ApiError:
    return ApiError(422, 'UnprocessableEntity', message, {})


def unknown_resource() -> ApiError:
    return ApiError(404, 'NotFound', 'the server could not find the requested resource', {})


def validation_causes(validator: Any, instance: Any) -> list[tuple[str, str]]:
    """(field path, message) for every violation, worded as the server lists them in an Invalid Status."""
    causes = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
        path = ''.join(f'[{p}]' if isinstance(p, int) else f'.{p}' for p in error.absolute_path).lstrip('.')
        if error.validator == 'required':
            missing = re.search(r"'([^']+)' is a required", error.message)
            path, message = f'{path}.{missing[1]}'.lstrip('.') if missing else path, 'Required value'
        elif error.validator == 'enum':
            allowed = ', '.join(json.dumps(v) for v in error.validator_value)
            message = f'Unsupported value: {json.dumps(error.instance)}: supported values: {allowed}'
        elif error.validator in ('minimum', 'maximum'):
            # kube-openapi's TooSmall/TooLarge messages; an exclusive bound (OpenAPI v3.0's
            # boolean exclusiveMinimum/exclusiveMaximum) drops the "or equal to".
            relation = 'greater' if error.validator == 'minimum' else 'less'
            exclusive = error.schema.get('exclusiveMinimum' if error.validator == 'minimum' else 'exclusiveMaximum')
            bound = f'{relation} than' if exclusive is True else f'{relation} than or equal to'
            message = f'Invalid value: {json.dumps(error.instance)}: {path} in body should be {bound} {error.validator_value}'
        elif error.validator == 'pattern':
            message = f'Invalid value: {json.dumps(error.instance)[:80]}: {path} in body should match {error.validator_value!r}'
        elif error.validator == 'minLength':
            message = f'Invalid value: {json.dumps(error.instance)[:80]}: {path} in body should be at least {error.validator_value} chars long'
        elif error.validator == 'maxLength':  # a TooLong field error
            message = f'Too long: may not be more than {error.validator_value} bytes'
        elif error.validator == 'type':
            message = f'Invalid value: "{type(error.instance).__name__}": {path} in body must be of type {error.validator_value}'
        else:
            message = f'Invalid value: {json.dumps(error.instance)[:80]}: {error.message}'
        causes.append((path or '<root>', message))
    return causes

