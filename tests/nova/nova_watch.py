"""What the failover scenario reads from Nova while it runs: a sampler of Nova's own API.

`NovaWatch` polls the real Nova API (hypervisors and compute services, as any client sees
them; independent of the operator's adapter) every `period` seconds in a background thread and
keeps, for the pool's nodes and members, every sample. The scenario asserts on the history:
how long a node was listed under two computes, where pinned nodes were, when a service was
forced down and cleared. With `placement_class` it also samples Placement (bench/nova_bench.py):
each node's resource provider generation and whether Placement offers it for that class.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from testbed.nova_stack import NovaStack
from tests.support.sampling import Sampler


@dataclass(frozen=True)
class Sample:
    """Nova at one instant (`at`: time.monotonic())."""

    at: float
    hosts: dict[str, tuple[str, ...]]       # node uuid -> hosts listing it (sorted)
    services: dict[str, dict]                # member -> its os-services entry
    providers: dict[str, int] = field(default_factory=dict)   # node -> its provider's generation
    candidates: frozenset[str] = frozenset()  # nodes GET /allocation_candidates offers


@dataclass
class NovaWatch(Sampler):
    """Samples Nova every `period` seconds for `nodes` and `members` until stopped."""

    stack: NovaStack
    nodes: set[str]
    members: set[str]
    # A sample lists os-hypervisors: nova-api spends ~25 ms per node on it (a service lookup
    # each), on the two cores every test shares. Every 2 s is fine enough for windows measured
    # against a 10 s update interval; the scenarios that time single moves ask for 1 s.
    period: float = 2.0
    placement_class: str | None = None       # also sample Placement for this resource class
    samples: list[Sample] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def sample(self) -> Sample:
        listed = self.stack.hypervisor_hosts()
        services = self.stack.compute_services()
        providers: dict[str, int] = {}
        candidates: frozenset[str] = frozenset()
        if self.placement_class:
            providers = {n: g for n, g in self.stack.resource_providers().items() if n in self.nodes}
            candidates = frozenset(self.stack.allocation_candidates(self.placement_class) & self.nodes)
        return Sample(time.monotonic(),
                      {n: tuple(sorted(listed.get(n, ()))) for n in self.nodes},
                      {m: services[m] for m in self.members if m in services}, providers, candidates)

    # -- questions about the history -------------------------------------------------------

    def longest_listed_twice(self) -> tuple[float, str | None]:
        """The longest time (seconds) any node was listed under two or more computes, and
        which node (None if never). Measured from the first sample showing it to the first
        that does not (or the last sample)."""
        worst, which = 0.0, None
        started: dict[str, float] = {}
        for sample in self.samples:
            for node, hosts in sample.hosts.items():
                if len(hosts) > 1:
                    started.setdefault(node, sample.at)
                    if sample.at - started[node] >= worst:
                        worst, which = sample.at - started[node], node
                else:
                    started.pop(node, None)
        return worst, which

    def where(self, nodes: set[str]) -> set[tuple[str, ...]]:
        """Every listing (tuple of hosts) any of `nodes` had in any sample."""
        return {sample.hosts[node] for sample in self.samples for node in nodes}

    def forced_down_times(self, member: str) -> list[float]:
        """The sample times at which `member`'s service was forced down."""
        return [s.at for s in self.samples if s.services.get(member, {}).get("forced_down")]

    def first(self, condition, after: float = 0.0) -> float | None:
        """The time of the first sample after `after` for which `condition(sample)` holds."""
        return next((s.at for s in self.samples if s.at >= after and condition(s)), None)
