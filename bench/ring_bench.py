"""Ring benchmark: our planner vs tooz's hash ring (what Nova and Ironic build), same run.

For each size it reports
- re-plan time: ours = plan() after a membership change, from Ironic's current owners;
  tooz = build the new ring, map every node, diff against the current owners
  (what a nova-compute with [ironic]peer_list does each cycle);
- first assignment time: ours = plan() with every node unassigned (a new pool); tooz = build
  the ring and map every node (the same mapping, without a diff);
- balance: busiest member / mean, after convergence (ours) and first choices (tooz);
- movement on one member joining and one leaving, as a ratio to the ideal
  (join: N/(M+1), leave: the leaver's nodes = N/M on average).

Usage: python bench/ring_bench.py [--quick]
Targets (issue 2): at 100k x 200, ours <= 1/10 of tooz's time and balance
<= 1.01; at 10k x 200 balance <= 1.05; movement <= 1.02 x ideal.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from collections import Counter

from tooz import hashring

from ironic_shard_operator.core.model import Member, Node, Observation, PoolSpec
from ironic_shard_operator.core.planner import owners_after, plan

TOOZ_PARTITIONS = 2**5  # Nova's and Ironic's hash_partition_exponent default of 5


def node_uuids(count: int, seed: int = 42) -> list[str]:
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(count)]


def best_of(repeat: int, work) -> tuple[float, object]:
    """The fastest of `repeat` runs (seconds) and the last result."""
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return min(times), result


def ours(uuids: list[str], members: int, repeat: int) -> dict:
    names = [f"p-{i}" for i in range(members)]
    spec = PoolSpec("p", replicas=members)
    everyone = tuple(Member(n, True, 0.0) for n in names)
    fresh = tuple(Node(u) for u in uuids)
    first_time, adopted = best_of(repeat, lambda: plan(Observation(spec, everyone, fresh, 1e6)))
    owners = owners_after(fresh, adopted.moves)
    current = tuple(Node(u, owners[u]) for u in uuids)
    load = Counter(owners.values())

    joined = Observation(PoolSpec("p", replicas=members + 1),
                         everyone + (Member(f"p-{members}", True, 0.0),), current, 1e6)
    join_time, join_plan = best_of(repeat, lambda: plan(joined))
    leaver = names[members // 2]
    left = Observation(spec, tuple(Member(n, n != leaver, 0.0) for n in names), current, 1e6)
    leave_time, leave_plan = best_of(repeat, lambda: plan(left))
    return {
        "time": statistics.mean([join_time, leave_time]),
        "first": first_time,
        "balance": max(load.values()) / (len(uuids) / members),
        "join": len(join_plan.moves),
        "leave": len(leave_plan.moves),
        "leaver_nodes": load[leaver],
    }


def tooz(uuids: list[str], members: int, repeat: int) -> dict:
    names = [f"p-{i}" for i in range(members)]
    keys = [u.encode() for u in uuids]

    def mapping(member_names):
        ring = hashring.HashRing(member_names, partitions=TOOZ_PARTITIONS)
        return {u: next(iter(ring.get_nodes(k))) for u, k in zip(uuids, keys)}

    first_time, current = best_of(repeat, lambda: mapping(names))
    load = Counter(current.values())

    def changed(member_names):
        new = mapping(member_names)
        return [u for u in uuids if new[u] != current[u]]

    leaver = names[members // 2]
    join_time, join_moves = best_of(repeat, lambda: changed(names + [f"p-{members}"]))
    leave_time, leave_moves = best_of(repeat, lambda: changed([n for n in names if n != leaver]))
    return {
        "time": statistics.mean([join_time, leave_time]),
        "first": first_time,
        "balance": max(load.values()) / (len(uuids) / members),
        "join": len(join_moves),
        "leave": len(leave_moves),
        "leaver_nodes": load[leaver],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k nodes only, one repeat")
    args = parser.parse_args(argv)
    sizes = [10_000] if args.quick else [10_000, 100_000]
    member_counts = [3, 10, 50, 200]
    repeat = 1 if args.quick else 3

    print(f"{'':>15} | {'re-plan after a change':^24} | {'first assignment':^24} |")
    print(f"{'nodes':>7} {'members':>7} | {'ours ms':>8} {'tooz ms':>8} {'ratio':>6} | "
          f"{'ours ms':>8} {'tooz ms':>8} {'ratio':>6} | "
          f"{'bal ours':>8} {'bal tooz':>8} | {'join ours':>9} {'join tooz':>9} | "
          f"{'leave ours':>10} {'leave tooz':>10}")
    verdicts = []
    for size in sizes:
        uuids = node_uuids(size)
        for members in member_counts:
            a, b = ours(uuids, members, repeat), tooz(uuids, members, repeat)
            ideal_join = size / (members + 1)
            row = {
                "ratio": a["time"] / b["time"],
                "join_ours": a["join"] / ideal_join, "join_tooz": b["join"] / ideal_join,
                "leave_ours": a["leave"] / a["leaver_nodes"],
                "leave_tooz": b["leave"] / b["leaver_nodes"],
            }
            print(f"{size:>7} {members:>7} | {a['time'] * 1e3:>8.1f} {b['time'] * 1e3:>8.1f} "
                  f"{row['ratio']:>6.3f} | {a['first'] * 1e3:>8.1f} {b['first'] * 1e3:>8.1f} "
                  f"{a['first'] / b['first']:>6.3f} | {a['balance']:>8.3f} {b['balance']:>8.3f} | "
                  f"{row['join_ours']:>9.3f} {row['join_tooz']:>9.3f} | "
                  f"{row['leave_ours']:>10.3f} {row['leave_tooz']:>10.3f}")
            if members == 200:
                verdicts.append((f"balance at {size} x 200 <= {1.01 if size == 100_000 else 1.05}",
                                 a["balance"] <= (1.01 if size == 100_000 else 1.05),
                                 f"{a['balance']:.3f} (tooz {b['balance']:.3f})"))
                if size == 100_000:
                    verdicts.append(("re-plan at 100k x 200 <= 1/10 of tooz's map + diff", row["ratio"] <= 0.1,
                                     f"{row['ratio']:.3f} = {a['time'] * 1e3:.0f} ms vs "
                                     f"{b['time'] * 1e3:.0f} ms"))
                    verdicts.append(("first assignment at 100k x 200 <= 0.75 of tooz's map",
                                     a["first"] <= 0.75 * b["first"],
                                     f"{a['first'] / b['first']:.3f} = {a['first'] * 1e3:.0f} ms vs "
                                     f"{b['first'] * 1e3:.0f} ms"))
            verdicts.append((f"movement at {size} x {members} <= 1.02 x ideal",
                             max(row["join_ours"], row["leave_ours"]) <= 1.02,
                             f"join {row['join_ours']:.3f}, leave {row['leave_ours']:.3f}"))
    print("\nmovement ratios are nodes moved / ideal (join: N/(M+1); leave: the leaver's nodes)")
    print("re-plan time is the mean of the join and leave cases, best of", repeat,
          "(tooz: map + diff); first assignment: every node unassigned (tooz: the map)")
    print()
    for name, ok, detail in verdicts:
        print(f"{'PASS' if ok else 'MISS'}  {name}: {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
