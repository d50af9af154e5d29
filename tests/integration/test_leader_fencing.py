"""A leader that is frozen (SIGSTOP here; a paused VM, a stalled node in production) while it
writes, and wakes up after a standby took the Lease over, makes no write: neither to Ironic
nor to Kubernetes. Each operator process has its own ServiceAccount token, so the fake API
server's audit tells whose writes it received; Ironic's shards tell whether anyone wrote
there, since the new leader finds the pool paused and writes none."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from testbed import service_account_tokens as tokens
from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, shards_of, unique_resource_class
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, lease_holder, patch_spec, pool_manifest, ready_members,
)
from tests.support.operator_rbac import install_identity

pytestmark = pytest.mark.integration

POOL = "fence"
NODES = 60


def test_a_frozen_leader_that_wakes_after_a_takeover_writes_nothing(
        kube_api: KubeAPI, kube_namespace: str, kubelet, ironic_service: IronicService,
        tmp_path: Path) -> None:
    if kube_api.audit is None:
        pytest.skip("counts each operator's writes in the test bed API server's audit log")
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(kube_api.client)
    resource_class = unique_resource_class("fencing")
    seed_nodes_directly_in_db(ironic_service, NODES, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)

    def operator(identity: str) -> tuple[OperatorProcess, tokens.BoundToken]:
        token = tokens.issue(client, ns, install_identity(client, ns))  # the chart's ServiceAccount
        kubeconfig = tmp_path / f"kubeconfig-{identity}"
        tokens.write_kubeconfig(kubeconfig, kube_api.kubeconfig, token)
        return OperatorProcess(kube_api, ns, identity, tmp_path, KUBECONFIG=str(kubeconfig)).start(), token

    def assigned() -> int:
        return sum(owner is not None for owner in shards_of(ironic_service, resource_class).values())

    (old, old_token), started = operator("op-a"), []
    started.append(old)
    try:
        wait(lambda: lease_holder(client, ns) == "op-a", timeout=30, what="op-a leading")
        new, new_token = operator("op-b")
        started.append(new)
        # A slow adoption (1 write/s): the leader is frozen with most of its shard writes to go.
        client.create(POOLS.format(ns=ns), pool_manifest(
            POOL, cloud_name=ironic_service.cloud_name, resource_class=resource_class, replicas=2,
            ironic={"pollIntervalSeconds": 5, "writesPerSecond": 1, "maxConcurrentWrites": 4}))
        wait(lambda: ready_members(client, ns, POOL) == [f"{POOL}-0", f"{POOL}-1"], timeout=60,
             what="two Ready members")
        wait(lambda: assigned() >= 3, timeout=60, interval=0.1, what="op-a writing shards")
        os.killpg(old.process.pid, signal.SIGSTOP)
        frozen = assigned()
        assert frozen < NODES - 10, "the adoption finished before the leader was frozen"

        # While op-a is frozen: the pool is paused, so whatever changes in Ironic from now on is
        # op-a's doing; op-b takes the Lease over and acts on the pool (writes its status).
        patch_spec(client, ns, POOL, {"paused": True})
        wait(lambda: lease_holder(client, ns) == "op-b", timeout=40, what="op-b taking the Lease over")
        wait(lambda: any(w["requestURI"].endswith(f"/{POOL}/status")
                         for w in kube_api.audit.writes_by_token(new_token.token)),
             timeout=30, what="op-b writing the pool's status")
        before = shards_of(ironic_service, resource_class)
        thawed_at = time.time()
        os.killpg(old.process.pid, signal.SIGCONT)

        code = wait(lambda: old.process.poll(), timeout=30, what="op-a to exit")
        time.sleep(2)  # anything op-a sent before it exited has landed by now
        assert code == 1
        assert "lost leadership" in old.log()
        assert shards_of(ironic_service, resource_class) == before, \
            "op-a wrote Ironic shards after the takeover"
        late = [f"{w['verb']} {w['requestURI']}" for w in kube_api.audit.writes_by_token(old_token.token)
                if w["time"] >= thawed_at]
        assert late == [], "op-a wrote to Kubernetes after the takeover"
        assert lease_holder(client, ns) == "op-b"
    finally:
        for process in started:
            if process.process is not None and process.process.poll() is None:
                os.killpg(process.process.pid, signal.SIGCONT)
            process.stop()
            print(f"----- operator {process.identity} -----\n{process.log()[-20000:]}")
