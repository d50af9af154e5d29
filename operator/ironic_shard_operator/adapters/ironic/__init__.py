"""The Ironic adapter, the one entry to import from: read a pool's managed nodes (reads.py),
write node shards (writes.py), and the errors of both (errors.py). Talks, decides nothing:
the write rule and which moves are guarded are core/shard_write.py's.
"""

from ironic_shard_operator.adapters.ironic.errors import (
    ERROR_KINDS, IronicAuthError, IronicConfigError, IronicEndpointError, IronicError, IronicKeystoneUnavailable,
    IronicRequestError, IronicTooOld, IronicUnavailable,
)
from ironic_shard_operator.adapters.ironic.reads import (
    MICROVERSION_HEADER, NODE_FIELDS, SHARD_MICROVERSION, IronicReader, node_from_api, selector_filters,
)
from ironic_shard_operator.adapters.ironic.writes import ApplyResult, Guard, IronicAdapter

__all__ = [
    "ERROR_KINDS", "MICROVERSION_HEADER", "NODE_FIELDS", "SHARD_MICROVERSION", "ApplyResult", "Guard",
    "IronicAdapter", "IronicAuthError", "IronicConfigError", "IronicEndpointError", "IronicError",
    "IronicKeystoneUnavailable", "IronicReader", "IronicRequestError", "IronicTooOld", "IronicUnavailable",
    "node_from_api", "selector_filters",
]
