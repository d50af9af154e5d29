"""ironic-shard-operator: nova-compute (Ironic driver) as a sharded, self-healing pool on Kubernetes."""
