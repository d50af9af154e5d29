"""Integration tier helpers over the real Ironic service.

The `ironic_service` fixture itself comes from tests/support/ironic_service.py, registered
by the root conftest.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ironic_shard_operator.core.model import Member, Node, Observation, PoolSpec
from ironic_shard_operator.core.planner import owners_after, plan
from testbed.ironic_service import (
    IronicService,
    assign_shards_directly_in_db,
    seed_nodes_directly_in_db,
    unique_resource_class,
)

POOL = "rack"


def ready_members(count: int) -> list[Member]:
    return [Member(f"{POOL}-{i}", ready=True) for i in range(count)]


def members_with_down(count: int, down: set[int], now: float) -> list[Member]:
    """`count` members; those in `down` lost readiness an hour ago (past any grace)."""
    return [Member(f"{POOL}-{i}", ready=i not in down, since=now - 3600 if i in down else None)
            for i in range(count)]


@pytest.fixture
def converged_pool(ironic_service: IronicService) -> Callable[..., tuple[str, dict[str, str]]]:
    """Make a pool of `count` available nodes already spread over `members` ready members,
    as a finished earlier cycle would leave it; return (resource class, owner by node).

    The owners come from the real planner; they are written with the database shortcut,
    so a test pays Ironic writes only for the change it is about.
    """

    def make(count: int, members: int, name: str) -> tuple[str, dict[str, str]]:
        resource_class = unique_resource_class(name)
        uuids = seed_nodes_directly_in_db(ironic_service, count, resource_class=resource_class)
        unassigned = tuple(Node(uuid=u, provision_state="available") for u in uuids)
        decision = plan(Observation(PoolSpec(POOL, replicas=members), tuple(ready_members(members)),
                                    unassigned, now=0.0))
        owners = owners_after(unassigned, decision.moves)
        assign_shards_directly_in_db(ironic_service, owners)
        return resource_class, owners  # type: ignore[return-value]

    return make
