"""Fixtures shared by every tier live in tests/support/; this file only registers them."""

pytest_plugins = [
    "tests.support.ironic_service",   # the real Ironic service (session scope)
    "tests.support.keystone",         # a real Keystone and an Ironic enforcing policy through it
    "tests.support.kube_api",         # a Kubernetes API server: $KUBECONFIG's, else the fake one
    "tests.support.nova_stack",       # the real Nova control plane and nova-compute processes
    "tests.support.scheduling",       # the long tiers handed to the xdist workers first
]
