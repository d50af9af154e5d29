"""No build reaches a retiring member, as Nova's real scheduler decides it (invariant 14, issue 37 item 1).

The real operator, real Ironic, the real Nova stack with member pods as REAL nova-compute processes
(testbed/process_kubelet.py), and Nova's REAL nova-scheduler asked where one-instance baremetal
builds would go (NovaStack.select_destinations_rounds: the RequestSpec of a boot sent as the
conductor sends it; hack/nova/select_destinations.py). 3 members, 12 nodes, one instance node on
member 2, handover on.

Before: builds land on all three members. Scale to 2: member 2 retires. Sampled every 0.2 s,
Nova shows its service disabled (with the operator's reason) before Ironic shows any of its free
nodes moved, and from then on no build is placed on it, while it still serves its instance. Scaled
back to 3 mid-retire: its service is enabled again and builds reach it again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ironic_shard_operator.core.retiring_service import DISABLED_BY
from testbed.ironic_service import IronicService
from testbed.nova_stack import NovaStack
from testbed.operator_objects import create_secrets
from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
from tests.nova import handover_pool
from tests.nova.test_failover_scenario import CLOUD, clouds_yaml
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import POOLS, OperatorProcess, patch_spec, pool_manifest, posted_events
from tests.support.sampling import Sampler

pytestmark = pytest.mark.nova

POLL = 5
NODES = 12
ROUNDS = 24  # one-instance builds asked per look: a host with a third of the nodes is missed by all with p < 1e-4


@dataclass
class RetireWatch(Sampler):
    """Ironic's shard of the member's nodes and its Nova service, sampled together."""

    stack: NovaStack
    ironic: IronicService
    member: str
    nodes: list[str]
    period: float = 0.2
    samples: list[tuple[float, bool, bool]] = field(default_factory=list)  # (at, disabled, a free node moved)
    errors: list[BaseException] = field(default_factory=list)

    def sample(self) -> tuple[float, bool, bool]:
        service = self.stack.compute_services()[self.member]
        shards = {n["uuid"]: n["shard"] for n in self.ironic.request(
            "GET", "/nodes?fields=uuid,shard&limit=1000").json()["nodes"] if n["uuid"] in self.nodes}
        return (time.monotonic(), service["status"] == "disabled",
                any(shards.get(n) != self.member for n in self.nodes))


def test_a_retiring_member_gets_no_build_from_its_retire_on_and_builds_again_once_it_stays(
        kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack, noauth_ironic: IronicService,
        tmp_path: Path) -> None:
    client, ns, wait, ironic = kube_api.client, kube_namespace, kube_api.wait_for, noauth_ironic
    names = handover_pool.fresh_pool(kube_api, ironic, "hs", NODES)
    pool, (m0, m1, m2), resource_class, nodes, shards = \
        names.pool, names.members, names.resource_class, names.nodes, names.shards

    def hosts_chosen() -> set[str]:
        return {host for [(host, _)] in nova_stack.select_destinations_rounds(resource_class, rounds=ROUNDS)}

    with ProcessKubelet(client, ns, nova_stack, tmp_path / "kubelet"):
        operator = OperatorProcess(kube_api, ns, "op-retire-sched", tmp_path).start()
        create_secrets(client, ns, clouds_yaml(nova_stack, ironic, nova_stack.compute_url),
                       nova_conf=nova_stack.compute_conf(ironic.cloud))
        handover_pool.create_manage_secret(client, ns, "nova-manage", nova_stack.nova_conf.read_text())
        try:
            client.create(POOLS.format(ns=ns), pool_manifest(
                pool, cloud_name=CLOUD, resource_class=resource_class, image=PROCESS_IMAGE,
                failover={"rebalanceAfterSeconds": 30}, ironic={"pollIntervalSeconds": POLL},
                handover={"novaManageConfig": {"secretRef": {"name": "nova-manage"}}, "maxConcurrent": 1}))
            handover_pool.wait_for_members(kube_api, ns, nova_stack, pool, (m0, m1, m2), shards)
            owners = shards()
            instances = handover_pool.seed_instances(nova_stack, ironic, owners, (m2,), 1)
            free_m2 = sorted(n for n, o in owners.items() if o == m2 and n not in instances)
            for node in set(nodes) - set(instances):  # a power state, as enrolled machines have
                ironic.request("PUT", f"/nodes/{node}/states/power", json={"target": "power off"})
            wait(lambda: nova_stack.allocation_candidates(resource_class) == set(nodes) - set(instances),
                 timeout=120, interval=2, what="Placement offering every free node")
            assert hosts_chosen() == {m0, m1, m2}

            with RetireWatch(nova_stack, ironic, m2, free_m2) as watch:
                patch_spec(client, ns, pool, {"replicas": 2})
                wait(lambda: nova_stack.compute_services()[m2]["status"] == "disabled", timeout=6 * POLL,
                     interval=0.3, what="the retiring member's service disabled")
                wait(lambda: any(moved for _, _, moved in watch.samples), timeout=6 * POLL, interval=0.3,
                     what="a free node of the retiring member moved")
            service = nova_stack.compute_services()[m2]
            assert service["disabled_reason"].startswith(DISABLED_BY) and pool in service["disabled_reason"]
            assert service["state"] == "up"  # it still serves its instance
            first_disabled = next(at for at, disabled, _ in watch.samples if disabled)
            first_moved = next(at for at, _, moved in watch.samples if moved)
            assert first_disabled <= first_moved, "a free node left the retiring member before its service was disabled"
            assert not [at for at, disabled, _ in watch.samples if at >= first_disabled and not disabled]
            (disabled_event,) = posted_events(client, ns, "NovaServiceDisabled")
            assert m2 in disabled_event["message"]
            # From the retire on, the scheduler sends it nothing (its nodes still listed under it or not)
            assert m2 not in hosts_chosen()

            patch_spec(client, ns, pool, {"replicas": 3})  # it stays after all
            wait(lambda: nova_stack.compute_services()[m2]["status"] == "enabled", timeout=6 * POLL, interval=0.5,
                 what="its service enabled again")
            assert m2 in posted_events(client, ns, "NovaServiceEnabled")[0]["message"]
            wait(lambda: m2 in hosts_chosen(), timeout=180, interval=2, what="builds placed on it again")
            print(f"retire scheduling scenario: service disabled {first_moved - first_disabled:.1f}s before the "
                  f"first free node moved; no build on it while retiring ({ROUNDS} probes); enabled again on "
                  "the scale back")
        finally:
            handover_pool.report_and_delete(kube_api, ns, pool, operator)
