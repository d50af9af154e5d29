"""Where a service of a pool's cloud answers, and why it did not: shared by both adapters.

The clouds.yaml's `<service>_endpoint_override` wins; otherwise Keystone's catalog is asked
with the cloud's interface and region, as openstacksdk itself would. Each adapter passes
its own error types, so an operator reading a condition sees "Ironic ..." or "Nova ..."
errors in that adapter's own terms.
"""

from __future__ import annotations

import re
from typing import Any


def endpoint_for(connection: Any, session: Any, service_type: str, cloud: str, *,
                 missing: type[Exception], refused: type[Exception],
                 unreachable: type[Exception]) -> str:
    """The URL of `service_type` in cloud `cloud`, without a trailing slash.

    Raises `missing` when neither the clouds.yaml nor the catalog names one, `refused`
    when Keystone refuses the credentials, `unreachable` when Keystone does not answer.
    """
    from keystoneauth1 import exceptions as ks

    config = connection.config
    url = config.get_endpoint(service_type)
    if not url:
        try:
            url = session.get_endpoint(service_type=service_type, interface=config.get_interface(),
                                       region_name=config.get_region_name(service_type))
        except ks.Unauthorized as error:
            raise refused(f"Keystone refused the credentials of cloud '{cloud}': {error}") from None
        except ks.EndpointNotFound:
            url = None
        except (ks.ConnectionError, ks.DiscoveryFailure) as error:
            raise unreachable(f"cannot reach Keystone for cloud '{cloud}': {short_reason(error)}") from None
    if not url:
        raise missing(f"cloud '{cloud}' has no {service_type} endpoint: neither "
                      f"{service_type}_endpoint_override in its clouds.yaml nor one in its catalog")
    return url.rstrip("/")


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


def short_reason(error: BaseException) -> str:
    """The useful part of a connection error: 'Connection refused', 'timed out', ..."""
    text = str(error)
    found = _ERRNO.search(text)
    if found:
        return found.group(1).strip()
    if "timed out" in text.lower() or "timeout" in type(error).__name__.lower():
        return "timed out"
    return " ".join(text.split())[:200] or type(error).__name__
