"""Reconcile benchmark against the real Ironic service: our planner vs a tooz ring, same run.

One Ironic (testbed/ironic_service.py, http_basic, sqlite) holds N fake-hardware nodes (default
10,000) in one pool of M members (default 20, so 500 nodes each, the default
maxNodesPerMember). Both strategies write through the same adapter (ironic.py: bulk
re-read, <= 4 concurrent writes, <= 20 writes/s); only the decision differs:

- ours: one reconcile cycle (cycle.py): observe, plan (sticky, bounded-load), apply;
- tooz: what a nova-compute with [ironic]peer_list computes today, a full re-mapping of
  every node with tooz.hashring.HashRing(members, partitions=2**5), written as shards:
  every node whose ring owner differs from its shard is moved.

Reported per strategy (each has its own pool of N nodes; phases alternate between the
two, so a busy machine slows both alike):
- Ironic requests per observation (target <= ceil(N/1000) + 1) and its time;
- for a member leaving, then the same member returning: writes vs the ideal (leave: the
  leaver's free nodes at a balanced start, N/M; join: the returning member's fair share,
  N/M), Ironic requests, and wall time from the change to all its free nodes re-owned
  (decision + writes; the poll interval and readiness grace the operator waits first are
  not included), with the write rate Ironic sustained meanwhile;
- balance after the change (busiest member / mean) and the writes of a cycle with nothing
  changed.

The starting ownership (a converged pool) is written with the database shortcut of
testbed/ironic_service.py; everything measured goes through the API.

Usage: .venv/bin/python bench/reconcile_bench.py [--nodes N] [--members M]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from tooz import hashring

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testbed, run as a script

from ironic_shard_operator.controller.ironic_cycle import run_cycle  # noqa: E402
from ironic_shard_operator.adapters.ironic import IronicAdapter  # noqa: E402
from ironic_shard_operator.core.model import Member, Move, Node, Observation, PoolSpec  # noqa: E402
from ironic_shard_operator.core.planner import owners_after, plan  # noqa: E402
from testbed.ironic_service import (  # noqa: E402
    IronicService,
    assign_shards_directly_in_db,
    running_ironic,
    seed_nodes_directly_in_db,
    shards_of,
)

POOL = "rack"
TOOZ_PARTITIONS = 2**5  # Nova's and Ironic's hash_partition_exponent default of 5
LEAVER = 7


def member_names(count: int) -> list[str]:
    return [f"{POOL}-{i}" for i in range(count)]


def balance(owners: dict[str, str | None], members: Sequence[str]) -> float:
    loads = Counter(owner for owner in owners.values() if owner in members)
    return max(loads[m] for m in members) / (len(owners) / len(members))


def tooz_owners(uuids: Sequence[str], members: Sequence[str]) -> dict[str, str]:
    """Every node's owner on a tooz ring over `members` (Nova's peer_list mapping)."""
    ring = hashring.HashRing(members, partitions=TOOZ_PARTITIONS)
    return {u: next(iter(ring.get_nodes(u.encode("utf-8")))) for u in uuids}


class Strategy:
    """One way of deciding owners, driven against the real service."""

    name = ""

    def __init__(self, service: IronicService, resource_class: str, nodes: int) -> None:
        self.service = service
        self.resource_class = resource_class
        self.nodes = nodes
        self.adapter: IronicAdapter = service.adapter(resource_class)
        self.adapter.check()

    def converge_directly(self, members: Sequence[str]) -> None:
        raise NotImplementedError

    def change(self, members: Sequence[Member]) -> None:
        raise NotImplementedError

    def measure(self, members: Sequence[Member], ideal: int, leaver: str | None,
                ready: Sequence[str]) -> dict[str, float]:
        """Apply one membership change; return writes, requests, seconds, balance."""
        before_writes, before_requests = self.adapter.writes_made, self.adapter.requests_made
        started = time.perf_counter()
        self.change(members)
        seconds = time.perf_counter() - started
        owners = shards_of(self.service, self.resource_class)
        if leaver is not None:
            assert leaver not in owners.values(), f"{self.name}: {leaver} still owns nodes"
        assert set(owners.values()) <= set(ready), f"{self.name}: a node has no ready owner"
        return {"writes": self.adapter.writes_made - before_writes, "ideal": ideal,
                "requests": self.adapter.requests_made - before_requests,
                "seconds": seconds, "balance": balance(owners, ready)}

    def observe(self) -> tuple[int, float]:
        before = self.adapter.requests_made
        started = time.perf_counter()
        self.adapter.list_nodes()
        return self.adapter.requests_made - before, time.perf_counter() - started


class Ours(Strategy):
    name = "ours (planner)"

    def converge_directly(self, members: Sequence[str]) -> None:
        nodes = tuple(Node(uuid=u) for u in shards_of(self.service, self.resource_class))
        decision = plan(Observation(PoolSpec(POOL, replicas=len(members)),
                                    tuple(Member(m, ready=True) for m in members), nodes, 0.0))
        assign_shards_directly_in_db(self.service, owners_after(nodes, decision.moves))

    def change(self, members: Sequence[Member]) -> None:
        run_cycle(self.adapter, PoolSpec(POOL, replicas=len(members)), members)


class Tooz(Strategy):
    name = "tooz ring (2^5)"

    def converge_directly(self, members: Sequence[str]) -> None:
        uuids = list(shards_of(self.service, self.resource_class))
        assign_shards_directly_in_db(self.service, tooz_owners(uuids, members))

    def change(self, members: Sequence[Member]) -> None:
        nodes = self.adapter.list_nodes()
        ready = [m.name for m in members if m.ready]
        wanted = tooz_owners([n.uuid for n in nodes], ready)
        moves = [Move(n.uuid, n.shard, wanted[n.uuid]) for n in nodes
                 if not n.pinned and n.shard != wanted[n.uuid]]
        self.adapter.apply_moves(moves, nodes)


def run(strategies: Sequence[Strategy], members: int) -> dict[str, dict[str, dict]]:
    """Each phase for every strategy in turn, so load changes on the machine hit both."""
    names = member_names(members)
    leaver = names[LEAVER % members]
    staying = [n for n in names if n != leaver]
    now = time.time()
    leaving = [Member(n, ready=n != leaver, since=now - 3600 if n == leaver else None)
               for n in names]
    all_ready = [Member(n, ready=True) for n in names]
    results: dict[str, dict[str, dict]] = {s.name: {} for s in strategies}
    for strategy in strategies:
        strategy.converge_directly(names)
        start = shards_of(strategy.service, strategy.resource_class)
        requests, seconds = strategy.observe()
        results[strategy.name]["observe"] = {"requests": requests, "seconds": seconds}
        results[strategy.name]["leaver_nodes"] = sum(o == leaver for o in start.values())
    for strategy in strategies:
        print(f"{strategy.name}: {leaver} leaves", flush=True)
        results[strategy.name]["leave"] = strategy.measure(
            leaving, ideal=math.ceil(strategy.nodes / members), leaver=leaver, ready=staying)
    for strategy in strategies:
        print(f"{strategy.name}: {leaver} returns", flush=True)
        results[strategy.name]["join"] = strategy.measure(
            all_ready, ideal=strategy.nodes // members, leaver=None, ready=names)
    for strategy in strategies:
        before = strategy.adapter.writes_made
        strategy.change(all_ready)
        results[strategy.name]["again"] = {"writes": strategy.adapter.writes_made - before}
    return results


def table(rows: list[tuple[str, Callable[[dict], str]]], results: dict[str, dict]) -> str:
    names = list(results)
    width = max(len(label) for label, _ in rows) + 2
    lines = [" " * width + "".join(f"{n:>20}" for n in names)]
    for label, cell in rows:
        lines.append(f"{label:<{width}}" + "".join(f"{cell(results[n]):>20}" for n in names))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--members", type=int, default=20)
    args = parser.parse_args()
    target = math.ceil(args.nodes / 1000) + 1

    with tempfile.TemporaryDirectory(prefix="reconcile-bench-") as state, \
            running_ironic(Path(state) / "ironic", auth="http_basic") as service:
        started = time.perf_counter()
        for pool in ("bench-ours", "bench-tooz"):  # one pool each, the same size
            seed_nodes_directly_in_db(service, args.nodes, resource_class=pool)
        strategies = (Ours(service, "bench-ours", args.nodes),
                      Tooz(service, "bench-tooz", args.nodes))
        api = ".".join(map(str, strategies[0].adapter.check()))
        print(f"Ironic (API max {api}) at {service.url}: 2 pools x {args.nodes} nodes seeded in "
              f"{time.perf_counter() - started:.1f} s; {args.members} members, "
              f"{POOL}-{LEAVER % args.members} leaves then returns; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        results = run(strategies, args.members)

    def phase(name: str) -> list[tuple[str, Callable[[dict], str]]]:
        return [
            (f"{name}: writes / ideal", lambda r: f"{r[name]['writes']} / {r[name]['ideal']}"),
            (f"{name}: Ironic requests", lambda r: f"{r[name]['requests']}"),
            (f"{name}: seconds, decide + write", lambda r: f"{r[name]['seconds']:.1f}"),
            (f"{name}: writes per second",
             lambda r: f"{r[name]['writes'] / r[name]['seconds']:.1f}"),
            (f"{name}: balance max/mean after", lambda r: f"{r[name]['balance']:.2f}"),
        ]

    rows = [
        (f"observe: Ironic requests (<= {target})", lambda r: f"{r['observe']['requests']}"),
        ("observe: seconds", lambda r: f"{r['observe']['seconds']:.2f}"),
        ("leave: the leaver's nodes before", lambda r: f"{r['leaver_nodes']}"),
        *phase("leave"),
        *phase("join"),
        ("nothing changed: writes", lambda r: f"{r['again']['writes']}"),
    ]
    print()
    print(table(rows, results))
    ours = results[Ours.name]
    ok = ours["observe"]["requests"] <= target and ours["again"]["writes"] == 0
    print(f"\nobservation within ceil(N/1000)+1 = {target} requests and zero writes when "
          f"nothing changed: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
