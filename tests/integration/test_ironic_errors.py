"""What a user sees when the Ironic side of a pool is misconfigured: one exception, one
line naming the problem, before anything is written. Against the real service (wrong
credentials, wrong endpoints) and a real Ironic acting as the Zed release (too old)."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ironic_shard_operator.controller.ironic_cycle import run_cycle
from ironic_shard_operator.adapters.ironic import (
    IronicAdapter,
    IronicAuthError,
    IronicConfigError,
    IronicEndpointError,
    IronicError,
    IronicKeystoneUnavailable,
    IronicTooOld,
    IronicUnavailable,
)
from ironic_shard_operator.core.model import Selector
from ironic_shard_operator.core.model import PoolSpec
from testbed.ironic_service import (
    IronicService,
    running_ironic,
    seed_nodes_directly_in_db,
    shards_of,
    unique_resource_class,
)
from tests.integration.conftest import POOL, ready_members
from tests.support.kube_api import KubeAPI
from tests.integration.test_preflight_ironic import preflight

pytestmark = pytest.mark.integration


def adapter_for(service: IronicService, **changes: object) -> IronicAdapter:
    """An adapter from the service's clouds.yaml with some of its cloud's keys changed."""
    cloud = service.cloud
    for key, value in changes.items():
        if key in ("password", "username"):
            cloud["auth"][key] = value
        else:
            cloud[key] = value
    clouds_yaml = yaml.safe_dump({"clouds": {"broken": cloud}})
    return IronicAdapter.from_clouds_yaml(clouds_yaml, "broken", retry_attempts=2,
                                          backoff_seconds=0.05,
                                          selector=Selector(resource_class="nothing-here"))


def one_line_error(adapter: IronicAdapter, kind: type[IronicError]) -> str:
    with pytest.raises(kind) as caught:
        run_cycle(adapter, PoolSpec(POOL, replicas=2), ready_members(2))
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    assert adapter.writes_made == 0
    return message


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_wrong_credentials_are_named_as_such(ironic_service: IronicService):
    message = one_line_error(adapter_for(ironic_service, password="not-the-password"),
                             IronicAuthError)
    assert "refused the credentials of cloud 'broken'" in message
    assert "Incorrect username or password" in message


def test_an_endpoint_where_nothing_listens_is_named_unreachable(ironic_service: IronicService):
    nowhere = f"http://127.0.0.1:{closed_port()}"
    message = one_line_error(adapter_for(ironic_service, baremetal_endpoint_override=nowhere),
                             IronicUnavailable)
    assert f"Ironic at {nowhere} (cloud 'broken') is not answering: Connection refused" \
        in message


def test_an_endpoint_that_is_not_ironic_is_named_so(ironic_service: IronicService):
    elsewhere = f"{ironic_service.url}/not-ironic"
    message = one_line_error(adapter_for(ironic_service, baremetal_endpoint_override=elsewhere),
                             IronicEndpointError)
    assert f"{elsewhere} (baremetal endpoint of cloud 'broken') answered HTTP 404 but is not " \
        "the Ironic API root" in message


def test_an_endpoint_that_is_the_kubernetes_api_is_named_not_ironic(ironic_service: IronicService,
                                                                    kube_api: KubeAPI):
    """The API server refuses the cloud's credentials (401, or 403 for an anonymous request):
    that is the wrong service answering, not Ironic refusing the password."""
    server = yaml.safe_load(kube_api.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    adapter = adapter_for(ironic_service, baremetal_endpoint_override=server,
                          insecure=True)  # a real cluster's certificate is no concern of this test
    message = one_line_error(adapter, IronicEndpointError)
    assert f"{server} (baremetal endpoint of cloud 'broken') answered HTTP 40" in message
    assert "(a Kubernetes API server: " in message and "but is not the Ironic API root" in message
    assert "credentials" not in message


def test_a_cloud_missing_from_the_clouds_yaml_is_named(ironic_service: IronicService):
    with pytest.raises(IronicConfigError,
                       match=r"the clouds.yaml has no cloud named 'prod' \(clouds there: "
                             r"ironic-test\)"):
        IronicAdapter.from_clouds_yaml(ironic_service.clouds_yaml, "prod")


def test_an_ironic_without_shards_is_refused_as_too_old(tmp_path: Path):
    with running_ironic(tmp_path / "zed", auth="noauth", pin_release="zed") as zed:
        adapter = IronicAdapter.from_clouds_yaml(zed.clouds_yaml, zed.cloud_name)
        message = one_line_error(adapter, IronicTooOld)
    assert f"Ironic at {zed.url} offers API 1.80 at most; node shards need 1.82" in message


def test_noauth_service_and_a_conductor_group_selector(tmp_path: Path):
    """The other auth mode users run standalone, and the conductor-group filter, for real:
    only the pool's group is read and written."""
    with running_ironic(tmp_path / "noauth", auth="noauth", conductor_group="rack-a") as ironic:
        resource_class = unique_resource_class("grouped")
        ours = seed_nodes_directly_in_db(ironic, 30, resource_class=resource_class,
                                         conductor_group="rack-a")
        theirs = seed_nodes_directly_in_db(ironic, 20, resource_class=resource_class,
                                           conductor_group="rack-b")
        adapter = IronicAdapter.from_clouds_yaml(
            ironic.clouds_yaml, ironic.cloud_name,
            selector=Selector(conductor_group="rack-a", resource_class=resource_class))

        report = run_cycle(adapter, PoolSpec(POOL, replicas=3), ready_members(3))

        owners = shards_of(ironic, resource_class)
    assert report.counts.total == len(ours)
    assert {owners[node] for node in ours} == {f"{POOL}-{i}" for i in range(3)}
    assert {owners[node] for node in theirs} == {None}
    assert adapter.writes_made == len(ours)


class _AnswersStatus(http.server.BaseHTTPRequestHandler):
    """A server answering `status` to every request: 401 is any service that wants a token
    (Keystone itself never answers its version document so), 503 a Keystone whose load
    balancer has no backend."""

    status = 401

    def _refuse(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"error": {"code": %d, "title": "Refused", "message": "not now"}}' % self.status
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _refuse

    def log_message(self, *args: object) -> None:
        pass


def password_entry(service: IronicService, auth_url: str, **settings: object) -> dict:
    """A clouds.yaml entry that authenticates with a password at `auth_url` (keystoneauth's
    generic `password` plugin, as most clouds.yaml files have) and whose Ironic is `service`;
    `settings` are more keys of the entry."""
    return {"auth_type": "password", "baremetal_endpoint_override": service.url, **settings,
            "auth": {"auth_url": auth_url, "username": "operator", "password": "pw", "project_name": "p",
                     "user_domain_name": "Default", "project_domain_name": "Default"}}


def password_cloud(service: IronicService, auth_url: str, **settings: object) -> IronicAdapter:
    """An adapter for `password_entry`'s cloud, named "broken"."""
    cloud = password_entry(service, auth_url, **settings)
    return IronicAdapter.from_clouds_yaml(yaml.safe_dump({"clouds": {"broken": cloud}}), "broken",
                                          request_timeout=1.0, retry_attempts=2, backoff_seconds=0.05,
                                          selector=Selector(resource_class="nothing-here"))


def error_within(seconds: float, adapter: IronicAdapter, kind: type[IronicError]) -> str:
    """one_line_error, in a thread given `seconds`: a cycle that never returns fails the test
    instead of hanging it."""
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(_caught(adapter, kind)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"the cycle still waits after {seconds:.0f}s"
    [result] = outcome
    if isinstance(result, BaseException):
        raise result
    return str(result)


def _caught(adapter: IronicAdapter, kind: type[IronicError]) -> object:
    try:
        return one_line_error(adapter, kind)
    except BaseException as failure:  # handed to the test's thread
        return failure


@contextlib.contextmanager
def answering(status: int) -> Iterator[str]:
    """An auth_url (…/v3) of a server answering `status` to every request."""
    handler = type("Answers", (_AnswersStatus,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v3"
    finally:
        server.shutdown()


def test_an_auth_url_that_is_not_keystone_is_refused_at_once(ironic_service: IronicService):
    """keystoneauth's generic plugins wait for ever on an auth_url answering 401 (they ask
    for a token to read the versions while holding the lock that asking needs): the cycle
    must name the mistake instead of holding the pool."""
    with answering(401) as auth_url:
        message = error_within(30, password_cloud(ironic_service, auth_url), IronicAuthError)
    assert f"the auth_url {auth_url} of cloud 'broken' answered HTTP 401" in message
    assert "not Keystone's Identity endpoint" in message


def test_a_keystone_answering_503_is_named_as_keystone(ironic_service: IronicService):
    """A Keystone behind a load balancer with no backend (503): the cycle reports Keystone's
    failure as the reason Ironic cannot be asked, in the adapter's own error type, not as a
    stray keystoneauth exception."""
    with answering(503) as auth_url:
        message = error_within(30, password_cloud(ironic_service, auth_url), IronicKeystoneUnavailable)
    assert f"Ironic at {ironic_service.url} (cloud 'broken') cannot be asked: the token request to Keystone " \
           f"at {auth_url} failed" in message


def test_a_keystone_that_never_answers_is_named_and_costs_a_bounded_wait(ironic_service: IronicService):
    """A Keystone that accepts connections and never answers: each of its requests ends at
    the cloud's api_timeout, and the error names Keystone, not Ironic (which was never asked)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # connections complete in the kernel's backlog; nothing ever answers
        auth_url = f"http://127.0.0.1:{silent.getsockname()[1]}/v3"
        started = time.monotonic()
        message = error_within(20, password_cloud(ironic_service, auth_url, api_timeout=1),
                               IronicKeystoneUnavailable)
    assert f"Ironic at {ironic_service.url} (cloud 'broken') cannot be asked: the token request to Keystone " \
           f"at {auth_url} failed: timed out" in message
    print(f"a silent Keystone cost the cycle {time.monotonic() - started:.1f}s (api_timeout 1 s, 2 attempts)")


def test_keystone_is_waited_for_30_s_at_most_unless_the_cloud_says_otherwise(ironic_service: IronicService):
    """keystoneauth has no timeout of its own: a cloud without `api_timeout` gets 30 s for
    every request of its session (Keystone's too), one with it keeps its own."""
    unset = password_cloud(ironic_service, "http://keystone.example/v3")
    assert unset.connection.session.timeout == 30.0
    assert password_cloud(ironic_service, "http://keystone.example/v3", api_timeout=7).connection.session.timeout == 7.0


def test_preflight_says_to_look_at_keystone_when_the_token_request_fails(ironic_service: IronicService,
                                                                        tmp_path: Path):
    """`ironic-shard-operator preflight` as a user runs it: Ironic could not be asked because
    Keystone failed the token request, and the fix points at Keystone, not at Ironic."""
    with answering(503) as auth_url:
        status, checks = preflight(tmp_path, {"broken": password_entry(ironic_service, auth_url)}, "broken")
    assert status == 1, checks
    reachable = checks["ironic-reachable"]
    assert reachable["verdict"] == "fail"
    assert f"the token request to Keystone at {auth_url} failed" in reachable["message"]
    assert "Keystone runs" in reachable["fix"] and "auth.auth_url" in reachable["fix"]


UNRESOLVABLE_KEYSTONE = "http://keystone.invalid:5000/v3"  # RFC 6761: .invalid never resolves


def unresolvable_keystone_entry() -> dict:
    """A clouds.yaml entry whose Ironic endpoint comes from Keystone's catalog, at a host name
    that does not resolve (a typo in auth_url, a DNS name only known inside another network)."""
    return {"auth_type": "password",
            "auth": {"auth_url": UNRESOLVABLE_KEYSTONE, "username": "operator", "password": "pw",
                     "project_name": "p", "user_domain_name": "Default", "project_domain_name": "Default"}}


def test_an_unresolvable_keystone_is_named_with_its_url_in_the_cycles_error():
    """The catalog lookup fails before Ironic is known: the error is Keystone's (the adapter's
    IronicKeystoneUnavailable), with Keystone's URL, not an Ironic that does not answer."""
    adapter = IronicAdapter.from_clouds_yaml(yaml.safe_dump({"clouds": {"broken": unresolvable_keystone_entry()}}),
                                             "broken", request_timeout=1.0, retry_attempts=1,
                                             selector=Selector(resource_class="nothing-here"))
    message = error_within(60, adapter, IronicKeystoneUnavailable)
    assert f"cannot reach Keystone at {UNRESOLVABLE_KEYSTONE} (cloud 'broken')" in message


def test_preflight_of_an_unresolvable_keystone_says_keystone_and_nothing_trails_its_table(tmp_path: Path):
    """`ironic-shard-operator preflight` as a user reads it: the failed check names Keystone and
    its URL, the fix is about Keystone's host name (not "check that Ironic runs"), and
    keystoneauth's own log lines ("Failed to discover available identity versions ...") do not
    follow the table."""
    import subprocess
    import sys

    (tmp_path / "clouds.yaml").write_text(yaml.safe_dump({"clouds": {"c": unresolvable_keystone_entry()}}))
    (tmp_path / "nova.conf").write_text("[DEFAULT]\ncompute_driver = ironic.IronicDriver\n")
    done = subprocess.run([sys.executable, "-m", "ironic_shard_operator.cli", "preflight", "--skip-image",
                           "--clouds-yaml", str(tmp_path / "clouds.yaml"), "--cloud", "c",
                           "--nova-conf", str(tmp_path / "nova.conf")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    row = next(i for i, line in enumerate(lines) if "ironic-reachable" in line)
    assert lines[row].split()[0] == "FAIL" and f"Keystone at {UNRESOLVABLE_KEYSTONE}" in lines[row]
    fix = lines[row + 1].strip()
    assert fix.startswith("fix:") and "auth.auth_url" in fix and "resolv" in fix and "Ironic runs" not in fix
    assert lines[-1].endswith("failed")  # the table's last line is the last thing printed
    assert done.stderr == ""
