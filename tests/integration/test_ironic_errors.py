"""What a user sees when the Ironic side of a pool is misconfigured: one exception, one
line naming the problem, before anything is written. Against the real service (wrong
credentials, wrong endpoints) and a real Ironic acting as the Zed release (too old)."""

from __future__ import annotations

import socket
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
