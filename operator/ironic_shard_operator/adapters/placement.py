"""The Placement adapter: does an Ironic node's resource provider carry allocations? Talks,
decides nothing.

Nova's scheduler claims a bare-metal node in Placement (an allocation against the resource
provider whose uuid is the node's uuid) before the build reaches Ironic and sets the node's
instance_uuid. The shard-write guard (core/shard_write.py, guarded_verdict) asks this right
before moving a free node away from a live owner, so that a build in flight is never
stranded on a member that no longer lists its node.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from ironic_shard_operator.adapters.openstack_http import (
    Transient, cloud_label, describe, endpoint_for, not_answering, parse_version, redacting, secrets_of, send_once,
    session_of, version_document,
)
from ironic_shard_operator.core.redact import redact

# Any microversion answers GET /resource_providers/{uuid}/allocations the same way.
HEADERS = {"OpenStack-API-Version": "placement 1.0", "Accept": "application/json"}


class PlacementError(Exception):
    """Placement could not answer the question; the message names the cloud and the problem."""

    def __init__(self, message: str = "") -> None:
        super().__init__(redact(message))


class PlacementNotConfigured(PlacementError):
    """The cloud names no placement endpoint (clouds.yaml nor catalog), or what answers
    there is not Placement (a token_endpoint or http_basic cloud gives its one URL for every
    service)."""


class PlacementUnavailable(PlacementError):
    """Placement did not answer, or answered with an error."""


class PlacementAdapter:
    """`check()` once, then `consumers(node_uuid)`, one GET per question.
    Construction does no I/O; `requests_made` counts the requests sent (answered or not)."""

    def __init__(self, connection: Any, *, cloud_name: str | None = None, request_timeout: float = 10.0) -> None:
        self.connection = connection
        self.cloud = cloud_label(connection, cloud_name)
        self.secrets = secrets_of(connection)
        self.request_timeout = request_timeout
        self._session = session_of(connection, missing=PlacementNotConfigured)
        self.requests_made = 0

    @cached_property
    def endpoint(self) -> str:
        return endpoint_for(self.connection, self._session, "placement", self.cloud,
                            missing=PlacementNotConfigured, refused=PlacementUnavailable,
                            unreachable=PlacementUnavailable)

    @redacting
    def check(self) -> tuple[int, int]:
        """Placement's maximum microversion, from its root document. Raises
        PlacementNotConfigured when what answers is not Placement, PlacementUnavailable when
        nothing answers."""
        response = self._get(self.endpoint + "/")
        document = version_document(response, "v1.0")
        if document is None:
            raise PlacementNotConfigured(
                f"{self.endpoint} (placement endpoint of cloud '{self.cloud}') answered HTTP "
                f"{response.status_code} but is not the Placement API")
        return parse_version(document.get("max_version") or "1.0")

    @redacting
    def consumers(self, node_uuid: str) -> tuple[str, ...]:
        """The consumers (instance uuids, for Nova) holding allocations against the node's
        resource provider, sorted. No provider (404: Nova never reported the node) has none.
        Raises PlacementNotConfigured or PlacementUnavailable."""
        response = self._get(f"{self.endpoint}/resource_providers/{node_uuid}/allocations")
        if response.status_code == 404 and "resource provider" in response.text.lower():
            return ()  # Placement's own 404 (a wrong endpoint's 404 is an error below)
        if response.status_code != 200:
            raise PlacementUnavailable(f"Placement at {self.endpoint} (cloud '{self.cloud}') could not "
                                       f"list the allocations of provider {node_uuid}: {describe(response)}")
        return tuple(sorted((response.json() or {}).get("allocations") or {}))

    def _get(self, url: str) -> Any:
        """One GET, counted: the response, whatever its status; PlacementUnavailable when
        nothing answered."""
        self.requests_made += 1
        try:
            return send_once(self._session, "GET", url, json=None, headers=HEADERS,
                             timeout=self.request_timeout, cloud=self.cloud, refused=PlacementUnavailable)
        except Transient as failure:
            raise PlacementUnavailable(not_answering("Placement", self.endpoint, self.cloud, failure,
                                                     "is it running, and is its endpoint right?")) from None
