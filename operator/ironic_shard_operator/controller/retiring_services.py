"""Retiring members' Nova services, disabled before their free nodes move (invariant 14).

controller/cloud_side.py runs it between the Nova side and the Ironic writes, from the services
the Nova side just read: core/retiring_service.py decides which services to disable or enable
again, this module writes them (the Lease checked before each write, one Event each) and says
whose free nodes wait because Nova does not show their service disabled yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ironic_shard_operator.adapters.nova import NovaAdapter, NovaError
from ironic_shard_operator.core import retiring_service
from ironic_shard_operator.core.events import Event

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetiringOutcome:
    """`events`: one per write done or refused; `kept_by`: the retiring members whose free
    nodes wait this cycle (Nova does not show their service disabled)."""

    events: tuple[Event, ...] = ()
    kept_by: frozenset[str] = frozenset()


def switch_services(nova: NovaAdapter | None, *, pool_key: str, retiring: Iterable[str], identities: Iterable[str],
                    services: Mapping[str, Any] | None, may_write: Callable[[], bool],
                    paused: bool) -> RetiringOutcome:
    """Disable the retiring members' services and enable again those whose retire ended
    (core/retiring_service.py::switches). `nova` None: the cloud has no Nova for the pool,
    nothing to do and nothing waits. `services` None: Nova's services could not be read this
    cycle, so every retiring member's free nodes wait. Blocking: run it in a worker thread."""
    retiring = tuple(retiring)
    if nova is None:
        return RetiringOutcome()
    if services is None:
        return RetiringOutcome(kept_by=retiring_service.moves_wait_for(retiring, None))
    now = dict(services)
    events: list[Event] = []
    for switch in retiring_service.switches(pool_key=pool_key, retiring=retiring, identities=identities,
                                            services=services):
        if paused or not may_write():
            break
        try:
            now[switch.host] = nova.set_disabled(services[switch.host], switch.reason)
        except NovaError as error:
            log.warning("pool %s: cannot %s the Nova service of %s: %s", pool_key,
                        "disable" if switch.disables else "enable", switch.host, error)
            events.append(Event("NovaServiceSwitchFailed", (
                f"Could not {'disable' if switch.disables else 'enable'} Nova compute service {switch.host}: {error}"
                + ("; its free nodes stay with it until Nova shows it disabled (tried again next cycle)"
                   if switch.disables else "; tried again next cycle")), "Warning"))
            continue
        events.append(Event("NovaServiceDisabled", (
            f"Disabled Nova compute service {switch.host}: it retires, so the scheduler sends it no new build; "
            "it serves its instances until they are handed over")) if switch.disables else Event(
            "NovaServiceEnabled", f"Enabled Nova compute service {switch.host} again: it no longer retires"))
    return RetiringOutcome(tuple(events), retiring_service.moves_wait_for(retiring, now))
