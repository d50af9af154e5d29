"""The `ironic-shard-operator` command: one subcommand per job, each in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import simulate


# Subcommands with their own argument parsers: everything after the name is theirs.
# Imported on use, so `simulate` does not pay for kopf and openstacksdk.
FORWARDED = {
    "run": ("ironic_shard_operator.controller.runner",
            "run the operator (leader election, then the controller)"),
    "stand-in-compute": ("ironic_shard_operator.testing.standin",
                         "a FAKE nova-compute for the kind e2e: lists its shard, serves /healthz"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in FORWARDED:
        module = importlib.import_module(FORWARDED[argv[0]][0])
        return module.main(argv[1:])

    parser = argparse.ArgumentParser(
        prog="ironic-shard-operator",
        description="Run nova-compute (Ironic driver) as a sharded, self-healing pool.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (_, summary) in FORWARDED.items():
        commands.add_parser(name, help=summary, add_help=False)

    sim = commands.add_parser(
        "simulate", help="plan a membership change on synthetic nodes (for sizing)",
        description="Converge a synthetic pool, apply a change, and show what moves.")
    sim.add_argument("--pool", default="rack-a", help="pool name (default: rack-a)")
    sim.add_argument("--nodes", type=int, default=10000, help="managed Ironic nodes")
    sim.add_argument("--members", type=int, default=5, help="members before the change")
    sim.add_argument("--pinned", type=float, default=0.0,
                     help="fraction of nodes that carry an instance (0..1)")
    sim.add_argument("--fail", action="append", default=[], metavar="MEMBER",
                     help="a member that loses readiness past the grace (repeatable)")
    sim.add_argument("--join", type=int, default=0, help="members that join")
    sim.add_argument("--seed", type=int, default=0, help="seed for the synthetic node set")

    args = parser.parse_args(argv)
    if args.command == "simulate":
        try:
            print(simulate.run(simulate.Simulation(
                pool=args.pool, nodes=args.nodes, members=args.members,
                pinned_fraction=args.pinned, failed=tuple(args.fail),
                joining=args.join, seed=args.seed)))
        except ValueError as error:
            sim.error(str(error))
        return 0
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
