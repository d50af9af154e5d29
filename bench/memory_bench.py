"""Memory of one pool's observation and plan at 100,000 nodes, vs holding the API's JSON.

The operator keeps no copy of Ironic between cycles: each cycle parses the `fields=` pages
into one observation (a `model.Node` per managed node, through the adapter's own
`node_from_api`) and makes one plan. The anchor, measured in the same run, is what a
straightforward adapter would hold instead: the parsed JSON documents themselves.
openstacksdk `Node` resources are shown too, measured on a sample and scaled: building one
costs milliseconds, so 100,000 of them would take many minutes — which is why the adapter
parses the raw API pages itself.

Usage: python bench/memory_bench.py [--nodes N] [--members M]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
import tracemalloc
import uuid

from openstack.baremetal.v1.node import Node as SdkNode

from ironic_shard_operator.adapters.ironic import node_from_api
from ironic_shard_operator.core.model import Member, Observation, PoolSpec
from ironic_shard_operator.core.planner import plan


def api_pages(count: int, members: int, page: int = 1000) -> list[str]:
    """What Ironic returns for `GET /v1/nodes?fields=...&limit=1000`, as response bodies."""
    rng = random.Random(7)
    documents = [{
        "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "shard": f"rack-a-{rng.randrange(members)}",
        "instance_uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if rng.random() < 0.3 else None,
        "provision_state": "active" if rng.random() < 0.3 else "available",
        "target_provision_state": None,
        "reservation": None,
    } for _ in range(count)]
    return [json.dumps({"nodes": documents[i:i + page]}) for i in range(0, count, page)]


def measured(build) -> tuple[int, int, object]:
    """(bytes still held by the result, peak bytes while building, the result)."""
    gc.collect()
    tracemalloc.start()
    result = build()
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return held, peak, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--members", type=int, default=200)
    parser.add_argument("--sdk-sample", type=int, default=2000,
                        help="openstacksdk Node resources actually built (then scaled)")
    args = parser.parse_args(argv)
    pages = api_pages(args.nodes, args.members)

    ours, ours_peak, nodes = measured(
        lambda: tuple(node_from_api(doc) for body in pages for doc in json.loads(body)["nodes"]))
    members = tuple(Member(f"rack-a-{i}", True, 0.0) for i in range(args.members + 1))
    joined = Observation(PoolSpec("rack-a", replicas=args.members + 1), members, nodes, 1e6)
    plan_held, plan_peak, result = measured(lambda: plan(joined))
    anchor, _, _ = measured(lambda: [doc for body in pages for doc in json.loads(body)["nodes"]])
    sample = json.loads(pages[0])["nodes"] * (args.sdk_sample // 1000 or 1)
    started = time.perf_counter()
    sdk, _, _ = measured(lambda: [SdkNode.existing(**doc) for doc in sample])
    scale = args.nodes / len(sample)
    sdk_seconds = (time.perf_counter() - started) * scale

    mib = 1024 * 1024
    print(f"{args.nodes} nodes, {args.members} members (+1 joining: {len(result.moves)} moves)")
    print(f"  observation (model.Node)   held {ours / mib:7.1f} MiB "
          f"({ours / args.nodes:4.0f} B/node), peak while parsing {ours_peak / mib:.1f} MiB")
    print(f"  plan                       held {plan_held / mib:7.1f} MiB, "
          f"peak {plan_peak / mib:.1f} MiB")
    print(f"  anchor: parsed API JSON    held {anchor / mib:7.1f} MiB "
          f"({anchor / args.nodes:4.0f} B/node)")
    print(f"  openstacksdk Node, scaled  held {sdk * scale / mib:7.1f} MiB "
          f"({sdk * scale / args.nodes:4.0f} B/node), ~{sdk_seconds:.0f} s to build")
    print(f"  ours / anchor: {ours / anchor:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
