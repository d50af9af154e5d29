"""A retiring member's Nova service is disabled before its free nodes move and enabled again when
its retire ends; an administrator's disable is never touched (core/retiring_service.py, and the
writes of controller/retiring_services.py against a Nova that refuses one of them)."""

from __future__ import annotations

from dataclasses import replace

from ironic_shard_operator.adapters.nova import NovaError
from ironic_shard_operator.controller.retiring_services import switch_services
from ironic_shard_operator.core.retiring_service import ServiceSwitch, disabled_reason, moves_wait_for, switches
from tests.unit.nova_records import service

KEY = "ns/rack"
REASON = disabled_reason(KEY)


def disabled(host, reason=REASON):
    return replace(service(host), enabled=False, disabled_reason=reason)


def test_a_retiring_members_service_is_disabled_with_a_reason_naming_the_operator_and_the_pool():
    services = {"rack-0": service("rack-0"), "rack-1": service("rack-1")}
    assert switches(pool_key=KEY, retiring=["rack-1"], identities=["rack-0", "rack-1"], services=services) == (
        ServiceSwitch("rack-1", REASON),)
    assert REASON.startswith("ironic-shard-operator:") and KEY in REASON and len(REASON) <= 255
    # already disabled (by anyone): nothing to write
    assert switches(pool_key=KEY, retiring=["rack-1"], identities=["rack-0", "rack-1"],
                    services={**services, "rack-1": disabled("rack-1", "maintenance")}) == ()


def test_a_member_that_no_longer_retires_is_enabled_again_only_when_the_operator_disabled_it():
    services = {"rack-0": disabled("rack-0"), "rack-1": disabled("rack-1", "maintenance by admin"),
                "rack-2": disabled("rack-2", disabled_reason("ns/other-pool"))}
    assert switches(pool_key=KEY, retiring=[], identities=["rack-0", "rack-1", "rack-2"], services=services) == (
        ServiceSwitch("rack-0", None),)
    # a member without a service in Nova needs nothing
    assert switches(pool_key=KEY, retiring=["rack-3"], identities=["rack-3"], services={}) == ()


def test_free_nodes_of_a_retiring_member_wait_until_nova_shows_its_service_disabled():
    assert moves_wait_for(["rack-1"], {"rack-1": service("rack-1")}) == {"rack-1"}
    assert moves_wait_for(["rack-1"], {"rack-1": disabled("rack-1")}) == frozenset()
    assert moves_wait_for(["rack-1"], {}) == frozenset()  # no service: nothing to place builds on
    assert moves_wait_for(["rack-1"], None) == {"rack-1"}  # Nova not read this cycle: unknown


class RefusingNova:
    """A Nova adapter whose disable of `refused` fails; records the writes it accepted."""

    def __init__(self, refused=()):
        self.refused, self.written = set(refused), []

    def set_disabled(self, svc, reason):
        if svc.host in self.refused:
            raise NovaError(f"Nova refused to update {svc.host}")
        self.written.append((svc.host, reason))
        return replace(svc, enabled=reason is None, disabled_reason=reason)


def test_each_switch_is_written_on_its_own_and_a_refused_disable_keeps_that_members_free_nodes():
    nova = RefusingNova(refused={"rack-1"})
    services = {h: service(h) for h in ("rack-0", "rack-1", "rack-2")}
    outcome = switch_services(nova, pool_key=KEY, retiring=["rack-1", "rack-2"], identities=list(services),
                              services=services, may_write=lambda: True, paused=False)
    assert nova.written == [("rack-2", REASON)]
    assert outcome.kept_by == {"rack-1"}
    assert [e.reason for e in outcome.events] == ["NovaServiceSwitchFailed", "NovaServiceDisabled"]
    assert "free nodes stay with it" in outcome.events[0].message


def test_nothing_is_written_without_the_lease_or_while_paused_and_nothing_waits_without_nova():
    services = {"rack-1": service("rack-1")}
    for may_write, paused in ((lambda: False, False), (lambda: True, True)):
        nova = RefusingNova()
        outcome = switch_services(nova, pool_key=KEY, retiring=["rack-1"], identities=["rack-1"], services=services,
                                  may_write=may_write, paused=paused)
        assert nova.written == [] and outcome.kept_by == {"rack-1"}
    assert switch_services(None, pool_key=KEY, retiring=["rack-1"], identities=["rack-1"], services=None,
                           may_write=lambda: True, paused=False).kept_by == frozenset()
