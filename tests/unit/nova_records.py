"""Nova's compute service records as the Nova adapter returns them, for the unit tests of the
decisions that read them (forced_down in core/fencing.py, the audit in core/nova_policy.py)."""

from ironic_shard_operator.adapters.nova import ComputeService


def service(host, *, up=True, forced_down=False):
    return ComputeService(id=f"id-{host}", host=host, up=up and not forced_down, enabled=True,
                          forced_down=forced_down)


def services(*hosts, changed=()):
    """Up services for `hosts`, with the ServiceRecords in `changed` instead where given."""
    by_host = {s.host: s for s in changed}
    return {h: by_host.get(h) or service(h) for h in hosts}


def nova_view(services, hosts, instances=None, stranded=frozenset(), *, nodes=(), read=None, tasks=None):
    """core/handover.py's NovaView as the controller builds it when Nova tells the truth: the
    lists (`hosts`: node -> the host its compute node is listed under), and each node's direct
    read agreeing with them (its compute node and its server on that host; `nodes` with an
    instance absent from `hosts` read as "no compute node"). `read` overrides single nodes."""
    from ironic_shard_operator.core.handover import NodeRead, NovaView

    reads = {uuid: NodeRead(host, True, host, uuid) for uuid, host in hosts.items()}
    reads.update((n.uuid, NodeRead(None, True)) for n in nodes if n.instance_uuid and n.uuid not in hosts)
    reads.update(read or {})
    return NovaView(services, hosts, instances or {}, frozenset(stranded), reads, tasks or {})
