"""Where the adapters find a service's endpoint (adapters/openstack_http.endpoint_for), for the
clouds.yaml entries a standalone Ironic is reached with: auth_type `none` or `http_basic` and
`auth.endpoint`. Those keystoneauth plugins have no catalog and answer their one URL for every
service type; taken for Nova, that guess was asked for Nova's API, answered 404 (it is Ironic),
and the pool's NovaDisabled Event spoke of an HTTP 404 from a URL nobody configured. No request
is sent here: finding the endpoint of such a cloud needs none."""

from __future__ import annotations

import pytest
from openstack import connection
from openstack.config import loader

from ironic_shard_operator.adapters.ironic import IronicAdapter
from ironic_shard_operator.adapters.nova import NovaAdapter, NovaNotConfigured
from ironic_shard_operator.adapters.placement import PlacementAdapter, PlacementNotConfigured

IRONIC = "http://ironic.example:6385"
NOVA = "http://nova.example:8774/v2.1"


def connect(**entry: object) -> connection.Connection:
    region = loader.OpenStackConfig(load_yaml_config=False, load_envvars=False).get_one(**entry)
    return connection.Connection(config=region)


STANDALONE = {
    "http_basic": {"auth_type": "http_basic", "auth": {"username": "nova", "password": "pw", "endpoint": IRONIC}},
    "none": {"auth_type": "none", "auth": {"endpoint": IRONIC}},
}


@pytest.mark.parametrize("auth_type", STANDALONE)
def test_a_cloud_without_a_catalog_has_no_compute_endpoint_unless_its_clouds_yaml_names_one(auth_type: str):
    cloud = connect(**STANDALONE[auth_type])
    with pytest.raises(NovaNotConfigured) as off:
        NovaAdapter(cloud, cloud_name="metal").endpoint
    assert str(off.value) == (f"cloud 'metal' has no compute endpoint: its clouds.yaml sets no "
                              f"compute_endpoint_override, and its auth_type {auth_type} has no catalog to find one in")
    with pytest.raises(PlacementNotConfigured, match="has no placement endpoint"):
        PlacementAdapter(cloud, cloud_name="metal").endpoint
    assert IronicAdapter(cloud, cloud_name="metal").endpoint == IRONIC  # auth.endpoint is Ironic's


@pytest.mark.parametrize("auth_type", STANDALONE)
def test_a_compute_endpoint_the_clouds_yaml_names_is_used(auth_type: str):
    cloud = connect(**STANDALONE[auth_type], compute_endpoint_override=NOVA)
    assert NovaAdapter(cloud, cloud_name="metal").endpoint == NOVA
    assert IronicAdapter(cloud, cloud_name="metal").endpoint == IRONIC
