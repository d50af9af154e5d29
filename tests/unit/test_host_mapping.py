"""Mapping new members' hosts to a Nova cell (core/host_mapping.py): what tells the operator a
member is mapped, the one Job per new service that maps it with a novaManageConfig, what the
status and the Events say without one, and how a failed Job is retried. Each test steps the
decisions as the shell does: the step's entries become the next step's record."""

from __future__ import annotations

import json

from ironic_shard_operator.core.handover import ACTIVE, FAILED, SUCCEEDED, retry_delay
from ironic_shard_operator.core.handover_job import CONFIG_PATH
from ironic_shard_operator.core.host_mapping import (
    HOST_NOT_MAPPED, MAPPED, MAPPING, MAPPING_FAILED, NOT_MAPPED, UNKNOWN, MappingJob, ProbeAnswer, awaiting_nova,
    decide, degraded,
    hosts_to_probe, job_name, job_selector, read_job, recorded_mapping, render_job,
)
from ironic_shard_operator.core.spec import read_pool
from ironic_shard_operator.core.status import host_mapping_section
from tests.unit.nova_records import service, services

NOW = 1_800_000_000.0
POOL = "rack"
NO_CONFIG = "the pool has no spec.handover.novaManageConfig"


def pool():
    return read_pool({
        "metadata": {"name": POOL, "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {"replicas": 2, "image": "registry/nova:34", "novaConfig": {"secretRef": {"name": "nc"}},
                 "cloud": {"secretRef": {"name": "cl"}},
                 "handover": {"novaManageConfig": {"secretRef": {"name": "nm", "key": "db.conf"}}}}})


def answers(mapped: dict, at: float = NOW) -> dict:
    """Probe answers by (member, service id) for the services of `nova_records.service`."""
    return {(host, f"id-{host}"): ProbeAnswer(at, value) for host, value in mapped.items()}


def step(*, hosts=("rack-0",), recorded=None, listed=(), probed=None, jobs=(), blocker=None, now=NOW,
         nova=None):
    """One step, from the last status.hostMapping `recorded` read back as the cycle reads it."""
    return decide(pool_name=POOL, services=nova or services(*hosts), recorded=recorded_mapping(recorded),
                  listed=listed, answers=probed if probed is not None else {}, jobs=jobs, blocker=blocker, now=now)


def recorded(result) -> dict:
    """The status.hostMapping the step writes, as the next step reads it back."""
    return host_mapping_section(result)


def job(batch_or_name, services_, state, *, finished=None, attempt=1, log=""):
    return MappingJob(batch_or_name, tuple(services_), state, finished, attempt, log)


def by_member(result) -> dict:
    return {e.member: e for e in result.entries}


# ---- with a novaManageConfig: one Job per new service -------------------------------------


def test_a_new_members_host_is_mapped_by_one_job_which_goes_once_the_mapping_is_on_record():
    first = step(probed=answers({"rack-0": False}))
    assert first.create is not None and first.create.services == (("rack-0", "id-rack-0"),)
    assert by_member(first)["rack-0"].state == MAPPING and by_member(first)["rack-0"].job == first.create.name
    assert first.events == () and first.delete == ()

    running = job(first.create.name, first.create.services, ACTIVE)
    second = step(recorded=recorded(first), jobs=[running])  # no probe while it runs
    assert second.create is None and second.delete == () and by_member(second)["rack-0"].state == MAPPING

    done = job(first.create.name, first.create.services, SUCCEEDED, finished=NOW + 20)
    third = step(recorded=recorded(second), jobs=[done], probed=answers({"rack-0": True}, NOW + 25), now=NOW + 25)
    assert by_member(third)["rack-0"].state == MAPPED and third.create is None
    assert [e.reason for e in third.events] == ["HostMapped"]
    assert third.delete == ()  # its outcome is not on record yet

    assert recorded(third)["members"][0]["job"] == first.create.name  # so the next step lists it
    fourth = step(recorded=recorded(third), jobs=[done], now=NOW + 30, blocker=NO_CONFIG)  # config gone meanwhile
    assert fourth.delete == (first.create.name,) and fourth.create is None and fourth.events == ()
    assert "job" not in recorded(fourth)["members"][0]
    fifth = step(recorded=recorded(fourth), now=NOW + 40)  # a pod restart: same service, nothing asked
    assert fifth.create is None and fifth.events == () and by_member(fifth)["rack-0"].state == MAPPED


def test_a_mapping_nova_shows_before_its_job_reports_complete_is_still_the_jobs():
    """The Job's pod ran discover_hosts and the member's nova-compute already lists its nodes,
    but the Job object is not Complete yet (a loaded cluster): the entry says which Job mapped
    the host, and keeps saying so once on record (the CI run that found it: the message said
    only that Nova lists nodes, for good)."""
    first = step(probed=answers({"rack-0": False}))
    running = job(first.create.name, first.create.services, ACTIVE)
    second = step(recorded=recorded(first), jobs=[running], listed=("rack-0",), now=NOW + 5)
    entry = by_member(second)["rack-0"]
    assert entry.state == MAPPED and f"mapped by Job {first.create.name}, still finishing" in entry.message
    done = job(first.create.name, first.create.services, SUCCEEDED, finished=NOW + 6)
    third = step(recorded=recorded(second), jobs=[done], listed=("rack-0",), now=NOW + 10)
    assert f"mapped by Job {first.create.name}" in by_member(third)["rack-0"].message
    assert third.delete == (first.create.name,) and not third.events  # on record: the Job goes


def test_members_appearing_together_share_a_job_and_one_appearing_meanwhile_waits_for_the_next():
    first = step(hosts=("rack-0", "rack-1"), probed=answers({"rack-0": False, "rack-1": None}))
    assert first.create.services == (("rack-0", "id-rack-0"), ("rack-1", "id-rack-1"))
    running = job(first.create.name, first.create.services, ACTIVE)
    second = step(hosts=("rack-0", "rack-1", "rack-2"), recorded=recorded(first), jobs=[running],
                  probed=answers({"rack-2": False}))
    assert second.create is None  # discover_hosts must not run twice at once
    waiting = by_member(second)["rack-2"]
    assert waiting.state == MAPPING and running.name in waiting.message and second.events == ()
    ended = job(first.create.name, first.create.services, SUCCEEDED, finished=NOW + 20)
    third = step(hosts=("rack-0", "rack-1", "rack-2"), recorded=recorded(second), jobs=[ended], now=NOW + 21,
                 probed=answers({"rack-0": True, "rack-1": None, "rack-2": False}, NOW + 21))
    assert third.create.services == (("rack-2", "id-rack-2"),)
    assert by_member(third)["rack-1"].state == MAPPED  # Nova does not say: the Job's success is believed


def test_a_host_nova_shows_mapped_gets_no_job():
    listed = step(listed=("rack-0",))  # its nodes are listed: mapped (os-hypervisors skips unmapped hosts)
    probed = step(probed=answers({"rack-0": True}))  # or Nova's os-hosts says so
    for result in (listed, probed):
        assert result.create is None and result.events == () and by_member(result)["rack-0"].state == MAPPED


def test_an_identity_taken_up_again_is_a_new_host_and_mapped_again():
    """Scale-down deleted its service, and Nova its host mapping with it: the record of the
    old service does not count for the new one."""
    old = step(listed=("rack-0",))
    new_service = {"rack-0": service("rack-0").__class__(id="id-2", host="rack-0", up=True, enabled=True,
                                                          forced_down=False)}
    again = step(nova=new_service, recorded=recorded(old), probed={("rack-0", "id-2"): ProbeAnswer(NOW, False)})
    assert again.create is not None and again.create.services == (("rack-0", "id-2"),)


def test_a_failed_job_is_reported_once_and_tried_again_after_its_backoff_in_a_new_job():
    first = step(probed=answers({"rack-0": False}))
    failed = job(first.create.name, first.create.services, FAILED, finished=NOW + 30,
                 log="ERROR: Duplicate host mapping was encountered. | exit 2")
    second = step(recorded=recorded(first), jobs=[failed], now=NOW + 31, probed=answers({"rack-0": False}, NOW + 31))
    entry = by_member(second)["rack-0"]
    assert (entry.state, entry.reason, entry.attempts) == (NOT_MAPPED, MAPPING_FAILED, 1)
    assert "Duplicate host mapping" in entry.message and entry.next_retry_at == NOW + 30 + retry_delay(1)
    assert [e.reason for e in second.events] == [MAPPING_FAILED] and second.events[0].type == "Warning"
    assert second.create is None and second.delete == ()

    later = step(recorded=recorded(second), jobs=[failed], now=NOW + 40, probed=answers({"rack-0": False}, NOW + 40))
    assert later.events == () and later.create is None  # reported once, still in its backoff

    due = NOW + 30 + retry_delay(1)
    retry = step(recorded=recorded(later), jobs=[failed], now=due, probed=answers({"rack-0": False}, due))
    assert retry.create.attempt == 2 and retry.create.name == job_name(POOL, first.create.services, 2)
    assert retry.create.name != first.create.name and retry.delete == (failed.name,)
    assert by_member(retry)["rack-0"].state == MAPPING


def test_a_job_that_succeeded_while_nova_still_says_not_mapped_is_a_failure():
    """A novaManageConfig whose [api_database] is another Nova's: nova-manage maps hosts there."""
    first = step(probed=answers({"rack-0": False}))
    done = job(first.create.name, first.create.services, SUCCEEDED, finished=NOW + 20)
    second = step(recorded=recorded(first), jobs=[done], now=NOW + 25, probed=answers({"rack-0": False}, NOW + 25))
    entry = by_member(second)["rack-0"]
    assert (entry.state, entry.reason) == (NOT_MAPPED, MAPPING_FAILED) and "[api_database]" in entry.message
    assert second.delete == () and [e.reason for e in second.events] == [MAPPING_FAILED]
    retry = step(recorded=recorded(second), jobs=[done], now=NOW + 20 + retry_delay(1),
                 probed=answers({"rack-0": False}, NOW + 26))
    assert retry.create.attempt == 2 and retry.delete == (done.name,)


def test_jobs_of_members_gone_are_deleted_once_ended():
    gone = job("rack-map-hosts-x", [("rack-5", "id-rack-5")], FAILED, finished=NOW)
    running = job("rack-map-hosts-y", [("rack-6", "id-rack-6")], ACTIVE)
    result = step(listed=("rack-0",), jobs=[gone, running])
    assert result.delete == ("rack-map-hosts-x",) and result.create is None


# ---- without one: reported until Nova has mapped it ---------------------------------------


def test_without_a_config_a_host_nova_says_is_not_mapped_is_reported_once_until_it_is_mapped():
    first = step(probed=answers({"rack-0": False}), blocker=NO_CONFIG)
    entry = by_member(first)["rack-0"]
    assert first.create is None and (entry.state, entry.reason) == (NOT_MAPPED, HOST_NOT_MAPPED)
    assert "nova-manage cell_v2 discover_hosts --by-service" in entry.message
    assert "discover_hosts_in_cells_interval" in entry.message and NO_CONFIG in entry.message
    assert [(e.reason, e.type) for e in first.events] == [(HOST_NOT_MAPPED, "Warning")]
    assert degraded(recorded(first)) == (HOST_NOT_MAPPED, entry.message)

    again = step(recorded=recorded(first), probed=answers({"rack-0": False}, NOW + 10), blocker=NO_CONFIG)
    assert again.events == () and degraded(recorded(again))  # said once, still reported

    mapped = step(recorded=recorded(again), probed=answers({"rack-0": True}, NOW + 20), blocker=NO_CONFIG)
    assert by_member(mapped)["rack-0"].state == MAPPED and [e.reason for e in mapped.events] == ["HostMapped"]
    assert degraded(recorded(mapped)) is None


def test_without_a_config_a_host_nova_says_nothing_of_is_unknown_not_degraded():
    result = step(probed=answers({"rack-0": None}), blocker=NO_CONFIG)
    assert by_member(result)["rack-0"].state == UNKNOWN and result.events == ()
    assert degraded(recorded(result)) is None


def test_a_failed_job_names_its_members_in_the_condition_before_hosts_merely_not_mapped():
    first = step(hosts=("rack-0", "rack-1"), probed=answers({"rack-0": False}))
    failed = job(first.create.name, [("rack-0", "id-rack-0")], FAILED, finished=NOW, log="boom")
    result = step(hosts=("rack-0", "rack-1"), jobs=[failed], probed=answers({"rack-0": False, "rack-1": False}),
                  blocker="Secret nm not found")
    reason, message = degraded(recorded(result))
    assert reason == MAPPING_FAILED and "rack-0" in message and "rack-1" in message
    assert by_member(result)["rack-0"].next_retry_at is None  # no new Job while the config is unusable


# ---- when Nova is asked -------------------------------------------------------------------


def test_nova_is_asked_about_a_host_not_known_mapped_once_per_interval_and_after_its_job_ended():
    nova = services("rack-0", "rack-1", "rack-2")
    record = recorded_mapping({"members": [{"member": "rack-0", "service": "id-rack-0", "state": MAPPED,
                                            "message": ""}]})
    ask = hosts_to_probe(services=nova, recorded=record, listed=("rack-1",), jobs=[], answers={}, now=NOW, every=10)
    assert ask == ["rack-2"]
    asked = answers({"rack-2": False}, NOW)
    assert hosts_to_probe(services=nova, recorded=record, listed=("rack-1",), jobs=[], answers=asked,
                          now=NOW + 5, every=10) == []
    assert hosts_to_probe(services=nova, recorded=record, listed=("rack-1",), jobs=[], answers=asked,
                          now=NOW + 10, every=10) == ["rack-2"]
    running = job("j", [("rack-2", "id-rack-2")], ACTIVE)
    assert hosts_to_probe(services=nova, recorded=record, listed=(), jobs=[running], answers={}, now=NOW,
                          every=10) == ["rack-1"]
    ended = job("j", [("rack-2", "id-rack-2")], SUCCEEDED, finished=NOW + 3)
    assert "rack-2" in hosts_to_probe(services=nova, recorded=record, listed=(), jobs=[ended], answers=asked,
                                      now=NOW + 4, every=10)


# ---- the Job ------------------------------------------------------------------------------


def test_the_job_runs_discover_hosts_by_service_with_the_db_config_and_is_read_back():
    batch = step(hosts=("rack-0", "rack-1"), probed=answers({"rack-0": False, "rack-1": False})).create
    raw = render_job(pool(), batch)
    container = raw["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["nova-manage", "--config-file", CONFIG_PATH, "cell_v2", "discover_hosts",
                                    "--by-service", "--verbose"]
    assert container["image"] == "registry/nova:34"
    assert raw["spec"]["template"]["spec"]["volumes"][0]["secret"] == {
        "secretName": "nm", "items": [{"key": "db.conf", "path": "nova.conf"}]}
    labels = raw["metadata"]["labels"]
    assert ",".join(f"{k}={v}" for k, v in labels.items()) == job_selector(POOL)
    assert raw["spec"]["template"]["metadata"]["labels"] == labels
    assert json.loads(raw["spec"]["template"]["metadata"]["annotations"]["ironicshards.io/host-mapping-services"]) \
        == [["rack-0", "id-rack-0"], ["rack-1", "id-rack-1"]]
    assert raw["metadata"]["ownerReferences"][0]["uid"] == "u-1" and len(batch.name) <= 63
    raw["status"] = {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2027-01-15T08:00:00Z"}]}
    back = read_job(raw)
    assert (back.name, back.services, back.state, back.attempt) == (batch.name, batch.services, SUCCEEDED, 1)
    assert back.finished is not None
    handover_job = {"metadata": {"name": "h", "labels": {"ironicshards.io/component": "handover"}}}
    assert read_job(handover_job) is None


def test_a_jobs_name_says_what_it_maps_and_its_attempt():
    pairs = [("rack-0", "id-rack-0")]
    assert job_name(POOL, pairs) == job_name(POOL, list(reversed(pairs)))
    assert job_name(POOL, pairs) != job_name(POOL, pairs, 2) != job_name(POOL, [("rack-0", "id-2")])
    assert len(job_name("p" * 60, pairs)) <= 63


# ---- which members Nova can schedule to: the planner's ring ----------------------------------


def test_a_member_gets_nodes_only_once_nova_lists_its_service_and_its_host_is_mapped() -> None:
    """No service listed yet, then NotMapped, then Mapping (the Job), then Mapped: only the last
    lets the planner give it nodes (a node on an unmapped host is under no hypervisor in Nova)."""
    enabled = {"state": "Enabled"}
    members = ("rack-0", "rack-1")
    record = recorded(step(hosts=("rack-0",), probed=answers({"rack-0": True})))
    assert awaiting_nova(members, nova_section=enabled, mapping=recorded_mapping(record)) == {"rack-1"}
    not_mapped = recorded(step(hosts=members, recorded=record, probed=answers({"rack-1": False}), blocker=NO_CONFIG))
    assert awaiting_nova(members, nova_section=enabled, mapping=recorded_mapping(not_mapped)) == {"rack-1"}
    mapping = step(hosts=members, recorded=record, probed=answers({"rack-1": False}))
    assert by_member(mapping)["rack-1"].state == MAPPING
    assert awaiting_nova(members, nova_section=enabled, mapping=recorded_mapping(recorded(mapping))) == {"rack-1"}
    mapped = recorded(step(hosts=members, recorded=recorded(mapping), probed=answers({"rack-1": True})))
    assert awaiting_nova(members, nova_section=enabled, mapping=recorded_mapping(mapped)) == frozenset()
    # Nova away for a while: what was on record stands
    assert awaiting_nova(members, nova_section={"state": "Unavailable"}, mapping=recorded_mapping(record)) == {"rack-1"}


def test_without_a_usable_nova_or_an_answer_about_the_host_nothing_is_waited_on() -> None:
    """Nothing would end the wait: no Nova (never answered, or Disabled), or a host Nova does
    not say about (os-hosts gives no answer: Unknown)."""
    members = ("rack-0",)
    assert awaiting_nova(members, nova_section=None, mapping=recorded_mapping(None)) == frozenset()
    assert awaiting_nova(members, nova_section={"state": "Disabled"}, mapping=recorded_mapping(None)) == frozenset()
    # an endpoint that never answered (no mapping ever recorded) may be no Nova at all
    assert awaiting_nova(members, nova_section={"state": "Unavailable"}, mapping=recorded_mapping(None)) == frozenset()
    unknown = recorded(step(probed=answers({"rack-0": None}), blocker=NO_CONFIG))
    assert recorded_mapping(unknown).entries["rack-0"]["state"] == UNKNOWN
    assert awaiting_nova(members, nova_section={"state": "Enabled"}, mapping=recorded_mapping(unknown)) == frozenset()
