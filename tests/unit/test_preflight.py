"""Preflight's verdicts (core/preflight.py): one bad input per check, the table a user reads,
the Preflight condition; and the `kubectl ics status` screen rendered from a pool's status."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ironic_shard_operator.core import preflight
from ironic_shard_operator.core.model import Node
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
    no_token = preflight.ironic_checks(ServiceAnswer(failure="keystone", message="the token request failed"), None)
    assert [c.verdict for c in no_token] == [Verdict.FAIL] and "auth.auth_url" in no_token[0].fix
    assert "Ironic" not in no_token[0].fix
    unresolved = preflight.ironic_checks(ServiceAnswer(failure="keystone", message=(
        "cannot reach Keystone at http://keystone.invalid/v3 (cloud 'c'), asked for the baremetal endpoint in "
        "its catalog: Temporary failure in name resolution")), None)
    assert "does not resolve" in unresolved[0].fix and "auth.auth_url" in unresolved[0].fix
    refused = preflight.ironic_checks(ServiceAnswer(version=(1, 99)), HttpAnswer(403, "forbidden"))
    assert verdicts(refused)["ironic-shard-list"] is Verdict.FAIL


def test_the_shard_update_probe_is_read_by_its_status() -> None:
    assert preflight.shard_update_check(HttpAnswer(400, "Couldn't apply patch"), "n1").verdict is Verdict.PASS
    refused = preflight.shard_update_check(HttpAnswer(403, "Access was denied"), "n1")
    assert refused.verdict is Verdict.FAIL and "system" in refused.fix
    assert preflight.shard_update_check(HttpAnswer(409, "locked"), "n1").verdict is Verdict.WARN
    assert preflight.shard_update_check(None, None).verdict is Verdict.WARN



def test_the_probe_addresses_only_a_node_the_pool_may_own() -> None:
    """Unsharded, or one of the pool's members' shards (an idle one first); never a node another
    pool's member holds, not even a namesake-looking one (rack-a-b-0 is pool rack-a-b's)."""
    nodes = [Node("theirs", "rack-b-0"), Node("lookalike", "rack-a-b-0"),
             Node("busy-own", "rack-a-1", reservation="conductor-1"),
             Node("deployed-own", "rack-a-3", instance_uuid="i-1", provision_state="active"),
             Node("own", "rack-a-2"), Node("free", None)]
    assert preflight.probe_target(nodes, "rack-a") == "own"  # free first: no instance, no work in progress
    assert preflight.probe_target(nodes[:4], "rack-a") == "busy-own"  # only pinned ones of its own: the first
    assert preflight.probe_target(nodes[:2], "rack-a") is None
    assert preflight.probe_target(nodes[:2], None) == "theirs"  # no pool named: the selection given
    unproved = preflight.shard_update_check(None, None, others=2)
    assert unproved.verdict is Verdict.WARN and "another pool's member" in unproved.message
    skipped = preflight.shard_update_not_probed("the pool is in Conflict", "resolve it")
    assert skipped.verdict is Verdict.WARN and skipped.message.startswith("not probed: the pool is in Conflict")

def test_a_refused_shard_summary_is_a_warning_that_says_its_cost_and_policy() -> None:
    """GET /v1/shards refused: the operator works (it lists every poll), so a warn, naming
    baremetal:shards:get and the role Ironic's default policy gives it to."""
    assert preflight.shard_summary_check(HttpAnswer(200, '{"shards": []}')).verdict is Verdict.PASS
    refused = preflight.shard_summary_check(HttpAnswer(403, "Access was denied to the following resource: "
                                                            "baremetal:shards:get"))
    assert refused.verdict is Verdict.WARN and refused.name == "ironic-shard-summary"
    assert "HTTP 403" in refused.message and "every poll" in refused.message
    assert "baremetal:shards:get" in refused.fix and "--system all" in refused.fix and "reader" in refused.fix
    assert "\n" not in refused.fix
    assert preflight.shard_summary_check(HttpAnswer(None, "timed out")).verdict is Verdict.WARN
    ok, reason, message = preflight.condition([refused])
    assert ok and reason == "PassedWithWarnings" and "ironic-shard-summary" in message


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
    status, events = build_status(CycleFacts(generation=1, preflight=failing, now=10.0), None)
    assert preflight_of(status)["status"] == "False" and preflight_of(status)["reason"] == "ChecksFailed"
    assert [(e.reason, e.type) for e in events if e.reason.startswith("Preflight")] == [("PreflightFailed", "Warning")]

    kept, events = build_status(CycleFacts(generation=1, now=20.0), status)
    assert preflight_of(kept) == preflight_of(status) and not [e for e in events if "Preflight" in e.reason]

    fixed, events = build_status(CycleFacts(generation=1, preflight=(True, "Passed", "all 9"), now=30.0),
                                 kept)
    assert preflight_of(fixed)["status"] == "True"
    assert [(e.reason, e.type) for e in events if e.reason.startswith("Preflight")] == [("PreflightPassed", "Normal")]

    fresh, events = build_status(CycleFacts(generation=1, preflight=(True, "Passed", "all 9"), now=1.0),
                                 None)
    assert preflight_of(fresh)["status"] == "True" and not [e for e in events if "Preflight" in e.reason]


def test_preflight_warnings_are_a_warning_event_when_they_first_show_or_change() -> None:
    """A pool whose checks pass with warnings (say, Ironic refuses the shard summary) tells the
    user once, at its first check too, and again only when the warnings change."""
    from ironic_shard_operator.core.status import CycleFacts, build_status

    def preflight_events(events):
        return [(e.reason, e.type, e.message) for e in events if e.reason.startswith("Preflight")]

    warned = (True, "PassedWithWarnings", "ironic-shard-summary: refused (HTTP 403)")
    status, events = build_status(CycleFacts(generation=1, preflight=warned, now=1.0), None)
    assert preflight_events(events) == [("PreflightWarnings", "Warning", warned[2])]
    same, events = build_status(CycleFacts(generation=1, preflight=warned, now=2.0), status)
    assert preflight_events(events) == []
    more = (True, "PassedWithWarnings", warned[2] + "; image: cannot check x from here")
    changed, events = build_status(CycleFacts(generation=1, preflight=more, now=3.0), same)
    assert preflight_events(events) == [("PreflightWarnings", "Warning", more[2])]
    clean, events = build_status(CycleFacts(generation=1, preflight=(True, "Passed", "all 9"), now=4.0),
                                 changed)
    assert preflight_events(events) == []  # True all along: passing cleanly is no news
    assert next(c for c in clean["conditions"] if c["type"] == "Preflight")["reason"] == "Passed"


@pytest.mark.parametrize("image, parts", [
    ("nova-compute", ("registry-1.docker.io", "library/nova-compute", "latest")),
    ("kolla/nova-compute:2024.1", ("registry-1.docker.io", "kolla/nova-compute", "2024.1")),
    ("quay.io/openstack.kolla/nova-compute-ironic:2024.1-ubuntu-jammy",
     ("quay.io", "openstack.kolla/nova-compute-ironic", "2024.1-ubuntu-jammy")),
    ("localhost:5000/nova@sha256:abc", ("localhost:5000", "nova", "sha256:abc")),
])
def test_an_image_reference_is_split_as_docker_reads_it(image, parts) -> None:
    assert preflight.split_image(image) == parts


IN_CLUSTER = "registry.kube-system.svc:5000/nova:1"


@pytest.mark.parametrize("answer, verdict, message, fix", [
    # it exists, but every node's runtime must be set to pull without TLS: preflight cannot see that
    (HttpAnswer(200, "", "http"), Verdict.WARN,
     [f"{IN_CLUSTER} exists in its registry", "registry.kube-system.svc:5000 answers over plain HTTP only",
      "container runtime must be configured to pull from it without TLS"],
     ["/etc/containerd/certs.d/registry.kube-system.svc:5000/hosts.toml",
      'server = "http://registry.kube-system.svc:5000"',
      'location = "registry.kube-system.svc:5000" and insecure = true', "serve the registry over TLS"]),
    (HttpAnswer(404, "Not Found", "http"), Verdict.FAIL,
     [f"{IN_CLUSTER} does not exist in its registry", "answers over plain HTTP only"],
     ["fix spec.image (repository and tag); then", "hosts.toml"]),
    (HttpAnswer(401, "Unauthorized", "http"), Verdict.WARN,
     ["the registry wants credentials (HTTP 401: Unauthorized)", "answers over plain HTTP only"],
     ["imagePullSecret", "hosts.toml"]),
    (HttpAnswer(500, "", "http"), Verdict.WARN, ["the registry answered HTTP 500", "plain HTTP only"],
     ["check the image by hand; then", "hosts.toml"]),
])
def test_a_registry_answering_over_plain_http_is_judged_by_its_answer_and_says_so(answer, verdict, message,
                                                                                 fix) -> None:
    check = preflight.image_check(IN_CLUSTER, answer)
    assert check.verdict is verdict
    assert all(part in check.message for part in message), check.message
    assert all(part in check.fix for part in fix), check.fix
    # a warning, not a failure, where the image is there: the pool can run once the nodes pull it
    assert preflight.any_failed([check]) is (verdict is Verdict.FAIL)


def test_over_https_nothing_is_said_about_plain_http() -> None:
    for answer in (HttpAnswer(200, "", "https"), HttpAnswer(404, "", "https"), HttpAnswer(200)):
        check = preflight.image_check(IN_CLUSTER, answer)
        assert "plain HTTP" not in check.message + check.fix
    assert preflight.image_check(IN_CLUSTER, HttpAnswer(200, "", "https")).verdict is Verdict.PASS


@pytest.mark.parametrize("host, by_itself", [
    ("localhost:5000", True), ("127.0.0.1:5000", True), ("[::1]:5000", True),
    ("localhost", False), ("localhost:443", False), ("kind-registry:5000", False), ("10.0.0.7:5000", False),
])
def test_the_plain_http_hint_says_where_containerd_needs_no_setting(host, by_itself) -> None:
    """containerd tries HTTP by itself for localhost on a port other than 443 (its
    ConfigureHosts); CRI-O only where registries.conf says insecure = true."""
    check = preflight.image_check(f"{host}/nova:1", HttpAnswer(200, "", "http"))
    assert check.verdict is Verdict.WARN
    assert ("containerd pulls from" in check.fix and "by itself" in check.fix) is by_itself, check.fix
    assert ("hosts.toml" in check.fix) is not by_itself
    assert f'location = "{host}" and insecure = true' in check.fix


def _serve(handle, connections: int = 2):
    """A listener on 127.0.0.1 whose first `connections` connections `handle(socket)` gets, in a
    thread; returns (port, join)."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def serve() -> None:
        with listener:
            for _ in range(connections):
                try:
                    connection, _ = listener.accept()
                except OSError:
                    return
                with connection:
                    handle(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], lambda: thread.join(10)


def test_a_port_that_speaks_neither_tls_nor_http_is_not_reachable_saying_both() -> None:
    """Another service's banner (SSH here) where the registry should be: the TLS handshake reads
    it as a record of no TLS version, the plain-HTTP retry as no status line."""
    from ironic_shard_operator.adapters.preflight import registry_answer

    def banner(connection) -> None:
        connection.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
        connection.settimeout(5)
        try:
            connection.recv(4096)
        except OSError:
            pass

    port, join = _serve(banner)
    answer = registry_answer(f"localhost:{port}/nova:1", timeout=5)
    join()
    assert answer.status is None and answer.scheme != "http"
    assert f"registry localhost:{port} not reachable: its port speaks no TLS" in answer.text
    assert "did not answer plain HTTP either (BadStatusLine: SSH-2.0-OpenSSH_9.2p1 Debian-2)" in answer.text
    assert "\n" not in answer.text  # one line in the table
    check = preflight.image_check(f"localhost:{port}/nova:1", answer)
    assert check.verdict is Verdict.WARN and "cannot check" in check.message


def test_a_plain_http_400_is_not_taken_for_a_registry_s_answer() -> None:
    """A 400 to plain HTTP is what a TLS port says to it (Go: "Client sent an HTTP request to
    an HTTPS server"): the image is not judged missing or present over plain HTTP on it."""
    from ironic_shard_operator.adapters.preflight import registry_answer

    def bad_request(connection) -> None:
        connection.settimeout(5)
        try:
            connection.recv(4096)
            connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        except OSError:
            pass

    port, join = _serve(bad_request)
    answer = registry_answer(f"localhost:{port}/nova:1", timeout=5)
    join()
    assert answer.status is None
    assert f"registry localhost:{port} not reachable over TLS" in answer.text
    assert "over plain HTTP it answered HTTP 400: Bad Request" in answer.text


def test_a_registry_whose_certificate_is_not_trusted_is_said_to_answer_not_to_be_unreachable(tmp_path) -> None:
    """A private CA the checking machine lacks: the registry answered, so the warning names the
    certificate and how to trust it, not "not reachable" (seen against the real registry)."""
    import socket
    import ssl
    import threading

    from ironic_shard_operator.adapters.preflight import registry_answer
    from testbed.registry import make_certificates

    make_certificates(tmp_path)  # a CA nobody here trusts, and a server certificate for localhost
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_one_handshake() -> None:
        connection, _ = listener.accept()
        with connection:
            try:
                context.wrap_socket(connection, server_side=True).close()
            except (ssl.SSLError, OSError):
                pass  # the client gives up on the certificate

    server = threading.Thread(target=serve_one_handshake, daemon=True)
    server.start()
    try:
        answer = registry_answer(f"localhost:{port}/nova:1", timeout=5)
    finally:
        server.join(5)
        listener.close()
    assert answer.status is None
    assert "TLS certificate not trusted here" in answer.text and "SSL_CERT_FILE" in answer.text
    assert "not reachable" not in answer.text
    check = preflight.image_check(f"localhost:{port}/nova:1", answer)
    assert check.verdict is Verdict.WARN and "not trusted" in check.message


def test_preflight_asks_what_its_inputs_allow():
    """No clouds.yaml: the cloud is not asked; in Conflict: no probe; the image's registry
    only when its check is wanted and an image is named."""
    full = preflight.Inputs(clouds_yaml="clouds: {}", cloud_name="c", nova_conf=None, image="registry/i:1")
    assert preflight.questions(full) == preflight.Questions(cloud=True, probe=True, image=True, registry=True)
    assert not preflight.questions(replace(full, clouds_yaml=None)).cloud
    assert not preflight.questions(replace(full, may_probe=False)).probe
    assert preflight.questions(replace(full, image=None)) == preflight.Questions(True, True, True, False)
    assert preflight.questions(replace(full, check_image=False)) == preflight.Questions(True, True, False, False)


def test_the_cloud_is_asked_beyond_ironic_only_once_ironic_answered():
    assert preflight.asks_beyond_ironic(preflight.ServiceAnswer(version=(1, 82)))
    assert not preflight.asks_beyond_ironic(preflight.ServiceAnswer(failure="auth", message="no"))
    assert preflight.ASKED_AGAIN == {"unavailable", "keystone"}


def test_the_file_checks_add_the_handovers_only_when_it_is_configured():
    inputs = preflight.Inputs(clouds_yaml=None, cloud_name="c", nova_conf=None)
    assert preflight.file_checks(inputs) == preflight.nova_conf_checks(None)
    configured = replace(inputs, handover=True)
    assert preflight.file_checks(configured) == [*preflight.nova_conf_checks(None),
                                                 preflight.handover_conf_check(None, True)]
    assert preflight.no_clouds_yaml().verdict is preflight.Verdict.FAIL
    assert preflight.probe_in_conflict().verdict is preflight.Verdict.WARN
