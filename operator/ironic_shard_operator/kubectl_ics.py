"""`kubectl ics`: IronicComputeShard pools from the command line (a kubectl plugin).

Installed as the console script `kubectl-ics`, so `kubectl ics status rack-a` runs it, and as
`kubectl_complete-ics`, which kubectl (1.26+) runs to complete `kubectl ics <TAB>`. It reads the
cluster through the official `kubernetes` client with the user's kubeconfig
(adapters/user_cluster.py) and writes only what a command says:

- `status`, `report` and `preflight` read;
- `pause` / `resume` merge-patch spec.paused, `retire` spec.replicas and spec.retireMembers,
  `fence` / `unfence` spec.fencedMembers (core/member_commands.py decides the patch), each with
  the pool's resourceVersion, so a pool changed meanwhile is refused, not overwritten; then the
  pool is read again and the change decided again from what it is now (`CONFLICT_ATTEMPTS` in
  all): the operator writes the pool's status every cycle, and each write changes its version.

What is shown is rendered by pure functions from what was read (`render_status`,
`render_pools`, `summary`, `bundle_files`, `completions`).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import textwrap
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ironic_shard_operator.adapters.user_cluster import KIND, RESOURCE, ClusterError, Conflict, UserCluster
from ironic_shard_operator.core import member_commands, nova_policy
from ironic_shard_operator.core.lease import LEASE_NAME

RECENT_EVENTS = 8
LAST_MOVES = 3
WIDTH = 100  # the status screen's lines wrap here, never cut
LOG_TAIL_LINES = 200

COMMANDS = {
    "status": "a pool at a glance (members, conditions in full, nodes, Nova, the operator's Lease, last "
              "cycle, Events); every pool of the namespace when no POOL is given",
    "report": "write a debug bundle of a pool (a zip: the CR and its status, Events, member pods, handover "
              "and host-mapping Jobs, their log tails, the operator's log tail, the names of its Secrets, never "
              "their values)",
    "retire": "retire one member: spec.replicas one lower and the member named in spec.retireMembers, so that "
              "it is the one whose nodes are handed over and that is removed",
    "fence": "take a member out of service: the operator deletes its pod and creates none until it is "
             "unfenced (spec.fencedMembers); it is then handled as a failed member",
    "unfence": "put a fenced member back in service: the operator creates its pod again",
    "pause": "set spec.paused: the operator stops writing for the pool and keeps reporting",
    "resume": "clear spec.paused: the operator acts on the pool again",
    "preflight": "check a pool's cloud and Secrets from here (Ironic, its policy, Nova, Placement, nova.conf, "
                 "the image) and show the operator's own Preflight condition",
}


def parser() -> argparse.ArgumentParser:
    """The command line: every command and argument with its help."""
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("-n", "--namespace", default=argparse.SUPPRESS,
                            help="the pool's namespace (default: the kubeconfig context's)")
    connection.add_argument("--kubeconfig", default=argparse.SUPPRESS,
                            help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    connection.add_argument("--context", default=argparse.SUPPRESS,
                            help="kubeconfig context (default: the current one)")
    top = argparse.ArgumentParser(
        prog="kubectl ics", parents=[connection],
        description="IronicComputeShard pools: " + ", ".join(COMMANDS) + ". `kubectl ics COMMAND --help` "
                    "says more. Shell completion: put kubectl_complete-ics (installed with this command) on "
                    "PATH and use kubectl's own completion (kubectl 1.26+).")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, parents=[connection], help=COMMANDS[name], description=COMMANDS[name])

    operator_ns = dict(metavar="NAMESPACE", help="where the operator runs (its Lease ironic-shard-operator); "
                                                 "default: found by name in every namespace")
    status = command("status")
    status.add_argument("pool", nargs="?", metavar="POOL", help="the pool; without it, every pool of the namespace")
    status.add_argument("-A", "--all-namespaces", action="store_true", help="every pool of every namespace")
    status.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                        help="text (default), or the same facts as JSON or YAML for scripts")
    status.add_argument("--operator-namespace", **operator_ns)
    report = command("report")
    report.add_argument("pool", metavar="POOL", help="the pool to report on")
    report.add_argument("-f", "--file", metavar="FILE",
                        help="the zip file to write (default: report-ics-POOL-UTCTIME.zip here)")
    report.add_argument("--tail-lines", type=int, default=LOG_TAIL_LINES, metavar="N",
                        help=f"the last N lines of each log (default {LOG_TAIL_LINES})")
    report.add_argument("--operator-namespace", **operator_ns)
    for name in ("retire", "fence", "unfence"):
        command(name).add_argument("member", metavar="MEMBER", help="a member, e.g. rack-a-1 (of pool rack-a)")
    for name in ("pause", "resume"):
        command(name).add_argument("pool", metavar="POOL", help="the pool")
    check = command("preflight")
    check.add_argument("pool", nargs="?", metavar="POOL", help="a pool in the cluster")
    check.add_argument("-f", "--filename", metavar="FILE", help="a pool's manifest not applied yet (its Secrets are "
                                                                "read from the cluster): check before `kubectl apply`")
    check.add_argument("--json", action="store_true", help="the checks as JSON")
    check.add_argument("--skip-image", action="store_true", help="do not ask the image's registry")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    cluster = UserCluster(kubeconfig=getattr(args, "kubeconfig", None), context=getattr(args, "context", None),
                          namespace_flag=getattr(args, "namespace", None))
    try:
        if args.command == "status":
            return _status(cluster, args)
        if args.command == "report":
            return _report(cluster, args)
        if args.command in ("pause", "resume"):
            return _set_paused(cluster, args.pool, args.command == "pause")
        if args.command in ("retire", "fence", "unfence"):
            return _member_command(cluster, args.command, args.member)
        if (args.pool is None) == (args.filename is None):
            top.error("preflight takes a POOL in the cluster or -f MANIFEST, one of the two")
        body = cluster.get_pool(args.pool) if args.pool else manifest_pool(cluster, args.filename)
        return _preflight(cluster, body, as_json=args.json, check_image=not args.skip_image)
    except member_commands.Refused as refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


# --- status -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OperatorView:
    """The operator's leader Leases found (one per installation), or why none could be read."""

    leases: tuple[Mapping[str, Any], ...] = ()
    error: str = ""


def _operator(cluster: UserCluster, namespace: str | None) -> OperatorView:
    try:
        return OperatorView(tuple(cluster.operator_leases(namespace)))
    except ClusterError as error:
        return OperatorView(error=str(error))


def _status(cluster: UserCluster, args: argparse.Namespace) -> int:
    operator, now = _operator(cluster, args.operator_namespace), time.time()
    if args.pool is not None:
        pool = cluster.get_pool(args.pool)
        events = cluster.events_of(KIND, args.pool)
        if args.output == "text":
            print(render_status(pool, events, operator, now))
        else:
            print(_dump(summary(pool, events, operator), args.output))
        return 0
    pools = cluster.list_pools(all_namespaces=args.all_namespaces)
    if args.output == "text":
        print(render_pools(pools, operator, now, all_namespaces=args.all_namespaces,
                           namespace=None if args.all_namespaces else cluster.namespace))
    else:
        print(_dump({"pools": [summary(p, None, None) for p in pools], "operator": _operator_facts(operator)},
                    args.output))
    return 0


def _dump(document: Any, output: str) -> str:
    if output == "json":
        return json.dumps(document, indent=2)
    import yaml

    return yaml.safe_dump(document, sort_keys=False).rstrip()


def summary(pool: Mapping[str, Any], events: Sequence[Mapping[str, Any]] | None,
            operator: OperatorView | None) -> dict[str, Any]:
    """What `status -o json|yaml` prints of a pool: the facts of the text screen."""
    meta, spec, status = pool.get("metadata") or {}, pool.get("spec") or {}, pool.get("status") or {}
    out: dict[str, Any] = {
        "name": meta.get("name"), "namespace": meta.get("namespace"),
        "generation": meta.get("generation"), "observedGeneration": status.get("observedGeneration"),
        "lastCycleTime": status.get("lastCycleTime"), "paused": bool(spec.get("paused")),
        "readyReplicas": status.get("readyReplicas", 0),
        "desiredReplicas": status.get("desiredReplicas", spec.get("replicas")),
        "desiredReason": status.get("desiredReason"),
        "retireMembers": list(spec.get("retireMembers") or ()), "fencedMembers": list(spec.get("fencedMembers") or ()),
        "conditions": [{k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
                       for c in status.get("conditions") or ()],
        "members": list(status.get("members") or ()), "nodes": status.get("nodes") or {},
    }
    for key in ("nova", "handover", "hostMapping"):
        if status.get(key):
            out[key] = status[key]
    if events is not None:
        out["events"] = [{k: e.get(k) for k in ("type", "reason", "message", "count")} | {"time": _when(e)}
                         for e in _newest(events)]
    if operator is not None:
        out["operator"] = _operator_facts(operator)
    return out


def _operator_facts(operator: OperatorView) -> dict[str, Any]:
    return {"leases": [{"namespace": (lease.get("metadata") or {}).get("namespace"),
                        "holder": (lease.get("spec") or {}).get("holderIdentity"),
                        "renewTime": (lease.get("spec") or {}).get("renewTime")} for lease in operator.leases],
            **({"error": operator.error} if operator.error else {})}


def _tracker_cell(member: Mapping[str, Any]) -> str:
    """A member's resource-tracker interval and the pass its nodes are expected to take ("10s/1.0s":
    Nova waits 10 s after each pass of about 1.0 s); "-" before the operator reported one."""
    interval = member.get("updateResourcesIntervalSeconds")
    if interval is None:
        return "-"
    return f"{interval:g}s/{member.get('expectedPassSeconds', 0):g}s"


def _forced_down_cell(member: str, forced: set[str], kept: set[str]) -> str:
    """yes / no, and `yes (kept)` for a flag the operator leaves alone (not set in a failure)."""
    return "yes (kept)" if member in kept else "yes" if member in forced else "no"


def render_status(pool: Mapping[str, Any], events: Sequence[Mapping[str, Any]],
                  operator: OperatorView | None = None, now: float | None = None) -> str:
    """One screen: the pool's line, the operator and the pool's last cycle, its conditions (their
    messages in full, wrapped), a row per member (ready, phase, nodes, pinned, forced down in
    Nova; its host's cell mapping unless mapped), node counts, Nova, handover progress when the
    status has it, the last moves and the recent Events."""
    meta, spec, status = pool.get("metadata") or {}, pool.get("spec") or {}, pool.get("status") or {}
    lines = _pool_lines(meta, spec, status, operator, now)
    lines += _member_lines(status)
    lines += _cloud_lines(status)
    lines += _event_lines(events)
    return "\n".join(lines)


def _pool_lines(meta: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any],
                operator: OperatorView | None, now: float | None) -> list[str]:
    """The pool's line, the operator, the last cycle, the fenced members, the conditions."""
    lines = [f"ironiccomputeshard/{meta.get('name')} in {meta.get('namespace')}: "
             f"{status.get('readyReplicas', 0)}/{status.get('desiredReplicas', spec.get('replicas', '?'))} "
             f"members ready ({status.get('desiredReason', 'not planned yet')})"
             + ("  PAUSED (spec.paused: no writes)" if spec.get("paused") else "")]
    if operator is not None:
        lines += _wrapped(f"operator: {_leader(operator, now)}", "  ")
    lines += _wrapped(f"last cycle: {_cycle(meta, status, now)}", "  ")
    fenced = list(spec.get("fencedMembers") or ())
    if fenced:
        lines += _wrapped(f"fenced (spec.fencedMembers): {', '.join(fenced)}", "  ")
    lines.append("")
    for condition in status.get("conditions") or ():
        lines.append(f"  {condition.get('type', '?'):<17}{condition.get('status', '?'):<6}{condition.get('reason', '')}")
        if condition.get("message"):
            lines += _wrapped(str(condition["message"]), " " * 6, " " * 6)
    return lines


def _member_lines(status: Mapping[str, Any]) -> list[str]:
    """A row per member, with why it is counted out, its message and its cell mapping unless mapped."""
    nova = status.get("nova") or {}
    forced, kept = set(nova.get("forcedDown") or ()), nova_policy.left_forced_down(nova)
    unmapped = {e.get("member"): e for e in (status.get("hostMapping") or {}).get("members") or ()
                if e.get("state") != "Mapped"}
    lines = ["", f"{'MEMBER':<20}{'READY':<7}{'PHASE':<12}{'NODES':>6}{'PINNED':>8}  {'FORCED_DOWN':<12}"
                 f"{'TRACKER':<12}SINCE"]
    for member in status.get("members") or ():
        name = member.get("name", "?")
        lines.append(f"{name:<20}{'yes' if member.get('ready') else 'no':<7}{member.get('phase', '?'):<12}"
                     f"{member.get('nodes', 0):>6}{member.get('pinnedNodes', 0):>8}  "
                     f"{_forced_down_cell(name, forced, kept):<12}{_tracker_cell(member):<12}{member.get('since', '')}")
        if member.get("countedOut"):
            lines += _wrapped(f"counted out: {member['countedOut']}", " " * 20, " " * 20)
        if member.get("message"):
            lines += _wrapped(str(member["message"]), " " * 20, " " * 20)
        if name in unmapped:
            lines += _wrapped(f"cell mapping {unmapped[name].get('state')}: {unmapped[name].get('message', '')}",
                              " " * 20, " " * 20)
    if not status.get("members"):
        lines.append("(no members yet)")
    return lines


def _cloud_lines(status: Mapping[str, Any]) -> list[str]:
    """Node counts, Nova's section and the handover progress, each when the status has it."""
    lines: list[str] = []
    nodes, nova = status.get("nodes"), status.get("nova") or {}
    if nodes:
        lines += ["", "NODES  " + "  ".join(f"{key} {nodes.get(key, 0)}" for key in
                                             ("total", "free", "pinned", "unassigned", "pendingMoves", "misplaced"))]
    if nova:
        forced = set(nova.get("forcedDown") or ())
        findings = ", ".join(f"{k} {v}" for k, v in sorted((nova.get("findings") or {}).items()) if v) or "none"
        lines += [""] + _wrapped(f"NOVA   {nova.get('state', '?')}: {nova.get('message', '')}", " " * 7)
        lines.append(f"       findings: {findings}; forced down: {', '.join(sorted(forced)) or 'none'}")
        for waiting in nova.get("waiting") or ():
            lines += _wrapped(f"       waiting: {waiting}", " " * 16)
    handover = status.get("handover")
    if handover:
        lines += ["", "HANDOVER " + _handover(handover)]
    return lines


def _event_lines(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The last moves and the recent Events, newest first."""
    moves = [e for e in events if e.get("reason") == "MovedNodes"]
    lines = ["", "LAST MOVES"]
    lines += [f"  {_when(e)}  {e.get('message', '')}" for e in _newest(moves)[:LAST_MOVES]] or ["  none"]
    lines += ["", "RECENT EVENTS"]
    for event in _newest(events)[:RECENT_EVENTS]:
        lines += _wrapped(f"  {_when(event)}  {event.get('type', ''):<8}{event.get('reason', ''):<22}"
                          f"{event.get('message', '')}", " " * 44)
    if not events:
        lines.append("  none")
    return lines


def render_pools(pools: Sequence[Mapping[str, Any]], operator: OperatorView, now: float, *,
                 all_namespaces: bool, namespace: str | None) -> str:
    """Every pool on one line each: conditions Ready and Degraded (with Degraded's reason),
    members ready of desired, nodes, the last cycle, paused; the operator's Lease above."""
    lines = _wrapped(f"operator: {_leader(operator, now)}", "  ")
    if not pools:
        return "\n".join(lines + [f"No IronicComputeShard pools found{'' if all_namespaces else f' in {namespace}'}."])
    rows = [("NAMESPACE", "NAME", "READY", "DEGRADED", "MEMBERS", "NODES", "PINNED", "LAST CYCLE", "PAUSED")]
    for pool in sorted(pools, key=lambda p: ((p.get("metadata") or {}).get("namespace") or "",
                                             (p.get("metadata") or {}).get("name") or "")):
        meta, spec, status = pool.get("metadata") or {}, pool.get("spec") or {}, pool.get("status") or {}
        degraded = _condition(pool, "Degraded") or {}
        nodes = status.get("nodes") or {}
        rows.append((meta.get("namespace") or "", meta.get("name") or "", (_condition(pool, "Ready") or {})
                     .get("status", "-"),
                     degraded.get("status", "-") + (f" ({degraded.get('reason')})"
                                                    if degraded.get("status") == "True" else ""),
                     f"{status.get('readyReplicas', 0)}/{status.get('desiredReplicas', spec.get('replicas', '?'))}",
                     str(nodes.get("total", "-")), str(nodes.get("pinned", "-")),
                     _ago(status.get("lastCycleTime"), now) or "never", "yes" if spec.get("paused") else "no"))
    if not all_namespaces:
        rows = [row[1:] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(lines + ["   ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                              for row in rows])


def _leader(operator: OperatorView, now: float | None) -> str:
    """Who holds the operator's Lease, and how fresh it is."""
    if operator.error:
        return f"its Lease {LEASE_NAME} cannot be read: {operator.error} (--operator-namespace names its namespace)"
    if not operator.leases:
        return (f"no Lease {LEASE_NAME} found: no operator has run (or you may not list Leases: "
                "--operator-namespace names its namespace)")
    parts = []
    for lease in operator.leases:
        spec = lease.get("spec") or {}
        where = f"{(lease.get('metadata') or {}).get('namespace')}/{LEASE_NAME}"
        holder = spec.get("holderIdentity")
        renewed = _ago(spec.get("renewTime"), now)
        duration = spec.get("leaseDurationSeconds")
        if not holder:
            parts.append(f"no leader (Lease {where} released)")
            continue
        stale = ""
        seconds = _age_seconds(spec.get("renewTime"), now)
        if seconds is not None and duration and seconds > duration:
            stale = f": not renewed for longer than its {duration}s, a standby takes over"
        parts.append(f"leader {holder} (Lease {where}, renewed {renewed or 'never'}{stale})")
    return "; ".join(parts)


def _cycle(meta: Mapping[str, Any], status: Mapping[str, Any], now: float | None) -> str:
    """When the operator last wrote the status, and whether it has seen the latest spec."""
    written = status.get("lastCycleTime")
    when = f"{written} ({_ago(written, now)})" if written else "not reported"
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    if observed is None:
        seen = "the operator has not reported on this pool yet"
    elif generation is not None and observed < generation:
        seen = f"spec generation {generation}, observed {observed}: the operator has not acted on the latest spec yet"
    else:
        seen = f"spec generation {generation} observed"
    return (f"{when}; {seen} (a cycle that changes nothing writes nothing, so on a steady pool this time stays; "
            "the Lease's renewal says the operator is alive)" if written else f"{when}; {seen}")


def _wrapped(text: str, indent: str, first: str = "") -> list[str]:
    """`text` wrapped at WIDTH (never cut: long words overflow), its first line after `first`,
    the others indented by `indent`."""
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [""]


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
    return sorted(events, key=lambda e: _seconds(_when(e)) or 0.0, reverse=True)


def _when(event: Mapping[str, Any]) -> str:
    return _rfc3339(event.get("lastTimestamp") or event.get("eventTime") or
                    (event.get("metadata") or {}).get("creationTimestamp") or "")


def _rfc3339(text: str) -> str:
    """A time as Kubernetes writes it (`...Z`), whatever offset notation it came in."""
    seconds = _seconds(text)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds)) if seconds is not None else text


def _seconds(text: Any) -> float | None:
    if not text or not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _age_seconds(text: Any, now: float | None) -> float | None:
    seconds = _seconds(text)
    return None if seconds is None or now is None else max(now - seconds, 0.0)


def _ago(text: Any, now: float | None) -> str:
    """`5s ago`, `3m ago`, `2h10m ago`, `4d ago`; '' without a time."""
    age = _age_seconds(text, now)
    if age is None:
        return _rfc3339(text) if isinstance(text, str) else ""
    age = int(age)
    if age < 120:
        return f"{age}s ago"
    if age < 3 * 3600:
        return f"{age // 60}m ago"
    if age < 48 * 3600:
        return f"{age // 3600}h{age % 3600 // 60}m ago"
    return f"{age // 86400}d ago"


def _condition(pool: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (pool.get("status") or {}).get("conditions") or () if c.get("type") == kind), None)


# --- writes -------------------------------------------------------------------------------


CONFLICT_ATTEMPTS = 5  # reads and conditional writes of one command before it gives up


def _on_fresh_pool(write: Callable[[], int]) -> int:
    """Run `write` (it reads the pool, decides, and writes with the version it read) again
    while the write is refused because the pool changed in between."""
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            return write()
        except Conflict:
            if attempt == CONFLICT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _set_paused(cluster: UserCluster, pool: str, paused: bool) -> int:
    def write() -> int:
        current = cluster.get_pool(pool)
        if bool((current.get("spec") or {}).get("paused")) == paused:
            print(f"ironiccomputeshard/{pool} is already {'paused' if paused else 'running (not paused)'}")
            return 0
        cluster.patch_pool(pool, {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                                  "spec": {"paused": paused}})
        print(f"ironiccomputeshard/{pool} " + (
            "paused: the operator makes no writes to Ironic, Nova or Kubernetes for it and keeps reporting"
            if paused else "resumed: the operator acts on it again"))
        return 0
    return _on_fresh_pool(write)


def _member_command(cluster: UserCluster, command: str, member: str) -> int:
    """retire / fence / unfence MEMBER: the pool's patch from core/member_commands.py, decided
    again from the pool as it is now when it changed before the write."""
    def write() -> int:
        pool = cluster.get_pool(member_commands.pool_of(member))
        change = member_commands.retire(pool, member) if command == "retire" else \
            member_commands.fence(pool, member, command == "fence")
        if change.patch is not None:
            cluster.patch_pool(pool["metadata"]["name"], change.patch)
        print(change.message)
        return 0
    return _on_fresh_pool(write)


# --- report -------------------------------------------------------------------------------


def _report(cluster: UserCluster, args: argparse.Namespace) -> int:
    """Read what the bundle holds (a part that cannot be read is named in it, not fatal) and
    write it as a zip."""
    pool = cluster.get_pool(args.pool)
    namespace = pool["metadata"]["namespace"]
    problems: list[str] = []

    def read(what: str, call: Callable[[], Any], default: Any) -> Any:
        try:
            return call()
        except ClusterError as error:
            problems.append(f"{what}: {error}")
            return default

    from ironic_shard_operator.core.handover_job import COMPONENT_LABEL
    from ironic_shard_operator.core.podspec import pool_selector

    pods = read("pods", lambda: cluster.pods(pool_selector(args.pool), namespace), [])
    job_selector = f"{pool_selector(args.pool)},{COMPONENT_LABEL} in (handover,host-mapping)"
    jobs = read("jobs", lambda: cluster.jobs(job_selector, namespace), [])
    events = {f"{KIND}/{args.pool}": read("events of the pool", lambda: cluster.events_of(KIND, args.pool, namespace), [])}
    for kind, items in (("Pod", pods), ("Job", jobs)):
        for item in items:
            name = item["metadata"]["name"]
            events[f"{kind}/{name}"] = read(f"events of {kind} {name}",
                                            lambda k=kind, n=name: cluster.events_of(k, n, namespace), [])
    logs: dict[str, str] = {}
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or ():
            key = f"{pod['metadata']['name']}/{container['name']}"
            logs[key] = read(f"log of {key}", lambda p=pod, c=container: cluster.pod_log(
                p["metadata"]["name"], namespace, container=c["name"], tail_lines=args.tail_lines), "")
    operator = _operator(cluster, args.operator_namespace)
    if operator.error:
        problems.append(f"the operator's Lease: {operator.error}")
    operator_logs: dict[str, str] = {}
    for lease in operator.leases:
        holder = (lease.get("spec") or {}).get("holderIdentity")
        lease_ns = (lease.get("metadata") or {}).get("namespace")
        if holder:
            operator_logs[f"{lease_ns}/{holder}"] = read(
                f"log of the operator's leader pod {lease_ns}/{holder}",
                lambda h=holder, n=lease_ns: cluster.pod_log(h, n, tail_lines=args.tail_lines), "")
    secrets = {}
    for field, ref in _secret_refs(pool):
        keys = read(f"Secret {ref['name']}", lambda r=ref: cluster.secret_keys(r["name"], namespace), None)
        secrets[field] = {"name": ref["name"], "key": ref.get("key"), "exists": keys is not None,
                          "hasKey": keys is not None and ref.get("key") in keys}
    now = time.time()
    files = bundle_files(pool=pool, events=events, pods=pods, jobs=jobs, logs=logs, operator=operator,
                         operator_logs=operator_logs, secrets=secrets, problems=problems, now=now)
    path = Path(args.file or f"report-ics-{args.pool}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}.zip")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, text in files.items():
            bundle.writestr(f"{path.stem}/{name}", text)
    path.write_bytes(buffer.getvalue())
    print(f"wrote {path} ({len(files)} files{'; not readable: ' + str(len(problems)) if problems else ''})")
    return 0


def _secret_refs(pool: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The Secrets the pool names, with the field that names each."""
    spec = pool.get("spec") or {}
    refs = [("spec.novaConfig", (spec.get("novaConfig") or {}).get("secretRef")),
            ("spec.cloud", (spec.get("cloud") or {}).get("secretRef")),
            ("spec.handover.novaManageConfig", ((spec.get("handover") or {}).get("novaManageConfig") or {})
             .get("secretRef"))]
    return [(field, ref) for field, ref in refs if ref and ref.get("name")]


def bundle_files(*, pool: Mapping[str, Any], events: Mapping[str, Sequence[Mapping[str, Any]]],
                 pods: Sequence[Mapping[str, Any]], jobs: Sequence[Mapping[str, Any]], logs: Mapping[str, str],
                 operator: OperatorView, operator_logs: Mapping[str, str], secrets: Mapping[str, Any],
                 problems: Sequence[str], now: float) -> dict[str, str]:
    """The bundle's files by name. Every text, and every string of a document, goes through
    core/redact.py's rules (URL passwords, `password=` pairs), and env values whose name says
    credential are masked;
    Secrets appear by name and key only (their values are never read into it)."""
    import yaml

    from ironic_shard_operator.core.redact import redact

    def dump(document: Any) -> str:
        return yaml.safe_dump(_redacted(_masked_env(_no_managed_fields(document)), redact), sort_keys=False)

    meta = pool.get("metadata") or {}
    files = {
        "README.txt": "\n".join([
            f"kubectl ics report of ironiccomputeshard/{meta.get('name')} in {meta.get('namespace')}, "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now))}.",
            "pool.yaml: the IronicComputeShard with its status; status.txt: `kubectl ics status`;",
            "events.yaml: the Events of the pool, its pods and Jobs; pods.yaml, jobs.yaml: the pool's pods (members",
            "and Job pods) and Jobs (handover, host mapping); logs/: each container's last lines; operator/: the",
            "operator's Lease and its leader pod's last log lines; secrets.yaml: the Secrets the pool names (names,",
            "keys, whether they exist; never their values).",
            *(["", "Not readable:", *[f"- {p}" for p in problems]] if problems else []), ""]),
        "pool.yaml": dump(pool),
        "status.txt": redact(render_status(pool, events.get(f"{KIND}/{meta.get('name')}", ()), operator, now)) + "\n",
        "events.yaml": dump({key: list(items) for key, items in events.items()}),
        "pods.yaml": dump(list(pods)),
        "jobs.yaml": dump(list(jobs)),
        "secrets.yaml": yaml.safe_dump(dict(secrets), sort_keys=False),
        "operator/leases.yaml": dump(_operator_facts(operator)),
    }
    for key, text in logs.items():
        files[f"logs/{key.replace('/', '.')}.log"] = redact(text)
    for key, text in operator_logs.items():
        files[f"operator/{key.replace('/', '.')}.log"] = redact(text)
    return files


def _no_managed_fields(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _no_managed_fields(v) for k, v in value.items() if k != "managedFields"}
    if isinstance(value, list):
        return [_no_managed_fields(v) for v in value]
    return value


def _redacted(value: Any, redact: Callable[[str], str]) -> Any:
    """Every string of a document redacted (keys kept: `secretName: nova-config` names a Secret)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: _redacted(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, redact) for v in value]
    return value


def _masked_env(value: Any) -> Any:
    """Every `env` entry whose name says credential (OS_PASSWORD, ...) with its value masked."""
    from ironic_shard_operator.core.redact import MASK, is_secret_key

    if isinstance(value, Mapping):
        out = {k: _masked_env(v) for k, v in value.items()}
        if isinstance(out.get("name"), str) and "value" in out and is_secret_key(out["name"]):
            out["value"] = MASK
        return out
    if isinstance(value, list):
        return [_masked_env(v) for v in value]
    return value


# --- preflight ------------------------------------------------------------------------------


def manifest_pool(cluster: UserCluster, path: str) -> dict[str, Any]:
    """The IronicComputeShard of a manifest file, in the namespace kubectl apply would use."""
    import yaml

    try:
        with open(path) as file:
            found = [d for d in yaml.safe_load_all(file) if isinstance(d, dict) and d.get("kind") == KIND]
    except (OSError, yaml.YAMLError) as error:
        raise ClusterError(f"cannot read {path}: {error}") from None
    if len(found) != 1:
        raise ClusterError(f"{path} holds {len(found)} {KIND} documents; preflight checks one")
    body = found[0]
    meta = body.setdefault("metadata", {})
    meta["namespace"] = cluster.namespace_flag or meta.get("namespace") or cluster.namespace
    return body


def _preflight(cluster: UserCluster, body: Mapping[str, Any], *, as_json: bool, check_image: bool) -> int:
    from ironic_shard_operator.adapters.preflight import quiet_client_logs, run_checks
    from ironic_shard_operator.core import preflight
    from ironic_shard_operator.core.spec import InvalidSpec

    pool_name = (body.get("metadata") or {}).get("name")
    try:
        inputs = pool_inputs(cluster, body, check_image=check_image)
    except InvalidSpec as error:
        raise ClusterError(f"the pool's spec is invalid: {error}") from None
    quiet_client_logs()
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


def pool_inputs(cluster: UserCluster, body: Mapping[str, Any], *, check_image: bool = True) -> Any:
    """Preflight's inputs for a pool's CR: its Secrets read from the cluster (a Secret or key
    that cannot be read counts as missing: its checks fail and say so)."""
    from ironic_shard_operator.core.preflight import Inputs
    from ironic_shard_operator.core.spec import read_pool

    pool = read_pool(body)

    def text(ref: Any) -> str | None:
        """The Secret's text, or None with the reason on stderr (its checks then fail)."""
        try:
            found = cluster.secret_text(ref.name, ref.key, pool.namespace)
        except ClusterError as error:
            print(f"note: Secret {pool.namespace}/{ref.name} cannot be read: {error}", file=sys.stderr)
            return None
        if found is None:
            print(f"note: Secret {pool.namespace}/{ref.name} has no key {ref.key}", file=sys.stderr)
        return found

    handover = pool.handover
    return Inputs(clouds_yaml=text(pool.cloud), cloud_name=pool.cloud_name, nova_conf=text(pool.nova_config),
                  selector=pool.selector, handover=handover is not None,
                  handover_nova_conf=text(handover.nova_manage_config) if handover else None,
                  image=pool.pod.image, check_image=check_image, pool_name=pool.name)


# --- shell completion (kubectl_complete-ics) ------------------------------------------------

# cobra's ShellCompDirective values, which kubectl reads from the last line of our output
NO_FILE_COMPLETION = 4
FILE_COMPLETION = 0
OPTIONS_WITH_VALUES = {"-n", "--namespace", "--kubeconfig", "--context", "-o", "--output", "--operator-namespace",
                       "-f", "--file", "--filename", "--tail-lines"}
FILE_OPTIONS = {"--kubeconfig", "-f", "--file", "--filename"}


@dataclass(frozen=True, slots=True)
class Lookups:
    """Where completion candidates come from (the cluster, the kubeconfig); each may fail
    silently by returning []."""

    pools: Callable[[], list[str]]
    members: Callable[[], list[str]]  # of every pool of the namespace
    fenced: Callable[[], list[str]]
    namespaces: Callable[[], list[str]]
    contexts: Callable[[], list[str]]


def completions(words: Sequence[str], current: str, lookups: Lookups) -> tuple[list[str], int]:
    """What kubectl offers for `kubectl ics WORDS... CURRENT<TAB>`: candidates (value, or
    `value\\tdescription`) and cobra's directive."""
    top = parser()
    if words and words[-1] in OPTIONS_WITH_VALUES:
        option = words[-1]
        if option in FILE_OPTIONS:
            return [], FILE_COMPLETION
        values = {"-n": lookups.namespaces, "--namespace": lookups.namespaces, "--context": lookups.contexts,
                  "--operator-namespace": lookups.namespaces}.get(option)
        if option in ("-o", "--output"):
            found = ["text", "json", "yaml"]
        else:
            found = values() if values else []
        return [v for v in found if v.startswith(current)], NO_FILE_COMPLETION
    positional = [w for i, w in enumerate(words) if not w.startswith("-")
                  and not (i and words[i - 1] in OPTIONS_WITH_VALUES)]
    command = positional[0] if positional else None
    if command is None:
        if current.startswith("-"):
            return _options(top, current), NO_FILE_COMPLETION
        return [f"{name}\t{COMMANDS[name].split(' (')[0]}" for name in COMMANDS if name.startswith(current)], \
            NO_FILE_COMPLETION
    if command not in COMMANDS:
        return [], NO_FILE_COMPLETION
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    if current.startswith("-"):
        return _options(sub, current), NO_FILE_COMPLETION
    if len(positional) > 1:  # each command takes one name
        return [], NO_FILE_COMPLETION
    found = {"retire": lookups.members, "fence": lookups.members, "unfence": lookups.fenced}.get(
        command, lookups.pools)()
    return sorted(v for v in found if v.startswith(current)), NO_FILE_COMPLETION


def _options(parser_: argparse.ArgumentParser, current: str) -> list[str]:
    return sorted(f"{option}\t{action.help or ''}" for action in parser_._actions for option in action.option_strings
                  if option.startswith(current) and option.startswith("--"))


def complete(argv: Sequence[str] | None = None) -> int:
    """Entry point of `kubectl_complete-ics`: kubectl runs it with the words typed after
    `kubectl ics`, the last being the one completed, and reads one candidate per line and
    `:<directive>` last."""
    words = list(sys.argv[1:] if argv is None else argv)
    current = words.pop() if words else ""
    flags = {"namespace_flag": None, "kubeconfig": None, "context": None}
    for option, key in (("-n", "namespace_flag"), ("--namespace", "namespace_flag"),
                        ("--kubeconfig", "kubeconfig"), ("--context", "context")):
        for i, word in enumerate(words[:-1]):
            if word == option:
                flags[key] = words[i + 1]
            elif word.startswith(option + "="):
                flags[key] = word.split("=", 1)[1]
    words = [w for w in words if not (w.startswith("--") and "=" in w)]
    cluster = UserCluster(**flags)

    def quietly(call: Callable[[], Iterable[str]]) -> list[str]:
        try:
            return list(call())
        except Exception:  # noqa: BLE001 -- completion offers nothing rather than a traceback
            return []

    def members() -> list[str]:
        return [m for p in cluster.list_pools() for m in member_commands.members_of(p)]

    def fenced() -> list[str]:
        return [m for p in cluster.list_pools() for m in (p.get("spec") or {}).get("fencedMembers") or ()]

    def contexts() -> list[str]:
        from kubernetes import config

        return [c["name"] for c in config.list_kube_config_contexts(cluster.kubeconfig)[0]]

    def namespaces() -> list[str]:
        from kubernetes import client

        return [n.metadata.name for n in client.CoreV1Api(cluster.api).list_namespace(_request_timeout=10).items]

    lookups = Lookups(pools=lambda: quietly(lambda: [p["metadata"]["name"] for p in cluster.list_pools()]),
                      members=lambda: quietly(members), fenced=lambda: quietly(fenced),
                      namespaces=lambda: quietly(namespaces), contexts=lambda: quietly(contexts))
    found, directive = completions(words, current, lookups)
    print("\n".join([*found, f":{directive}"]))
    return 0


__all__ = ["RESOURCE", "complete", "completions", "main", "parser", "render_pools", "render_status", "summary"]


if __name__ == "__main__":
    sys.exit(main())
