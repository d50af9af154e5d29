"""No credential in anything the operator writes: the redaction rule (core/redact.py), the
credentials it finds in a clouds.yaml and a nova.conf, and its last lines of defence where
the status and its Events are built and where an Event is posted."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from aiohttp import web

from ironic_shard_operator.adapters.kube import Kube
from ironic_shard_operator.core import model
from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.pods import MemberState
from ironic_shard_operator.core.redact import MASK, redact, secrets_in_clouds_yaml, secrets_in_ini
from ironic_shard_operator.core.status import CycleFacts, build_status

PW = "Qx7-sEcr3t!pw"  # distinctive, and with characters a URL must percent-encode
ENCODED = "Qx7-sEcr3t%21pw"

CLOUDS_YAML = f"""\
clouds:
  prod:
    auth_type: password
    auth:
      auth_url: http://admin:{ENCODED}@keystone.example:5000/v3
      username: admin
      password: "{PW}"
      project_name: admin
      application_credential_id: 4f1d
      application_credential_secret: {PW}-app
      endpoint: http://admin:{PW}-endpoint@ironic.example:6385
      token: {PW}-token
    baremetal_endpoint_override: http://admin:{PW}-override@ironic.example:6385/
    compute_endpoint_override: https://admin:{PW}-compute@nova.example/v2.1
"""
NOVA_CONF = f"""\
[DEFAULT]
transport_url = rabbit://nova:{PW}-rabbit@10.0.0.1:5672,nova:{PW}-rabbit2@10.0.0.2:5672/
[database]
connection = mysql+pymysql://nova:{PW}-db@db.example/nova?charset=utf8
[ironic]
auth_type = password
username = ironic
password = {PW}-ironic
[keystone_authtoken]
password={PW}-authtoken
memcache_secret_key = {PW}-memcache
"""


def test_url_userinfo_is_masked_and_the_user_and_host_kept():
    assert redact(f"Ironic at http://admin:{PW}@127.0.0.1:1 (cloud 'c') is not answering") == \
        f"Ironic at http://admin:{MASK}@127.0.0.1:1 (cloud 'c') is not answering"
    assert redact(f"rabbit://nova:{PW}@h1:5672,nova:{PW}2@h2:5672/vhost") == \
        f"rabbit://nova:{MASK}@h1:5672,nova:{MASK}@h2:5672/vhost"
    assert redact(f"mysql+pymysql://nova:{PW}@db/nova?charset=utf8") == \
        f"mysql+pymysql://nova:{MASK}@db/nova?charset=utf8"


@pytest.mark.parametrize("text", [
    f"password={PW}&user=admin", f'{{"password": "{PW}", "user": "admin"}}', f"auth: {{password: {PW}}}",
    f"X-Auth-Token: {PW}", f"application_credential_secret = {PW}", f"'client_secret': '{PW}'",
])
def test_the_value_of_a_credential_setting_is_masked(text: str):
    assert PW not in redact(text) and MASK in redact(text)


def test_known_values_are_masked_anywhere_also_percent_encoded():
    text = f"could not use {PW} (in a URL: {ENCODED})"
    assert redact(text, {PW}) == f"could not use {MASK} (in a URL: {MASK})"


def test_text_without_credentials_is_unchanged_and_redacting_is_idempotent():
    plain = ("Ironic at http://127.0.0.1:6385 (cloud 'c') refused the credentials of cloud 'c' to list "
             "nodes: HTTP 401: Incorrect username or password; token_url: http://x; the check passed: ok")
    assert redact(plain, {"ab"}) == plain, "too short to mask everywhere"
    once = redact(f"http://u:{PW}@h password={PW}", {PW})
    assert redact(once, {PW}) == once


def test_every_credential_of_a_clouds_yaml_is_found():
    expected = {ENCODED, PW, f"{PW}-app", f"{PW}-endpoint", f"{PW}-token", f"{PW}-override", f"{PW}-compute"}
    found = secrets_in_clouds_yaml(CLOUDS_YAML)
    assert found >= expected
    assert "4f1d" not in found and "admin" not in found
    assert secrets_in_clouds_yaml(yaml.safe_load(CLOUDS_YAML)) >= expected, "the same from a parsed file"
    assert PW in secrets_in_clouds_yaml("clouds:\n  c:\n    auth:\n      password: " + PW + ": broken\n"), \
        "a clouds.yaml that is not YAML still has its passwords found"


def test_every_credential_of_a_nova_conf_is_found():
    found = secrets_in_ini(NOVA_CONF)
    for suffix in ("rabbit", "rabbit2", "db", "ironic", "authtoken", "memcache"):
        assert f"{PW}-{suffix}" in found
    assert "ironic" not in found and "password" not in found


def test_the_status_and_its_events_carry_no_credential():
    secrets = secrets_in_clouds_yaml(CLOUDS_YAML) | secrets_in_ini(NOVA_CONF)
    leaks = [f"{PW}-ironic", f"http://admin:{PW}-override@ironic.example:6385", f"password={PW}"]
    facts = CycleFacts(
        generation=1, members=(model.Member("p-0", False, 1.0),),
        states=(MemberState("p-0", "Replacing", f"pod said {leaks[0]}"),),
        error=f"Ironic at {leaks[1]} is not answering ({leaks[2]})", error_reason="IronicUnavailable",
        extra_events=(Event("Custom", f"nova.conf had {leaks[0]}", "Warning"),),
        nova={"state": "Unavailable", "message": f"Nova at https://admin:{PW}-compute@nova.example said no"},
        now=10.0, secrets=secrets)

    status, events = build_status(facts, None)

    written = json.dumps(status) + json.dumps([(e.reason, e.message) for e in events])
    assert PW not in written and ENCODED not in written
    assert "Ironic at http://admin:***@ironic.example:6385 is not answering" in written, "still says what"
    assert {e.reason for e in events} >= {"Custom", "Degraded"}


class EventSink:
    """An API server that accepts Events and keeps their bodies."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        return web.json_response({"kind": "Event"}, status=201)


async def test_a_posted_event_carries_no_credential(tmp_path, monkeypatch: pytest.MonkeyPatch):
    sink = EventSink()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", sink.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    try:
        async with Kube() as kube:
            await kube.post_event({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}},
                                  Event("Degraded", f"Ironic at http://admin:{PW}@h:1 said password={PW}",
                                        "Warning"), "2026-01-01T00:00:00Z")
    finally:
        await runner.cleanup()
    body, = sink.bodies
    assert PW not in json.dumps(body)
    assert body["message"] == f"Ironic at http://admin:{MASK}@h:1 said password={MASK}"
