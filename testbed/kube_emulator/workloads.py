"""apps/v1 Deployments and policy/v1 PodDisruptionBudgets as the real registry admits them
(Kubernetes 1.32): their defaults and 422 refusals. Deployments are stored only (no controller);
a budget's status is the disruption controller's (disruption.py). Details: README.md,
"Deployments and PodDisruptionBudgets"."""
from __future__ import annotations

import json
import re
from typing import Any

from testbed.kube_emulator.jobs import DNS_SUBDOMAIN, DNS_SUBDOMAIN_MESSAGE, selector_matches

_PERCENT = re.compile(r'(\d+)%')


def deployment_defaults(deployment: dict[str, Any], *, created: bool) -> dict[str, Any]:
    """The Deployment with apps/v1's defaults (SetDefaults_Deployment); status {} on create."""
    spec = deployment.setdefault('spec', {})
    spec.setdefault('replicas', 1)
    strategy = spec.setdefault('strategy', {})
    strategy.setdefault('type', 'RollingUpdate')
    if strategy['type'] == 'RollingUpdate':
        rolling = strategy.setdefault('rollingUpdate', {})
        rolling.setdefault('maxUnavailable', '25%')
        rolling.setdefault('maxSurge', '25%')
    spec.setdefault('revisionHistoryLimit', 10)
    spec.setdefault('progressDeadlineSeconds', 600)
    if created:
        deployment['status'] = {}
    return deployment


def _go_value(value: Any) -> str:
    return json.dumps(value, sort_keys=True)[:200]


def _int_or_percent(value: Any, path: str) -> tuple[int | None, list[tuple[str, str]]]:
    """An IntOrString of a rollout or budget: its number (percent or count) and its refusals."""
    if isinstance(value, int):
        if value < 0:
            return value, [(path, f'Invalid value: {value}: must be greater than or equal to 0')]
        return value, []
    match = _PERCENT.fullmatch(str(value))
    if match is None:
        return None, [(path, f'Invalid value: "{value}": a valid percent string must be a numeric string '
                             "followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")]
    percent = int(match[1])
    if percent > 100:
        return percent, [(path, f'Invalid value: "{value}": must not be greater than 100%')]
    return percent, []


def deployment_errors(deployment: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The causes of a real server's 422 for this Deployment (create: `old` None)."""
    errors: list[tuple[str, str]] = []
    name = deployment['metadata'].get('name') or ''
    if len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        errors.append(('metadata.name', f'Invalid value: "{name}": {DNS_SUBDOMAIN_MESSAGE}'))
    spec = deployment.get('spec') or {}
    if isinstance(spec.get('replicas'), int) and spec['replicas'] < 0:
        errors.append(('spec.replicas', f'Invalid value: {spec["replicas"]}: must be greater than or equal to 0'))
    template = spec.get('template') or {}
    labels = (template.get('metadata') or {}).get('labels') or {}
    selector = spec.get('selector')
    if selector is None:
        errors.append(('spec.selector', 'Required value'))
    elif not (selector.get('matchLabels') or selector.get('matchExpressions')):
        errors.append(('spec.selector', f'Invalid value: {_go_value(selector)}: empty selector is invalid for deployment'))
    elif not selector_matches(selector, labels):
        errors.append(('spec.template.metadata.labels',
                       f'Invalid value: {_go_value(labels)}: `selector` does not match template `labels`'))
    pod_spec = template.get('spec') or {}
    if not pod_spec.get('containers'):
        errors.append(('spec.template.spec.containers', 'Required value'))
    policy = pod_spec.get('restartPolicy')
    if policy != 'Always':
        errors.append(('spec.template.spec.restartPolicy', f'Unsupported value: "{policy}": supported values: "Always"'))
    strategy = spec.get('strategy') or {}
    rolling = strategy.get('rollingUpdate')
    if strategy.get('type') == 'Recreate' and rolling is not None:
        errors.append(('spec.strategy.rollingUpdate',
                       'Forbidden: may not be specified when strategy `type` is \'Recreate\''))
    elif strategy.get('type') == 'RollingUpdate' and rolling is not None:
        unavailable, causes = _int_or_percent(rolling.get('maxUnavailable'), 'spec.strategy.rollingUpdate.maxUnavailable')
        surge, surge_causes = _int_or_percent(rolling.get('maxSurge'), 'spec.strategy.rollingUpdate.maxSurge')
        errors += causes + surge_causes
        if unavailable == 0 and surge == 0:
            errors.append(('spec.strategy.rollingUpdate.maxUnavailable',
                           'Invalid value: 0: may not be 0 when `maxSurge` is 0'))
    elif strategy.get('type') not in ('Recreate', 'RollingUpdate'):
        errors.append(('spec.strategy.type', f'Unsupported value: "{strategy.get("type")}": supported values: '
                                             '"Recreate", "RollingUpdate"'))
    if old is not None and spec.get('selector') != (old.get('spec') or {}).get('selector'):
        errors.append(('spec.selector', f'Invalid value: {_go_value(spec.get("selector"))}: field is immutable'))
    return errors


def pdb_defaults(budget: dict[str, Any], *, created: bool) -> dict[str, Any]:
    """A new PodDisruptionBudget's status: its counts, zero until the disruption controller runs."""
    if created:
        budget['status'] = {'disruptionsAllowed': 0, 'currentHealthy': 0, 'desiredHealthy': 0, 'expectedPods': 0}
    return budget


def pdb_errors(budget: dict[str, Any]) -> list[tuple[str, str]]:
    """The causes of a real server's 422 for this PodDisruptionBudget."""
    spec = budget.get('spec') or {}
    errors: list[tuple[str, str]] = []
    if spec.get('minAvailable') is not None and spec.get('maxUnavailable') is not None:
        errors.append(('spec', f'Invalid value: {_go_value(spec)}: minAvailable and maxUnavailable cannot be both set'))
    for field in ('minAvailable', 'maxUnavailable'):
        if spec.get(field) is not None:
            errors += _int_or_percent(spec[field], f'spec.{field}')[1]
    return errors
