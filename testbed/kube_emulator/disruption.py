"""Pod disruption budgets at work (Kubernetes 1.32): the disruption controller, which writes each
budget's status (DisruptionController: every CHECK_PERIOD seconds, and right after each
eviction), and the checks of the pods/eviction subresource (429 while a budget allows no
disruption, worded as a real server words it). Details: README.md, "Disruption budgets and
evictions"."""
from __future__ import annotations

import asyncio
import datetime
import logging
import math
import re
from collections.abc import Callable
from typing import Any

from testbed.kube_emulator.conditions import pod_ready
from testbed.kube_emulator.errors import ApiError, bad_request
from testbed.kube_emulator.jobs import selector_matches

CHECK_PERIOD = 0.5  # real: on every pod and budget event
DELETION_TIMEOUT = 120.0  # seconds an eviction's entry in disruptedPods waits for the pod's deletion
CAUSE = 'DisruptionBudget'
REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE = 'This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.'
EVICTION_CONDITION = {'type': 'DisruptionTarget', 'status': 'True', 'reason': 'EvictionByEvictionAPI',
                      'message': 'Eviction API: evicting'}
_PERCENT = re.compile(r'(\d+)%')

log = logging.getLogger(__name__)

# (namespace, owner reference) -> the controller's scale; raises LookupError with the reason
# when it cannot be had (no such controller, no scale subresource, no value at its path).
ScaleOf = Callable[[str, dict[str, Any]], int]


def timestamp(moment: datetime.datetime) -> str:
    return moment.strftime('%Y-%m-%dT%H:%M:%SZ')


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=datetime.UTC)


def selects(budget: dict[str, Any], pod: dict[str, Any]) -> bool:
    """metav1.LabelSelectorAsSelector of the budget's selector matches the pod (nil: nothing)."""
    selector = (budget.get('spec') or {}).get('selector')
    if selector is None or pod['metadata'].get('namespace') != budget['metadata'].get('namespace'):
        return False
    return selector_matches(selector, pod['metadata'].get('labels') or {})


def _count_or_percent(value: Any, total: int, *, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, int):
        return value
    match = _PERCENT.fullmatch(str(value))
    if match is None:
        raise LookupError(f'invalid value for IntOrString: invalid value "{value}"')
    scaled = int(match[1]) * total / 100
    return math.ceil(scaled) if round_up else math.floor(scaled)


def _expected_scale(pods: list[dict[str, Any]], scale_of: ScaleOf) -> int:
    """getExpectedScale: the sum of the scales of the pods' controllers (each counted once)."""
    scales: dict[str, int] = {}
    for pod in pods:
        ref = next((r for r in pod['metadata'].get('ownerReferences') or () if r.get('controller')), None)
        if ref is None or ref.get('uid') in scales:
            continue  # an unmanaged pod, or a controller already counted
        try:
            scales[ref['uid']] = scale_of(pod['metadata']['namespace'], ref)
        except LookupError as error:
            raise LookupError(str(error) or f'found no controllers for pod "{pod["metadata"]["name"]}"') from None
    return sum(scales.values())


def _condition(allowed: int, observed: int, old: list[dict[str, Any]], now: datetime.datetime,
               reason: str | None = None, message: str = '') -> list[dict[str, Any]]:
    """The DisruptionAllowed condition (apimeta.SetStatusCondition: the transition time moves only
    when the status does)."""
    status = 'True' if allowed > 0 and reason is None else 'False'
    reason = reason or ('SufficientPods' if status == 'True' else 'InsufficientPods')
    previous = next((c for c in old if c.get('type') == 'DisruptionAllowed'), None)
    since = previous['lastTransitionTime'] if previous and previous.get('status') == status else timestamp(now)
    return [c for c in old if c.get('type') != 'DisruptionAllowed'] + [{
        'type': 'DisruptionAllowed', 'status': status, 'reason': reason, 'message': message,
        'observedGeneration': observed, 'lastTransitionTime': since}]


def budget_status(budget: dict[str, Any], pods: list[dict[str, Any]], scale_of: ScaleOf,
                  now: datetime.datetime) -> dict[str, Any]:
    """The status the disruption controller writes for `budget`, given every pod of the cluster."""
    spec, old = budget.get('spec') or {}, budget.get('status') or {}
    generation = budget['metadata'].get('generation', 1)
    matched = [p for p in pods if selects(budget, p)]
    try:
        if spec.get('maxUnavailable') is not None:
            expected = _expected_scale(matched, scale_of)
            desired = max(expected - _count_or_percent(spec['maxUnavailable'], expected, round_up=True), 0)
        elif isinstance(spec.get('minAvailable'), int):
            expected, desired = len(matched), spec['minAvailable']
        elif spec.get('minAvailable') is not None:
            expected = _expected_scale(matched, scale_of)
            desired = _count_or_percent(spec['minAvailable'], expected, round_up=True)
        else:
            expected, desired = 0, 0
    except LookupError as error:  # failSafe
        observed = old.get('observedGeneration', 0)
        return {**old, 'disruptionsAllowed': 0,
                'conditions': _condition(0, observed, old.get('conditions') or [], now, 'SyncFailed', str(error))}
    alive = {p['metadata']['name']: p for p in matched}
    disrupted = {name: since for name, since in (old.get('disruptedPods') or {}).items()
                 if name in alive and not alive[name]['metadata'].get('deletionTimestamp')
                 and (now - parse_time(since)).total_seconds() < DELETION_TIMEOUT}
    healthy = sum(1 for p in matched if pod_ready(p) and not p['metadata'].get('deletionTimestamp')
                  and p['metadata']['name'] not in disrupted)
    allowed = healthy - desired if expected > 0 and healthy - desired > 0 else 0
    status = {'observedGeneration': generation, 'disruptionsAllowed': allowed, 'currentHealthy': healthy,
              'desiredHealthy': desired, 'expectedPods': expected,
              'conditions': _condition(allowed, generation, old.get('conditions') or [], now)}
    if disrupted:
        status['disruptedPods'] = disrupted
    return status


def too_many_requests(message: str, cause: str, retry_after: int = 0) -> ApiError:
    """errors.NewTooManyRequests with one cause of reason DisruptionBudget."""
    details: dict[str, Any] = {'causes': [{'reason': CAUSE, 'message': cause}]}
    if retry_after:
        details['retryAfterSeconds'] = retry_after
    return ApiError(429, 'TooManyRequests', message, details)


def eviction_target(eviction: Any, name: str) -> None:
    """The checks of the Eviction object itself (EvictionREST.Create)."""
    if not isinstance(eviction, dict) or eviction.get('kind') != 'Eviction' \
            or eviction.get('apiVersion') not in ('policy/v1', 'policy/v1beta1'):
        raise bad_request(f'not a Eviction object: {type(eviction).__name__}')
    if (eviction.get('metadata') or {}).get('name') != name:
        raise bad_request('name in URL does not match name in Eviction object')


def can_ignore_budgets(pod: dict[str, Any]) -> bool:
    """canIgnorePDB: a pod that ended, is Pending or is being deleted is deleted without a budget."""
    phase = (pod.get('status') or {}).get('phase')
    return phase in ('Succeeded', 'Failed', 'Pending') or bool(pod['metadata'].get('deletionTimestamp'))


def take_from_budget(pod: dict[str, Any], budgets: list[dict[str, Any]],
                     now: datetime.datetime) -> dict[str, Any] | None:
    """The budget's new status when evicting `pod` takes a disruption from it; None when the pod
    may go without (no budget, or a pod that is not Ready and need not count); raises the
    refusal (500 for two budgets, 429 when the budget allows none, 403 for a negative count)."""
    if len(budgets) > 1:
        raise ApiError(500, '', MULTIPLE, {})
    if not budgets:
        return None
    budget = budgets[0]
    spec, status = budget.get('spec') or {}, dict(budget.get('status') or {})
    name = budget['metadata']['name']
    if not pod_ready(pod):
        if spec.get('unhealthyPodEvictionPolicy') == 'AlwaysAllow':
            return None
        if status.get('currentHealthy', 0) >= status.get('desiredHealthy', 0) > 0:
            return None
    if status.get('observedGeneration', 0) < budget['metadata'].get('generation', 1):
        raise too_many_requests(REFUSED, f'The disruption budget {name} is still being processed by the server.', 10)
    allowed = status.get('disruptionsAllowed', 0)
    if allowed < 0:
        raise ApiError(403, 'Forbidden', f'poddisruptionbudgets.policy "{name}" is forbidden: '
                                         'pdb disruptions allowed is negative',
                       {'name': name, 'group': 'policy', 'kind': 'poddisruptionbudgets'})
    if allowed == 0:
        raise too_many_requests(REFUSED, f'The disruption budget {name} needs {status.get("desiredHealthy", 0)} '
                                         f'healthy pods and has {status.get("currentHealthy", 0)} currently')
    status['disruptionsAllowed'] = allowed - 1
    if allowed - 1 == 0:
        status['conditions'] = _condition(0, status.get('observedGeneration', 0), status.get('conditions') or [], now)
    status['disruptedPods'] = {**(status.get('disruptedPods') or {}), pod['metadata']['name']: timestamp(now)}
    return status


class DisruptionController:
    """The controller's loop over the fake's store, given as functions: `budgets()` and `pods()`
    list the stored objects, `scale_of` reads a controller's scale, `write_status(budget,
    status)` stores a budget's status (the fake's own write path, a no-op when unchanged)."""

    def __init__(self, budgets: Callable[[], list[dict[str, Any]]], pods: Callable[[], list[dict[str, Any]]],
                 scale_of: ScaleOf, write_status: Callable[[dict[str, Any], dict[str, Any]], None], *,
                 check_period: float = CHECK_PERIOD) -> None:
        self._budgets, self._pods, self._scale_of, self._write = budgets, pods, scale_of, write_status
        self.check_period = check_period

    async def run(self) -> None:
        """Sync every `check_period` seconds until cancelled; a failed pass is logged, not fatal."""
        while True:
            await asyncio.sleep(self.check_period)
            try:
                self.sync()
            except Exception:  # a bug of the fake: say so, and keep going
                log.exception('the fake disruption controller failed a pass')

    def sync(self) -> None:
        pods, now = self._pods(), datetime.datetime.now(datetime.UTC)
        for budget in self._budgets():
            if not budget['metadata'].get('deletionTimestamp'):
                self._write(budget, budget_status(budget, pods, self._scale_of, now))
