"""batch/v1 Jobs as the real registry admits them (Kubernetes 1.32): the API defaults of a Job
and its pod template (`job_defaults`), the generated selector and labels, and the 422 refusals
(`job_errors`). Details: README.md, "Jobs"."""
from __future__ import annotations

import json
import re
from typing import Any

CONTROLLER_UID_LABEL = 'batch.kubernetes.io/controller-uid'
LEGACY_CONTROLLER_UID_LABEL = 'controller-uid'
JOB_NAME_LABEL = 'batch.kubernetes.io/job-name'
LEGACY_JOB_NAME_LABEL = 'job-name'
DNS_SUBDOMAIN = re.compile(r'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')
DNS_SUBDOMAIN_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                         "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                         "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def job_defaults(job: dict[str, Any], *, created: bool) -> dict[str, Any]:
    """The Job with the defaults a real server fills in (its template's PodSpec defaults are
    admission.py's); on create also the generated selector and template labels (they need the
    uid, set before admission) and an empty status."""
    spec = job.setdefault('spec', {})
    if spec.get('completions') is None and spec.get('parallelism') is None:
        spec['completions'] = spec['parallelism'] = 1
    spec.setdefault('parallelism', 1)
    if spec.get('backoffLimitPerIndex') is None:
        spec.setdefault('backoffLimit', 6)
    spec.setdefault('completionMode', 'NonIndexed')
    spec.setdefault('suspend', False)
    spec.setdefault('podReplacementPolicy', 'Failed' if spec.get('podFailurePolicy') else 'TerminatingOrFailed')
    template = spec.setdefault('template', {})
    if created:
        job['status'] = {}
        if not spec.get('manualSelector'):
            meta = job['metadata']
            labels = template.setdefault('metadata', {}).setdefault('labels', {})
            for key in (JOB_NAME_LABEL, LEGACY_JOB_NAME_LABEL):
                labels.setdefault(key, meta['name'])
            for key in (CONTROLLER_UID_LABEL, LEGACY_CONTROLLER_UID_LABEL):
                labels.setdefault(key, meta['uid'])
            selector = spec.setdefault('selector', {})
            selector.setdefault('matchLabels', {}).setdefault(CONTROLLER_UID_LABEL, meta['uid'])
    return job


def _go_value(value: Any) -> str:
    """A value as an Invalid cause quotes it (JSON here; Go prints its own struct syntax)."""
    return json.dumps(value, sort_keys=True)[:200]


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions) against a label set."""
    if any(labels.get(key) != value for key, value in (selector.get('matchLabels') or {}).items()):
        return False
    for expression in selector.get('matchExpressions') or []:
        key, operator, values = expression.get('key'), expression.get('operator'), expression.get('values') or []
        present = key in labels
        ok = {'In': present and labels.get(key) in values, 'NotIn': not present or labels.get(key) not in values,
              'Exists': present, 'DoesNotExist': not present}.get(operator, False)
        if not ok:
            return False
    return True


def job_errors(job: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The causes of a real server's 422 for this Job (create: `old` None; update: the stored one)."""
    errors: list[tuple[str, str]] = []
    meta, spec = job['metadata'], job.get('spec') or {}
    name = meta.get('name') or ''
    if len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        errors.append(('metadata.name', f'Invalid value: "{name}": {DNS_SUBDOMAIN_MESSAGE}'))
    template = spec.get('template') or {}
    pod_spec = template.get('spec') or {}
    labels = (template.get('metadata') or {}).get('labels') or {}
    if not spec.get('manualSelector') and len(labels.get(JOB_NAME_LABEL, '')) > 63:
        errors.append(('spec.template.labels', f'Invalid value: "{labels[JOB_NAME_LABEL]}": must be no more than 63 characters'))
    if not pod_spec.get('containers'):
        errors.append(('spec.template.spec.containers', 'Required value'))
    policy = pod_spec.get('restartPolicy')
    if policy not in ('OnFailure', 'Never'):
        errors.append(('spec.template.spec.restartPolicy',
                       f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"'))
    for field in ('parallelism', 'completions', 'backoffLimit', 'activeDeadlineSeconds'):
        value = spec.get(field)
        if isinstance(value, int) and value < 0:
            errors.append((f'spec.{field}', f'Invalid value: {value}: must be greater than or equal to 0'))
    replacement = spec.get('podReplacementPolicy')
    if replacement not in ('Failed', 'TerminatingOrFailed'):
        errors.append(('spec.podReplacementPolicy', f'Unsupported value: "{replacement}": supported values: '
                                                    '"Failed", "TerminatingOrFailed"'))
    elif spec.get('podFailurePolicy') and replacement != 'Failed':
        errors.append(('spec.podReplacementPolicy', f'Unsupported value: "{replacement}": supported values: '
                                                    '"Failed"'))
    selector = spec.get('selector')
    if not selector:
        errors.append(('spec.selector', 'Required value'))
    else:
        if not selector_matches(selector, labels):
            errors.append(('spec.template.metadata.labels',
                           f'Invalid value: {_go_value(labels)}: `selector` does not match template `labels`'))
        expected = {'matchLabels': {CONTROLLER_UID_LABEL: meta.get('uid')}}
        if not spec.get('manualSelector') and selector != expected:
            errors.append(('spec.selector', f'Invalid value: {_go_value(selector)}: `selector` not auto-generated'))
    if old is not None:
        old_spec = old.get('spec') or {}
        for field in ('selector', 'template', 'completionMode'):
            if spec.get(field) != old_spec.get(field):
                errors.append((f'spec.{field}', f'Invalid value: {_go_value(spec.get(field))}: field is immutable'))
    return errors
