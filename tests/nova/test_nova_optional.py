"""Nova is optional: a pool whose cloud has no Nova, or credentials Nova refuses, runs with the
Nova features off, says why in status.nova and one Event, and crashes nothing (pods and Ironic
are looked after as usual); a corrected clouds.yaml is tried at the next cycle. Real operator
process, the API server and fake kubelet of the integration tier, the session's real Ironic
(HTTP basic auth) and the real Nova stack.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from testbed.ironic_service import (
    IronicService, seed_nodes_directly_in_db, shards_of, unique_resource_class,
)
from testbed.nova_stack import NovaStack
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, get_pool, pool_manifest, posted_events, ready_members,
)

pytestmark = pytest.mark.nova


def test_without_a_usable_nova_the_pool_runs_with_nova_features_off(
        kube_api: KubeAPI, kube_namespace: str, kubelet, ironic_service: IronicService,
        nova_stack: NovaStack, tmp_path: Path) -> None:
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(kube_api.client)
    # "ironic-only": the Ironic service's own clouds.yaml (no compute endpoint at all).
    # "basic-to-nova": the same credentials with Nova's endpoint added: Nova refuses them.
    clouds = yaml.safe_load(ironic_service.clouds_yaml)["clouds"]
    only_ironic = clouds[ironic_service.cloud_name]
    clouds = {"ironic-only": only_ironic,
              "basic-to-nova": {**only_ironic, "compute_endpoint_override": nova_stack.compute_url}}
    create_secrets(client, ns, yaml.safe_dump({"clouds": clouds}))
    classes = {}
    for pool in ("ironic-only", "basic-to-nova"):
        classes[pool] = unique_resource_class(pool)
        seed_nodes_directly_in_db(ironic_service, 4, resource_class=classes[pool])

    with OperatorProcess(kube_api, ns, "op-a", tmp_path) as operator:
        try:
            for pool in classes:
                client.create(POOLS.format(ns=ns), pool_manifest(
                    pool, cloud_name=pool, resource_class=classes[pool], replicas=1))
            for pool in classes:  # the pools work: a Ready member owning every node
                wait(lambda: ready_members(client, ns, pool) == [f"{pool}-0"], timeout=60,
                     what=f"{pool}: a Ready member")
                wait(lambda: set(shards_of(ironic_service, classes[pool]).values()) == {f"{pool}-0"},
                     timeout=60, what=f"{pool}: nodes adopted")

            def nova_of(pool: str) -> dict:
                return wait(lambda: get_pool(client, ns, pool).get("status", {}).get("nova"),
                            timeout=30, what=f"{pool}: status.nova")

            off = nova_of("ironic-only")
            assert off["state"] == "Disabled"
            assert ("has no compute endpoint: its clouds.yaml sets no compute_endpoint_override, and its "
                    "auth_type http_basic has no catalog" in off["message"])
            refused = nova_of("basic-to-nova")
            assert refused["state"] == "Disabled"
            assert "refused the credentials of cloud 'basic-to-nova'" in refused["message"]
            assert all(count == 0 for count in off["findings"].values())
            disabled = posted_events(client, ns, "NovaDisabled", count=2)
            assert {e["involvedObject"]["name"] for e in disabled} == set(classes)
            assert len(disabled) == 2  # one Event per pool, not one per cycle
            (plainly,) = [e["message"] for e in disabled if e["involvedObject"]["name"] == "ironic-only"]
            assert plainly.startswith("Nova features are off: cloud 'ironic-only' has no compute endpoint")
            assert "HTTP 404" not in plainly  # Ironic's URL is not asked for Nova's API

            # The clouds.yaml changes (Nova's endpoint added to "ironic-only"): Nova is asked
            # again at the pool's next cycle, not after the five-minute recheck of a Disabled cloud.
            clouds["ironic-only"] = {**only_ironic, "compute_endpoint_override": nova_stack.compute_url}
            client.patch(f"/api/v1/namespaces/{ns}/secrets/openstack-cloud", {"data": {
                "clouds.yaml": base64.b64encode(yaml.safe_dump({"clouds": clouds}).encode()).decode()}})
            rechecked = wait(lambda: "refused the credentials of cloud 'ironic-only'" in (
                s := nova_of("ironic-only"))["message"] and s, timeout=30,
                what="ironic-only: Nova asked again with the new clouds.yaml")
            assert rechecked["state"] == "Disabled"
            log = operator.log()
            assert "Traceback" not in log and "failed unexpectedly" not in log
        finally:
            for item in client.get(POOLS.format(ns=ns))["items"]:
                client.delete(f"{POOLS.format(ns=ns)}/{item['metadata']['name']}")
            wait(lambda: not client.get(POOLS.format(ns=ns))["items"], timeout=60,
                 what="the pools deleted")
