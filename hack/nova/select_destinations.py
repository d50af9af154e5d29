"""TEST SETUP SHORTCUT standing in for the API part of a boot: ask the stack's REAL
nova-scheduler where builds of a flavor would go, exactly as nova-conductor asks it for a boot.

A real `POST /servers` cannot get that far here: Nova's API resolves the image in Glance (or
the root volume in Cinder) before it records anything, and this test bed has neither (see
README.md, "What a boot needs"). Everything after the API's part is real: this script builds
the RequestSpec the API would build for an image boot of `FLAVOR` (`RequestSpec.from_components`
with the flavor read from Nova's database, an image without properties, no networks, no
group, no availability zone), and calls the conductor's own query
(`SchedulerQueryClient.select_destinations(context, spec, instance_uuids, return_objects=True,
return_alternates=False)`, after `scheduler_utils.setup_instance_group`, as
`ComputeTaskManager._schedule_instances` does) over RPC to the running nova-scheduler. The
scheduler runs its request filters and Placement query, its host filters (ComputeFilter, which
rejects a disabled or down service, among them) and weighers, and CLAIMS each chosen node in
Placement for a new instance UUID, as for a boot.

Nothing is left behind: a probe is not a boot, so the allocations the scheduler wrote are
DELETED from Placement right after the answer (`DELETE /allocations/<uuid>` through Nova's own
Placement client, whether the round succeeded or not; NoValidHost has already removed its
own). No instance, build request, request spec or instance mapping is ever written.

    .tools/nova-venv/bin/python hack/nova/select_destinations.py NOVA_CONF FLAVOR_NAME \
        [--count N] [--rounds R]

One round = one boot of N instances (`--min N --max N`): the scheduler places all N or none.
Prints one JSON line: {"rounds": [[[host, node], ...] or null, ...], "seconds": [...]};
null is a round the scheduler answered NoValidHost. Nova's imports cost seconds per run:
ask many rounds in one run.
"""

import argparse
import json
import sys
import time
import uuid

from nova import config, context, exception, objects
from nova.scheduler import utils as scheduler_utils
from nova.scheduler.client import query, report

PROBE_PROJECT = "scheduler-probe"  # the project (and user) the probe's builds are asked for


def request_spec(user_context, flavor, instance_uuids: list) -> "objects.RequestSpec":
    """The RequestSpec the API records for a boot of `len(instance_uuids)` instances of
    `flavor` from an image without properties, no networks, no group, no zone
    (compute/api.py `_provision_instances`: from_components, then num_instances)."""
    spec = objects.RequestSpec.from_components(
        user_context, instance_uuids[0], {"properties": {}}, flavor, None,
        objects.InstancePCIRequests(requests=[]), {}, None, None,
        project_id=PROBE_PROJECT, user_id=PROBE_PROJECT)
    spec.is_bfv = False
    spec.num_instances = len(instance_uuids)
    return spec


def select_once(user_context, flavor, count: int, placement) -> "list | None":
    """One boot's scheduling: [[host, node], ...] per instance, or None for NoValidHost;
    every allocation it claimed is deleted before returning."""
    instance_uuids = [str(uuid.uuid4()) for _ in range(count)]
    spec = request_spec(user_context, flavor, instance_uuids)
    try:
        scheduler_utils.setup_instance_group(user_context, spec)
        host_lists = query.SchedulerQueryClient().select_destinations(
            user_context, spec, instance_uuids, return_objects=True, return_alternates=False)
        return [[hosts[0].service_host, hosts[0].nodename] for hosts in host_lists]
    except exception.NoValidHost:
        return None
    finally:
        for instance_uuid in instance_uuids:
            placement.delete_allocation_for_instance(user_context, instance_uuid, force=True)


def main(argv: list) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("nova_conf")
    parser.add_argument("flavor")
    parser.add_argument("--count", type=int, default=1, help="instances in one boot")
    parser.add_argument("--rounds", type=int, default=1, help="boots asked one after the other")
    args = parser.parse_args(argv)
    config.parse_args(["select-destinations", "--config-file", args.nova_conf])
    objects.register_all()
    flavor = objects.Flavor.get_by_name(context.get_admin_context(), args.flavor)
    user_context = context.RequestContext(user_id=PROBE_PROJECT, project_id=PROBE_PROJECT,
                                          roles=["member", "reader"])
    placement = report.report_client_singleton()
    rounds, seconds = [], []
    for _ in range(args.rounds):
        started = time.monotonic()
        rounds.append(select_once(user_context, flavor, args.count, placement))
        seconds.append(round(time.monotonic() - started, 3))
    return {"rounds": rounds, "seconds": seconds}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
