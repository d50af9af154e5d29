"""`kubectl ics retire|fence|pause` on a pool the operator writes meanwhile: each of its status
writes changes the pool's version, so a conditional write may be refused (409); the command
reads the pool again and decides again, never writing over a change it did not see."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ironic_shard_operator import kubectl_ics
from ironic_shard_operator.adapters.user_cluster import Conflict


class ChangingCluster:
    """A pool whose version moves on `moves` times between a read and the write after it."""

    def __init__(self, pool: dict[str, Any], moves: int) -> None:
        self.pool, self.moves, self.writes = pool, moves, []

    def get_pool(self, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.pool)

    def patch_pool(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        if self.moves:  # the operator wrote the status in between
            self.moves -= 1
            self.pool["metadata"]["resourceVersion"] = str(int(self.pool["metadata"]["resourceVersion"]) + 1)
        if patch["metadata"]["resourceVersion"] != self.pool["metadata"]["resourceVersion"]:
            raise Conflict(f'patch {name}: the object has been modified')
        self.writes.append(patch)
        self.pool["spec"].update(patch.get("spec") or {})
        return self.pool


def pool() -> dict[str, Any]:
    return {"metadata": {"name": "rack-k", "resourceVersion": "7"}, "spec": {"replicas": 3},
            "status": {"members": [{"name": f"rack-k-{i}", "ready": True} for i in range(3)]}}


def test_a_member_command_decides_again_on_the_changed_pool(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = ChangingCluster(pool(), moves=2)
    assert kubectl_ics._member_command(cluster, "fence", "rack-k-1") == 0
    assert [w["metadata"]["resourceVersion"] for w in cluster.writes] == ["9"]  # written once, on what it read last
    assert cluster.pool["spec"]["fencedMembers"] == ["rack-k-1"]


def test_pause_gives_up_after_its_attempts_and_says_why() -> None:
    cluster = ChangingCluster(pool(), moves=kubectl_ics.CONFLICT_ATTEMPTS)
    with pytest.raises(Conflict):
        kubectl_ics._set_paused(cluster, "rack-k", True)
    assert cluster.writes == [] and "paused" not in cluster.pool["spec"]
