"""The handover Job (core/handover_job.py): what it runs, how it is read back, and the check of
the nova.conf it mounts."""

from __future__ import annotations

import shlex

import pytest

from ironic_shard_operator.core.handover import ACTIVE, FAILED, SUCCEEDED, JobBatch, handover_durations, job_name
from ironic_shard_operator.core.handover_job import (
    BACKOFF_LIMIT, CONFIG_PATH, config_problem, job_selector, read_job, render_job,
)
from ironic_shard_operator.core.model import Move
from ironic_shard_operator.core.spec import read_pool


def _pool():
    return read_pool({
        "metadata": {"name": "rack", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {"replicas": 2, "image": "registry/nova:34", "novaConfig": {"secretRef": {"name": "nc"}},
                 "cloud": {"secretRef": {"name": "cl"}},
                 "handover": {"novaManageConfig": {"secretRef": {"name": "nm", "key": "db.conf"}}}}})


def test_the_job_runs_nova_manage_per_node_in_the_pool_image_with_the_db_config_and_stops_at_a_refusal():
    moves = (Move("n-1", "rack-2", "rack-0"), Move("n-2", "rack-2", "rack-1"))
    job = render_job(_pool(), JobBatch("rack-2", job_name("rack-2", moves), moves))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry/nova:34"
    shell, flag, text = container["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    steps = [shlex.split(step) for step in text.split("; ")]
    assert steps[0] == ["set", "-e"]
    assert steps[1:] == [["nova-manage", "--config-file", CONFIG_PATH, "db", "ironic_compute_node_move",
                          "--ironic-node-uuid", m.node_uuid, "--destination-host", m.target] for m in moves]
    volume = job["spec"]["template"]["spec"]["volumes"][0]["secret"]
    assert volume == {"secretName": "nm", "items": [{"key": "db.conf", "path": "nova.conf"}]}
    assert job["spec"]["backoffLimit"] == BACKOFF_LIMIT and job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert len(job["metadata"]["name"]) <= 63


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
