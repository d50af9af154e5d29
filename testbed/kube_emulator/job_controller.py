"""JobController: kube-controller-manager's Job controller (Kubernetes 1.32) for NonIndexed Jobs,
over the fake's store: a Job's pods made from its template, each end counted once (the
job-tracking finalizer), replacements after a compressed backoff, and the Job's end (Complete,
Failed). Details: README.md, "The Job controller"."""
from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Callable
from typing import Any

from testbed.kube_emulator.conditions import condition_true, pod_ready

CHECK_PERIOD = 0.1
BACKOFF_BASE = 0.2  # real: 10 s
BACKOFF_CAP = 5.0  # real: 6 min
TRACKING_FINALIZER = 'batch.kubernetes.io/job-tracking'
TERMINAL = ('Succeeded', 'Failed')

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class JobStore:
    """What the controller may do to the fake's store (each a write path of the fake)."""
    version: Callable[[], int]  # the store's resourceVersion: a pass runs only after a change
    jobs: Callable[[], list[dict[str, Any]]]
    pods: Callable[[], list[dict[str, Any]]]
    create_pod: Callable[[str, dict[str, Any]], dict[str, Any]]  # (namespace, pod); raises on refusal
    delete_pod: Callable[[dict[str, Any]], None]
    remove_finalizer: Callable[[dict[str, Any], str], None]
    write_status: Callable[[dict[str, Any], dict[str, Any]], None]  # (job, its new status)
    record_event: Callable[[dict[str, Any], str, str, str], None]  # (job, type, reason, message)


def now_timestamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')


def _seconds_since(timestamp: str) -> float:
    moment = datetime.datetime.fromisoformat(timestamp.replace('Z', '+00:00'))
    return (datetime.datetime.now(datetime.UTC) - moment).total_seconds()


def controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in obj['metadata'].get('ownerReferences') or []:
        if ref.get('controller'):
            return ref.get('uid')
    return None


class JobController:
    """The Job controller's loop over the fake's store (see the module docstring)."""

    def __init__(self, store: JobStore, *, check_period: float = CHECK_PERIOD,
                 clock: Callable[[], float] = lambda: asyncio.get_running_loop().time()) -> None:
        self._store = store
        self.check_period = check_period
        self._clock = clock
        self._last_failure: dict[str, float] = {}  # by Job uid: when a failure was last counted
        self._seen_version = -1

    async def run(self) -> None:
        """Sync every `check_period` seconds after a change, until cancelled; errors are logged."""
        while True:
            await asyncio.sleep(self.check_period)
            version = self._store.version()
            if version == self._seen_version and not self._last_failure:
                continue
            self._seen_version = version
            try:
                self.sync()
            except Exception:  # a bug of the fake: say so, and keep going
                log.exception('the fake job controller failed a pass')

    def sync(self) -> None:
        """One pass over every Job, then the finalizers of pods whose Job is gone."""
        jobs = {job['metadata']['uid']: job for job in self._store.jobs()}
        pods_by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in self._store.pods():
            owner = controller_uid(pod)
            if owner in jobs:
                pods_by_job.setdefault(owner, []).append(pod)
            elif TRACKING_FINALIZER in (pod['metadata'].get('finalizers') or []):
                self._store.remove_finalizer(pod, TRACKING_FINALIZER)  # an orphan: nothing to count
        for uid, job in jobs.items():
            self._sync_job(job, pods_by_job.get(uid, []))
        for uid in set(self._last_failure) - set(jobs):
            del self._last_failure[uid]

    def _sync_job(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = job['metadata'], job.get('spec') or {}
        old_status = job.get('status') or {}
        status = {k: v for k, v in old_status.items()}
        succeeded, failed = status.get('succeeded', 0), status.get('failed', 0)
        only_failed = spec.get('podReplacementPolicy') == 'Failed'
        counted = []
        for pod in pods:
            if TRACKING_FINALIZER not in (pod['metadata'].get('finalizers') or []):
                continue
            phase = (pod.get('status') or {}).get('phase')
            if phase == 'Succeeded':
                succeeded += 1
            elif phase == 'Failed' or (pod['metadata'].get('deletionTimestamp') and not only_failed):
                failed += 1
                self._last_failure[meta['uid']] = self._clock()
            else:
                continue
            counted.append(pod)
        live = [p for p in pods if (p.get('status') or {}).get('phase') not in TERMINAL]
        active = [p for p in live if not p['metadata'].get('deletionTimestamp')]
        terminating = [p for p in live if p['metadata'].get('deletionTimestamp')]
        restarts = sum(c.get('restartCount', 0) for p in active for c in (p.get('status') or {}).get('containerStatuses') or []) \
            if (spec.get('template') or {}).get('spec', {}).get('restartPolicy') == 'OnFailure' else 0

        conditions = list(status.get('conditions') or [])
        finished = condition_true(job, 'Complete') or condition_true(job, 'Failed')
        if finished:
            self._last_failure.pop(meta['uid'], None)
        if not finished and not spec.get('suspend') and not status.get('startTime'):
            status['startTime'] = now_timestamp()
        ending = next((c for c in conditions if c['type'] in ('FailureTarget', 'SuccessCriteriaMet')
                       and c['status'] == 'True'), None)
        if not finished and ending is None:
            deadline = spec.get('activeDeadlineSeconds')
            completions = spec.get('completions')
            if failed + restarts > spec.get('backoffLimit', 6):
                ending = self._end(job, conditions, 'FailureTarget', 'BackoffLimitExceeded',
                                   'Job has reached the specified backoff limit')
            elif deadline is not None and status.get('startTime') and _seconds_since(status['startTime']) >= deadline:
                ending = self._end(job, conditions, 'FailureTarget', 'DeadlineExceeded',
                                   'Job was active longer than specified deadline')
            elif completions is not None and succeeded >= completions:
                ending = self._end(job, conditions, 'SuccessCriteriaMet', 'CompletionsReached',
                                   'Reached expected number of succeeded pods')
        if not finished and ending is not None:
            for pod in active:
                self._store.delete_pod(pod)
                self._store.record_event(job, 'Normal', 'SuccessfulDelete', f'Deleted pod: {pod["metadata"]["name"]}')
            active = []
            if not live:  # pods just deleted are still running: the end comes on a later pass
                self._finish(job, conditions, status, ending)
        elif not finished and not spec.get('suspend'):
            active += self._create_pods(job, len(active) + (len(terminating) if only_failed else 0), succeeded)

        status.update(succeeded=succeeded, failed=failed, active=len(active), ready=sum(map(pod_ready, active)),
                      terminating=len(terminating), uncountedTerminatedPods={}, conditions=conditions)
        for key in ('succeeded', 'failed', 'active'):
            if not status[key]:
                del status[key]
        if not conditions:
            del status['conditions']
        if status != old_status:
            self._store.write_status(job, status)
        for pod in counted:  # after the counts are stored, as the real controller does
            self._store.remove_finalizer(pod, TRACKING_FINALIZER)

    def _end(self, job: dict[str, Any], conditions: list[dict[str, Any]], kind: str, reason: str,
             message: str) -> dict[str, Any]:
        now = now_timestamp()
        condition = {'type': kind, 'status': 'True', 'lastProbeTime': now, 'lastTransitionTime': now,
                     'reason': reason, 'message': message}
        conditions.append(condition)
        if kind == 'FailureTarget':
            self._store.record_event(job, 'Warning', reason, message)
        return condition

    def _finish(self, job: dict[str, Any], conditions: list[dict[str, Any]], status: dict[str, Any],
                ending: dict[str, Any]) -> None:
        """The terminal condition, once no pod of the Job is left running."""
        now = now_timestamp()
        kind = 'Complete' if ending['type'] == 'SuccessCriteriaMet' else 'Failed'
        conditions.append(dict(ending, type=kind, lastProbeTime=now, lastTransitionTime=now))
        if kind == 'Complete':
            status['completionTime'] = now
            self._store.record_event(job, 'Normal', 'Completed', 'Job completed')

    def _create_pods(self, job: dict[str, Any], active: int, succeeded: int) -> list[dict[str, Any]]:
        spec, meta = job['spec'], job['metadata']
        completions = spec.get('completions')
        wanted = spec.get('parallelism', 1)
        if completions is not None:
            wanted = min(wanted, completions - succeeded)
        if wanted <= active:
            return []
        failures = (job.get('status') or {}).get('failed', 0)
        last = self._last_failure.get(meta['uid'])
        if last is not None and failures:
            if self._clock() < last + min(BACKOFF_BASE * 2 ** (failures - 1), BACKOFF_CAP):
                return []
        template = spec.get('template') or {}
        created = []
        for _ in range(wanted - active):
            pod_meta = {key: dict(value) for key, value in (template.get('metadata') or {}).items()
                        if key in ('labels', 'annotations')}
            pod_meta.update(generateName=f'{meta["name"]}-', finalizers=[TRACKING_FINALIZER], ownerReferences=[{
                'apiVersion': 'batch/v1', 'kind': 'Job', 'name': meta['name'], 'uid': meta['uid'],
                'controller': True, 'blockOwnerDeletion': True}])
            pod = {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': pod_meta,
                   'spec': dict(template.get('spec') or {})}
            try:
                made = self._store.create_pod(meta['namespace'], pod)
            except Exception as error:  # refused (quota, admission): a real controller retries too
                self._store.record_event(job, 'Warning', 'FailedCreate', f'Error creating: {error}')
                break
            self._store.record_event(job, 'Normal', 'SuccessfulCreate', f'Created pod: {made["metadata"]["name"]}')
            created.append(made)
        return created
