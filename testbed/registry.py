"""A real OCI registry (the CNCF distribution registry, Debian's docker-registry 2.8) on
127.0.0.1 with TLS (or, asked for, plain HTTP), holding one small image: the peer of
preflight's image check.

Commands: install (hack/registry.sh), start STATE_DIR (TLS or plain HTTP; auth none, htpasswd or
token, with this module's token server in the registry's process group), stop, status, and the
token server itself. A STATE_DIR keeps one registry (port, storage, credentials), so a stopped
one starts again as it was. Details: README.md, "The OCI registry".
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import secrets
import ssl
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from testbed import service_process
from testbed.certificates import CertificateAuthority
from testbed.ports import free_port
from testbed.service_process import ServiceProcess

REPO = Path(__file__).resolve().parents[1]
INSTALLER = REPO / "hack" / "registry.sh"
REPOSITORY, PRIVATE_REPOSITORY, TAG = "testbed/member", "private/member", "1.0"
AUTH_KINDS = ("none", "htpasswd", "token")
SERVICE, ISSUER = "testbed-registry", "testbed-token-issuer"
HOST_NAME = "localhost"
START_TIMEOUT_SECONDS = 30.0  # ~0.1 s alone
REQUEST_TIMEOUT = 10.0
PROVISIONED = "htpasswd is missing, provisioning with default user"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class ServiceError(service_process.ServiceError):
    """A problem installing, starting or using the registry, with a message a person can act on."""


class CannotInstall(ServiceError):
    """This machine cannot have the registry (hack/registry.sh exit 3): the reason."""


def install() -> Path:
    """The registry binary, installed by hack/registry.sh if needed (idempotent, locked)."""
    done = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True)
    if done.returncode == 3:
        raise CannotInstall(done.stderr.strip())
    if done.returncode != 0:
        raise ServiceError(f"hack/registry.sh failed (exit {done.returncode}):\n{done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1])


# --- TLS ---------------------------------------------------------------------------------

def make_certificates(state: Path) -> None:
    """ca.pem (a CA made for this registry only), server.pem and server.key for localhost,
    127.0.0.1 and ::1 (testbed/certificates.py: the extensions a strict verifier wants)."""
    ca = CertificateAuthority.create(state, "ironic-shard-operator testbed registry CA")
    ca.issue(state, "server", HOST_NAME, hosts=(HOST_NAME, "127.0.0.1", "::1"), server=True)


# --- configuration and process -----------------------------------------------------------

def render_config(state: Path, port: int, auth: str, plain_http: bool = False) -> None:
    """config.yml (JSON, which YAML reads), the certificates and the coordinates, into a fresh
    `state`; `plain_http` leaves TLS out of the registry's listener."""
    if auth not in AUTH_KINDS:
        raise ServiceError(f"--auth is one of {', '.join(AUTH_KINDS)}, not {auth!r}")
    make_certificates(state)
    config: dict = {
        "version": 0.1,
        "log": {"level": "info", "formatter": "json", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(state / "data")},
                    "maintenance": {"uploadpurging": {"enabled": False}}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": secrets.token_urlsafe(24)},
    }
    if not plain_http:
        config["http"]["tls"] = {"certificate": str(state / "server.pem"), "key": str(state / "server.key")}
    if auth == "htpasswd":
        config["auth"] = {"htpasswd": {"realm": SERVICE, "path": str(state / "htpasswd")}}
    elif auth == "token":
        token_port = free_port()
        (state / "token-port").write_text(f"{token_port}\n")
        config["auth"] = {"token": {"realm": f"https://{HOST_NAME}:{token_port}/token", "service": SERVICE,
                                    "issuer": ISSUER, "rootcertbundle": str(state / "ca.pem")}}
    (state / "config.yml").write_text(json.dumps(config, indent=2) + "\n")
    (state / "auth").write_text(auth + "\n")
    (state / "host").write_text(f"{HOST_NAME}:{port}\n")
    (state / "scheme").write_text("http\n" if plain_http else "https\n")


def configured_host(state: Path) -> str:
    return (state / "host").read_text().strip()


def configured_scheme(state: Path) -> str:
    """https, or http for a registry started with --plain-http (a STATE_DIR from before that
    mode has no `scheme` file: https)."""
    scheme = state / "scheme"
    return scheme.read_text().strip() if scheme.exists() else "https"


def base_url(state: Path) -> str:
    return f"{configured_scheme(state)}://{configured_host(state)}"


def configured_auth(state: Path) -> str:
    return (state / "auth").read_text().strip()


def _opener(state: Path) -> urllib.request.OpenerDirector:
    """HTTPS trusting this registry's CA only (plain HTTP too), never through a proxy."""
    context = ssl.create_default_context(cafile=str(state / "ca.pem"))
    return urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                       urllib.request.HTTPSHandler(context=context))


def _answers(state: Path, url: str) -> bool:
    try:
        with _opener(state).open(url, timeout=2):
            return True
    except urllib.error.HTTPError as error:
        return error.code in (400, 401)
    except (OSError, ValueError):
        return False


def answers(state: Path) -> bool:
    """True when the registry's /v2/ answers (200, or 401 when it wants credentials), and its
    token server too where it has one."""
    if configured_auth(state) == "token" and not _answers(
            state, f"https://{HOST_NAME}:{(state / 'token-port').read_text().strip()}/token"):
        return False
    return _answers(state, f"{base_url(state)}/v2/")


def _process(state: Path) -> ServiceProcess:
    return ServiceProcess(state.resolve() / "registry.pid", "registry", ServiceError)


def running_pid(state: Path) -> int | None:
    return _process(state).running_pid()


def log_tail(state: Path, lines: int = 20) -> str:
    return service_process.last_lines(state / "registry.log", lines)


def credentials(state: Path) -> tuple[str, str] | None:
    """(user, password) of a registry with htpasswd auth: saved from the line the registry
    logs when it provisions its htpasswd file; None for the other kinds of auth."""
    saved = state / "credentials.json"
    if saved.exists():
        user, password = json.loads(saved.read_text())
        return user, password
    if configured_auth(state) != "htpasswd":
        return None
    for line in (state / "registry.log").read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") == PROVISIONED:
            saved.write_text(json.dumps([entry["user"], entry["password"]]))
            saved.chmod(0o600)
            return entry["user"], entry["password"]
    raise ServiceError(f"the registry logged no provisioned user ({PROVISIONED!r}):\n{log_tail(state)}")


def start(state: Path, auth: str = "none", port: int | None = None,
          plain_http: bool = False) -> dict[str, str]:
    """Start the registry of `state` (set up, with IMAGE pushed, on first use; `plain_http`
    serves it without TLS) and wait until it answers; return its coordinates."""
    state = state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    binary = install()
    first = not (state / "config.yml").exists()
    if first:
        render_config(state, port or free_port(), auth, plain_http)
    pid = running_pid(state)
    if pid is None or not answers(state):
        if pid is not None:
            stop(state)
        pid = _serve(state, binary)
    user_password = credentials(state)
    if first:
        for repository in (REPOSITORY, PRIVATE_REPOSITORY):
            push_image(state, repository, TAG)
    host = configured_host(state)
    coordinates = {"REGISTRY_HOST": host, "REGISTRY_IMAGE": f"{host}/{REPOSITORY}:{TAG}",
                   "REGISTRY_PRIVATE_IMAGE": f"{host}/{PRIVATE_REPOSITORY}:{TAG}",
                   "REGISTRY_CA": str(state / "ca.pem"), "REGISTRY_SCHEME": configured_scheme(state)}
    if user_password:
        coordinates.update(REGISTRY_USER=user_password[0], REGISTRY_PASSWORD=user_password[1])
    return {**coordinates, "REGISTRY_PID": str(pid)}


def _serve(state: Path, binary: Path) -> int:
    """The registry in a new process group (and the token server in the same group)."""
    service = _process(state)
    # In this session: a process may join a group only in its own session, and the token
    # server joins the registry's.
    log = state / "registry.log"
    process = service.start([str(binary), "serve", str(state / "config.yml")], log,
                            own_session=False)
    if configured_auth(state) == "token":
        try:
            with open(log, "ab") as out:
                subprocess.Popen([sys.executable, "-m", "testbed.registry", "token-server", str(state)],
                                 cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 process_group=process.pid)
        except OSError as error:
            stop(state)
            raise ServiceError(f"the token server could not start: {error}") from None
    service.await_ready(
        process, lambda: answers(state), timeout=START_TIMEOUT_SECONDS, interval=0.05,
        exited=lambda code: (f"docker-registry exited with code {code} before it answered at "
                             f"{configured_host(state)}; last log lines:\n{log_tail(state)}"),
        timed_out=lambda: (f"the registry (or its token server) did not answer at {configured_host(state)} "
                           f"within {START_TIMEOUT_SECONDS:.0f} s; last log lines:\n{log_tail(state)}"))
    return process.pid


def stop(state: Path) -> None:
    """End the registry's process group: none of it is left when this returns (idempotent)."""
    _process(state).stop()


# --- the token server ---------------------------------------------------------------------

def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_token(state: Path, access: list[dict]) -> str:
    """A JWT the registry accepts (ES256, signed with the server key, its certificate in x5c
    chaining to ca.pem), granting `access` ([{type, name, actions}]) for five minutes."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    certificate = x509.load_pem_x509_certificate((state / "server.pem").read_bytes())
    key = serialization.load_pem_private_key((state / "server.key").read_bytes(), password=None)
    der = certificate.public_bytes(serialization.Encoding.DER)
    now = int(time.time())
    header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(der).decode()]}
    claims = {"iss": ISSUER, "sub": "", "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
              "jti": secrets.token_hex(8), "access": access}
    signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing_input}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def anonymous_access(scopes: list[str]) -> list[dict]:
    """What an anonymous client may do: pull, from any repository outside private/."""
    access = []
    for scope in scopes:
        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        if kind == "repository" and name and not name.startswith("private/") and "pull" in actions.split(","):
            access.append({"type": "repository", "name": name, "actions": ["pull"]})
    return access


def serve_tokens(state: Path) -> None:
    """The token realm of a `token` registry: GET /token?service=...&scope=... gives an
    anonymous token (Docker's token protocol); runs until it is killed."""
    port = int((state / "token-port").read_text())

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            if url.path != "/token" or query.get("service") != [SERVICE]:
                self.send_error(400, "this realm serves /token?service=" + SERVICE)
                return
            token = sign_token(state, anonymous_access(query.get("scope", [])))
            body = json.dumps({"token": token, "access_token": token, "expires_in": 300}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            print(json.dumps({"msg": "token server: " + format % args}), flush=True)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(state / "server.pem", state / "server.key")
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


# --- pushing an image over the distribution API ------------------------------------------

def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_parts() -> tuple[bytes, bytes]:
    """(config blob, gzipped layer) of a one-file image; the same bytes every time."""
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w", format=tarfile.PAX_FORMAT) as tar:
        content = b"a member image of the ironic-shard-operator testbed\n"
        member = tarfile.TarInfo("etc/testbed-image")
        member.size, member.mtime, member.mode = len(content), 0, 0o644
        tar.addfile(member, io.BytesIO(content))
    layer_tar = tar_bytes.getvalue()
    layer = gzip.compress(layer_tar, mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]}},
                        sort_keys=True).encode()
    return config, layer


def push_image(state: Path, repository: str, tag: str) -> str:
    """Push the one-file image to `repository:tag` (with what the registry's auth wants);
    return the manifest's digest."""
    config, layer = image_parts()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _digest(layer), "size": len(layer)}],
    }).encode()
    base = f"{base_url(state)}/v2/{repository}"
    authorization = _authorization(state, repository)
    for blob in (config, layer):
        headers = _send(state, "POST", f"{base}/blobs/uploads/", b"", authorization)
        location = urllib.request.urljoin(base, headers["Location"])
        separator = "&" if "?" in location else "?"
        _send(state, "PUT", f"{location}{separator}digest={_digest(blob)}", blob, authorization,
              "application/octet-stream")
    _send(state, "PUT", f"{base}/manifests/{tag}", manifest, authorization, OCI_MANIFEST)
    return _digest(manifest)


def _authorization(state: Path, repository: str) -> str | None:
    """The Authorization header that lets the testbed push to `repository`."""
    user_password = credentials(state)
    if user_password:
        return "Basic " + base64.b64encode(":".join(user_password).encode()).decode()
    if configured_auth(state) == "token":
        return "Bearer " + sign_token(state, [{"type": "repository", "name": repository,
                                               "actions": ["pull", "push"]}])
    return None


def _send(state: Path, method: str, url: str, body: bytes, authorization: str | None,
          content_type: str | None = None) -> dict[str, str]:
    headers = {"Content-Length": str(len(body))}
    if content_type:
        headers["Content-Type"] = content_type
    if authorization:
        headers["Authorization"] = authorization
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with _opener(state).open(request, timeout=REQUEST_TIMEOUT) as response:
            return dict(response.headers)
    except urllib.error.HTTPError as error:
        raise ServiceError(f"registry refused {method} {url}: HTTP {error.code} "
                           f"{error.read().decode(errors='replace')[:500]}") from None


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command line; `prog` names the command in usage and error lines."""
    return service_process.command_line(
        argv, prog, __doc__.split("\n\n")[0], install=install,
        install_help="unpack Debian's docker-registry into .tools/docker-registry (idempotent)",
        start_help="start (or restart) the registry of STATE_DIR", start_options=_start_options,
        start=lambda args: start(args.state_dir, args.auth, args.port, args.plain_http), stop=stop,
        up=lambda state: (state / "host").exists() and running_pid(state) is not None
        and answers(state),
        more={"token-server": serve_tokens})


def _start_options(starting: argparse.ArgumentParser) -> None:
    starting.add_argument("--auth", choices=AUTH_KINDS, default="none",
                          help="who may pull: anyone (none), Basic credentials (htpasswd), anonymous "
                               "bearer tokens outside private/ (token); first start only")
    starting.add_argument("--port", type=int, help="default: a free port (first start only)")
    starting.add_argument("--plain-http", action="store_true",
                          help="serve the registry without TLS (first start only)")


if __name__ == "__main__":
    sys.exit(main())
