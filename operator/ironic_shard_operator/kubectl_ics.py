"""`kubectl ics`: a pool at a glance, pause and resume, preflight (a kubectl plugin).

Installed as the console script `kubectl-ics`, so `kubectl ics status rack-a` runs it.
It talks to the cluster through the user's kubectl (adapters/kubectl.py: the same
kubeconfig, context and namespace as kubectl) and writes only what the command says:
`status` and `preflight` read; `pause` and `resume` merge-patch `spec.paused` and nothing
else. The screen of `status` is rendered by pure functions (`render_status`) from the
pool's CR and its Events.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ironic_shard_operator.adapters.kubectl import RESOURCE, Kubectl, KubectlError, NotFound
from ironic_shard_operator.core import nova_policy

RECENT_EVENTS = 8
LAST_MOVES = 3


def main(argv: Sequence[str] | None = None) -> int:
    # kubectl's connection flags, accepted before or after the command as kubectl accepts them.
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("-n", "--namespace", default=argparse.SUPPRESS,
                            help="the pool's namespace (default: the context's)")
    connection.add_argument("--kubeconfig", default=argparse.SUPPRESS,
                            help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    connection.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context (default: the current one)")
    parser = argparse.ArgumentParser(
        prog="kubectl ics", parents=[connection],
        description="IronicComputeShard pools: status, pause, resume, preflight.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", parents=[connection],
                        help="members, nodes, Nova, handover, last moves and Events").add_argument("pool")
    commands.add_parser("pause", parents=[connection],
                        help="set spec.paused: the operator stops writing, keeps reporting").add_argument("pool")
    commands.add_parser("resume", parents=[connection], help="clear spec.paused").add_argument("pool")
    check = commands.add_parser("preflight", parents=[connection],
                                help="check the pool's cloud and Secrets from here, and show the operator's "
                                     "own Preflight condition")
    check.add_argument("pool", nargs="?", help="a pool in the cluster")
    check.add_argument("-f", "--filename", help="a pool's manifest not applied yet (its Secrets are read "
                                                "from the cluster): check before `kubectl apply`")
    check.add_argument("--json", action="store_true", help="the checks as JSON")
    check.add_argument("--skip-image", action="store_true", help="do not ask the image's registry")
    args = parser.parse_args(argv)
    kubectl = Kubectl(kubeconfig=getattr(args, "kubeconfig", None), context=getattr(args, "context", None),
                      namespace=getattr(args, "namespace", None))
    try:
        if args.command == "status":
            pool = kubectl.get_pool(args.pool)
            print(render_status(pool, kubectl.events_of("IronicComputeShard", args.pool)))
            return 0
        if args.command in ("pause", "resume"):
            return _set_paused(kubectl, args.pool, args.command == "pause")
        if (args.pool is None) == (args.filename is None):
            parser.error("preflight takes a POOL in the cluster or -f MANIFEST, one of the two")
        body = kubectl.get_pool(args.pool) if args.pool else manifest_pool(kubectl, args.filename)
        return _preflight(kubectl, body, as_json=args.json, check_image=not args.skip_image)
    except NotFound as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KubectlError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _set_paused(kubectl: Kubectl, pool: str, paused: bool) -> int:
    current = kubectl.get_pool(pool)
    if bool((current.get("spec") or {}).get("paused")) == paused:
        print(f"ironiccomputeshard/{pool} is already {'paused' if paused else 'running (not paused)'}")
        return 0
    kubectl.merge_patch(RESOURCE, pool, {"spec": {"paused": paused}})
    print(f"ironiccomputeshard/{pool} " + (
        "paused: the operator makes no writes to Ironic, Nova or Kubernetes for it and keeps reporting"
        if paused else "resumed: the operator acts on it again"))
    return 0


def manifest_pool(kubectl: Kubectl, path: str) -> dict[str, Any]:
    """The IronicComputeShard of a manifest file, in the namespace kubectl apply would use."""
    import yaml

    try:
        with open(path) as file:
            found = [d for d in yaml.safe_load_all(file) if isinstance(d, dict) and d.get("kind") == "IronicComputeShard"]
    except (OSError, yaml.YAMLError) as error:
        raise KubectlError(f"cannot read {path}: {error}") from None
    if len(found) != 1:
        raise KubectlError(f"{path} holds {len(found)} IronicComputeShard documents; preflight checks one")
    body = found[0]
    meta = body.setdefault("metadata", {})
    meta["namespace"] = kubectl.namespace or meta.get("namespace") or kubectl.current_namespace()
    return body


def _preflight(kubectl: Kubectl, body: Mapping[str, Any], *, as_json: bool, check_image: bool) -> int:
    from ironic_shard_operator.adapters.preflight import run_checks
    from ironic_shard_operator.core import preflight
    from ironic_shard_operator.core.spec import InvalidSpec

    pool_name = (body.get("metadata") or {}).get("name")
    try:
        inputs = pool_inputs(kubectl, body, check_image=check_image)
    except InvalidSpec as error:
        raise KubectlError(f"the pool's spec is invalid: {error}") from None
    checks = run_checks(inputs)
    if as_json:
        print(preflight.as_json(checks))
    else:
        print(f"Preflight of ironiccomputeshard/{pool_name}, run from this machine with the pool's Secrets:")
        print(preflight.table(checks))
        condition = _condition(body, "Preflight")
        if condition:
            print(f"\nThe operator's own checks (from inside the cluster): Preflight={condition.get('status')} "
                  f"{condition.get('reason', '')}: {condition.get('message', '')}")
    return 1 if preflight.any_failed(checks) else 0


def pool_inputs(kubectl: Kubectl, body: Mapping[str, Any], *, check_image: bool = True) -> Any:
    """Preflight's inputs for a pool's CR: its Secrets read through kubectl (a Secret or key
    that cannot be read counts as missing: its checks fail and say so)."""
    from ironic_shard_operator.adapters.preflight import Inputs
    from ironic_shard_operator.core.spec import read_pool

    pool = read_pool(body)
    namespace = Kubectl(kubectl.kubeconfig, kubectl.context, pool.namespace, kubectl.binary)

    def text(ref: Any) -> str | None:
        """The Secret's text, or None with the reason on stderr (its checks then fail)."""
        try:
            found = namespace.secret_text(ref.name, ref.key)
        except KubectlError as error:
            print(f"note: Secret {pool.namespace}/{ref.name} cannot be read: {error}", file=sys.stderr)
            return None
        if found is None:
            print(f"note: Secret {pool.namespace}/{ref.name} has no key {ref.key}", file=sys.stderr)
        return found

    handover = pool.handover
    return Inputs(clouds_yaml=text(pool.cloud), cloud_name=pool.cloud_name, nova_conf=text(pool.nova_config),
                  selector=pool.selector, handover=handover is not None,
                  handover_nova_conf=text(handover.nova_manage_config) if handover else None,
                  image=pool.pod.image, check_image=check_image)


# --- the status screen (pure) ----------------------------------------------------------


def _forced_down_cell(member: str, forced: set[str], kept: set[str]) -> str:
    """yes / no, and `yes (kept)` for a flag the operator leaves alone (not set in a failure)."""
    return "yes (kept)" if member in kept else "yes" if member in forced else "no"


def render_status(pool: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> str:
    """One screen: the pool's line, its conditions, a row per member (ready, phase, nodes,
    pinned, forced down in Nova), node counts, Nova, handover progress when the status has
    it, the last moves and the recent Events."""
    meta, spec, status = pool.get("metadata") or {}, pool.get("spec") or {}, pool.get("status") or {}
    nova = status.get("nova") or {}
    forced, kept = set(nova.get("forcedDown") or ()), nova_policy.left_forced_down(nova)
    lines = [f"ironiccomputeshard/{meta.get('name')} in {meta.get('namespace')}: "
             f"{status.get('readyReplicas', 0)}/{status.get('desiredReplicas', spec.get('replicas', '?'))} "
             f"members ready ({status.get('desiredReason', 'not planned yet')})"
             + ("  PAUSED (spec.paused: no writes)" if spec.get("paused") else "")]
    for condition in status.get("conditions") or ():
        lines.append(f"  {condition.get('type', '?'):<17}{condition.get('status', '?'):<6}"
                     f"{condition.get('reason', '')}: {_short(condition.get('message', ''), 90)}")
    lines += ["", f"{'MEMBER':<20}{'READY':<7}{'PHASE':<12}{'NODES':>6}{'PINNED':>8}  {'FORCED_DOWN':<12}SINCE"]
    for member in status.get("members") or ():
        name = member.get("name", "?")
        lines.append(f"{name:<20}{'yes' if member.get('ready') else 'no':<7}{member.get('phase', '?'):<12}"
                     f"{member.get('nodes', 0):>6}{member.get('pinnedNodes', 0):>8}  "
                     f"{_forced_down_cell(name, forced, kept):<12}{member.get('since', '')}")
        if member.get("message"):
            lines.append(f"{'':<20}{_short(member['message'], 90)}")
    if not status.get("members"):
        lines.append("(no members yet)")
    nodes = status.get("nodes")
    if nodes:
        lines += ["", "NODES  " + "  ".join(f"{key} {nodes.get(key, 0)}" for key in
                                             ("total", "free", "pinned", "unassigned", "pendingMoves", "misplaced"))]
    if nova:
        findings = ", ".join(f"{k} {v}" for k, v in sorted((nova.get("findings") or {}).items()) if v) or "none"
        lines += ["", f"NOVA   {nova.get('state', '?')}: {_short(nova.get('message', ''), 80)}",
                  f"       findings: {findings}; forced down: {', '.join(sorted(forced)) or 'none'}"]
        lines += [f"       waiting: {w}" for w in nova.get("waiting") or ()]
    handover = status.get("handover")
    if handover:
        lines += ["", "HANDOVER " + _handover(handover)]
    moves = [e for e in events if e.get("reason") == "MovedNodes"]
    lines += ["", "LAST MOVES"]
    lines += [f"  {_when(e)}  {e.get('message', '')}" for e in _newest(moves)[:LAST_MOVES]] or ["  none"]
    lines += ["", "RECENT EVENTS"]
    lines += [f"  {_when(e)}  {e.get('type', ''):<8}{e.get('reason', ''):<22}{_short(e.get('message', ''), 80)}"
              for e in _newest(events)[:RECENT_EVENTS]] or ["  none"]
    return "\n".join(lines)


def _handover(section: Mapping[str, Any]) -> str:
    """status.handover in one line, whatever keys it carries (its shape is the handover's)."""
    parts = []
    for key, value in section.items():
        if isinstance(value, (list, tuple)):
            parts.append(f"{key}: {len(value)}")
        elif isinstance(value, Mapping):
            parts.append(f"{key}: " + ", ".join(f"{k} {v}" for k, v in value.items()))
        else:
            parts.append(f"{key}: {value}")
    return "; ".join(parts)


def _newest(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(events, key=_when, reverse=True)


def _when(event: Mapping[str, Any]) -> str:
    return event.get("lastTimestamp") or event.get("eventTime") or \
        (event.get("metadata") or {}).get("creationTimestamp") or ""


def _condition(pool: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (pool.get("status") or {}).get("conditions") or () if c.get("type") == kind), None)


def _short(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 1] + "…"


if __name__ == "__main__":
    sys.exit(main())
