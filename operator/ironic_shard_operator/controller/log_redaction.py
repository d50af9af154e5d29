"""The operator's log output carries no credential, whoever logs: our modules, kopf, or the
OpenStack libraries (keystoneauth logs the auth_url it could not reach, userinfo included).

`install()` puts a `RedactingFilter` on the root logger's handlers (kopf's stream handler):
every record they emit is redacted (core/redact.py) with the credentials of every pool's
clouds.yaml and nova.conf, which the cycles hand to `KNOWN` as they read the Secrets. The
same values are masked in the pool's status and Events (`KNOWN.of(pool)`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from ironic_shard_operator.core.redact import redact


class KnownSecrets:
    """The credentials each pool's Secrets hold, by pool key; read from any thread.

    Replaced whole on each update (copy on write), so a reader never sees a dict changing.
    """

    def __init__(self) -> None:
        self._by_pool: Mapping[str, frozenset[str]] = {}
        self._every: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def remember(self, pool_key: str, secrets: frozenset[str]) -> None:
        """The credentials `pool_key`'s Secrets hold now (those of an earlier read are dropped)."""
        with self._lock:
            if self._by_pool.get(pool_key) == secrets:
                return
            by_pool = {**self._by_pool, pool_key: secrets}
            self._by_pool, self._every = by_pool, frozenset().union(*by_pool.values())

    def forget(self, pool_key: str) -> None:
        with self._lock:
            by_pool = {key: value for key, value in self._by_pool.items() if key != pool_key}
            self._by_pool, self._every = by_pool, frozenset().union(*by_pool.values())

    def of(self, pool_key: str) -> frozenset[str]:
        return self._by_pool.get(pool_key, frozenset())

    @property
    def every(self) -> frozenset[str]:
        return self._every


KNOWN = KnownSecrets()


class RedactingFilter(logging.Filter):
    """Redacts a record's message (its arguments merged in) and its exception text."""

    def __init__(self, known: KnownSecrets = KNOWN) -> None:
        super().__init__()
        self.known = known

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self.known.every
        message = record.getMessage()
        clean = redact(message, secrets)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, secrets)
        return True


def install(logger: logging.Logger | None = None, known: KnownSecrets = KNOWN) -> None:
    """Redact every record the handlers of `logger` (default: the root logger) emit; call it
    after the handlers are set up (kopf.configure). Idempotent."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter(known))
