"""`kubectl get ics` as the API server prints it: the CRD's printer columns, evaluated by the real
API server (its table convertor for custom resources) on a pool whose status is what the operator
writes (core/status.py build_status, merge-patched through the status subresource as the
operator's adapter does). Asked for as kubectl asks: a meta.k8s.io/v1 Table of the pools.

The CRD's schema and examples are checked offline in tests/unit/test_crd_schema.py; the status
built here is that module's.
"""

from __future__ import annotations

from typing import Any

import pytest

from ironic_shard_operator.core import model
from ironic_shard_operator.core.spec import GROUP, PLURAL, VERSION
from ironic_shard_operator.core.status import CycleFacts, build_status
from testbed.kube_client import KubeClient
from testbed.operator_objects import install_crd
from tests.support.kube_api import KubeAPI
from tests.unit.test_crd_schema import _converged_plan, _written_status, example_pool

pytestmark = pytest.mark.integration

CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}"


def printed_pool(client: KubeClient, ns: str, status: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Create examples/minimal.yaml's pool in `ns`, write `status` as the operator does, and read
    the pools of `ns` as `kubectl get` does: (the Table's column definitions, its one row's cells
    by column name)."""
    install_crd(client)
    pools = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}"
    name = client.create(pools, example_pool("minimal"))["metadata"]["name"]
    client.patch(f"{pools}/{name}/status", {"status": status})
    printed = client.table(pools)
    (row,) = printed["rows"]
    columns = printed["columnDefinitions"]
    return columns, dict(zip((c["name"] for c in columns), row["cells"]))


def test_kubectl_get_wide_shows_a_value_in_every_status_column(kube_api: KubeAPI, kube_namespace: str):
    """`kubectl get ics -o wide`: every column read from .status shows what the operator wrote
    (Target, status.desiredReplicas, stayed empty)."""
    _, cells = printed_pool(kube_api.client, kube_namespace, _written_status(_converged_plan()))
    (version,) = kube_api.client.get(CRD_PATH)["spec"]["versions"]
    status_columns = [c["name"] for c in version["additionalPrinterColumns"] if c["jsonPath"].startswith(".status.")]
    assert "Target" in status_columns
    assert [name for name in status_columns if cells[name] is None] == []
    assert (cells["Target"], cells["Ready Members"], cells["Nodes"]) == (2, 2, 600)


def test_kubectl_get_shows_the_ready_and_degraded_conditions_without_wide(kube_api: KubeAPI, kube_namespace: str):
    """`kubectl get ics` (no -o wide) shows conditions Ready and Degraded as the operator wrote
    them: a pool that is not Ready, and why it is Degraded, is seen in the list of pools."""
    members = (model.Member("rack-a-0", True, 1.7e9), model.Member("rack-a-1", False, 1.7e9))
    status, _ = build_status(CycleFacts(
        generation=1, members=members, plan=_converged_plan(), pods_existing=2, pods_ready=1,
        selector="ironicshards.io/pool=rack-a", now=1.8e9, error="Ironic at http://x is not answering",
        error_reason="IronicUnavailable"), None)
    columns, cells = printed_pool(kube_api.client, kube_namespace, status)
    shown = [c["name"] for c in columns if c["priority"] == 0]
    assert {"Ready", "Degraded"} <= set(shown)
    assert (cells["Ready"], cells["Degraded"], cells["Ready Members"]) == ("False", "True", 1)
