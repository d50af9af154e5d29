"""Each write of a handover step fails on its own (controller/handover.py `_act`, issue 37): a
refused Job creation (a namespace quota) or forced_down stops no other source's writes and is
reported on its own source; the Lease is asked before every write."""

from __future__ import annotations

import asyncio

from ironic_shard_operator.adapters.kube import KubeError
from ironic_shard_operator.adapters.nova import NovaError
from ironic_shard_operator.controller.handover import HandoverWork, _act
from ironic_shard_operator.core import handover
from ironic_shard_operator.core.model import Move, Node
from ironic_shard_operator.core.spec import read_pool
from tests.unit.nova_records import nova_view, service

POOL = read_pool({
    "metadata": {"name": "rack", "namespace": "ns", "uid": "u-1", "generation": 1},
    "spec": {"replicas": 2, "image": "registry/nova:34", "novaConfig": {"secretRef": {"name": "nc"}},
             "cloud": {"secretRef": {"name": "cl"}},
             "handover": {"novaManageConfig": {"secretRef": {"name": "nm", "key": "nova.conf"}}}}})


class Kube:
    def __init__(self, refuse_create=()):
        self.refuse_create, self.created, self.deleted = set(refuse_create), [], []

    async def create_job(self, namespace, job):
        name = job["metadata"]["name"]
        if name in self.refuse_create:
            raise KubeError(403, f'jobs "{name}" is forbidden: exceeded quota: jobs')
        self.created.append(name)
        return True

    async def delete_job(self, namespace, name):
        self.deleted.append(name)
        return True


class Nova:
    def __init__(self, refuse=()):
        self.refuse, self.forced = set(refuse), []

    def set_forced_down(self, svc, forced):
        if svc.host in self.refuse:
            raise NovaError(f"Nova refused to force {svc.host} down")
        self.forced.append(svc.host)
        return svc


class Ironic:
    def __init__(self):
        self.written = []

    def hand_over(self, moves, nodes, stop):
        self.written += list(moves)
        return type("Result", (), {"applied": len(moves)})()


def batch(source, node, dest):
    moves = (Move(node, source, dest),)
    return handover.JobBatch(source, handover.job_name(source, moves), moves)


def run(step, kube, nova, ironic, may_write=lambda: True, jobs=()):
    events = []
    view = nova_view({h: service(h) for h in ("rack-0", "rack-1", "rack-2", "rack-3")}, {})
    work = HandoverWork(kube, may_write)
    written = asyncio.run(_act(work, POOL, step, ironic, nova, view, [Node("n9", shard="rack-3")], events, jobs))
    return written, events


def test_a_refused_job_or_forced_down_of_one_source_stops_no_other_write_and_is_reported_on_its_source():
    quota, fine = batch("rack-2", "n1", "rack-0"), batch("rack-3", "n2", "rack-1")
    failed_job = handover.JobView("rack-2-handover-old", "rack-2", (("n1", "rack-0"),), handover.FAILED)
    step = handover.HandoverStep(force_down=("rack-1", "rack-3"), create_jobs=(quota, fine),
                                 delete_jobs=("rack-2-handover-old", "rack-3-handover-done"),
                                 shard_writes=(Move("n9", "rack-3", "rack-0"),),
                                 retried=(("rack-2-handover-old", "refused"),))
    kube, nova, ironic = Kube(refuse_create={quota.name}), Nova(refuse={"rack-1"}), Ironic()
    done_job = handover.JobView("rack-3-handover-done", "rack-3", (("n9", "rack-0"),), handover.SUCCEEDED)
    written, events = run(step, kube, nova, ironic, jobs=(failed_job, done_job))
    assert nova.forced == ["rack-3"] and kube.created == [fine.name] and written == 1
    # the failed Job of rack-2 is the record of its attempt: it stays until its batch's next Job exists
    assert kube.deleted == ["rack-3-handover-done"]
    warnings = [e.message for e in events if e.type == "Warning"]
    assert len(warnings) == 2
    assert any(w.startswith("Handover of rack-1: forcing Nova compute service rack-1 down failed") for w in warnings)
    assert any(w.startswith(f"Handover of rack-2: creating Job {quota.name} failed") and "quota" in w
               for w in warnings)


def test_the_lease_is_asked_before_every_write_and_nothing_is_written_once_it_is_lost():
    step = handover.HandoverStep(force_down=("rack-1",), create_jobs=(batch("rack-2", "n1", "rack-0"),),
                                 shard_writes=(Move("n9", "rack-3", "rack-0"),))
    asked = []

    def may_write():
        asked.append(len(asked))
        return len(asked) == 1  # lost after the first write

    kube, nova, ironic = Kube(), Nova(), Ironic()
    written, _ = run(step, kube, nova, ironic, may_write=may_write)
    assert len(asked) == 3 and nova.forced == ["rack-1"] and kube.created == [] and written == 0
