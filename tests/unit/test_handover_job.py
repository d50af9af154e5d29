"""The handover Job (core/handover_job.py): what it runs, how it is read back, and the check of
the nova.conf it mounts."""

from __future__ import annotations

import shlex

import pytest

from ironic_shard_operator.core.handover import ACTIVE, FAILED, SUCCEEDED, JobBatch, handover_durations, job_name
from ironic_shard_operator.core.handover_job import (
    BACKOFF_LIMIT, CONFIG_PATH, SOURCE_NOT_FORCED_DOWN, config_problem, job_selector, read_job, read_job_pod, render_job, script,
)
from ironic_shard_operator.core.model import Move
from ironic_shard_operator.core.spec import JOB_GRACE_SECONDS, read_pool


def _pool(**handover):
    return read_pool({
        "metadata": {"name": "rack", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {"replicas": 2, "image": "registry/nova:34", "novaConfig": {"secretRef": {"name": "nc"}},
                 "cloud": {"secretRef": {"name": "cl"}},
                 "handover": {"novaManageConfig": {"secretRef": {"name": "nm", "key": "db.conf"}}, **handover}}})


def test_the_job_runs_in_the_pool_image_with_the_db_config_and_bounded_retries():
    moves = (Move("n-1", "rack-2", "rack-0"), Move("n-2", "rack-2", "rack-1"))
    job = render_job(_pool(), JobBatch("rack-2", job_name("rack-2", moves), moves))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry/nova:34"
    shell, flag, text = container["command"]
    assert (shell, flag) == ("/bin/sh", "-c") and text == script(moves)
    volume = job["spec"]["template"]["spec"]["volumes"][0]["secret"]
    assert volume == {"secretName": "nm", "items": [{"key": "db.conf", "path": "nova.conf"}]}
    assert job["spec"]["backoffLimit"] == BACKOFF_LIMIT and job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert len(job["metadata"]["name"]) <= 63


def test_the_job_pod_has_the_grace_of_the_spec_to_finish_the_run_under_way():
    """Deleted (by the operator, the Job's deadline or a drain), the pod ends the nova-manage
    run under way (script()); its terminationGracePeriodSeconds is the spec's, not the API's
    30 s default, so the kubelet's SIGKILL does not cut a run a loaded database slows down."""
    moves = (Move("n-1", "rack-2", "rack-0"),)
    batch = JobBatch("rack-2", job_name("rack-2", moves), moves)
    assert render_job(_pool(), batch)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == JOB_GRACE_SECONDS
    pool = _pool(jobTerminationGracePeriodSeconds=300)
    assert render_job(pool, batch)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 300


def test_the_job_pod_takes_the_members_pull_secrets_security_volumes_and_placement():
    """A cluster that runs the members runs the Jobs: same registry credentials, the same Pod
    Security level, the CA bundle, the same nodes; the Job's own nova.conf stays its own."""
    import dataclasses
    pool = _pool()
    pod = dataclasses.replace(pool.pod, image_pull_secrets=("registry",), pod_security_context={"runAsNonRoot": True},
                              volumes=({"name": "ca", "configMap": {"name": "private-ca"}},),
                              volume_mounts=({"name": "ca", "mountPath": "/etc/pki/ca"},),
                              node_selector={"role": "compute"}, tolerations=({"key": "k", "operator": "Exists"},))
    moves = (Move("n-1", "rack-2", "rack-0"),)
    spec = render_job(dataclasses.replace(pool, pod=pod), JobBatch("rack-2", job_name("rack-2", moves), moves)
                      )["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["securityContext"] == {"runAsNonRoot": True}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert [v["name"] for v in spec["volumes"]] == ["nova-manage-conf", "ca"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/etc/nova/handover/nova.conf", "/etc/pki/ca"]
    assert spec["nodeSelector"] == {"role": "compute"} and spec["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert "affinity" not in spec and "topologySpreadConstraints" not in spec  # one pod that runs once


# A stand-in nova-manage for the script's control flow (the real one runs in tests/nova): it
# records its arguments and answers as nova 34 does for the node named in $NOVA_MANAGE_ANSWERS.
STAND_IN = """#!/bin/sh
echo "$*" >> "$CALLS"
node=$(echo "$*" | sed 's/.*--ironic-node-uuid \\([^ ]*\\).*/\\1/')
answer=$(grep "^$node " "$ANSWERS" | cut -d' ' -f2-)
[ -z "$answer" ] && exit 0
echo "An error has occurred:"
echo "nova.exception.NovaException: $answer"
exit 1
"""


@pytest.mark.parametrize("answers, ran, code, logged", [
    ({}, ["n-1", "n-2", "n-3"], 0, None),
    # n-1 refused as not forced down (an earlier pod of the Job may have moved it): noted, not
    # counted as moved, the rest of the batch runs
    ({"n-1": SOURCE_NOT_FORCED_DOWN}, ["n-1", "n-2", "n-3"], 0, "node n-1 skipped"),
    # any other refusal ends the pod with nova-manage's status; nothing after it runs
    ({"n-2": "Destination compute is forced down!"}, ["n-1", "n-2"], 1, "Destination compute is forced down!"),
    ({"n-1": SOURCE_NOT_FORCED_DOWN, "n-3": "Found an ironic host with more than one instance!"},
     ["n-1", "n-2", "n-3"], 1, "more than one instance"),
], ids=["all move", "a node refused as not forced down is skipped", "a refusal stops the batch", "skip, then refusal"])
def test_the_jobs_script_moves_each_node_skips_one_moved_already_and_stops_at_any_other_failure(
        tmp_path, answers, ran, code, logged):
    import os
    import subprocess

    moves = tuple(Move(f"n-{i}", "rack-2", f"rack-{i % 2}") for i in (1, 2, 3))
    stand_in = tmp_path / "bin" / "nova-manage"
    stand_in.parent.mkdir()
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    (tmp_path / "answers").write_text("".join(f"{node} {text}\n" for node, text in answers.items()))
    done = subprocess.run(["/bin/sh", "-c", script(moves)], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{stand_in.parent}:{os.environ['PATH']}",
                               "CALLS": str(tmp_path / "calls"), "ANSWERS": str(tmp_path / "answers")})
    calls = [shlex.split(line) for line in (tmp_path / "calls").read_text().splitlines()]
    assert [c[c.index("--ironic-node-uuid") + 1] for c in calls] == ran
    assert all(c[:4] == ["--config-file", CONFIG_PATH, "db", "ironic_compute_node_move"] for c in calls)
    assert [c[c.index("--destination-host") + 1] for c in calls] == [m.target for m in moves][:len(ran)]
    assert done.returncode == code, done.stdout + done.stderr
    if logged:
        assert logged in done.stdout
    if SOURCE_NOT_FORCED_DOWN in answers.values():  # a skip claims nothing: where the node is, is Nova's to say
        assert "not counted as moved: the operator reads Nova's hypervisor list" in done.stdout
        assert "moved already" not in done.stdout and "Job moved it" not in done.stdout


def test_a_job_pod_asked_to_stop_finishes_the_move_under_way_and_starts_no_other(tmp_path):
    """SIGTERM reaches the Job's pod when the pod or its Job is deleted. Killing nova-manage
    between its two saves would leave a half move: the script, PID 1 of its container (run so by
    testbed/task_pods.py), lets the run under way end and starts no other (exit 143)."""
    import time

    from testbed.task_pods import start_task

    slow = tmp_path / "bin" / "nova-manage"
    slow.parent.mkdir()
    slow.write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path / 'calls'}\nsleep 2\necho moved\n")
    slow.chmod(0o755)
    moves = tuple(Move(f"n-{i}", "rack-2", "rack-0") for i in (1, 2, 3))
    task = start_task(["/bin/sh", "-c", script(moves)], slow.parent, tmp_path / "log", tmp_path)
    deadline = time.monotonic() + 30
    while not (tmp_path / "calls").exists():
        assert time.monotonic() < deadline and task.alive(), task.output()
        time.sleep(0.02)
    task.terminate(grace=30.0)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 1 and "--ironic-node-uuid n-1" in calls[0]
    assert task.exit_code() == 143
    assert "moved" in task.output() and "asked to stop (SIGTERM): node n-2" in task.output()


def test_the_job_replaces_a_pod_only_once_it_has_ended_and_its_pods_say_what_they_move():
    moves = (Move("n-1", "rack-2", "rack-0"),)
    job = render_job(_pool(), JobBatch("rack-2", "j", moves))
    assert job["spec"]["podReplacementPolicy"] == "Failed"
    pod = {"metadata": {"name": "j-abcde", **job["spec"]["template"]["metadata"],
                        "labels": {**job["spec"]["template"]["metadata"]["labels"],
                                   "batch.kubernetes.io/job-name": "j"}},
           "status": {"phase": "Running"}}
    view = read_job_pod(pod)
    assert (view.job, view.source, view.moves, view.alive) == ("j", "rack-2", (("n-1", "rack-0"),), True)
    pod["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert read_job_pod(pod).alive  # being deleted: it runs until its kubelet says it ended
    assert read_job_pod(pod).stopping_since == 1735689600.0  # since when (a lost node's pod is named after a bound)
    assert read_job_pod({**pod, "spec": {"nodeName": "node-7"}}).node == "node-7"
    assert not read_job_pod({**pod, "status": {"phase": "Failed"}}).alive
    del pod["metadata"]["annotations"]
    assert read_job_pod(pod).moves is None  # an earlier version's pod: it may move any node of its source
    assert read_job_pod({"metadata": {"name": "rack-2", "labels": {"ironicshards.io/member": "rack-2"}}}) is None


def test_a_failed_jobs_reason_is_the_error_that_ended_it_not_a_node_skipped_before():
    from ironic_shard_operator.core.handover import job_failure_reason

    tail = " | ".join([
        "An error has occurred:", f"nova.exception.NovaException: {SOURCE_NOT_FORCED_DOWN}",
        "ironic-shard-operator: node n-1 skipped: nova-manage refused it, the service its compute node is listed "
        "under is not forced down (an earlier run may have moved it); not counted as moved: the operator reads "
        "Nova's hypervisor list to know where it is",
        "An error has occurred:", "Traceback (most recent call last):",
        "oslo_db.exception.DBConnectionError: (pymysql.err.OperationalError) (2003, \"Can't connect\")"])
    assert job_failure_reason(tail) == "database"


@pytest.mark.parametrize("conditions, state", [
    ([], ACTIVE),
    ([{"type": "Complete", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}], SUCCEEDED),
    ([{"type": "Failed", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}], FAILED),
])
def test_a_job_is_read_back_with_its_moves_and_state(conditions, state):
    moves = (Move("n-1", "rack-2", "rack-0"),)
    job = render_job(_pool(), JobBatch("rack-2", "j", moves))
    job["status"] = {"conditions": conditions}
    view = read_job(job, "tail")
    assert (view.source, view.moves, view.state, view.log_tail) == ("rack-2", (("n-1", "rack-0"),), state, "tail")
    assert "ironicshards.io/component=handover" in job_selector("rack")


def test_a_jobs_attempt_is_read_back_from_the_job_itself():
    moves = (Move("n-1", "rack-2", "rack-0"),)
    assert read_job(render_job(_pool(), JobBatch("rack-2", "j", moves, attempt=3))).attempt == 3
    assert read_job(render_job(_pool(), JobBatch("rack-2", "j", moves))).attempt == 1


def test_a_handed_over_node_is_timed_from_its_jobs_creation_as_the_api_wrote_it():
    moves = (Move("n-1", "rack-2", "rack-0"), Move("n-2", "rack-2", "rack-1"))
    job = render_job(_pool(), JobBatch("rack-2", "j", moves))
    job["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    view = read_job(job)
    assert view.created == 1735689600.0
    written = (Move("n-1", "rack-2", "rack-0"), Move("n-2", "rack-2", "rack-0"), Move("n-3", "rack-2", "rack-0"))
    # n-2 went elsewhere than this Job moved it, n-3 was in no Job: neither is timed.
    assert handover_durations(written, [view], 1735689642.5) == [42.5]
    assert handover_durations(written, [read_job(render_job(_pool(), JobBatch("rack-2", "j", moves)))], 1.0) == []


def test_a_nova_conf_without_database_access_is_refused_by_name():
    assert config_problem(None, "nm", "nova.conf").startswith("Secret nm has no key nova.conf")
    message = config_problem("[DEFAULT]\ndebug = true\n", "nm", "nova.conf")
    assert "no [database] connection and no [api_database] connection" in message
    assert config_problem("[database]\nconnection = mysql://x\n[api_database]\nconnection = mysql://y\n",
                          "nm", "nova.conf") is None


def test_a_large_batch_gets_a_deadline_that_covers_its_runs():
    """A Job of maxConcurrent nodes (up to 1000) runs one nova-manage per node, 16.3 s each under
    load (bench/grace_bench.py): a fixed 900 s deadline would fail any batch above ~55 nodes."""
    from ironic_shard_operator.core.handover_job import ACTIVE_DEADLINE_SECONDS, SECONDS_PER_RUN

    small = (Move("n-1", "rack-2", "rack-0"),)
    large = tuple(Move(f"n-{i}", "rack-2", "rack-0") for i in range(200))
    assert render_job(_pool(), JobBatch("rack-2", "j", small))["spec"]["activeDeadlineSeconds"] == ACTIVE_DEADLINE_SECONDS
    deadline = render_job(_pool(), JobBatch("rack-2", "j", large))["spec"]["activeDeadlineSeconds"]
    assert deadline == 200 * SECONDS_PER_RUN and deadline > 200 * 16.3 * 3
