"""The operator's Nova adapter against the real Nova stack and real nova-compute members."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import openstack
import pytest

from ironic_shard_operator.adapters.nova import (
    NovaAdapter, NovaAuthError, NovaNotConfigured, NovaUnavailable, ServiceInUse)
from ironic_shard_operator.core.podspec import member_conf
from testbed.ironic_service import IronicService
from testbed.nova_stack import NovaStack, started_computes
from tests.nova.sharded_pool import ShardedPool, start_sharded_pool

pytestmark = pytest.mark.nova


@pytest.fixture(scope="module")
def running_pool(nova_stack: NovaStack, ironic_service: IronicService,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShardedPool]:
    """Two live members over 6 nodes, shared by this module's read-and-restore tests."""
    with started_computes(nova_stack) as start:
        yield start_sharded_pool(nova_stack, ironic_service, tmp_path_factory.mktemp("pool"),
                                 members=2, nodes=6, start=start)


@pytest.fixture
def nova(nova_stack: NovaStack) -> NovaAdapter:
    return NovaAdapter(nova_stack.connection(), cloud_name="nova-test")


def test_reads_members_services_and_which_nodes_each_reports(
        nova: NovaAdapter, running_pool: ShardedPool) -> None:
    services = nova.compute_services(running_pool.members)
    assert set(services) == set(running_pool.members)
    assert all(s.up and s.enabled and not s.forced_down for s in services.values())
    assert nova.service(running_pool.members[0]) == services[running_pool.members[0]]
    assert nova.service("no-such-member-0") is None

    reported: dict[str, set[str]] = {}
    for hypervisor in nova.hypervisors():
        if hypervisor.host in running_pool.members:
            reported.setdefault(hypervisor.host, set()).add(hypervisor.node_uuid)
    assert reported == {m: set(running_pool.nodes_of(m)) for m in running_pool.members}
    assert nova.writes_made == 0


def test_a_hypervisor_listing_longer_than_a_page_is_read_whole(
        nova_stack: NovaStack, running_pool: ShardedPool) -> None:
    """Pages of 2 over the pool's 6 nodes (and whatever else the stack lists): the same
    listing as in one page, read in several requests (to the first empty page)."""
    whole = NovaAdapter(nova_stack.connection(), cloud_name="nova-test", page_limit=1000)
    paged = NovaAdapter(nova_stack.connection(), cloud_name="nova-test", page_limit=2)
    listed = sorted((h.host, h.node_uuid) for h in whole.hypervisors())
    assert sorted((h.host, h.node_uuid) for h in paged.hypervisors()) == listed
    assert {n for m in running_pool.members for n in running_pool.nodes_of(m)} <= {n for _, n in listed}
    assert paged.requests_made - whole.requests_made >= len(listed) // 2 - 1


def test_a_compute_api_version_pinned_in_the_clouds_yaml_does_not_change_the_calls(
        nova_stack: NovaStack, running_pool: ShardedPool) -> None:
    """The adapter speaks 2.53 whatever the cloud's `compute_api_version`: at 2.1 Nova would
    give services integer ids, which Nova 2.53 refuses to address."""
    cloud = {**nova_stack.cloud_config(), "compute_api_version": "2.1"}
    pinned = NovaAdapter(openstack.connect(load_yaml_config=False, load_envvars=False, **cloud), cloud_name="pinned")
    member = running_pool.members[0]
    service = pinned.service(member)
    assert service is not None and uuid.UUID(service.id)
    assert {h.node_uuid for h in pinned.hypervisors() if h.host == member} == set(running_pool.nodes_of(member))


def test_forced_down_is_set_and_then_cleared_by_us(
        nova: NovaAdapter, nova_stack: NovaStack, running_pool: ShardedPool) -> None:
    member = running_pool.members[1]
    service = nova.service(member)

    forced = nova.set_forced_down(service, True)
    assert forced.forced_down and not forced.up
    assert nova_stack.compute_services()[member]["forced_down"] is True
    assert nova_stack.compute_services()[member]["state"] == "down"  # though its process runs

    cleared = nova.set_forced_down(forced, False)
    assert not cleared.forced_down
    assert nova_stack.compute_services()[member]["forced_down"] is False
    nova_stack.wait_for(f"{member} up again", lambda: nova.service(member).up, timeout=30)
    assert nova.writes_made == 2


def test_service_delete_is_refused_while_its_host_has_an_instance_and_idempotent_otherwise(
        nova: NovaAdapter, nova_stack: NovaStack, ironic_service: IronicService,
        tmp_path: Path) -> None:
    with started_computes(nova_stack) as start:
        pool = start_sharded_pool(nova_stack, ironic_service, tmp_path, members=2, nodes=4,
                                  start=start)
        busy, idle = pool.members
        for process in pool.processes.values():  # scale-down: the members are gone first
            process.stop()
    pinned = pool.nodes_of(busy)[0]
    instance = nova_stack.seed_instance(busy, pinned)
    ironic_service.request("PATCH", f"/nodes/{pinned}", json=[
        {"op": "add", "path": "/instance_uuid", "value": instance}])

    with pytest.raises(ServiceInUse) as refused:
        nova.delete_service(nova.service(busy))
    assert refused.value.host == busy
    assert "instances" in refused.value.reason
    assert busy in str(refused.value)
    assert nova.service(busy) is not None

    gone = nova.service(idle)
    assert nova.delete_service(gone) is True
    assert nova.service(idle) is None
    assert not {h.node_uuid for h in nova.hypervisors()} & set(pool.nodes_of(idle))
    assert nova.delete_service(gone) is False  # already gone: nothing to do, no error


def test_whether_a_host_is_mapped_to_a_cell_is_nova_s_own_answer(
        nova: NovaAdapter, nova_stack: NovaStack, running_pool: ShardedPool, tmp_path: Path) -> None:
    """A member serving nodes is mapped; a new compute is not until host discovery ran, and
    Nova says so before the compute has reported any node (its shard holds none here), when
    its hypervisor list cannot tell: it lists no node under either."""
    assert all(nova.host_mapped(member) is True for member in running_pool.members)
    newcomer = f"{running_pool.pool.name}-9"
    overlay = tmp_path / "member.conf"
    overlay.write_text(member_conf(running_pool.pool, newcomer))
    base = tmp_path / "nova.conf"
    base.write_text(running_pool.processes[running_pool.members[0]].config_files[0].read_text())
    with started_computes(nova_stack) as start:
        start(newcomer, [base, overlay])
        nova_stack.wait_for(f"{newcomer}'s service up", lambda: (s := nova.service(newcomer)) is not None and s.up,
                            timeout=90)
        assert nova.host_mapped(newcomer) is False
        assert newcomer not in {h.host for h in nova.hypervisors()}
        nova_stack.discover_hosts()
        assert nova.host_mapped(newcomer) is True  # mapped, no compute node: "Compute host ... not found"
        assert newcomer not in {h.host for h in nova.hypervisors()}
    assert nova.writes_made == 0


def test_a_cloud_whose_only_endpoint_is_ironic_turns_nova_off(
        ironic_service: IronicService) -> None:
    nova = NovaAdapter(ironic_service.connection(), cloud_name="ironic-only")
    # http_basic has no catalog: no compute endpoint is guessed from Ironic's URL, and the
    # message says what is missing rather than what a guessed URL answered
    with pytest.raises(NovaNotConfigured, match="has no compute endpoint: .* no compute_endpoint_override"):
        nova.check()


def test_credentials_without_admin_are_refused_with_a_clear_error(nova_stack: NovaStack) -> None:
    nova = NovaAdapter(nova_stack.connection(token="alice:project-a"), cloud_name="not-admin")
    with pytest.raises(NovaAuthError, match="does not allow.*admin is needed.*not-admin"):
        nova.compute_services()


def test_nova_not_answering_is_retried_then_reported(nova_stack: NovaStack) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/v2.1"
    cloud = {**nova_stack.cloud_config(), "compute_endpoint_override": closed}
    connection = openstack.connect(load_yaml_config=False, load_envvars=False, **cloud)
    nova = NovaAdapter(connection, cloud_name="down", retry_attempts=3, backoff_seconds=0.05)
    with pytest.raises(NovaUnavailable, match="not answering: Connection refused; tried 3 times"):
        nova.check()
    assert nova.requests_made == 3
