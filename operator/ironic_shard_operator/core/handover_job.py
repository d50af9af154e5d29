"""A handover's Kubernetes Job, rendered and read back, and the check of its nova.conf. Pure.

The Job runs `nova-manage db ironic_compute_node_move --ironic-node-uuid U --destination-host H`
for each node of its batch, one after the other, in the pool's image, with the nova.conf of
`spec.handover.novaManageConfig` (database access) mounted read-only. The first failure ends
the pod, so nothing after it runs. Its name is derived from its batch
(core/handover.py::job_name), it is owned by the pool (garbage-collected with it), its pod is
never restarted in place and the Job retries at most BACKOFF_LIMIT times, a new pod only once
the last one has ended (`podReplacementPolicy: Failed`: never two pods of one Job at once). A
pod asked to stop (SIGTERM: its deletion, or the Job's) finishes the nova-manage run under way
(killing it between its two saves would leave a half move) and starts no other. A pod that
runs a batch again cannot move a node twice: nova-manage refuses a node whose compute node's
service is not forced down, which a node already at its (live) destination is not; the script
notes that refusal and goes on with the batch, so a pod killed mid-batch costs its retry the
nodes left, not a failed Job and a backoff. Whether a node moved is never taken from the Job
or its log: the operator believes only Nova's hypervisor list (core/handover.py).

The batch is also recorded in an annotation of the Job and of its pods, so the operator reads
back which nodes a Job, or a pod that outlives its Job, may still be moving without parsing its
command; and so is its attempt (a batch tried again after its Job failed: the backoff of
core/handover.py::retry_delay grows with it, across restarts too).
"""

from __future__ import annotations

import configparser
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ironic_shard_operator.core.handover import ACTIVE, FAILED, SUCCEEDED, JobBatch, JobPod, JobView
from ironic_shard_operator.core.pods import parse_time
from ironic_shard_operator.core.podspec import (
    MEMBER_LABEL, POOL_LABEL, container_security_context, extra_mounts, extra_volumes, owner_reference,
    shared_pod_settings,
)
from ironic_shard_operator.core.spec import GROUP, Pool

COMPONENT_LABEL = f"{GROUP}/component"
COMPONENT = "handover"
MOVES_ANNOTATION = f"{GROUP}/handover-moves"
ATTEMPT_ANNOTATION = f"{GROUP}/handover-attempt"
CONTAINER_NAME = "nova-manage"
CONFIG_PATH = "/etc/nova/handover/nova.conf"
BACKOFF_LIMIT = 2
# A Job that hangs (a database that does not answer) is failed by Kubernetes after this long,
# and at least SECONDS_PER_RUN per nova-manage run it makes: one move took 16.3 s per node in a
# batch of 10 under load (bench/grace_bench.py, 2026-12-02, 2 cores), so a batch of
# handover.maxConcurrent (up to 1000) nodes is never cut by a deadline made for a few.
ACTIVE_DEADLINE_SECONDS = 900
SECONDS_PER_RUN = 60


def active_deadline(runs: int) -> int:
    """activeDeadlineSeconds of a Job of `runs` nova-manage runs (ACTIVE_DEADLINE_SECONDS at least)."""
    return max(ACTIVE_DEADLINE_SECONDS, SECONDS_PER_RUN * runs)


def job_selector(pool_name: str) -> str:
    """The label selector of a pool's handover Jobs."""
    return f"{POOL_LABEL}={pool_name},{COMPONENT_LABEL}={COMPONENT}"


# nova 34's refusal of a node whose compute node's service is not forced down: for a node of a
# running Job (its source forced down first, and held so while the Job runs), most likely an
# earlier pod of the Job moved it already; but the log cannot tell (its source's flag may have
# been cleared by someone). Noted and skipped, never counted as moved: whether it moved is Nova's
# hypervisor list's to say, which the operator reads.
SOURCE_NOT_FORCED_DOWN = "Source service is not yet forced down!"
# The exit status of a pod that stopped between two nodes when asked to (128 + SIGTERM).
STOPPED_EXIT = 143


def script(moves: Sequence[Any]) -> str:
    """The shell script of a batch (POSIX sh, PID 1 of its container): one nova-manage per node,
    its output in the log; a node refused with SOURCE_NOT_FORCED_DOWN is noted and skipped, any other
    failure ends the pod with nova-manage's exit status. SIGTERM is trapped: the run under way
    ends (a shell runs a trap only once its foreground command is done), no other starts, and
    the pod exits STOPPED_EXIT."""
    command = " ".join(shlex.quote(word) for word in (
        "nova-manage", "--config-file", CONFIG_PATH, "db", "ironic_compute_node_move"))
    trap = "stopping=; trap 'stopping=1' TERM"
    move = ('move() { if [ -n "$stopping" ]; then echo "ironic-shard-operator: asked to stop (SIGTERM): '
            f'node $1 and the rest of the batch not started"; exit {STOPPED_EXIT}; fi; '
            "out=$(" + command + ' --ironic-node-uuid "$1" --destination-host "$2" 2>&1); rc=$?; '
            "printf '%s\\n' \"$out\"; [ \"$rc\" -eq 0 ] && return 0; "
            f"case \"$out\" in *{shlex.quote(SOURCE_NOT_FORCED_DOWN)}*) "
            'echo "ironic-shard-operator: node $1 skipped: nova-manage refused it, the service its compute node '
            'is listed under is not forced down (an earlier run may have moved it); not counted as moved: the '
            'operator reads Nova\'s hypervisor list to know where it is"; return 0;; '
            'esac; return "$rc"; }')
    steps = [f"move {shlex.quote(m.node_uuid)} {shlex.quote(m.target)} || exit $?" for m in moves]
    return "\n".join([trap, move, *steps, f'[ -z "$stopping" ] || exit {STOPPED_EXIT}'])


def render_job(pool: Pool, batch: JobBatch) -> dict[str, Any]:
    """The batch's Job (module doc)."""
    moves = json.dumps([[m.node_uuid, m.target] for m in batch.moves])
    labels = {POOL_LABEL: pool.name, MEMBER_LABEL: batch.source, COMPONENT_LABEL: COMPONENT}
    return nova_manage_job(pool, name=batch.name, labels=labels,
                           annotations={MOVES_ANNOTATION: moves, ATTEMPT_ANNOTATION: str(batch.attempt)},
                           pod_annotations={MOVES_ANNOTATION: moves},
                           command=["/bin/sh", "-c", script(batch.moves)], runs=len(batch.moves))


def nova_manage_job(pool: Pool, *, name: str, labels: Mapping[str, str], annotations: Mapping[str, str],
                    pod_annotations: Mapping[str, str], command: Sequence[str], runs: int = 1) -> dict[str, Any]:
    """A Job that runs `command` once in the pool's image with `spec.handover.novaManageConfig`
    mounted read-only at CONFIG_PATH: owned by the pool, its pod never restarted in place, at
    most BACKOFF_LIMIT retries, each only once the last pod has ended, failed by Kubernetes
    after `active_deadline(runs)` (`runs`: the nova-manage runs `command` makes), its pod's terminationGracePeriodSeconds
    spec.handover.jobTerminationGracePeriodSeconds. `labels` go on the Job and its pods."""
    assert pool.handover is not None
    secret = pool.handover.nova_manage_config
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # Asked to stop, the pod finishes the nova-manage run under way (script()): the grace
        # covers one run, so the kubelet's SIGKILL never cuts one between its two saves.
        "terminationGracePeriodSeconds": pool.handover.job_grace_seconds,
        "containers": [{
            "name": CONTAINER_NAME,
            "image": pool.pod.image,
            "command": list(command),
            "volumeMounts": [{"name": "nova-manage-conf", "mountPath": CONFIG_PATH, "subPath": "nova.conf",
                              "readOnly": True}, *extra_mounts(pool)],
            "securityContext": container_security_context(pool),
            **({"imagePullPolicy": pool.pod.image_pull_policy} if pool.pod.image_pull_policy else {}),
        }],
        "volumes": [{"name": "nova-manage-conf",
                     "secret": {"secretName": secret.name, "items": [{"key": secret.key, "path": "nova.conf"}]}},
                    *extra_volumes(pool)],
        # The members' pull secrets, security context and placement: the same image, the same
        # cluster policies (a namespace's Pod Security level applies to Job pods too).
        **shared_pod_settings(pool),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": pool.namespace,
            "labels": dict(labels),
            "annotations": dict(annotations),
            "ownerReferences": [owner_reference(pool)],
        },
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "activeDeadlineSeconds": active_deadline(runs),
            "podReplacementPolicy": "Failed",
            "template": {"metadata": {"labels": dict(labels), "annotations": dict(pod_annotations)},
                         "spec": pod_spec},
        },
    }


def _moves_and_source(meta: Mapping[str, Any]) -> tuple[tuple[tuple[str, str], ...] | None, str | None]:
    """(moves, source) from a handover Job's or pod's metadata; (None, None) when it is no
    handover object of ours; moves None when its annotation is missing or unreadable."""
    labels = meta.get("labels") or {}
    source = labels.get(MEMBER_LABEL)
    if not source or labels.get(COMPONENT_LABEL) != COMPONENT:
        return None, None
    try:
        moves = tuple((str(uuid), str(dest)) for uuid, dest in
                      json.loads((meta.get("annotations") or {}).get(MOVES_ANNOTATION, "")))
    except (ValueError, TypeError):
        return None, source
    return moves, source


def read_job(raw: Mapping[str, Any], log_tail: str = "") -> JobView | None:
    """A JobView of a Job as the API returns it; None when it is no handover Job of ours."""
    meta = raw.get("metadata") or {}
    moves, source = _moves_and_source(meta)
    if moves is None or source is None:
        return None
    try:
        attempt = max(1, int((meta.get("annotations") or {}).get(ATTEMPT_ANNOTATION, "1")))
    except ValueError:
        attempt = 1
    state, finished = job_state(raw)
    return JobView(name=meta.get("name", ""), source=source, moves=moves, state=state, finished=finished,
                   log_tail=log_tail, attempt=attempt, created=parse_time(meta.get("creationTimestamp")))


def job_state(raw: Mapping[str, Any]) -> tuple[str, float | None]:
    """(ACTIVE, SUCCEEDED or FAILED, when it finished) of a Job as the API returns it; a Job
    being deleted counts as FAILED (its pod is stopped, nothing more runs)."""
    state, finished = ACTIVE, None
    for condition in (raw.get("status") or {}).get("conditions") or ():
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            state, finished = SUCCEEDED, parse_time(condition.get("lastTransitionTime"))
        elif condition.get("type") == "Failed":
            state, finished = FAILED, parse_time(condition.get("lastTransitionTime"))
    if ((raw.get("metadata") or {}).get("deletionTimestamp")) and state == ACTIVE:
        state = FAILED
    return state, finished


# The label the Job controller puts on each pod of a Job (Kubernetes 1.27+).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def read_job_pod(raw: Mapping[str, Any]) -> JobPod | None:
    """A JobPod of a pod as the API returns it; None when it is no pod of a handover Job. Its
    moves come from the pod's own annotation (a pod may outlive its Job); a pod of an earlier
    version without one holds every node of its source (`moves` None)."""
    meta = raw.get("metadata") or {}
    moves, source = _moves_and_source(meta)
    if source is None:
        return None
    phase = (raw.get("status") or {}).get("phase") or "Pending"
    return JobPod(name=meta.get("name", ""), job=(meta.get("labels") or {}).get(JOB_NAME_LABEL, ""),
                  source=source, moves=moves, alive=phase not in ("Succeeded", "Failed"),
                  stopping_since=parse_time(meta.get("deletionTimestamp")),
                  node=(raw.get("spec") or {}).get("nodeName"))


def config_problem(text: str | None, secret: str, key: str) -> str | None:
    """Why the nova.conf of novaManageConfig cannot run nova-manage's move: it is missing, or
    lacks [database] or [api_database] connection; None when it can."""
    if text is None:
        return f"Secret {secret} has no key {key} (spec.handover.novaManageConfig): no handover can run"
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error as error:
        return f"Secret {secret} key {key} (spec.handover.novaManageConfig) is no readable nova.conf: {error}"
    missing = [section for section in ("database", "api_database")
               if not parser.get(section, "connection", fallback="").strip()]
    if missing:
        return (f"Secret {secret} key {key} (spec.handover.novaManageConfig) has no "
                + " and no ".join(f"[{s}] connection" for s in missing)
                + ": nova-manage needs database access to move compute nodes; no handover runs")
    return None
