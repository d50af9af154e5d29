"""Fixtures shared by every tier live in tests/support/; this file only registers them."""

pytest_plugins: list[str] = []
