"""Fixtures shared by every tier live in tests/support/; this file registers them, and
groups the slow tiers for CI's parallel run."""

from __future__ import annotations

import pytest

pytest_plugins = [
    "tests.support.ironic_service",   # the real Ironic service (session scope)
    "tests.support.kube_api",         # a Kubernetes API server: $KUBECONFIG's, else the fake one
    "tests.support.nova_stack",       # the real Nova control plane and nova-compute processes
]

# CI (hack/test.sh) runs the suite on two pytest-xdist workers with --dist loadgroup. Each
# slow tier below stays on one worker, so its session services (a Nova stack, an Ironic, an
# API server) start once, and the two tiers, which mostly wait on Ironic's writes and Nova's
# timers, run side by side. The unit tests go to whichever worker is free.
TIER_GROUPS = (
    ("tests/nova/", "nova"),
    ("tests/integration/", "integration"),
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = next((name for prefix, name in TIER_GROUPS if item.nodeid.startswith(prefix)), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
