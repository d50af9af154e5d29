"""The real Ironic service for a test session (a pytest plugin, registered by the root conftest).

The service itself and the helpers that fill it with nodes are testbed/ironic_service.py. The
session service runs with http_basic auth, what a user would turn on. Tests share it: each
test gives its nodes a resource class of its own (`unique_resource_class`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.ironic_service import IronicService, running_ironic


@pytest.fixture(scope="session")
def ironic_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IronicService]:
    """The real Ironic service (http_basic auth, sqlite, fake-hardware) for the session."""
    with running_ironic(tmp_path_factory.mktemp("ironic"), auth="http_basic") as service:
        yield service


@pytest.fixture(scope="session")
def noauth_ironic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IronicService]:
    """A real Ironic without auth, for the real-Nova tier: a pool's one cloud then reaches
    Ironic, Nova and Placement with one token, as with Keystone (the session's Ironic uses HTTP
    basic auth, which the test Nova API does not speak)."""
    with running_ironic(tmp_path_factory.mktemp("ironic-noauth"), auth="noauth") as service:
        yield service
