"""The operator's ServiceAccount token is rotated while it runs: the kubelet writes a new token
into the pod's projected volume, and the API server stops accepting the old one (here: at once,
as when its bound object is deleted; in a cluster that does not extend token expiry, an hour
after it was issued). The operator must read its credentials again and go on: keep its Lease
and act on the pool, with the new token."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testbed import service_account_tokens as tokens
from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, unique_resource_class
from testbed.kube_client import KubeAPIError, KubeClient
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    LEASE, POOLS, OperatorProcess, lease_holder, member_pods, pool_manifest, ready_members, settle,
)
from tests.support.operator_rbac import install_identity

pytestmark = pytest.mark.integration

POOL = "rot"


def test_a_token_rotated_under_the_running_operator_is_read_again(
        kube_api: KubeAPI, kube_namespace: str, kubelet, ironic_service: IronicService,
        tmp_path: Path) -> None:
    if kube_api.audit is None:
        pytest.skip("reads the writes made with each token from the test bed API server's audit log")
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(kube_api.client)
    resource_class = unique_resource_class("rotation")
    seed_nodes_directly_in_db(ironic_service, 20, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)

    account = install_identity(client, ns)  # the chart's ServiceAccount, with the chart's RBAC
    first = tokens.issue(client, ns, account)
    kubeconfig = tmp_path / "operator-kubeconfig"  # what the pod's projected token is to the operator
    tokens.write_kubeconfig(kubeconfig, kube_api.kubeconfig, first)
    operator = OperatorProcess(kube_api, ns, "op-a", tmp_path, KUBECONFIG=str(kubeconfig)).start()
    try:
        wait(lambda: lease_holder(client, ns) == "op-a", timeout=30, what="op-a leading")
        client.create(POOLS.format(ns=ns), pool_manifest(POOL, cloud_name=ironic_service.cloud_name,
                                                         resource_class=resource_class, replicas=2))
        wait(lambda: ready_members(client, ns, POOL) == [f"{POOL}-0", f"{POOL}-1"], timeout=60,
             what="two Ready members")
        transitions = client.get(LEASE.format(ns=ns))["spec"].get("leaseTransitions")

        # Rotation: a new token in the file, and the old one refused from now on.
        second = tokens.issue(client, ns, account)
        tokens.write_kubeconfig(kubeconfig, kube_api.kubeconfig, second)
        tokens.revoke(client, first)
        stale = tmp_path / "stale-kubeconfig"
        tokens.write_kubeconfig(stale, kube_api.kubeconfig, first)

        def refused_status() -> int | None:  # the authenticator's cache sees the Secret gone a moment later
            try:
                KubeClient(stale).get(LEASE.format(ns=ns))
            except KubeAPIError as error:
                return error.status
            return None
        assert wait(refused_status, timeout=30, what="the revoked token refused") == 401
        rotated_at = time.time()

        # The operator acts with the new token: a failed member is replaced...
        old_uid = kubelet.fail(f"{POOL}-0")["metadata"]["uid"]
        wait(lambda: (p := member_pods(client, ns, POOL).get(f"{POOL}-0"))
             and p["metadata"]["uid"] != old_uid, timeout=30, what="the failed member's replacement")
        # ...and keeps leading past its renew deadline (10 s) without a leader change.
        settle(12)
        assert operator.process.poll() is None, operator.log()[-3000:]
        lease = client.get(LEASE.format(ns=ns))["spec"]
        assert (lease["holderIdentity"], lease.get("leaseTransitions")) == ("op-a", transitions)
        written = [w for w in kube_api.audit.writes_by_token(second.token) if w["time"] >= rotated_at]
        assert any("/leases/" in w["requestURI"] and w["code"] == 200 for w in written)
        assert any(w["verb"] == "create" and w["requestURI"].endswith("/pods") and w["code"] == 201
                   for w in written)
    finally:
        operator.stop()
        print(f"----- operator op-a -----\n{operator.log()[-20000:]}")
