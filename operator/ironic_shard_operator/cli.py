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

    check = commands.add_parser(
        "preflight", help="check a pool's cloud, credentials and nova.conf before (or while) it runs",
        description="Check Ironic, Nova, Placement, the nova.conf files and the member image; print a "
                    "table of pass/warn/fail with a fix for each; exit 1 on any fail. Give the files, "
                    "or --pool NAMESPACE/NAME to read them from the pool's Secrets (your kubeconfig).")
    check.add_argument("--pool", metavar="NAMESPACE/NAME", help="read everything from this pool and its Secrets")
    check.add_argument("--kubeconfig", help="with --pool: kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    check.add_argument("--context", help="with --pool: kubeconfig context")
    check.add_argument("--clouds-yaml", metavar="FILE", help="the clouds.yaml of spec.cloud")
    check.add_argument("--cloud", metavar="NAME", help="the cloud's name in it (spec.cloud.cloudName)")
    check.add_argument("--nova-conf", metavar="FILE", help="the base nova.conf of spec.novaConfig")
    check.add_argument("--handover-nova-conf", metavar="FILE",
                       help="the nova.conf of spec.handover.novaManageConfig, when handover is used")
    check.add_argument("--resource-class", help="spec.selector.resourceClass (the node the policy is proved on)")
    check.add_argument("--conductor-group", help="spec.selector.conductorGroup")
    check.add_argument("--image", help="the member image (spec.image)")
    check.add_argument("--skip-image", action="store_true", help="do not ask the image's registry")
    check.add_argument("--json", action="store_true", help="the checks as JSON")

    args = parser.parse_args(argv)
    if args.command == "preflight":
        return _preflight(check, args)
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


def _preflight(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`preflight`: the checks of adapters/preflight.py on files, or on a pool's Secrets."""
    from pathlib import Path

    from ironic_shard_operator.adapters.user_cluster import ClusterError, UserCluster
    from ironic_shard_operator.adapters.preflight import quiet_client_logs, run_checks
    from ironic_shard_operator.core.preflight import Inputs
    from ironic_shard_operator.core import preflight
    from ironic_shard_operator.core.model import Selector
    from ironic_shard_operator.core.spec import InvalidSpec
    from ironic_shard_operator.kubectl_ics import pool_inputs

    def read(path: str | None) -> str | None:
        if path is None:
            return None
        try:
            return Path(path).read_text()
        except OSError as error:
            parser.error(f"cannot read {path}: {error.strerror}")
        return None

    if args.pool:
        namespace, _, name = args.pool.rpartition("/")
        if not namespace or not name:
            parser.error("--pool takes NAMESPACE/NAME")
        cluster = UserCluster(kubeconfig=args.kubeconfig, context=args.context, namespace_flag=namespace)
        try:
            inputs = pool_inputs(cluster, cluster.get_pool(name), check_image=not args.skip_image)
        except (ClusterError, InvalidSpec) as error:
            print(f"error: pool {args.pool}: {error}", file=sys.stderr)
            return 2
    else:
        if not args.clouds_yaml or not args.cloud:
            parser.error("give --clouds-yaml FILE and --cloud NAME (and --nova-conf FILE), or --pool NAMESPACE/NAME")
        inputs = Inputs(clouds_yaml=read(args.clouds_yaml), cloud_name=args.cloud, nova_conf=read(args.nova_conf),
                        selector=Selector(resource_class=args.resource_class or None,
                                          conductor_group=args.conductor_group or None),
                        handover=args.handover_nova_conf is not None,
                        handover_nova_conf=read(args.handover_nova_conf), image=args.image,
                        check_image=not args.skip_image)
    quiet_client_logs()
    checks = run_checks(inputs)
    print(preflight.as_json(checks) if args.json else preflight.table(checks))
    return 1 if preflight.any_failed(checks) else 0


if __name__ == "__main__":
    sys.exit(main())
