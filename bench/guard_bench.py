"""What guarding a free move costs, per move, against the real Ironic and the real Placement.

A free node moving away from a LIVE owner (a member joining, returning, rebalancing) can race a
build: Nova's scheduler claims the node in Placement, then the build sets instance_uuid in
Ironic. Issue 11 (item 5) asks to close that window and to measure each way of doing it.
Each option writes the same number of shard moves (--moves, default 100) through the
adapter's bounded writer (4 concurrent, 20 writes/s, as the operator runs it), on nodes of
its own, in one run:

- anchor: the batch's bulk re-read alone (one listing per batch, then the PATCHes): what the
  operator did before, and still does for moves away from a dead or absent owner;
- ironic: the per-node re-read of a guarded move (GET the node right before its PATCH);
- ironic+placement: that, and Placement's allocations of the node's provider (what the
  operator does now for guarded moves when the cloud has Placement);
- maintenance: fence the node with Ironic's maintenance flag around its write (set, PATCH
  the shard, unset: a racing build is refused by nova-compute and rescheduled), written
  sequentially by hand, since it is three writes where the others are one.

Printed: seconds, moves per second and milliseconds per move for each, and each one's cost
beside the anchor's.

Usage: .venv/bin/python bench/guard_bench.py [--moves N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testbed, run as a script

from ironic_shard_operator.adapters.ironic import Guard, IronicAdapter  # noqa: E402
from ironic_shard_operator.controller.ironic_cycle import placement_question  # noqa: E402
from ironic_shard_operator.core.model import Move, Selector  # noqa: E402
from testbed import nova_starter  # noqa: E402
from testbed.ironic_service import running_ironic, seed_nodes_directly_in_db  # noqa: E402
from testbed.nova_stack import NovaStack  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=100)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="guard-bench-"))
    state = nova_starter.start(work / "nova", owner_pid=os.getpid())
    try:
        stack = NovaStack(state)
        with running_ironic(work / "ironic", auth="noauth") as ironic:
            entry = stack.cloud_config()
            entry.pop("compute_api_version")
            entry |= {"baremetal_endpoint_override": ironic.url, "placement_endpoint_override": stack.placement_url}
            clouds_yaml = yaml.safe_dump({"clouds": {"c": entry}})

            def adapter(option: str) -> tuple[IronicAdapter, list[Move]]:
                nodes = seed_nodes_directly_in_db(ironic, args.moves, resource_class=f"bench-{option}",
                                                  shard="live-0")
                built = IronicAdapter.from_clouds_yaml(clouds_yaml, "c", selector=Selector(resource_class=f"bench-{option}"))
                built.check()
                return built, [Move(node, "live-0", "joined-1") for node in nodes]

            results = {}
            for option in ("anchor", "ironic", "ironic+placement"):
                ironic_adapter, moves = adapter(option.replace("+", "-"))
                observed = ironic_adapter.list_nodes()
                guard = None if option == "anchor" else Guard(
                    frozenset({"live-0"}), *(placement_question(ironic_adapter) if "placement" in option else ()))
                started, requests = time.monotonic(), ironic_adapter.requests_made
                applied = ironic_adapter.apply_moves(moves, observed, guard=guard)
                results[option] = (time.monotonic() - started, applied.applied,
                                   ironic_adapter.requests_made - requests)
            maintenance_adapter, moves = adapter("maintenance")
            started = time.monotonic()
            for move in moves:
                ironic.request("PUT", f"/nodes/{move.node_uuid}/maintenance", json={"reason": "shard move"})
                ironic.request("PATCH", f"/nodes/{move.node_uuid}",
                               json=[{"op": "add", "path": "/shard", "value": move.target}])
                ironic.request("DELETE", f"/nodes/{move.node_uuid}/maintenance")
            results["maintenance"] = (time.monotonic() - started, len(moves), 3 * len(moves))
    finally:
        nova_starter.stop(state)

    anchor_seconds = results["anchor"][0]
    print(f"\nGuarding {args.moves} free-node moves (real Ironic, real Placement, one run):")
    print(f"{'option':<18} {'seconds':>8} {'moves/s':>8} {'ms/move':>8} {'Ironic requests':>16} {'vs anchor':>10}")
    for option, (seconds, applied, requests) in results.items():
        print(f"{option:<18} {seconds:>8.2f} {applied / seconds:>8.1f} {1000 * seconds / applied:>8.1f} "
              f"{requests:>16} {seconds / anchor_seconds:>9.2f}x")


if __name__ == "__main__":
    main()
