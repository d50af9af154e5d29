"""Preflight: is a pool's configuration usable, before (and while) a pool runs on it? Which
checks run, and each check's verdict.

Each check is a pure verdict over text (a nova.conf) or over what an adapter was answered
(adapters/preflight.py asks Ironic, Nova, Placement and the image registry what `questions`
selects, and passes the answers here as plain data). Every check says pass, warn or fail,
what it saw in one line, and for warn and fail a one-line fix. Invariants:
- a check never raises: an unreadable input is that check's fail;
- a fail means the pool cannot work as configured; a warn means it works but something is
  ignored, unproven or not checkable from here;
- no text quotes a credential: messages name keys and sections, never their values;
- the one request that could write (the shard-update probe) is sent only while the pool is
  not in Conflict, and only to a node the pool may own (`probe_target`).
"""

from __future__ import annotations

import configparser
import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import Enum

from ironic_shard_operator.core.model import Node, Selector, member_ordinal

SHARD_MICROVERSION = (1, 82)
COMPUTE_MICROVERSION = (2, 53)
# The field a no-op probe addresses: a path under /shard that Ironic's policy check matches
# ("/shard..." needs baremetal:node:update:shard) and that no JSON patch can apply (a shard
# is a string or null, never a container), so a permitted probe ends in HTTP 400 and a
# refused one in 403, and neither writes the node.
SHARD_PROBE_PATH = "/shard/ironic-shard-operator-preflight"


class Verdict(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Check:
    """One check's outcome: `name` is stable (scripts and the condition use it), `message`
    says what was seen, `fix` what to do (empty on pass)."""

    name: str
    verdict: Verdict
    message: str
    fix: str = ""


@dataclass(frozen=True, slots=True)
class Inputs:
    """What preflight checks: the cloud (clouds.yaml text and cloud name), the pool's node
    selection, the base nova.conf, the handover nova.conf (`handover` says whether one is
    configured) and the member image. `pool`: the pool's name (the shard-update probe addresses
    only a node it may own; None: any node of the selection); `may_probe` False: the probe is
    not sent (the pool is in Conflict: its selection holds another pool's nodes)."""

    clouds_yaml: str | None
    cloud_name: str
    nova_conf: str | None
    selector: Selector = Selector()
    handover: bool = False
    handover_nova_conf: str | None = None
    image: str | None = None
    check_image: bool = True
    pool_name: str | None = None
    may_probe: bool = True


@dataclass(frozen=True, slots=True)
class Questions:
    """Which questions preflight asks, from its inputs alone: the cloud (Ironic, then Nova and
    Placement once Ironic answered: `asks_beyond_ironic`), the shard-update probe, the image
    check and, for it, the image's registry."""

    cloud: bool
    probe: bool
    image: bool
    registry: bool


def questions(inputs: Inputs) -> Questions:
    """No clouds.yaml: the cloud is not asked (`no_clouds_yaml` fails instead). In Conflict:
    no probe (`probe_in_conflict` warns). The image check only when wanted; its registry only
    when an image is named."""
    return Questions(cloud=inputs.clouds_yaml is not None, probe=inputs.may_probe, image=inputs.check_image,
                     registry=inputs.check_image and bool(inputs.image))


def asks_beyond_ironic(answer: ServiceAnswer) -> bool:
    """Whether the cloud's other questions are asked: only once Ironic answered its check (the
    failure alone says what to fix first)."""
    return answer.failure is None


# The failures of a service's check that are asked once more before they stand: no answer (one
# dropped connection is no verdict).
ASKED_AGAIN = frozenset({"unavailable", "keystone"})


def no_clouds_yaml() -> Check:
    """The cloud's check when no clouds.yaml is given: nothing is asked."""
    return failed("ironic-reachable", "no clouds.yaml given",
                  "create the Secret of spec.cloud (or pass --clouds-yaml FILE)")


def clouds_yaml_unusable(message: str, cloud_name: str) -> Check:
    """The cloud's check when the clouds.yaml cannot describe a connection (`message`)."""
    return failed("ironic-reachable", message,
                  f"fix the clouds.yaml so that 'clouds:' maps cloud '{cloud_name}' to its settings "
                  "(auth_type, auth, endpoint override)")


def file_checks(inputs: Inputs) -> list[Check]:
    """The checks of the files alone: the base nova.conf, and the handover's when configured."""
    checks = nova_conf_checks(inputs.nova_conf)
    handover = handover_conf_check(inputs.handover_nova_conf, inputs.handover)
    return checks if handover is None else [*checks, handover]


def passed(name: str, message: str) -> Check:
    return Check(name, Verdict.PASS, message)


def warned(name: str, message: str, fix: str) -> Check:
    return Check(name, Verdict.WARN, message, fix)


def failed(name: str, message: str, fix: str) -> Check:
    return Check(name, Verdict.FAIL, message, fix)


# --- answers the adapters got -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceAnswer:
    """What asking a service gave: its maximum API version on success, else the kind of
    failure (adapters/preflight.py: 'config', 'unavailable', 'endpoint', 'auth', 'too_old',
    'not_configured', 'request') and the adapter's own message."""

    version: tuple[int, int] | None = None
    failure: str | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """One HTTP exchange's outcome: its status (None: nothing answered), the service's text
    and, where the asker chose between them, the scheme that answered ('https'; 'http' for
    an image registry that speaks no TLS, adapters/preflight.registry_answer)."""

    status: int | None
    text: str = ""
    scheme: str = ""


def ironic_checks(answer: ServiceAnswer, shard_list: HttpAnswer | None) -> list[Check]:
    """Ironic reachable; its API >= 1.82; a node list filtered by `shard` answers."""
    fixes = {
        "config": "fix the cloud's entry in clouds.yaml (auth_type, auth, endpoint override)",
        "unavailable": "check that Ironic runs and that baremetal_endpoint_override (or the catalog) "
                       "gives an address reachable from here",
        "keystone": "check that Keystone runs and that the cloud's auth.auth_url (its Identity endpoint, e.g. "
                    "https://keystone.example/v3) is reachable from here",
        "endpoint": "point baremetal_endpoint_override (or the catalog's baremetal entry) at Ironic's API",
        "auth": "use credentials Ironic accepts: a system-scoped admin (or a role with the "
                "baremetal:node:* policies), with auth.auth_url at Keystone's Identity endpoint",
        "request": "see Ironic's message; the API may have refused the node list",
    }
    if answer.failure == "too_old":
        return [passed("ironic-reachable", "Ironic answers"),
                failed("ironic-api-version", answer.message,
                       "upgrade Ironic to 2023.1 (21.4) or newer: node shards need API 1.82")]
    if answer.failure == "keystone" and _unresolved(answer.message):
        return [failed("ironic-reachable", answer.message,
                       "the host name in the cloud's auth.auth_url (Keystone's Identity endpoint) does not resolve "
                       "here: correct auth.auth_url, or make the name resolvable from here (DNS, /etc/hosts)")]
    if answer.failure is not None:
        return [failed("ironic-reachable", answer.message, fixes.get(answer.failure, fixes["request"]))]
    version = answer.version or (0, 0)
    checks = [passed("ironic-reachable", "Ironic answers and lists nodes with these credentials"),
              passed("ironic-api-version", f"Ironic offers API {version[0]}.{version[1]} "
                                           f"(shards need {SHARD_MICROVERSION[0]}.{SHARD_MICROVERSION[1]})")]
    if shard_list is None or shard_list.status == 200:
        checks.append(passed("ironic-shard-list", "a node list filtered by shard answers"))
    else:
        checks.append(failed("ironic-shard-list",
                             f"a node list filtered by shard was refused: {_http(shard_list)}",
                             "allow baremetal:node:list for these credentials at API 1.82"))
    return checks


# How a resolver says a host name has no address (glibc's gai_strerror, musl's, Python's own).
_UNRESOLVED = ("Name or service not known", "Temporary failure in name resolution", "No address associated",
               "nodename nor servname", "Name does not resolve", "getaddrinfo failed")


def _unresolved(message: str) -> bool:
    return any(text.lower() in message.lower() for text in _UNRESOLVED)


def shard_summary_check(answer: HttpAnswer) -> Check:
    """May the credentials read the shard summary (`GET /v1/shards`, policy
    baremetal:shards:get), which the operator's steady polls ask instead of listing every
    node (core/observation.py)? Refused, the operator still works, listing the pool in full
    every poll: a warn that says what that costs."""
    name = "ironic-shard-summary"
    if answer.status == 200:
        return passed(name, "Ironic's policy allows baremetal:shards:get: steady polls ask GET /v1/shards "
                            "instead of listing every node")
    if answer.status in (401, 403):
        return warned(name, f"Ironic's policy refuses these credentials the shard summary (GET /v1/shards, "
                            f"baremetal:shards:get): {_http(answer)}; the operator then lists all the pool's "
                            "nodes every poll (ceil(nodes/1000)+1 requests instead of 2, ~18 s of Ironic's "
                            "time per poll at 100,000 nodes)",
                      "allow baremetal:shards:get for the operator's user: Ironic's default policy gives it "
                      "to a system-scoped reader (openstack role add --system all --user USER reader; "
                      "admin implies reader), or grant it in Ironic's policy file")
    return warned(name, f"the shard summary (GET /v1/shards) got an unexpected answer: {_http(answer)}",
                  "check by hand: openstack baremetal shard list (needs baremetal:shards:get); without "
                  "it every poll lists the pool in full")


def probe_target(nodes: Sequence[Node], pool_name: str | None) -> str | None:
    """The node the shard-update probe may address, of the pool's selection as listed: one the
    pool may own, i.e. without a shard or with one of `pool_name`'s member names (`<pool>-<n>`),
    never a node another pool's member holds; a free one first (not `pinned`: the one rule,
    core/model.py::Node). With no pool named (the command line's --clouds-yaml mode) any node
    of the selection the person named."""
    mine = [n for n in nodes if pool_name is None or not n.shard or member_ordinal(pool_name, n.shard) is not None]
    free = [n for n in mine if not n.pinned]
    found = free or mine
    return found[0].uuid if found else None


def probe_in_conflict() -> Check:
    """The shard-update check of a pool in Conflict: not probed (Questions.probe)."""
    return shard_update_not_probed("the pool is in Conflict (its selection holds another pool's nodes)",
                                   "resolve the Conflict (its condition names the other pool); the probe runs then")


def shard_update_not_probed(why: str, fix: str) -> Check:
    """The shard-update check when the probe is not sent at all (`why`): a warn, nothing asked."""
    return warned("ironic-shard-update", f"not probed: {why}; no request that could write a node was sent", fix)


def shard_update_check(probe: HttpAnswer | None, node: str | None, *, others: int = 0) -> Check:
    """May the credentials update shards (baremetal:node:update:shard)? Read from the answer
    to the no-op probe PATCH (SHARD_PROBE_PATH) on `node`: 400 = the policy let it through
    and the patch itself failed (nothing written), 403 = the policy refused it. `others`: the
    nodes of the selection left out because another pool's member holds them (probe_target)."""
    name = "ironic-shard-update"
    if node is None and others:
        return warned(name, f"every node of the pool's selection these credentials list ({others}) has another "
                            "pool's member as shard, and the probe touches only nodes this pool may own, so the "
                            "shard-update policy could not be proved",
                      "run preflight again once the pool has nodes (unsharded, or with its members' shards)")
    if node is None or probe is None:
        return warned(name, "these credentials list no node in the pool's selection, so the shard-update "
                            "policy could not be proved",
                      "if Ironic has no node there yet, enrol one (or widen the selector) and run preflight "
                      "again; if it has, these credentials cannot see them: project-scoped credentials (a "
                      "nova-compute's service user) list only their project's nodes, and the operator needs "
                      "a system-scoped admin anyway (baremetal:node:update:shard): openstack role add "
                      "--system all --user USER admin")
    if probe.status == 400:
        return passed(name, f"Ironic's policy allows baremetal:node:update:shard (proved on node {node} "
                            "with a PATCH no JSON patch can apply: nothing was written)")
    if probe.status in (401, 403):
        return failed(name, f"Ironic's policy refuses these credentials baremetal:node:update:shard "
                            f"(probed on node {node}, nothing written): {_http(probe)}",
                      "give the operator's user a system-scoped admin role (openstack role add --system "
                      "all --user USER admin) or grant baremetal:node:update:shard in Ironic's policy")
    if probe.status == 409:
        return warned(name, f"node {node} is busy (locked or in a state transition): {_http(probe)}",
                      "run preflight again once the node is idle")
    return warned(name, f"the shard-update probe on node {node} got an unexpected answer: {_http(probe)}",
                  "check by hand: openstack baremetal node set --shard <its current shard> NODE")


def nova_check(answer: ServiceAnswer) -> Check:
    """Nova at >= 2.53 with admin rights on os-services; a cloud without Nova is a warn."""
    name = "nova"
    if answer.failure is None:
        version = answer.version or (0, 0)
        return passed(name, f"Nova offers compute API {version[0]}.{version[1]} and lists compute services")
    if answer.failure == "not_configured":
        return warned(name, answer.message, "without Nova the operator does not force failed members "
                      "down nor delete retired services; add compute_endpoint_override or a catalog "
                      "entry to turn them on")
    fixes = {"too_old": "upgrade Nova: the operator needs compute API 2.53 (Nova 2024.1 for shards)",
             "auth": "give the credentials the admin role (os-services and os-hypervisors need it)",
             "unavailable": "check that Nova's API runs and its endpoint is reachable from here"}
    return failed(name, answer.message, fixes.get(answer.failure, "see Nova's message"))


def placement_check(answer: ServiceAnswer) -> Check:
    """Placement reachable: Nova's resource providers for Ironic nodes live there."""
    name = "placement"
    if answer.failure is None:
        version = answer.version or (0, 0)
        return passed(name, f"Placement answers (API up to {version[0]}.{version[1]})")
    if answer.failure == "not_configured":
        return warned(name, answer.message, "add placement_endpoint_override or a catalog entry so "
                      "moves can be checked against Placement")
    return failed(name, answer.message, "check that Placement runs and its endpoint is reachable from here")


def split_image(image: str) -> tuple[str, str, str]:
    """(registry host, repository, tag or digest) of an image reference, Docker's defaults
    applied (docker.io, library/, latest)."""
    name, reference = image, "latest"
    if "@" in name:
        name, reference = name.split("@", 1)
    elif ":" in name.rsplit("/", 1)[-1]:
        name, reference = name.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, rest
    else:
        registry, repository = "registry-1.docker.io", name
    if registry == "registry-1.docker.io" and "/" not in repository:
        repository = f"library/{repository}"
    return registry, repository, reference


def image_check(image: str | None, answer: HttpAnswer | None) -> Check:
    """The member image's manifest, asked from its registry anonymously. A registry that
    answered over plain HTTP (it speaks no TLS) is judged by its answer as any other, and
    every verdict then says so with how to let the nodes pull without TLS: an image there
    that exists is a WARN, not a PASS, because container runtimes pull over HTTPS unless
    each node is configured otherwise (containerd tries HTTP by itself only for localhost,
    CRI-O only for a registry its registries.conf marks insecure), which preflight cannot
    see from here."""
    name = "image"
    if not image:
        return warned(name, "no member image given", "pass --image (or --pool) to check it")
    if answer is None or answer.status is None:
        return warned(name, f"cannot check {image} from here: {answer.text if answer else 'no registry'}",
                      "make sure the nodes can pull it (imagePullSecrets, registry mirror)")
    note, hint = "", ""
    if answer.scheme == "http":
        host = split_image(image)[0]
        note = (f"; {host} answers over plain HTTP only (no TLS), so the nodes' container runtime "
                "must be configured to pull from it without TLS")
        hint = _plain_http_hint(host)
    if answer.status == 200:
        if hint:
            return warned(name, f"{image} exists in its registry{note}", hint)
        return passed(name, f"{image} exists in its registry")
    if answer.status in (401, 403):
        return warned(name, f"{image}: the registry wants credentials ({_http(answer)}){note}",
                      _also("give the pool's pods an imagePullSecret for this registry", hint))
    if answer.status == 404:
        return failed(name, f"{image} does not exist in its registry{note}",
                      _also("fix spec.image (repository and tag)", hint))
    return warned(name, f"{image}: the registry answered {_http(answer)}{note}",
                  _also("check the image by hand", hint))


def _plain_http_hint(host: str) -> str:
    """How to let every node's container runtime pull from `host` over plain HTTP."""
    crio = (f"CRI-O: a [[registry]] with location = \"{host}\" and insecure = true in "
            "/etc/containers/registries.conf")
    if _containerd_tries_http(host):
        return (f"containerd pulls from {host} over plain HTTP by itself (localhost on a port other than "
                f"443); {crio}; or serve the registry over TLS")
    return (f"let every node's container runtime pull from {host} over plain HTTP: containerd: "
            f"/etc/containerd/certs.d/{host}/hosts.toml with server = \"http://{host}\"; {crio}; "
            "or serve the registry over TLS")


def _containerd_tries_http(host: str) -> bool:
    """containerd's own rule (remotes/docker/config ConfigureHosts): a localhost or loopback
    registry on a port other than 443 is tried over HTTP without configuration."""
    if host.startswith("["):  # [IPv6]:port
        name, _, port = host[1:].partition("]")
        port = port.removeprefix(":")
    else:
        name, _, port = host.partition(":")
    try:
        loopback = ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = name == "localhost"
    return loopback and port not in ("", "443")


def _also(fix: str, hint: str) -> str:
    return f"{fix}; then {hint}" if hint else fix


# --- nova.conf --------------------------------------------------------------------------


def nova_conf_checks(text: str | None) -> list[Check]:
    """The base nova.conf every member runs: it parses; compute_driver is Ironic's; [ironic]
    has auth; peer_list is absent (warn: shards ignore it); host and [ironic]shard are not
    set (warn: each member's overlay overrides them)."""
    if text is None:
        return [failed("nova-conf", "no base nova.conf given", "create the Secret of spec.novaConfig "
                       "with key nova.conf (or pass --nova-conf FILE)")]
    parser = _ini(text)
    if isinstance(parser, str):
        return [failed("nova-conf", f"the base nova.conf does not parse: {parser}",
                       "fix the file's INI syntax (sections in [brackets], key = value)")]
    checks = [passed("nova-conf", "the base nova.conf parses")]
    driver = parser.get("DEFAULT", "compute_driver", fallback="").strip()
    if driver.endswith("IronicDriver"):
        checks.append(passed("nova-conf-driver", f"compute_driver = {driver}"))
    else:
        checks.append(failed("nova-conf-driver",
                             f"[DEFAULT]compute_driver is {driver or 'not set'}, not ironic.IronicDriver",
                             "set compute_driver = ironic.IronicDriver in [DEFAULT]"))
    checks.append(_ironic_auth(parser))
    if parser.has_option("ironic", "peer_list"):
        checks.append(warned("nova-conf-peer-list", "[ironic]peer_list is set: with [ironic]shard, Nova "
                             "ignores it (one nova-compute per shard)", "remove peer_list from [ironic]"))
    else:
        checks.append(passed("nova-conf-peer-list", "[ironic]peer_list is not set"))
    overridden = [f"[{section}]{key}" for section, key in (("DEFAULT", "host"), ("ironic", "shard"))
                  if _has_own(parser, section, key)]
    if overridden:
        checks.append(warned("nova-conf-identity", f"{' and '.join(overridden)} set in the base nova.conf: "
                             "each member's own file overrides them with its identity",
                             f"remove {' and '.join(overridden)} from the base nova.conf"))
    else:
        checks.append(passed("nova-conf-identity", "[DEFAULT]host and [ironic]shard are left to the members"))
    return checks


def handover_conf_check(text: str | None, configured: bool) -> Check | None:
    """The handover nova.conf (nova-manage runs with it) has [database] and [api_database]
    connections; None when no handover is configured."""
    name = "handover-nova-conf"
    if not configured:
        return None
    if text is None:
        return failed(name, "handover is configured but its nova.conf cannot be read",
                      "create the Secret spec.handover.novaManageConfig names (or pass --handover-nova-conf)")
    parser = _ini(text)
    if isinstance(parser, str):
        return failed(name, f"the handover nova.conf does not parse: {parser}", "fix the file's INI syntax")
    missing = [f"[{s}]connection" for s in ("database", "api_database")
               if not parser.get(s, "connection", fallback="").strip()]
    if missing:
        return failed(name, f"the handover nova.conf has no {' and no '.join(missing)}",
                      "nova-manage needs both database connections: add them to the handover nova.conf")
    return passed(name, "the handover nova.conf has [database] and [api_database] connections")


_IRONIC_AUTH_KEYS = {
    "password": ("auth_url", "username", "password"),
    "v3password": ("auth_url", "username", "password"),
    "http_basic": ("username", "password"),
    "token": ("auth_url", "token"),
    "v3applicationcredential": ("auth_url", "application_credential_secret"),
    "none": ("endpoint_override",),
    "noauth": ("endpoint_override",),
}


def _ironic_auth(parser: configparser.ConfigParser) -> Check:
    name = "nova-conf-ironic-auth"
    if not parser.has_section("ironic"):
        return failed(name, "the base nova.conf has no [ironic] section",
                      "add [ironic] with auth_type and its credentials (see examples/secrets.yaml)")
    auth_type = parser.get("ironic", "auth_type", fallback="").strip()
    if not auth_type:
        return failed(name, "[ironic] has no auth_type", "set [ironic]auth_type (password, http_basic, ...)")
    missing = [key for key in _IRONIC_AUTH_KEYS.get(auth_type, ())
               if not parser.get("ironic", key, fallback="").strip()]
    if auth_type in ("password", "v3password") and "application_credential_id" not in parser["ironic"] \
            and not parser.get("ironic", "project_name", fallback="").strip() \
            and not parser.get("ironic", "system_scope", fallback="").strip():
        missing.append("project_name or system_scope")
    if missing:
        return failed(name, f"[ironic] auth_type = {auth_type} lacks {', '.join(missing)}",
                      f"add {', '.join(missing)} to [ironic]")
    return passed(name, f"[ironic] authenticates with auth_type = {auth_type}")


def _ini(text: str) -> configparser.ConfigParser | str:
    """The parsed file, or the parser's complaint on one line (no line content quoted)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(text)
    except configparser.MissingSectionHeaderError as error:
        return f"line {error.lineno} comes before any [section]"
    except configparser.ParsingError as error:
        return "unparsable line" + ("s " if len(error.errors) > 1 else " ") + \
            ", ".join(str(lineno) for lineno, _ in error.errors)
    except configparser.Error as error:
        return type(error).__name__
    return parser


def _has_own(parser: configparser.ConfigParser, section: str, key: str) -> bool:
    """`key` set in `section` itself ([DEFAULT] values otherwise leak into every section)."""
    if section == "DEFAULT":
        return bool(parser.defaults().get(key, "").strip())
    return parser.has_section(section) and key in parser._sections.get(section, {})  # type: ignore[attr-defined]


def _http(answer: HttpAnswer) -> str:
    if answer.status is None:
        return f"no answer ({answer.text})" if answer.text else "no answer"
    return f"HTTP {answer.status}: {answer.text}" if answer.text else f"HTTP {answer.status}"


# --- the report -------------------------------------------------------------------------


def any_failed(checks: Iterable[Check]) -> bool:
    return any(c.verdict is Verdict.FAIL for c in checks)


def table(checks: Sequence[Check]) -> str:
    """The checks as a terminal table: verdict, check, what was seen, and the fix below it."""
    width = max((len(c.name) for c in checks), default=5)
    lines = [f"{'RESULT':<6}  {'CHECK':<{width}}  DETAIL"]
    for check in checks:
        lines.append(f"{check.verdict.value.upper():<6}  {check.name:<{width}}  {check.message}")
        if check.fix:
            lines.append(f"{'':<6}  {'':<{width}}  fix: {check.fix}")
    counts = {v: sum(c.verdict is v for c in checks) for v in Verdict}
    lines.append(f"{counts[Verdict.PASS]} passed, {counts[Verdict.WARN]} warnings, {counts[Verdict.FAIL]} failed")
    return "\n".join(lines)


def as_json(checks: Sequence[Check]) -> str:
    return json.dumps({"ok": not any_failed(checks),
                       "checks": [{**asdict(c), "verdict": c.verdict.value} for c in checks]}, indent=2)


def condition(checks: Sequence[Check]) -> tuple[bool, str, str]:
    """The `Preflight` condition: (status, reason, message). True when nothing failed
    (reason Passed, or PassedWithWarnings naming them); False names the failed checks and
    their fixes."""
    failures = [c for c in checks if c.verdict is Verdict.FAIL]
    if failures:
        return False, "ChecksFailed", "; ".join(f"{c.name}: {c.message} (fix: {c.fix})" for c in failures)
    warnings = [c for c in checks if c.verdict is Verdict.WARN]
    if warnings:
        return True, "PassedWithWarnings", "; ".join(f"{c.name}: {c.message}" for c in warnings)
    return True, "Passed", f"all {len(checks)} checks passed"


def from_json(text: str | Mapping) -> list[Check]:
    """Checks back from `as_json` output (what `kubectl ics preflight` prints as a table)."""
    body = json.loads(text) if isinstance(text, str) else text
    return [Check(c["name"], Verdict(c["verdict"]), c["message"], c.get("fix", "")) for c in body["checks"]]
