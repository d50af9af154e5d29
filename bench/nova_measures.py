"""The arithmetic of bench/nova_bench.py, pure: no I/O, no clock (unit-tested in
tests/unit/test_nova_measures.py, so `make test` checks it while the benchmark itself is not in CI).

- A nova-compute's resource-tracker passes, read from its log (`PassLog`): a pass runs from
  "Running periodic task ComputeManager.update_available_resource" (or, for the pass a service
  makes before it starts serving, "Starting compute node") to the last "Final resource view" of
  that pass; it is complete once the periodic loop moves on. Its nodes are its "Final resource
  view" lines. These lines are logged at DEBUG.
- What samples of Nova's and Placement's APIs (tests/nova/nova_watch.py's `Sample`: `at`,
  `hosts` node -> hosts listing it, `services` host -> os-services entry, `providers` node ->
  resource provider generation, `candidates` nodes offered by GET /allocation_candidates) say:
  windows in which a node was listed under two hypervisors or under none, which nodes changed
  hypervisor and how often, resource providers deleted (and created again), and when a set of
  nodes was schedulable again.
- The fit of pass seconds against nodes per compute, and the table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) (\d+) [A-Z]+ ")
PASS_START = "Running periodic task ComputeManager.update_available_resource"
STARTUP = "Starting compute node"
FINAL = "Final resource view: name="
# The periodic loop moved on (another task, or its sleep), or the service went on to serve.
PASS_END = ("Running periodic task ", "Service.periodic_tasks' sleeping for", "Creating RPC server")
# The resource tracker saved a compute node record under this host, taking it from another.
MOVED = re.compile(r"ComputeNode (\S+) moving from (\S+) to (\S+)")


@dataclass(frozen=True)
class Pass:
    """One update_available_resource pass of one nova-compute process (times: epoch seconds)."""

    pid: int
    started: float
    ended: float          # its last "Final resource view" (`started` when it had none)
    nodes: int            # its "Final resource view" lines: the nodes it updated
    startup: bool         # the pass a service makes before it serves (creates records)

    @property
    def seconds(self) -> float:
        return self.ended - self.started


@dataclass
class _Open:
    started: float
    startup: bool
    ended: float | None = None
    nodes: int = 0


def log_time(stamp: str) -> float:
    """Epoch seconds of a log line's local timestamp ("2025-11-25 13:06:54.202")."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()


@dataclass(frozen=True)
class Moved:
    """A compute node record this compute took from another host (its resource tracker's
    "ComputeNode N moving from A to B", logged as it saves the record under its own host: from
    then on Nova lists the node under it)."""

    at: float
    node: str
    source: str


@dataclass
class PassLog:
    """Feed a nova-compute log's lines in order (several processes may have written it: each
    line names its pid); `passes` are the complete ones. A pass cut short (the process killed,
    or the log read mid-pass) is never reported. `moved`: the compute node records it took."""

    passes: list[Pass] = field(default_factory=list)
    moved: list[Moved] = field(default_factory=list)
    _open: dict[int, _Open] = field(default_factory=dict)

    def feed(self, lines: Iterable[str]) -> None:
        for line in lines:
            match = LINE.match(line)
            if not match:
                continue
            pid, message = int(match.group(2)), line[match.end():]
            if moved := MOVED.search(message):
                self.moved.append(Moved(log_time(match.group(1)), moved.group(1), moved.group(2)))
            if PASS_START in message or STARTUP in message:
                self._open[pid] = _Open(log_time(match.group(1)), startup=STARTUP in message)
                continue
            current = self._open.get(pid)
            if current is None:
                continue
            if FINAL in message:
                current.nodes += 1
                current.ended = log_time(match.group(1))
            elif any(marker in message for marker in PASS_END):
                del self._open[pid]
                self.passes.append(Pass(pid, current.started, current.ended or current.started,
                                        current.nodes, current.startup))

    def steady(self, after: float = -math.inf) -> list[Pass]:
        """The complete periodic passes (not the startup one) that started after `after`."""
        return [p for p in self.passes if not p.startup and p.started >= after]


def seconds_per_node(passes: Sequence[Pass]) -> float | None:
    """Seconds per node over `passes`: their total time over their total nodes."""
    nodes = sum(p.nodes for p in passes)
    return sum(p.seconds for p in passes) / nodes if nodes else None


def linear_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares y = slope * x + intercept over (x, y) points; None without two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    return slope, mean_y - slope * mean_x


def median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


# ---- samples of Nova and Placement -------------------------------------------------------------

class SampleLike(Protocol):
    at: float
    hosts: Mapping[str, tuple[str, ...]]
    services: Mapping[str, Mapping[str, Any]]
    providers: Mapping[str, int]
    candidates: frozenset[str]


@dataclass(frozen=True)
class Window:
    """A node listed under two or more hypervisors ("double") or under none ("missing"), from
    the first sample showing it to the first that does not (or the last sample)."""

    node: str
    kind: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def between(samples: Sequence[SampleLike], start: float = -math.inf, end: float = math.inf) -> list[SampleLike]:
    return [s for s in samples if start <= s.at <= end]


def ownership_windows(samples: Sequence[SampleLike], nodes: Iterable[str]) -> list[Window]:
    """Every window of double or missing ownership of `nodes` over `samples`."""
    windows: list[Window] = []
    for node in nodes:
        kind_since: tuple[str, float] | None = None
        for sample in samples:
            count = len(sample.hosts.get(node, ()))
            kind = "double" if count > 1 else "missing" if count == 0 else None
            if kind_since and kind_since[0] != kind:
                windows.append(Window(node, kind_since[0], kind_since[1], sample.at))
                kind_since = None
            if kind and kind_since is None:
                kind_since = (kind, sample.at)
        if kind_since and samples:
            windows.append(Window(node, kind_since[0], kind_since[1], samples[-1].at))
    return sorted(windows, key=lambda w: (w.start, w.node))


def listings(samples: Sequence[SampleLike], node: str) -> list[tuple[str, ...]]:
    """The distinct successive non-empty listings of `node` (who listed it, in turn)."""
    seen: list[tuple[str, ...]] = []
    for sample in samples:
        hosts = tuple(sample.hosts.get(node, ()))
        if hosts and (not seen or seen[-1] != hosts):
            seen.append(hosts)
    return seen


def changed_hypervisor(samples: Sequence[SampleLike], nodes: Iterable[str]) -> dict[str, int]:
    """The nodes whose listing changed over `samples`, with how many times it changed (a node
    that moved once changed once; more is owners taking it from each other)."""
    changes = {node: len(listings(samples, node)) - 1 for node in nodes}
    return {node: count for node, count in changes.items() if count > 0}


def ended_elsewhere(samples: Sequence[SampleLike], nodes: Iterable[str]) -> set[str]:
    """The nodes whose last listing differs from their first: moved, whatever happened between."""
    moved = set()
    for node in nodes:
        seen = listings(samples, node)
        if seen and seen[0] != seen[-1]:
            moved.add(node)
    return moved


def provider_churn(samples: Sequence[SampleLike], nodes: Iterable[str]) -> dict[str, int]:
    """Resource providers deleted (and possibly created again) over `samples`, per node: a
    provider missing from a sample after it was present, or present with a lower generation than
    before (deleted and created again between two samples; generations only grow otherwise)."""
    churn: dict[str, int] = {}
    for node in nodes:
        previous: int | None = None
        events = 0
        for sample in samples:
            generation = sample.providers.get(node)
            if previous is not None and (generation is None or generation < previous):
                events += 1
            previous = generation
        if events:
            churn[node] = events
    return churn


def parse_nova_time(value: str | None) -> float | None:
    """Epoch seconds of Nova's `updated_at` (UTC, "2025-11-25T13:05:01.000000")."""
    if not value:
        return None
    stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def live_hosts(sample: SampleLike, since: float) -> set[str]:
    """Hosts whose nova-compute is up, not forced down, and reported in at or after `since`
    (epoch seconds): a process that is alive now, not the heartbeat of one that died."""
    live = set()
    for host, service in sample.services.items():
        beat = parse_nova_time(service.get("updated_at"))
        if service.get("state") == "up" and not service.get("forced_down") and beat is not None and beat >= since:
            live.add(host)
    return live


def listed_live(sample: SampleLike, nodes: Iterable[str], since: float) -> bool:
    """Every node listed under a live hypervisor (`live_hosts`)."""
    live = live_hosts(sample, since)
    return all(set(sample.hosts.get(n, ())) & live for n in nodes)


def any_listed_live(sample: SampleLike, nodes: Iterable[str], since: float) -> bool:
    """At least one of `nodes` listed under a live hypervisor (`live_hosts`): a recovery's first
    node picked up, where `listed_live` is its last."""
    live = live_hosts(sample, since)
    return any(set(sample.hosts.get(n, ())) & live for n in nodes)


def service_flag(sample: SampleLike, host: str, flag: str) -> bool:
    """`host`'s os-services entry says `flag`: "down" (Nova's own verdict, service_down_time
    after its last report) or "forced_down" (set by someone: here, the operator)."""
    service = sample.services.get(host) or {}
    return service.get("state") == "down" if flag == "down" else bool(service.get(flag))


def offered(sample: SampleLike, nodes: Iterable[str]) -> bool:
    """Every node offered by Placement's GET /allocation_candidates."""
    return all(n in sample.candidates for n in nodes)


def schedulable(sample: SampleLike, nodes: Iterable[str], since: float) -> bool:
    """Every node listed under a live hypervisor AND offered by Placement."""
    nodes = list(nodes)
    return listed_live(sample, nodes, since) and offered(sample, nodes)


def first(samples: Sequence[SampleLike], condition: Callable[[SampleLike], bool],
          after: float = -math.inf) -> float | None:
    """The time of the first sample at or after `after` for which `condition` holds."""
    return next((s.at for s in samples if s.at >= after and condition(s)), None)


def moved_instance_nodes(samples: Sequence[SampleLike], hosts: Mapping[str, str]) -> set[str]:
    """Nodes with an instance (node -> its instance's host) ever listed under another host."""
    return {node for node, host in hosts.items()
            if any(s.hosts.get(node) and tuple(s.hosts[node]) != (host,) for s in samples)}


def settled_since(samples: Sequence[SampleLike], nodes: Iterable[str]) -> float | None:
    """When the latest listing of `nodes` (each under exactly one host) began: the time of the
    first sample of the run of samples equal to the last one; None while a node is listed
    under none or two."""
    nodes = list(nodes)
    if not samples:
        return None

    def listing(sample: SampleLike) -> tuple:
        return tuple(tuple(sample.hosts.get(n, ())) for n in nodes)

    last = listing(samples[-1])
    if any(len(hosts) != 1 for hosts in last):
        return None
    since = samples[-1].at
    for sample in reversed(samples):
        if listing(sample) != last:
            break
        since = sample.at
    return since


def sample_gaps(samples: Sequence[SampleLike]) -> tuple[float | None, float | None]:
    """(median, longest) seconds between two successive samples: the resolution of windows."""
    gaps = [b.at - a.at for a, b in zip(samples, samples[1:])]
    return median(gaps), max(gaps, default=None)


# ---- the table ---------------------------------------------------------------------------------

def render_table(columns: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    """A Markdown table: one row per measure, one column per setup."""
    lines = ["| measure | " + " | ".join(columns) + " |", "| --- |" + " --- |" * len(columns)]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(lines)
