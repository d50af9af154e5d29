"""The one kind of news the operator posts: a Kubernetes Event on the pool.

Decisions in core return Events as data; controller/reconcile.py hands them to the
Kubernetes adapter, which posts them. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event to post on the pool: `type` is Normal or Warning."""

    reason: str
    message: str
    type: str = "Normal"
