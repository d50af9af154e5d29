"""An unusable cloud configuration is reported once per change, not once per cycle: a
clouds.yaml with an unknown auth_type gives one WARNING line in the operator's log, and the
same precise message on every cycle (for the status) until the clouds.yaml changes."""

from __future__ import annotations

import logging

import pytest

from ironic_shard_operator.adapters.ironic import IronicAdapter, IronicConfigError
from ironic_shard_operator.controller.ironic_cycle import AdapterCache

POOL = "nova/rack"


def clouds_yaml(auth_type: str) -> str:
    return (f"clouds:\n  ironic:\n    auth_type: {auth_type}\n"
            "    auth: {endpoint: 'http://127.0.0.1:6385'}\n"
            "    baremetal_endpoint_override: http://127.0.0.1:6385\n")


def cycles(cache: AdapterCache, text: str, count: int) -> list[str]:
    """`count` cycles' worth of asking for the adapter; the message of each refusal."""
    messages = []
    for _ in range(count):
        with pytest.raises(IronicConfigError) as caught:
            cache.get((text, "ironic"), lambda: IronicAdapter.from_clouds_yaml(text, "ironic"), label=POOL)
        messages.append(str(caught.value))
    return messages


def warnings_in(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


def test_an_unknown_auth_type_is_named_with_the_known_ones_and_logs_nothing_itself(
        caplog: pytest.LogCaptureFixture):
    """The adapter refuses it before openstacksdk's loader, which logged a WARNING per call."""
    caplog.set_level(logging.DEBUG)
    for _ in range(3):
        with pytest.raises(IronicConfigError) as caught:
            IronicAdapter.from_clouds_yaml(clouds_yaml("passwrod"), "ironic")
        assert "cloud 'ironic' of the clouds.yaml has auth_type 'passwrod', which is no " \
               "authentication plugin known here (known: " in str(caught.value)
        assert "password" in str(caught.value).partition("known: ")[2]
    assert warnings_in(caplog) == []


def test_an_unknown_auth_type_is_logged_once_per_clouds_yaml_change(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG)
    cache = AdapterCache()

    first = cycles(cache, clouds_yaml("passwrod"), 5)

    assert len(set(first)) == 1 and "auth_type 'passwrod'" in first[0], "every cycle says it, alike"
    logged = warnings_in(caplog)
    assert len(logged) == 1 and POOL in logged[0] and "auth_type 'passwrod'" in logged[0]

    second = cycles(cache, clouds_yaml("v3pasword"), 5)

    assert "auth_type 'v3pasword'" in second[0]
    assert len(warnings_in(caplog)) == 2, "a changed clouds.yaml is reported again, once"

    fixed = clouds_yaml("none")
    adapter = cache.get((fixed, "ironic"), lambda: IronicAdapter.from_clouds_yaml(fixed, "ironic"), label=POOL)
    again = cache.get((fixed, "ironic"), lambda: pytest.fail("rebuilt for an unchanged configuration"))
    assert again is adapter
    assert len(warnings_in(caplog)) == 2
