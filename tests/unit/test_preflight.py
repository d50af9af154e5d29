"""Preflight's verdicts (core/preflight.py): one bad input per check, the table a user reads,
the Preflight condition; and the `kubectl ics status` screen rendered from a pool's status."""

from __future__ import annotations

import json

import pytest

from ironic_shard_operator.core import preflight
from ironic_shard_operator.core.preflight import HttpAnswer, ServiceAnswer, Verdict
from ironic_shard_operator.kubectl_ics import render_status
from testbed.operator_objects import NOVA_CONF

GOOD_CONF = """[DEFAULT]
compute_driver = ironic.IronicDriver
transport_url = rabbit://nova:s3cret@rabbit/
[ironic]
auth_type = password
auth_url = http://keystone:5000/v3
username = nova
password = s3cret
project_name = service
"""


def verdicts(checks):
    return {c.name: c.verdict for c in checks}


def test_a_good_base_nova_conf_passes_every_check() -> None:
    checks = preflight.nova_conf_checks(GOOD_CONF)
    assert set(verdicts(checks).values()) == {Verdict.PASS}
    assert "s3cret" not in preflight.table(checks)


@pytest.mark.parametrize("text, check, verdict, says", [
    (None, "nova-conf", Verdict.FAIL, "no base nova.conf"),
    ("compute_driver = x\n", "nova-conf", Verdict.FAIL, "line 1 comes before any [section]"),
    (GOOD_CONF.replace("ironic.IronicDriver", "libvirt.LibvirtDriver"), "nova-conf-driver", Verdict.FAIL,
     "libvirt.LibvirtDriver, not ironic.IronicDriver"),
    (GOOD_CONF.split("[ironic]")[0], "nova-conf-ironic-auth", Verdict.FAIL, "no [ironic] section"),
    (GOOD_CONF.replace("password = s3cret\n", ""), "nova-conf-ironic-auth", Verdict.FAIL, "lacks password"),
    (GOOD_CONF + "peer_list = a,b\n", "nova-conf-peer-list", Verdict.WARN, "Nova ignores it"),
    (GOOD_CONF + "shard = rack-0\n", "nova-conf-identity", Verdict.WARN, "[ironic]shard set"),
    (GOOD_CONF.replace("[ironic]", "host = compute-1\n[ironic]"), "nova-conf-identity", Verdict.WARN,
     "[DEFAULT]host set"),
])
def test_each_bad_base_nova_conf_is_named_with_a_fix(text, check, verdict, says) -> None:
    found = {c.name: c for c in preflight.nova_conf_checks(text)}[check]
    assert found.verdict is verdict and says in found.message and found.fix
    assert "s3cret" not in found.message + found.fix


def test_the_test_beds_minimal_nova_conf_fails_for_want_of_ironic_auth() -> None:
    assert verdicts(preflight.nova_conf_checks(NOVA_CONF))["nova-conf-ironic-auth"] is Verdict.FAIL


def test_the_handover_nova_conf_needs_both_database_connections() -> None:
    assert preflight.handover_conf_check(None, configured=False) is None
    assert preflight.handover_conf_check(None, configured=True).verdict is Verdict.FAIL
    only_main = "[database]\nconnection = mysql+pymysql://nova:pw@db/nova\n"
    check = preflight.handover_conf_check(only_main, configured=True)
    assert check.verdict is Verdict.FAIL and "[api_database]connection" in check.message
    both = only_main + "[api_database]\nconnection = mysql+pymysql://nova:pw@db/nova_api\n"
    assert preflight.handover_conf_check(both, configured=True).verdict is Verdict.PASS


def test_ironic_answers_become_checks_with_fixes() -> None:
    good = preflight.ironic_checks(ServiceAnswer(version=(1, 99)), HttpAnswer(200))
    assert verdicts(good) == {"ironic-reachable": Verdict.PASS, "ironic-api-version": Verdict.PASS,
                              "ironic-shard-list": Verdict.PASS}
    old = preflight.ironic_checks(ServiceAnswer(failure="too_old", message="offers API 1.80 at most"), None)
    assert verdicts(old)["ironic-api-version"] is Verdict.FAIL and "1.82" in old[-1].fix
    down = preflight.ironic_checks(ServiceAnswer(failure="unavailable", message="Connection refused"), None)
    assert [c.verdict for c in down] == [Verdict.FAIL] and "reachable" in down[0].fix
    refused = preflight.ironic_checks(ServiceAnswer(version=(1, 99)), HttpAnswer(403, "forbidden"))
    assert verdicts(refused)["ironic-shard-list"] is Verdict.FAIL


def test_the_shard_update_probe_is_read_by_its_status() -> None:
    assert preflight.shard_update_check(HttpAnswer(400, "Couldn't apply patch"), "n1").verdict is Verdict.PASS
    refused = preflight.shard_update_check(HttpAnswer(403, "Access was denied"), "n1")
    assert refused.verdict is Verdict.FAIL and "system" in refused.fix
    assert preflight.shard_update_check(HttpAnswer(409, "locked"), "n1").verdict is Verdict.WARN
    assert preflight.shard_update_check(None, None).verdict is Verdict.WARN


def test_nova_placement_and_image_verdicts() -> None:
    assert preflight.nova_check(ServiceAnswer(version=(2, 96))).verdict is Verdict.PASS
    assert preflight.nova_check(ServiceAnswer(failure="not_configured", message="no compute")).verdict is Verdict.WARN
    assert preflight.nova_check(ServiceAnswer(failure="auth", message="403")).verdict is Verdict.FAIL
    assert preflight.placement_check(ServiceAnswer(failure="unavailable", message="refused")).verdict is Verdict.FAIL
    assert preflight.image_check("r/x:1", HttpAnswer(404)).verdict is Verdict.FAIL
    assert preflight.image_check("r/x:1", HttpAnswer(200)).verdict is Verdict.PASS
    assert preflight.image_check("r/x:1", HttpAnswer(None, "unreachable")).verdict is Verdict.WARN


def test_the_report_table_json_and_condition() -> None:
    checks = [preflight.passed("a", "fine"), preflight.warned("b", "odd", "look"),
              preflight.failed("c", "broken", "mend it")]
    text = preflight.table(checks)
    assert "FAIL    c" in text and "fix: mend it" in text and "1 passed, 1 warnings, 1 failed" in text
    assert preflight.from_json(preflight.as_json(checks)) == checks
    assert json.loads(preflight.as_json(checks))["ok"] is False
    assert preflight.condition(checks) == (False, "ChecksFailed", "c: broken (fix: mend it)")
    assert preflight.condition(checks[:2]) == (True, "PassedWithWarnings", "b: odd")
    assert preflight.condition(checks[:1])[:2] == (True, "Passed")


def test_the_status_screen_shows_members_forced_down_moves_and_events() -> None:
    pool = {"metadata": {"name": "rack-a", "namespace": "ops"}, "spec": {"replicas": 2, "paused": True},
            "status": {"readyReplicas": 1, "desiredReplicas": 2, "desiredReason": "spec.replicas: 2",
                       "conditions": [{"type": "Ready", "status": "False", "reason": "MembersNotReady",
                                       "message": "1/2 members ready"}],
                       "members": [{"name": "rack-a-0", "ready": True, "phase": "Ready", "nodes": 7,
                                    "pinnedNodes": 2},
                                   {"name": "rack-a-1", "ready": False, "phase": "Replacing", "nodes": 3,
                                    "pinnedNodes": 3, "message": "container exited"}],
                       "nodes": {"total": 10, "free": 5, "pinned": 5, "unassigned": 0, "pendingMoves": 0,
                                 "misplaced": 0},
                       "nova": {"state": "Enabled", "message": "in sync", "findings": {"duplicate": 0},
                                "forcedDown": ["rack-a-1"], "waiting": []},
                       "handover": {"inProgress": 2, "done": 5}}}
    events = [{"type": "Normal", "reason": "MovedNodes", "message": "Set the Ironic shard of 4 of 4 nodes",
               "lastTimestamp": "2026-01-01T00:00:02Z"},
              {"type": "Warning", "reason": "Degraded", "message": "rack-a-1: Replacing",
               "lastTimestamp": "2026-01-01T00:00:03Z"}]
    screen = render_status(pool, events)
    lines = screen.splitlines()
    assert "PAUSED" in lines[0] and "1/2 members ready" in lines[0]
    row = next(line for line in lines if line.startswith("rack-a-1"))
    assert row.split()[:6] == ["rack-a-1", "no", "Replacing", "3", "3", "yes"]
    assert "HANDOVER inProgress: 2; done: 5" in screen
    assert "Set the Ironic shard of 4 of 4 nodes" in screen.split("LAST MOVES")[1].split("RECENT")[0]
    recent = screen.split("RECENT EVENTS")[1].splitlines()
    assert "Degraded" in recent[1] and "MovedNodes" in recent[2]  # newest first
    assert len(lines) < 40  # one screen


def test_the_preflight_condition_warns_when_it_first_fails_and_is_kept_between_verdicts() -> None:
    from ironic_shard_operator.core.status import CycleFacts, build_status

    def preflight_of(status):
        return next(c for c in status["conditions"] if c["type"] == "Preflight")

    failing = (False, "ChecksFailed", "nova-conf-driver: not Ironic's (fix: set compute_driver)")
    status, events = build_status(CycleFacts(generation=1, pool="p", preflight=failing, now=10.0), None)
    assert preflight_of(status)["status"] == "False" and preflight_of(status)["reason"] == "ChecksFailed"
    assert [(e.reason, e.type) for e in events if e.reason.startswith("Preflight")] == [("PreflightFailed", "Warning")]

    kept, events = build_status(CycleFacts(generation=1, pool="p", now=20.0), status)
    assert preflight_of(kept) == preflight_of(status) and not [e for e in events if "Preflight" in e.reason]

    fixed, events = build_status(CycleFacts(generation=1, pool="p", preflight=(True, "Passed", "all 9"), now=30.0),
                                 kept)
    assert preflight_of(fixed)["status"] == "True"
    assert [(e.reason, e.type) for e in events if e.reason.startswith("Preflight")] == [("PreflightPassed", "Normal")]

    fresh, events = build_status(CycleFacts(generation=1, pool="q", preflight=(True, "Passed", "all 9"), now=1.0),
                                 None)
    assert preflight_of(fresh)["status"] == "True" and not [e for e in events if "Preflight" in e.reason]


@pytest.mark.parametrize("image, parts", [
    ("nova-compute", ("registry-1.docker.io", "library/nova-compute", "latest")),
    ("kolla/nova-compute:2024.1", ("registry-1.docker.io", "kolla/nova-compute", "2024.1")),
    ("quay.io/openstack.kolla/nova-compute-ironic:2024.1-ubuntu-jammy",
     ("quay.io", "openstack.kolla/nova-compute-ironic", "2024.1-ubuntu-jammy")),
    ("localhost:5000/nova@sha256:abc", ("localhost:5000", "nova", "sha256:abc")),
])
def test_an_image_reference_is_split_as_docker_reads_it(image, parts) -> None:
    from ironic_shard_operator.adapters.preflight import split_image

    assert split_image(image) == parts
