"""The nova-compute stand-in reads its config files as Nova (oslo.config) would."""

from __future__ import annotations

from pathlib import Path

import pytest

from ironic_shard_operator.testing import standin
from ironic_shard_operator.testing.standin import ConfigError, Health, compute_config, parse_ini, read_config_files

NOVA_CONF = """\
[DEFAULT]
# the base file from the user's Secret
host = placeholder
transport_url = rabbit://nova:secret@rabbit:5672/

[ironic]
auth_type = http_basic
username = admin
password = "p@ss: w=rd"
endpoint_override = http://ironic.example:6385
conductor_group = old-group
"""

MEMBER_CONF = """\
[DEFAULT]
host = rack-a-1

[IRONIC]
shard = rack-a-1
conductor_group = rack-a
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_member_file_overrides_the_base_file(tmp_path):
    files = [write(tmp_path, "nova.conf", NOVA_CONF), write(tmp_path, "member.conf", MEMBER_CONF)]
    config = compute_config(read_config_files(files), files)
    assert config.host == "rack-a-1"
    assert config.shard == "rack-a-1"
    assert config.conductor_group == "rack-a"
    assert config.endpoint == "http://ironic.example:6385"
    assert (config.auth_type, config.username, config.password) == ("http_basic", "admin", "p@ss: w=rd")


def test_the_order_of_files_decides(tmp_path):
    files = [write(tmp_path, "member.conf", MEMBER_CONF), write(tmp_path, "nova.conf", NOVA_CONF)]
    merged = read_config_files(files)
    assert merged["DEFAULT"]["host"] == "placeholder"
    assert merged["ironic"]["conductor_group"] == "old-group"


def test_oslo_ini_syntax():
    sections = parse_ini(
        "[DEFAULT]\n"
        "; a comment\n"
        "host: from-colon\n"
        "debug = true\n"
        "debug = false\n"
        "[filter]\n"
        "names = one\n"
        "    two\n"
        "empty =\n",
        "x.conf")
    assert sections["DEFAULT"] == {"host": "from-colon", "debug": "false"}
    assert sections["filter"] == {"names": "one\ntwo", "empty": ""}


@pytest.mark.parametrize(("text", "message"), [
    ("host = a\n", "x.conf:1: option 'host' outside any [section]"),
    ("[DEFAULT\nhost = a\n", "x.conf:1: invalid section header"),
    ("[DEFAULT]\njust words\n", "x.conf:2: no '=' or ':'"),
    ("[DEFAULT]\n  indented\n", "x.conf:2: continuation line"),
])
def test_syntax_errors_name_file_and_line(text, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        parse_ini(text, "x.conf")


@pytest.mark.parametrize(("member", "message"), [
    ("[DEFAULT]\nhost = rack-a-0\n", r"\[ironic\]shard is not set in .*nova.conf, .*member.conf"),
    ("[ironic]\nshard = rack-a-0\n[DEFAULT]\nhost =\n", r"\[DEFAULT\]host is not set"),
    ("[DEFAULT]\nhost = a\n[ironic]\nshard = a\nauth_type = password\n",
     r"auth_type = password is not supported .* none or http_basic"),
    ("[DEFAULT]\nhost = a\n[ironic]\nshard = a\npassword =\n", r"\[ironic\]password is not set"),
])
def test_unusable_configs_are_refused_naming_the_option(tmp_path, member, message):
    files = [write(tmp_path, "nova.conf", NOVA_CONF), write(tmp_path, "member.conf", member)]
    with pytest.raises(ConfigError, match=message):
        compute_config(read_config_files(files), files)


def test_main_exits_2_with_the_reason_on_a_bad_config(tmp_path, capsys):
    missing = str(tmp_path / "absent.conf")
    assert standin.main(["--config-file", missing, "--health-port", "0"]) == 2
    assert f"cannot read config file {missing}" in capsys.readouterr().err


def test_health_goes_stale_without_fresh_listings():
    now = [100.0]
    health = Health(stale_after=30, clock=lambda: now[0])
    assert health.status() == (False, "no listing yet")
    health.succeeded()
    assert health.status() == (True, "ok")
    health.failed("ConnectFailure: refused")
    now[0] = 131.0
    ready, reason = health.status()
    assert not ready
    assert reason == "last successful listing 31s ago: ConnectFailure: refused"
