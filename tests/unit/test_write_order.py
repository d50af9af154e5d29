"""The order of a cycle's shard writes: a failed member's heirs each get their set in one go,
so a heir's pass that starts during the writes does not catch half of it."""

from hypothesis import given, strategies as st

from ironic_shard_operator.core.model import Move
from ironic_shard_operator.core.write_order import write_order

BATCH = 40


def failover(per_heir: dict[str, int]) -> list[Move]:
    """A failed member's free nodes, spread over uuids as the ring spreads them."""
    moves, index = [], 0
    while any(per_heir.values()):
        for heir in sorted(per_heir):
            if per_heir[heir]:
                moves.append(Move(f"node-{index:05d}", "pool-0", heir))
                per_heir[heir] -= 1
                index += 1
    return moves


def runs(order: list[Move]) -> list[str]:
    """The destinations in the order their writes come, one entry per contiguous run."""
    out: list[str] = []
    for move in order:
        if not out or out[-1] != move.target:
            out.append(move.target)
    return out


def test_each_heir_gets_its_whole_set_before_the_next_heir_gets_any():
    moves = failover({"pool-1": 60, "pool-2": 75, "pool-3": 67})
    order = write_order(moves, BATCH)
    assert runs(order) == ["pool-2", "pool-3", "pool-1"]  # the heir with the most first
    for heir in ("pool-1", "pool-2", "pool-3"):
        mine = [move.node_uuid for move in order if move.target == heir]
        assert mine == sorted(mine)  # each heir's in uuid order: its re-reads stay narrow


def test_heirs_with_less_than_a_batch_each_keep_uuid_order():
    # A failed member's 500 nodes over 199 heirs: grouping would make every re-read span the
    # whole range for no gain, as each heir's few writes are made within a batch's time.
    moves = failover({f"pool-{n}": 3 for n in range(1, 200)})
    assert write_order(moves, BATCH) == sorted(moves)


def test_one_destination_keeps_uuid_order():
    moves = list(reversed(failover({"pool-4": 200})))
    assert write_order(moves, BATCH) == sorted(moves)


@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["a", "b", "c", "d"])),
                unique_by=lambda pair: pair[0], max_size=300),
       st.integers(1, 60))
def test_every_move_is_written_exactly_once(pairs, batch):
    moves = [Move(f"node-{uuid:05d}", "x", target) for uuid, target in pairs]
    order = write_order(moves, batch)
    assert sorted(order) == sorted(moves)
    for target in {move.target for move in moves}:
        mine = [move for move in order if move.target == target]
        assert mine == sorted(mine)
