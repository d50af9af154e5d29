"""What the real API server's audit log (testbed/control_plane.py writes it, one JSON event a
line, level Metadata for every client but the control plane's own) tells a test: who was refused
what, which writes a credential made, which RBAC grants nobody used.

Invariants:
- Only the API server's own record is read: an event is what the server decided (its HTTP code,
  and the authorizer's decision: a 403 with decision "forbid" is a refusal by the Node authorizer
  or RBAC, a 403 after "allow" an admission plugin's), never what a client believes it sent.
- A ServiceAccount token is known by its JWT ID: the server records it in every event made with
  it (`user.extra["authentication.kubernetes.io/credential-id"] == ["JTI=<jti>"]`).
- A grant is unused when no allowed request of the user matches it, rule by rule as the RBAC
  authorizer matches (API group, resource/subresource, verb, resource names); the bootstrap
  policy (roles labelled `kubernetes.io/bootstrapping`) is not the chart's and is left out.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RBAC = "/apis/rbac.authorization.k8s.io/v1"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
BOOTSTRAP_LABEL = "kubernetes.io/bootstrapping"
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
DECISION = "authorization.k8s.io/decision"  # the authorizer's verdict, "allow" or "forbid"


@dataclass(frozen=True)
class Refusal:
    """One request the server answered 403: what was asked and the server's message."""
    verb: str
    uri: str
    message: str
    namespace: str | None  # of the object asked for; None: a cluster-wide request


def token_id(token: str) -> str:
    """The JWT ID (`jti`) of a ServiceAccount token, read without verifying it."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"]


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


class AuditLog:
    """The audit log of one API server (a file it appends to while the tests read)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> Iterator[dict[str, Any]]:
        """Every complete event so far (a line being written is skipped), each with `time`: when
        the request was received, in epoch seconds, and `code`: the HTTP status answered."""
        if not self.path.exists():
            return
        with self.path.open() as log:
            for line in log:
                if line.endswith("\n"):
                    event = json.loads(line)
                    event["time"] = datetime.datetime.fromisoformat(  # epoch seconds, as time.time()
                        event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
                    event["code"] = event.get("responseStatus", {}).get("code")  # the HTTP answer
                    yield event

    def by_user(self, username: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["user"].get("username") == username]

    def refused(self, username: str, since: float = 0.0) -> list[Refusal]:
        """The requests of `username` the authorizer (Node, RBAC) refused from `since` (epoch
        seconds) on, oldest first. An admission plugin's 403 (PodSecurity refusing a pod) is
        not one: the user had the right, the object was refused."""
        return [Refusal(e["verb"], e["requestURI"], e["responseStatus"].get("message", ""),
                        (e.get("objectRef") or {}).get("namespace"))
                for e in self.by_user(username) if e["code"] == 403 and e["time"] >= since
                and (e.get("annotations") or {}).get(DECISION) == "forbid"]

    def writes_by_token(self, token: str) -> list[dict[str, Any]]:
        """The write requests made with `token` (allowed or not), as audit events."""
        credential = [f"JTI={token_id(token)}"]
        return [e for e in self.events() if e["verb"] in WRITE_VERBS
                and (e["user"].get("extra") or {}).get(CREDENTIAL_ID) == credential]

    def unused_grants(self, admin: Any, namespace: str, service_account: str) -> list[str]:
        """What the bindings of ServiceAccount `namespace/service_account` grant, one line per
        (rule, API group, resource, verb), that no allowed request of it used; `admin` is a
        client (testbed.kube_client.KubeClient) that may read RBAC. A line reads
        `RoleBinding NS/B -> Role R rule N: VERB RESOURCE in API group "G"`."""
        user = service_account_user(namespace, service_account)
        allowed = [e for e in self.by_user(user) if e["code"] != 403 and e.get("objectRef")]
        unused = []
        for where, binding_namespace, rules in _grants(admin, namespace, service_account):
            for index, rule in enumerate(rules):
                names = f' named {sorted(rule["resourceNames"])}' if rule.get("resourceNames") else ""
                for group in rule.get("apiGroups") or ():
                    for resource in rule.get("resources") or ():
                        for verb in rule.get("verbs") or ():
                            narrowed = dict(rule, apiGroups=[group], resources=[resource], verbs=[verb])
                            if not any(rule_allows(narrowed, e, binding_namespace) for e in allowed):
                                unused.append(f'{where} rule {index}: {verb} {resource} in API group "{group}"{names}')
        return unused


def rule_allows(rule: dict[str, Any], event: dict[str, Any], binding_namespace: str | None) -> bool:
    """Whether the RBAC rule (of a binding in `binding_namespace`, None: cluster-wide) allows
    the resource request of the audit `event` (rbac/v1 RuleAllows)."""
    ref = event["objectRef"]
    if binding_namespace is not None and ref.get("namespace") != binding_namespace:
        return False
    resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")

    def matches(values: list[str], wanted: str) -> bool:
        return any(value in ("*", wanted) for value in values)

    resources = rule.get("resources") or []
    return (matches(rule.get("verbs") or [], event["verb"])
            and matches(rule.get("apiGroups") or [], ref.get("apiGroup", ""))
            and (matches(resources, resource)
                 or (bool(ref.get("subresource")) and f"*/{ref['subresource']}" in resources))
            and (not rule.get("resourceNames") or ref.get("name") in rule["resourceNames"]))


def _grants(admin: Any, namespace: str, service_account: str) -> list[tuple[str, str | None, list[dict[str, Any]]]]:
    """(description, the binding's namespace or None, the role's rules) of every binding naming
    the ServiceAccount (or a group it is in), bootstrap roles left out."""
    groups = {"system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"}

    def names_it(binding: dict[str, Any]) -> bool:
        for subject in binding.get("subjects") or []:
            if subject["kind"] == "ServiceAccount" and subject["name"] == service_account \
                    and subject.get("namespace") == namespace:
                return True
            if subject["kind"] == "Group" and subject["name"] in groups:
                return True
        return False

    found = []
    bindings = [(b, b["metadata"]["namespace"]) for b in admin.get(f"{RBAC}/rolebindings")["items"]] + \
               [(b, None) for b in admin.get(f"{RBAC}/clusterrolebindings")["items"]]
    for binding, binding_namespace in bindings:
        if not names_it(binding):
            continue
        ref = binding["roleRef"]
        path = (f"{RBAC}/namespaces/{binding_namespace}/roles/{ref['name']}" if ref["kind"] == "Role"
                else f"{RBAC}/clusterroles/{ref['name']}")
        try:
            role = admin.get(path)
        except Exception as error:  # a binding to a missing role grants nothing
            if getattr(error, "status", None) == 404:
                continue
            raise
        if BOOTSTRAP_LABEL in (role["metadata"].get("labels") or {}):
            continue
        kind = "RoleBinding" if binding_namespace is not None else "ClusterRoleBinding"
        where = f"{binding_namespace}/" if binding_namespace is not None else ""
        found.append((f"{kind} {where}{binding['metadata']['name']} -> {ref['kind']} {ref['name']}",
                      binding_namespace, role.get("rules") or []))
    return sorted(found, key=lambda g: g[0])
