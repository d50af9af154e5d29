"""Preflight's Nova and Placement checks against the real Nova stack: one cloud reaching Ironic,
Nova and Placement passes; a user without admin rights fails the Nova check; a Placement that
does not answer fails the Placement check."""

from __future__ import annotations

import socket

import pytest
import yaml

from ironic_shard_operator.adapters.preflight import cloud_checks
from testbed.ironic_service import IronicService
from testbed.nova_stack import NovaStack

pytestmark = pytest.mark.nova



def cloud(stack: NovaStack, noauth_ironic: IronicService, token: str | None = None, **overrides: str) -> str:
    entry = stack.cloud_config(token)
    entry.pop("compute_api_version")
    entry |= {"baremetal_endpoint_override": noauth_ironic.url, "placement_endpoint_override": stack.placement_url,
              **overrides}
    return yaml.safe_dump({"clouds": {"c": entry}})


def verdicts(clouds_yaml: str) -> dict[str, tuple[str, str]]:
    return {c.name: (c.verdict.value, c.message) for c in cloud_checks(clouds_yaml, "c")}


def test_ironic_nova_and_placement_pass_with_an_admin(nova_stack: NovaStack, noauth_ironic: IronicService) -> None:
    found = verdicts(cloud(nova_stack, noauth_ironic))
    assert found["nova"][0] == "pass" and "lists compute services" in found["nova"][1]
    assert found["placement"][0] == "pass", found["placement"]
    assert found["ironic-reachable"][0] == "pass"


def test_a_user_without_admin_fails_the_nova_check(nova_stack: NovaStack, noauth_ironic: IronicService) -> None:
    verdict, message = verdicts(cloud(nova_stack, noauth_ironic, token="demo:demo"))["nova"]
    assert verdict == "fail" and "does not allow (policy; admin is needed)" in message


def test_a_placement_that_does_not_answer_fails(nova_stack: NovaStack, noauth_ironic: IronicService) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    verdict, message = verdicts(cloud(nova_stack, noauth_ironic, placement_endpoint_override=f"http://127.0.0.1:{port}"))[
        "placement"]
    assert verdict == "fail" and "not answering" in message
