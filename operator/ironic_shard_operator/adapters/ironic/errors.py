"""The Ironic adapter's errors: one family, `IronicError`, whose message names the problem
(unreachable, not Ironic, credentials, too old) and the cloud it concerns, and holds no
credential (core/redact.py: URL userinfo, the cloud's passwords and tokens). Each class's
`kind` is a label of the metric ironic_shard_ironic_api_errors_total.
"""

from __future__ import annotations

from typing import ClassVar

from ironic_shard_operator.core.redact import redact


class IronicError(Exception):
    """Anything that stops the adapter; the message says what is wrong and where, and holds
    no credential in a form core/redact.py recognises (URL userinfo, `password=...`)."""
    kind: ClassVar[str] = "other"  # metrics: ironic_shard_ironic_api_errors_total{kind}

    def __init__(self, message: str = "") -> None:
        super().__init__(redact(message))


class IronicConfigError(IronicError):
    """The clouds.yaml or cloud name cannot describe a connection."""
    kind: ClassVar[str] = "config"


class IronicUnavailable(IronicError):
    """Ironic does not answer (down, refused, timed out, or 5xx beyond the retries)."""
    kind: ClassVar[str] = "unavailable"


class IronicKeystoneUnavailable(IronicUnavailable):
    """Ironic could not be asked: the token request to Keystone failed (no answer, TLS, an
    HTTP error); Ironic itself was not reached."""
    kind: ClassVar[str] = "keystone_unavailable"


class IronicEndpointError(IronicError):
    """Something answers at the configured endpoint, but it is not the Ironic API."""
    kind: ClassVar[str] = "endpoint"


class IronicAuthError(IronicError):
    """Ironic (or Keystone) refused the credentials, or they may not do what we need."""
    kind: ClassVar[str] = "auth"


class IronicTooOld(IronicError):
    """The Ironic API is older than 1.82 and has no node shards."""
    kind: ClassVar[str] = "too_old"


class IronicRequestError(IronicError):
    """Ironic refused a request for another reason (a bug here or an API change)."""
    kind: ClassVar[str] = "request"


# Every `kind` an Ironic error can have, from the classes above (a metric's label values).
ERROR_KINDS = tuple(dict.fromkeys(cls.kind for cls in (
    IronicUnavailable, IronicKeystoneUnavailable, IronicAuthError, IronicEndpointError, IronicTooOld,
    IronicConfigError, IronicRequestError, IronicError)))
