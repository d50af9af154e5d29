"""The order a cycle's shard writes are made in. Pure.

A nova-compute lists the nodes of its shard when its `update_available_resource` pass starts,
and serves a node only from the pass that listed it. A pass that starts while a destination's
nodes are half-written serves the rest one whole pass later, and that pass is a slow one (each
node new to a compute costs Nova a compute-node save and a few Placement requests). So when a
failed member's nodes go to a few heirs, each heir's set is written together, one heir after
another, the heir with the most first (its pass is the longest): an heir's set is complete a
moment after its first node is written.

What that costs: the adapter re-reads each batch of writes with one listing over the batch's
uuid range (adapters/ironic/writes.py); a batch of one heir's moves spans the other heirs'
nodes of the same range too. Grouping pays only while each destination has at least a batch
of moves (the re-reads list at most about `batch_size` x destinations nodes); with fewer (a
failed member's 500 nodes over 199 heirs) a batch would span the whole range, so the moves keep
uuid order, where each re-read lists about its batch.
"""

from __future__ import annotations

from collections.abc import Iterable

from ironic_shard_operator.core.model import Move


def write_order(moves: Iterable[Move], batch_size: int) -> list[Move]:
    """`moves` in the order to write them.

    Invariants: every move exactly once; each destination's moves in uuid order; when the
    destinations have at least `batch_size` moves each on average, each destination's moves
    are contiguous, destinations with more moves first (ties by name); otherwise all in uuid
    order.
    """
    ordered = sorted(moves)
    by_target: dict[str, list[Move]] = {}
    for move in ordered:
        by_target.setdefault(move.target, []).append(move)
    if len(by_target) < 2 or len(ordered) < batch_size * len(by_target):
        return ordered
    heirs = sorted(by_target, key=lambda target: (-len(by_target[target]), target))
    return [move for target in heirs for move in by_target[target]]
