"""The operator's log carries no credential, whoever logs it: the filter on its handlers masks
the credentials of every pool's Secrets, URL userinfo and credential settings, in messages,
their arguments and exception texts."""

from __future__ import annotations

import io
import logging

from ironic_shard_operator.controller.log_redaction import KnownSecrets, install

PW = "Lq4-Logged!Pw"


def test_every_record_the_handlers_emit_is_redacted():
    known = KnownSecrets()
    known.remember("ns/a", frozenset({PW}))
    out = io.StringIO()
    logger = logging.getLogger("test_log_redaction.root")
    logger.propagate = False
    handler = logging.StreamHandler(out)
    logger.addHandler(handler)
    child = logging.getLogger("test_log_redaction.root.keystoneauth")  # propagates to the handler
    try:
        install(logger, known)
        install(logger, known)  # idempotent
        child.warning("Failed to discover available identity versions when contacting %s.",
                      "http://admin:Other-Pw-42@keystone:5000/v3")
        logger.warning("pool ns/a: Nova: %s", f"nova.conf [ironic] password is {PW}")
        try:
            raise ValueError(f"config said password={PW}")
        except ValueError:
            logger.exception("cycle failed")
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert PW not in text and "Other-Pw-42" not in text
    assert "contacting http://admin:***@keystone:5000/v3." in text
    assert "password is ***" in text and "ValueError: config said password=***" in text
    assert len(handler.filters) == 1


def test_known_secrets_follow_each_pool_s_latest_read():
    known = KnownSecrets()
    known.remember("ns/a", frozenset({"old-secret"}))
    known.remember("ns/b", frozenset({"b-secret"}))
    known.remember("ns/a", frozenset({"new-secret"}))
    assert known.every == {"new-secret", "b-secret"} and known.of("ns/a") == {"new-secret"}
    known.forget("ns/b")
    assert known.every == {"new-secret"}
