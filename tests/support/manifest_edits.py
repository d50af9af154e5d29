"""Edits of a manifest by dotted path, for tables of malformed objects (the CRD schema's unit
tests, the bad-input catalogue): each returns the change as a function of the manifest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Change = Callable[[dict[str, Any]], None]


def set_at(path: str, value: Any) -> Change:
    """Set `path` ("spec.failover.fencing") to `value`, creating the mappings on the way."""
    def change(manifest: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = manifest
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return change


def delete_at(path: str) -> Change:
    """Delete `path`, which must exist."""
    def change(manifest: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = manifest
        for key in parents:
            node = node[key]
        del node[leaf]
    return change
