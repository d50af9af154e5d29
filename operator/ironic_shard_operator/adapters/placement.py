"""The Placement adapter: does an Ironic node's resource provider carry allocations? Talks,
decides nothing.

Nova's scheduler claims a bare-metal node in Placement (an allocation against the resource
provider whose uuid is the node's uuid) before the build reaches Ironic and sets the node's
instance_uuid. The shard-write guard (core/shard_write.py, guarded_verdict) asks this right
before moving a free node away from a live owner, so that a build in flight is never
stranded on a member that no longer lists its node.

openstacksdk's placement proxy asks the allocations, through this adapter's one-attempt
transport (openstack_http.routed_proxy) on the cloud's session; the API root stays raw.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

from ironic_shard_operator.adapters.openstack_http import (
    Transient, answer_of, cloud_label, describe, endpoint_for, not_answering, parse_version, redacting,
    routed_proxy, secrets_of, session_of, version_document,
)
from ironic_shard_operator.core.redact import redact

# Any microversion answers GET /resource_providers/{uuid}/allocations the same way.
MICROVERSION = "1.0"


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

    @cached_property
    def _placement(self) -> Any:
        """openstacksdk's placement proxy for `endpoint`, at 1.0, through `_exchange`."""
        from openstack.placement.v1._proxy import Proxy

        return routed_proxy(Proxy, self.connection, service_type="placement", endpoint=self.endpoint,
                            default_microversion=MICROVERSION, exchange=self._exchange)

    @redacting
    def check(self) -> tuple[int, int]:
        """Placement's maximum microversion, from its root document. Raises
        PlacementNotConfigured when what answers is not Placement, PlacementUnavailable when
        nothing answers."""
        # Raw: openstacksdk has no call for Placement's root document, and what answers may not be Placement
        response = self._placement.get(self.endpoint + "/", microversion=None)
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
        from openstack import exceptions as sdk

        try:
            return tuple(sorted(allocation.consumer_id
                                for allocation in self._placement.resource_provider_allocations(node_uuid)))
        except sdk.HttpException as error:
            response = error.response
            if response.status_code == 404 and "resource provider" in response.text.lower():
                return ()  # Placement's own 404 (a wrong endpoint's 404 is an error below)
            raise PlacementUnavailable(f"Placement at {self.endpoint} (cloud '{self.cloud}') could not "
                                       f"list the allocations of provider {node_uuid}: {describe(response)}") from None

    def _exchange(self, method: str, send: Callable[..., Any]) -> Any:
        """One attempt, counted: the response, whatever its status; PlacementUnavailable when
        nothing answered."""
        self.requests_made += 1
        try:
            return answer_of(self._session, send, timeout=self.request_timeout, cloud=self.cloud,
                             refused=PlacementUnavailable)
        except Transient as failure:
            raise PlacementUnavailable(not_answering("Placement", self.endpoint, self.cloud, failure,
                                                     "is it running, and is its endpoint right?")) from None
