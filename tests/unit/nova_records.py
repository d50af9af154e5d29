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
