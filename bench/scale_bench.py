"""Scale benchmark: one pool of 100,000 nodes and 200 members against the real Ironic service.

One Ironic (testbed/ironic_service.py, http_basic, sqlite) holds N fake-hardware nodes (default
100,000) already spread over M members (default 200, so 500 each) by our planner, written with
the database shortcut of testbed/ironic_service.py; everything measured goes through the API.
The operator's side runs in a process of its own (the operator's imports, kopf included, and
nothing of the benchmark's), so its RSS is the operator's. Reported in one run:

- a steady poll before (every poll lists the pool: ceil(N/1000)+1 requests) and after
  (observation by need: a shard summary and an unsharded listing), requests and seconds;
- a full observation's time (summary + listing + plan) and the operator process's RSS;
- one member's failure past its grace: its ~N/M free nodes re-owned, the time of the poll that
  does it (plan stage, then the writing stage, as controller/cloud_side.py runs them) against
  moves / the PATCH rate Ironic sustains in the same run (target <= 1.1x);
- the adoption of `--adopt` new unassigned nodes by one poll, as a rate against the same
  anchor (target >= 90%);
- the planner's first full assignment of N unassigned nodes to M members beside tooz's time
  for the same mapping (what a nova-compute with [ironic]peer_list computes).

The anchor: PATCHes of a node's shard on nodes outside the pool, `maxConcurrentWrites` (4) at
a time with no rate limit, measured right before and right after each writing phase (their
mean is that phase's anchor: the machine's load drifts). The operator runs with
writesPerSecond 1000 (the CRD's maximum) so that its own throttle (default 20/s, about what
Ironic takes here) does not hide its overhead, and re-reads every 40 writes, as it does at the
default 20/s (`recheck_seconds`).

Usage: .venv/bin/python bench/scale_bench.py [--nodes N] [--members M] [--adopt K]
(`make bench-scale`; many minutes, not in CI)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testbed, run as a script

POOL = "scale"
ANCHOR_CLASS = "scale-anchor"
ANCHOR_WRITES = 200
ANCHOR_SHARDS = ("anchor-a", "anchor-b")
BATCH = 40  # writes between two bulk re-reads, as at the default writesPerSecond 20
CONCURRENT_WRITES = 4
WRITES_PER_SECOND = 1000.0
FAILED = 7
TOOZ_PARTITIONS = 2**5


# ---- the operator's side, in its own process ---------------------------------------------------

def rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB: now, and the peak so far."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


def operator_side(service_json: str, nodes: int, members: int, adopt: int) -> dict:
    """Every operator phase, as the operator runs it; returns the measurements."""
    import ironic_shard_operator.controller.runner  # noqa: F401 - the operator's own imports (kopf, ...)
    from ironic_shard_operator.controller.ironic_cycle import ObservationMemory, run_cycle
    from ironic_shard_operator.core.model import Member, PoolSpec
    from testbed.ironic_service import IronicService, seed_nodes_directly_in_db

    raw = json.loads(service_json)
    service = IronicService(Path(raw["state_dir"]), raw["url"], raw["clouds_yaml"], raw["cloud_name"])
    adapter = service.adapter(POOL, max_concurrent_writes=CONCURRENT_WRITES,
                              writes_per_second=WRITES_PER_SECOND, recheck_seconds=BATCH / WRITES_PER_SECOND)
    anchor_nodes = [n.uuid for n in service.adapter(ANCHOR_CLASS).list_nodes() if n.shard is None]
    anchors = iter(ANCHOR_SHARDS * 2)
    adapter.check()
    spec = PoolSpec(POOL, replicas=members)
    ready = [Member(f"{POOL}-{i}", ready=True) for i in range(members)]
    out: dict = {}

    def poll(memory, members_now, paused=True):
        report = run_cycle(adapter, spec, members_now, memory=memory, paused=paused)
        return report

    # Before: every poll lists (no memory), plans; nothing moves in a converged pool.
    before = [poll(None, ready) for _ in range(2)]
    out["before"] = {"requests": before[-1].ironic_requests,
                     "seconds": statistics.mean(r.duration_seconds for r in before)}
    # After: the first poll lists in full (a full observation), the next ones are steady.
    memory = ObservationMemory()
    first = poll(memory, ready)
    out["full"] = {"requests": first.ironic_requests, "seconds": first.duration_seconds,
                   "reason": first.full_listing}
    steady = [poll(memory, ready) for _ in range(5)]
    assert all(r.full_listing is None for r in steady), [r.full_listing for r in steady]
    out["after"] = {"requests": max(r.ironic_requests for r in steady),
                    "seconds": statistics.median(r.duration_seconds for r in steady)}
    out["rss_steady"] = rss_mib()

    # One member's failure past its grace: plan stage, then the writing stage (cloud_side.py).
    failed = f"{POOL}-{FAILED}"
    down = [Member(m.name, ready=False, since=time.time() - 3600) if m.name == failed else m for m in ready]
    rate_before = anchor_rate(service, anchor_nodes, next(anchors))
    writes = adapter.writes_made
    started = time.perf_counter()
    planned = poll(memory, down)
    wrote = run_cycle(adapter, spec, down, memory=memory)
    seconds = time.perf_counter() - started
    out["failure"] = {"anchor": (rate_before, anchor_rate(service, anchor_nodes, next(anchors))),
                      "seconds": seconds, "moves": planned.moves_planned,
                      "applied": wrote.moves_applied, "writes": adapter.writes_made - writes,
                      "plan_stage_seconds": planned.duration_seconds,
                      "write_stage_seconds": wrote.duration_seconds,
                      "requests": planned.ironic_requests + wrote.ironic_requests,
                      "observe_requests": planned.observe_requests + wrote.observe_requests,
                      "listing": planned.full_listing}
    relisted = poll(memory, down)  # after its own writes: one full listing
    assert relisted.full_listing is not None and relisted.moves_planned == 0

    # New nodes arrive unassigned: one poll adopts them.
    seed_nodes_directly_in_db(service, adopt, resource_class=POOL)
    rate_before = anchor_rate(service, anchor_nodes, next(anchors))
    writes = adapter.writes_made
    started = time.perf_counter()
    planned = poll(memory, down)
    wrote = run_cycle(adapter, spec, down, memory=memory)
    seconds = time.perf_counter() - started
    out["adoption"] = {"anchor": (rate_before, anchor_rate(service, anchor_nodes, next(anchors))),
                       "seconds": seconds, "moves": planned.moves_planned,
                       "applied": wrote.moves_applied, "writes": adapter.writes_made - writes,
                       "requests": planned.ironic_requests + wrote.ironic_requests,
                       "listing": planned.full_listing}
    out["rss_end"] = rss_mib()
    return out


# ---- the benchmark's side ------------------------------------------------------------------------

def anchor_rate(service, uuids: list[str], value: str) -> float:
    """Shard PATCHes per second Ironic sustains, CONCURRENT_WRITES at a time, no rate limit."""
    session = service.connection().session
    url = f"{service.url}/v1/nodes/"
    headers = {"X-OpenStack-Ironic-API-Version": "1.82"}

    def patch(node: str) -> None:
        response = session.request(url + node, "PATCH", headers=headers, raise_exc=False,
                                   json=[{"op": "add", "path": "/shard", "value": value}])
        assert response.status_code == 200, response.text

    started = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENT_WRITES) as pool:
        list(pool.map(patch, uuids))
    return len(uuids) / (time.perf_counter() - started)


def converge_directly(service, nodes: int, members: int) -> float:
    """Seed `nodes` nodes of the pool and give them our planner's owners, in the database."""
    from ironic_shard_operator.core.model import Member, Node, Observation, PoolSpec
    from ironic_shard_operator.core.planner import owners_after, plan
    from testbed.ironic_service import assign_shards_directly_in_db, seed_nodes_directly_in_db

    started = time.perf_counter()
    uuids = seed_nodes_directly_in_db(service, nodes, resource_class=POOL)
    fresh = tuple(Node(u, provision_state="available") for u in uuids)
    decision = plan(Observation(PoolSpec(POOL, replicas=members),
                                tuple(Member(f"{POOL}-{i}", ready=True) for i in range(members)), fresh, 0.0))
    assign_shards_directly_in_db(service, owners_after(fresh, decision.moves))
    return time.perf_counter() - started


def first_assignment(nodes: int, members: int, repeat: int = 3) -> dict[str, float]:
    """The planner's first full assignment (every node unassigned) and tooz's full mapping of
    the same nodes to the same members: best of `repeat`, seconds."""
    from tooz import hashring

    from ironic_shard_operator.core.model import Member, Node, Observation, PoolSpec
    from ironic_shard_operator.core.planner import plan

    rng = random.Random(42)
    uuids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(nodes)]
    names = [f"{POOL}-{i}" for i in range(members)]
    observation = Observation(PoolSpec(POOL, replicas=members), tuple(Member(n, True) for n in names),
                              tuple(Node(u) for u in uuids), 0.0)

    def tooz() -> dict[str, str]:
        ring = hashring.HashRing(names, partitions=TOOZ_PARTITIONS)
        return {u: next(iter(ring.get_nodes(u.encode()))) for u in uuids}

    def best(work) -> float:
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
        return min(times)

    return {"ours": best(lambda: plan(observation)), "tooz": best(tooz)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--members", type=int, default=200)
    parser.add_argument("--adopt", type=int, default=1000)
    parser.add_argument("--operator-side", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.operator_side:
        print(json.dumps(operator_side(args.operator_side, args.nodes, args.members, args.adopt)))
        return 0

    from testbed.ironic_service import running_ironic, seed_nodes_directly_in_db

    with tempfile.TemporaryDirectory(prefix="scale-bench-") as state, \
            running_ironic(Path(state) / "ironic", auth="http_basic") as service:
        seeded = converge_directly(service, args.nodes, args.members)
        seed_nodes_directly_in_db(service, ANCHOR_WRITES, resource_class=ANCHOR_CLASS)
        for shard in ANCHOR_SHARDS:  # the anchor's shard values exist all along: no news to the pool
            seed_nodes_directly_in_db(service, 1, resource_class=f"{ANCHOR_CLASS}-fixed", shard=shard)
        print(f"Ironic at {service.url}: {args.nodes:,} nodes over {args.members} members seeded in "
              f"{seeded:.0f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        coordinates = json.dumps({"state_dir": str(service.state_dir), "url": service.url,
                                  "clouds_yaml": service.clouds_yaml, "cloud_name": service.cloud_name})
        child = subprocess.run(
            [sys.executable, __file__, "--nodes", str(args.nodes), "--members", str(args.members),
             "--adopt", str(args.adopt), "--operator-side", coordinates],
            check=True, capture_output=True, text=True)
        measured = json.loads(child.stdout.strip().splitlines()[-1])
    ring = first_assignment(args.nodes, args.members)
    report(args, measured, ring)
    return 0


def report(args, m: dict, ring: dict[str, float]) -> None:
    failure, adoption = m["failure"], m["adoption"]
    failure_rate, adoption_anchor = statistics.mean(failure["anchor"]), statistics.mean(adoption["anchor"])
    failure_ideal = failure["applied"] / failure_rate
    adoption_rate = adoption["applied"] / adoption["seconds"]
    rows = [
        ("steady poll: Ironic requests", f"{m['before']['requests']}", f"{m['after']['requests']}"),
        ("steady poll: seconds (observe + plan)", f"{m['before']['seconds']:.2f}", f"{m['after']['seconds']:.2f}"),
    ]
    print(f"\n{args.nodes:,} nodes x {args.members} members, real Ironic; anchor: shard PATCHes "
          f"{CONCURRENT_WRITES} at a time, unthrottled, right before/after each writing phase\n")
    print(f"{'':40}{'before':>12}{'after':>12}")
    for label, a, b in rows:
        print(f"{label:40}{a:>12}{b:>12}")
    print()
    print(f"full observation (summary + listing + plan): {m['full']['requests']} requests, "
          f"{m['full']['seconds']:.1f} s")
    print(f"operator RSS: {m['rss_steady'][0]:.0f} MiB steady at {args.nodes:,} nodes, "
          f"peak {m['rss_end'][1]:.0f} MiB over the whole run (target <= 250)")
    print(f"member failure: {failure['applied']} of {failure['moves']} free nodes re-owned in "
          f"{failure['seconds']:.1f} s ({failure['observe_requests']} observation requests, "
          f"{failure['requests']} in all; listing: {failure['listing'] or 'none in full'}); at the "
          f"anchor's {failure_rate:.1f}/s ({failure['anchor'][0]:.1f} before, {failure['anchor'][1]:.1f} "
          f"after) {failure_ideal:.1f} s: {failure['seconds'] / failure_ideal:.2f}x (target <= 1.1); plan "
          f"stage {failure['plan_stage_seconds']:.1f} s, writing stage {failure['write_stage_seconds']:.1f} s")
    print(f"adoption of {args.adopt} new nodes: {adoption['applied']} written in {adoption['seconds']:.1f} s, "
          f"{adoption_rate:.1f}/s = {adoption_rate / adoption_anchor:.0%} of the anchor's "
          f"{adoption_anchor:.1f}/s ({adoption['anchor'][0]:.1f} before, {adoption['anchor'][1]:.1f} after; "
          f"target >= 90%; {adoption['requests']} requests; listing: {adoption['listing'] or 'none in full'})")
    print(f"first full assignment of {args.nodes:,} unassigned nodes to {args.members} members: planner "
          f"{ring['ours']:.2f} s, tooz map {ring['tooz']:.2f} s ({ring['ours'] / ring['tooz']:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
