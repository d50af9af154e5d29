"""TEST SETUP SHORTCUT: record an instance on an Ironic node in Nova, through Nova's own objects.

Nothing here can boot a real instance (no Glance, Cinder, Neutron: README.md), yet the operator
must meet Nova's answers for hosts that carry instances (DELETE os-services -> 409). This
script, run by the Nova venv's python with the control plane's nova.conf, writes what a boot
would have left behind: an Instance in cell1 on `host`/`node` (with the compute node's id,
as Nova requires), with what the API and the compute's power actions read of a booted
instance (its flavor in instance_extra, an InstanceInfoCache with an empty network_info, so
/servers/detail renders it; launched_at; an empty image_ref), and its InstanceMapping in the
API database. It prints the instance UUID; the caller sets the same UUID as the Ironic node's
instance_uuid (and powers the node on, as a deploy leaves it). Several nodes of one host are
seeded by one run (one UUID printed per node, in order): Nova's imports cost seconds per run.

    .tools/nova-venv/bin/python hack/nova/seed_instance.py NOVA_CONF HOST NODE_UUID [NODE_UUID ...]
    .tools/nova-venv/bin/python hack/nova/seed_instance.py NOVA_CONF --delete INSTANCE_UUID
"""

import sys
import uuid

from nova import config, context, objects
from nova.network import model as network_model
from oslo_utils import timeutils


def _flavor() -> "objects.Flavor":
    """The flavor a boot would have recorded (a baremetal flavor: the resource class does the
    scheduling, so no VCPU/RAM/disk are claimed); never written to the flavors table."""
    return objects.Flavor(id=1, flavorid="seeded-baremetal", name="seeded-baremetal", memory_mb=0, vcpus=0,
                          root_gb=0, ephemeral_gb=0, swap=0, rxtx_factor=1.0, vcpu_weight=0, disabled=False,
                          is_public=True, extra_specs={}, description=None)


def main(nova_conf: str, host: str, nodes: list[str]) -> list[str]:
    config.parse_args(["seed-instance", "--config-file", nova_conf])
    objects.register_all()
    admin = context.get_admin_context()
    cell = next((c for c in objects.CellMappingList.get_all(admin) if c.name == "cell1"), None)
    if cell is None:
        raise SystemExit("seed_instance: no cell 'cell1' in this stack")
    return [_seed(admin, cell, host, node) for node in nodes]


def _seed(admin, cell, host: str, node: str) -> str:
    instance_uuid = str(uuid.uuid4())
    with context.target_cell(admin, cell) as cell_context:
        compute_node = objects.ComputeNode.get_by_host_and_nodename(cell_context, host, node)
        objects.Instance(
            cell_context, uuid=instance_uuid, host=host, node=node, compute_id=compute_node.id,
            project_id="seeded", user_id="seeded", display_name=f"seeded-{node[:8]}",
            hostname=f"seeded-{node[:8]}", vm_state="active", power_state=1, task_state=None,
            image_ref="", launched_at=timeutils.utcnow(), flavor=_flavor(), instance_type_id=1,
            memory_mb=0, vcpus=0, root_gb=0, ephemeral_gb=0, system_metadata={}, metadata={},
            info_cache=objects.InstanceInfoCache(network_info=network_model.NetworkInfo()),
        ).create()
    objects.InstanceMapping(admin, instance_uuid=instance_uuid, cell_mapping=cell,
                            project_id="seeded", user_id="seeded").create()
    return instance_uuid


def delete(nova_conf: str, instance_uuid: str) -> str:
    """Mark a seeded instance deleted in cell1, as Nova's own delete leaves it (the row kept,
    `deleted` set): nova-manage and the API no longer count it."""
    config.parse_args(["seed-instance", "--config-file", nova_conf])
    objects.register_all()
    admin = context.get_admin_context()
    cell = next(c for c in objects.CellMappingList.get_all(admin) if c.name == "cell1")
    with context.target_cell(admin, cell) as cell_context:
        objects.Instance.get_by_uuid(cell_context, instance_uuid).destroy()
    return instance_uuid


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--delete":
        print(delete(sys.argv[1], sys.argv[3]))
    elif len(sys.argv) >= 4:
        print("\n".join(main(sys.argv[1], sys.argv[2], sys.argv[3:])))
    else:
        raise SystemExit(__doc__)
