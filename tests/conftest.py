"""Fixtures shared by every tier live in tests/support/; this file only registers them."""

pytest_plugins = [
    "tests.support.ironic_service",   # the real Ironic service (session scope)
]
