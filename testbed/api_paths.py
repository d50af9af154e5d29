"""Resource URLs of the Kubernetes API: a path parsed into its parts (ApiPath), as the API
server's request info reads it (kube_client.py finds the official model of an answer by them)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ApiPath:
    """A resource URL: /api/v1/namespaces/NS/pods/NAME/status -> its parts."""
    group: str
    version: str
    plural: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None

    @classmethod
    def parse(cls, path: str) -> ApiPath | None:
        """The parts of a resource URL; None for any other path (discovery, /version, /healthz)."""
        parts = [part for part in path.split('/') if part]
        if len(parts) >= 3 and parts[0] == 'api':
            group, version, rest = '', parts[1], parts[2:]
        elif len(parts) >= 4 and parts[0] == 'apis':
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = None
        own_subresource = len(rest) == 3 and rest[2] in ('status', 'finalize')  # of a namespace itself
        if len(rest) >= 3 and rest[0] == 'namespaces' and not own_subresource:  # .../namespaces/NS/PLURAL/...
            namespace, rest = rest[1], rest[2:]
        if not 1 <= len(rest) <= 3:
            return None
        return cls(group, version, rest[0], namespace, *rest[1:])
