"""Preflight's `image` check against a real OCI registry (the CNCF distribution registry,
Debian's docker-registry 2.8, testbed/registry.py: TLS with a CA of its own, one pushed image),
one bad input per outcome: the image exists (PASS), its tag does not (FAIL with the fix), the
registry wants credentials (WARN naming them), the registry is stopped (WARN: not reachable),
its CA is not trusted here (WARN saying so). The first two run the real CLI as a user types it,
trusting the registry's CA the way a user with a private CA does (SSL_CERT_FILE). A registry
with token auth (as Docker Hub, quay.io and ghcr.io answer) proves the anonymous bearer token:
an image anyone may pull passes through it, a private one warns about credentials.

The same registry served over plain HTTP (as in-cluster and localhost:5000 registries often
are) is asked again without TLS once its port answers the handshake in plain text, and judged
by that answer, through the real CLI and with no CA trusted: its image is a WARN (exit 0) that
says the registry answers over plain HTTP only and how to let the nodes' runtime pull from it,
a missing tag still FAILs.

Where hack/registry.sh cannot install the registry (not Debian, no apt) every test here skips,
saying why."""

from __future__ import annotations

import base64
import os
import ssl
import subprocess
import sys
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ironic_shard_operator.adapters.preflight import run_checks
from ironic_shard_operator.core.preflight import Check, Inputs, Verdict
from testbed import registry
from testbed.ironic_service import IronicService, unique_resource_class
from testbed.procgroup import group_members
from tests.integration.test_preflight_ironic import GOOD_CONF

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).with_name("ironic-shard-operator")


def _started(state: Path, auth: str = "none", plain_http: bool = False) -> dict[str, str]:
    try:
        return registry.start(state, auth=auth, plain_http=plain_http)
    except registry.CannotInstall as error:
        reason = f"the real OCI registry cannot be installed here, registry tests skipped: {error}"
        warnings.warn(reason, stacklevel=1)
        pytest.skip(reason)


def _stopped(state: Path, coordinates: dict[str, str]) -> None:
    registry.stop(state)
    assert not group_members(int(coordinates["REGISTRY_PID"])), "a registry process outlived stop()"


@pytest.fixture(scope="module")
def open_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A registry anyone may pull from, holding REGISTRY_IMAGE."""
    state = tmp_path_factory.mktemp("registry")
    coordinates = _started(state)
    yield coordinates
    _stopped(state, coordinates)


@pytest.fixture(scope="module")
def plain_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A registry anyone may pull from, served over plain HTTP (no TLS), holding REGISTRY_IMAGE."""
    state = tmp_path_factory.mktemp("registry-plain")
    coordinates = _started(state, plain_http=True)
    assert coordinates["REGISTRY_SCHEME"] == "http"
    yield coordinates
    _stopped(state, coordinates)


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A registry behind htpasswd auth, holding REGISTRY_IMAGE (pushed with its credentials)."""
    state = tmp_path_factory.mktemp("registry-auth")
    coordinates = _started(state, auth="htpasswd")
    yield coordinates
    _stopped(state, coordinates)


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A registry with token auth: anonymous pull tokens from its realm, except for private/."""
    state = tmp_path_factory.mktemp("registry-token")
    coordinates = _started(state, auth="token")
    yield coordinates
    _stopped(state, coordinates)


def image_check(image: str) -> Check:
    """The `image` check as preflight runs it (adapters/preflight.run_checks), nothing else asked."""
    checks = run_checks(Inputs(clouds_yaml=None, cloud_name="none", nova_conf=None, image=image))
    return next(c for c in checks if c.name == "image")


def preflight_cli(tmp_path: Path, ironic: IronicService, image: str,
                  ca: str | None) -> subprocess.CompletedProcess[str]:
    """`ironic-shard-operator preflight ... --image IMAGE` with a good cloud and nova.conf (so
    the image decides the exit status), the registry's CA trusted through SSL_CERT_FILE (none
    trusted when `ca` is None)."""
    (tmp_path / "clouds.yaml").write_text(yaml.safe_dump({"clouds": {"ironic": ironic.cloud}}))
    (tmp_path / "nova.conf").write_text(GOOD_CONF)
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    done = subprocess.run([str(CLI), "preflight", "--clouds-yaml", str(tmp_path / "clouds.yaml"),
                           "--cloud", "ironic", "--nova-conf", str(tmp_path / "nova.conf"),
                           "--resource-class", unique_resource_class("registry"), "--image", image],
                          capture_output=True, text=True, timeout=120,
                          env={**env, "SSL_CERT_FILE": ca} if ca else env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def row(output: str, check: str) -> list[str]:
    """The table's line of `check` and its fix line (if any)."""
    lines = output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[1:2] == [check])
    return lines[at:at + 2] if at + 1 < len(lines) and lines[at + 1].lstrip().startswith("fix:") else lines[at:at + 1]


def test_an_image_the_registry_holds_passes_through_the_cli(open_registry, ironic_service, tmp_path) -> None:
    image = open_registry["REGISTRY_IMAGE"]
    assert image.startswith("localhost:")  # the reference as a user writes spec.image
    done = preflight_cli(tmp_path, ironic_service, image, open_registry["REGISTRY_CA"])
    assert done.returncode == 0, done.stdout
    [line] = row(done.stdout, "image")
    assert line.split()[0] == "PASS" and f"{image} exists in its registry" in line
    assert "plain HTTP" not in line  # asked over TLS, answered over TLS


def test_a_tag_the_registry_lacks_fails_through_the_cli_with_the_fix(open_registry, ironic_service,
                                                                     tmp_path) -> None:
    image = f"{open_registry['REGISTRY_HOST']}/{registry.REPOSITORY}:no-such-tag"
    done = preflight_cli(tmp_path, ironic_service, image, open_registry["REGISTRY_CA"])
    assert done.returncode == 1, done.stdout
    verdict, fix = row(done.stdout, "image")
    assert verdict.split()[0] == "FAIL" and f"{image} does not exist in its registry" in verdict
    assert "fix: fix spec.image (repository and tag)" in fix
    # the only failure: everything else about this cloud is fine
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAIL")] == ["image"]


def test_an_image_behind_registry_credentials_warns_naming_them(auth_registry, monkeypatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", auth_registry["REGISTRY_CA"])
    image = auth_registry["REGISTRY_IMAGE"]
    check = image_check(image)
    assert check.verdict is Verdict.WARN
    assert "wants credentials" in check.message and "HTTP 401" in check.message
    assert "imagePullSecret" in check.fix
    # it is there: with the registry's credentials the same manifest answers 200
    host, _, rest = image.partition("/")
    repository, _, tag = rest.rpartition(":")
    token = base64.b64encode(f"{auth_registry['REGISTRY_USER']}:{auth_registry['REGISTRY_PASSWORD']}".encode())
    request = urllib.request.Request(f"https://{host}/v2/{repository}/manifests/{tag}", method="HEAD", headers={
        "Authorization": f"Basic {token.decode()}", "Accept": registry.OCI_MANIFEST})
    context = ssl.create_default_context(cafile=auth_registry["REGISTRY_CA"])
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        assert response.status == 200


def test_a_token_registry_s_image_passes_with_the_anonymous_bearer_token(token_registry, monkeypatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", token_registry["REGISTRY_CA"])
    check = image_check(token_registry["REGISTRY_IMAGE"])
    assert check.verdict is Verdict.PASS, check


def test_a_private_image_of_a_token_registry_warns_naming_credentials(token_registry, monkeypatch) -> None:
    """Its realm gives the anonymous token, which grants nothing here: the registry answers 401."""
    monkeypatch.setenv("SSL_CERT_FILE", token_registry["REGISTRY_CA"])
    check = image_check(token_registry["REGISTRY_PRIVATE_IMAGE"])
    assert check.verdict is Verdict.WARN
    assert "wants credentials" in check.message and "HTTP 401" in check.message
    assert "imagePullSecret" in check.fix


def test_a_stopped_registry_warns_not_reachable(tmp_path, monkeypatch) -> None:
    state = tmp_path / "registry"
    coordinates = _started(state)
    monkeypatch.setenv("SSL_CERT_FILE", coordinates["REGISTRY_CA"])
    image = coordinates["REGISTRY_IMAGE"]
    assert image_check(image).verdict is Verdict.PASS
    _stopped(state, coordinates)
    check = image_check(image)
    assert check.verdict is Verdict.WARN
    assert f"registry {coordinates['REGISTRY_HOST']} not reachable" in check.message
    assert "Connection refused" in check.message and check.fix


def test_a_registry_whose_ca_is_not_trusted_here_warns_so(open_registry, monkeypatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    check = image_check(open_registry["REGISTRY_IMAGE"])
    assert check.verdict is Verdict.WARN
    assert "TLS certificate not trusted here" in check.message and "not reachable" not in check.message
    assert "SSL_CERT_FILE" in check.message


def test_an_image_of_a_plain_http_registry_warns_through_the_cli_with_the_runtime_hint(
        plain_registry, ironic_service, tmp_path) -> None:
    """Before, this was 'not reachable ([SSL: WRONG_VERSION_NUMBER] ...)' though the registry
    answered. No CA is trusted: nothing here needs TLS."""
    image, host = plain_registry["REGISTRY_IMAGE"], plain_registry["REGISTRY_HOST"]
    done = preflight_cli(tmp_path, ironic_service, image, ca=None)
    assert done.returncode == 0, done.stdout  # a warning: the pool can run once the nodes pull over HTTP
    verdict, fix = row(done.stdout, "image")
    assert verdict.split()[0] == "WARN" and f"{image} exists in its registry" in verdict
    assert f"{host} answers over plain HTTP only (no TLS)" in verdict
    assert "container runtime must be configured to pull from it without TLS" in verdict
    assert "not reachable" not in verdict and "SSL" not in verdict
    # localhost:PORT: containerd tries plain HTTP by itself, CRI-O must be told
    assert f"containerd pulls from {host} over plain HTTP by itself" in fix
    assert f'location = "{host}" and insecure = true' in fix
    assert not [line for line in done.stdout.splitlines() if line.startswith("FAIL")]


def test_a_tag_a_plain_http_registry_lacks_fails_through_the_cli(plain_registry, ironic_service,
                                                                   tmp_path) -> None:
    image = f"{plain_registry['REGISTRY_HOST']}/{registry.REPOSITORY}:no-such-tag"
    done = preflight_cli(tmp_path, ironic_service, image, ca=None)
    assert done.returncode == 1, done.stdout
    verdict, fix = row(done.stdout, "image")
    assert verdict.split()[0] == "FAIL" and f"{image} does not exist in its registry" in verdict
    assert "answers over plain HTTP only" in verdict
    assert "fix: fix spec.image (repository and tag); then" in fix
