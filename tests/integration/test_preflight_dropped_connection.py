"""One dropped connection is no verdict: preflight asks a service again before it fails a check.

A server closes an idle keep-alive connection after a few seconds (gunicorn, which serves
Keystone and Nova, after 2); a request sent on it at that moment gets no answer ("Connection
aborted") although the service runs. A preflight verdict stands until its next run (5 minutes
for a failed one in the operator), so a check that got no answer is made once more before it
fails. The requests are cut, for real, by a forwarder in front of the real Ironic and the
real Keystone (tests/support/switchable_proxy.py): the request never reaches the service and
its connection closes unanswered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.ironic_service import IronicService, enrol_nodes, unique_resource_class
from tests.integration.test_preflight_ironic import preflight
from tests.integration.test_shard_policy_keystone import preflight as keystone_preflight
from tests.support.keystone import KeystoneService
from tests.support.switchable_proxy import SwitchableProxy

pytestmark = pytest.mark.integration


def test_ironic_dropping_the_first_request_still_passes(ironic_service: IronicService, tmp_path: Path) -> None:
    resource_class = unique_resource_class("preflight-cut")
    enrol_nodes(ironic_service, 1, resource_class=resource_class)
    with SwitchableProxy(ironic_service.url) as ironic:
        ironic.cut_once(b"GET / HTTP")  # the adapter's first request: the API root
        cloud = ironic_service.cloud_at(ironic.url(ironic_service.url))
        status, checks = preflight(tmp_path, {"c": cloud}, "c", "--resource-class", resource_class)

    assert ironic.cuts == 1  # the request was cut: the check passed on the second try
    assert checks["ironic-reachable"]["verdict"] == "pass", checks["ironic-reachable"]
    assert status == 0, checks


def test_keystone_dropping_the_token_request_still_passes(
        keystone_service: KeystoneService, keystone_ironic: IronicService, tmp_path: Path) -> None:
    resource_class = unique_resource_class("preflight-cut-ks")
    enrol_nodes(keystone_ironic, 1, resource_class=resource_class)
    with SwitchableProxy(keystone_service.url) as keystone:
        keystone.cut_once(b"POST /v3/auth/tokens")
        cloud = keystone_ironic.cloud
        cloud = {**cloud, "auth": {**cloud["auth"], "auth_url": keystone.url(keystone_service.url)}}
        status, checks = keystone_preflight(tmp_path, cloud, resource_class)

    assert keystone.cuts == 1  # the token request was cut: the check passed on the second try
    assert checks["ironic-reachable"]["verdict"] == "pass", checks["ironic-reachable"]
    assert checks["ironic-shard-update"]["verdict"] == "pass", checks["ironic-shard-update"]
    assert status == 0, checks

