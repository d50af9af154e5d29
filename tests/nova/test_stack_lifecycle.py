"""hack/nova leaves nothing behind, and Nova's API enforces the test token and Nova's policy."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from testbed import nova_starter
from testbed.nova_stack import NovaStack

pytestmark = pytest.mark.nova


def _databases() -> set[str]:
    return set(nova_starter.sql("SHOW DATABASES").split())


def _vhosts() -> set[str]:
    return set(subprocess.run(["rabbitmqctl", "-q", "list_vhosts"], capture_output=True,
                              text=True, check=True).stdout.split())


def test_a_stack_whose_owner_died_is_reaped_with_every_process_database_and_vhost(
        tmp_path: Path) -> None:
    owner = subprocess.Popen(["sleep", "600"])
    state = nova_starter.start(tmp_path / "orphan", owner_pid=owner.pid)
    run_dir = Path(state["run_dir"])
    try:
        # a compute of that stack too (it cannot reach the Ironic URL; it runs all the same)
        base = tmp_path / "nova.conf"
        base.write_text(nova_starter.render_compute_conf(state, "http://127.0.0.1:9"))
        member = tmp_path / "member.conf"
        member.write_text("[DEFAULT]\nhost = orphan-0\n[ironic]\nshard = orphan-0\n")
        nova_starter.spawn_compute(state, "orphan-0", [base, member])
        processes = {name: nova_starter.pid_of(run_dir, name) for name in nova_starter.process_names(run_dir)}
        assert set(processes) == {"placement-api", "nova-api", "nova-conductor", "neutron-standin", "orphan-0"}
        started = {pid: nova_starter.start_time_of(pid) for pid in processes.values()}
        assert all(started.values())
        assert set(state["databases"].values()) <= _databases()
        assert state["vhost"] in _vhosts()

        assert state["id"] not in nova_starter.reap_stale()  # its owner still runs
        owner.kill()
        owner.wait()
        assert state["id"] in nova_starter.reap_stale()
    finally:
        owner.kill()
        nova_starter.stop(state)  # idempotent; only does something if the test failed early

    assert all(nova_starter.start_time_of(pid) != start for pid, start in started.items())
    assert not set(state["databases"].values()) & _databases()
    assert state["vhost"] not in _vhosts()
    assert not Path(state["registry_entry"]).exists()


def test_nova_api_wants_a_token_and_applies_nova_policy(nova_stack: NovaStack) -> None:
    url = nova_stack.compute_url + "/os-services"
    assert nova_starter.http_json(url, token=None)[0] == 401
    assert nova_starter.http_json(url, token="alice:project-a")[0] == 403  # not admin by policy
    status, body = nova_starter.http_json(url, token=nova_stack.token, microversion="2.53")
    assert status == 200
    assert {s["binary"] for s in body["services"]} >= {"nova-conductor"}
    # identity headers sent by a client do not get past the test auth filter
    spoofed = urllib.request.Request(url, headers={
        "X-Auth-Token": "alice:project-a", "X-Roles": "admin", "X-User-Id": "admin"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(spoofed, timeout=10)
    assert refused.value.code == 403
