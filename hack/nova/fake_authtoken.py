"""FAKE keystonemiddleware.auth_token for the TEST Nova API only (hack/nova, never an image).

Nova 34 has no noauth pipeline any more, and no Keystone runs here. This paste filter takes the
place of `authtoken` in Nova's pipeline and speaks the same contract downstream: it turns
`X-Auth-Token: <user>:<project>` into the identity headers authtoken would set (X-User-Id,
X-Project-Id, X-Roles, X-Identity-Status). Nova's own `keystonecontext` filter then builds the
request context from them and Nova's own policy decides as usual.

Invariants:
- identity headers sent by the client are always dropped first (no spoofing past the filter);
- a missing or malformed token is answered 401, like authtoken would;
- user `admin` gets roles admin,member,reader; every other user member,reader.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

# Every header authtoken owns (and oslo.context reads): dropped from the client's request first.
_IDENTITY_HEADER_PREFIXES = (
    "HTTP_X_IDENTITY_STATUS", "HTTP_X_USER", "HTTP_X_PROJECT", "HTTP_X_TENANT", "HTTP_X_DOMAIN",
    "HTTP_X_ROLE", "HTTP_X_SERVICE_", "HTTP_X_SYSTEM_SCOPE", "HTTP_OPENSTACK_SYSTEM_SCOPE",
    "HTTP_X_IS_ADMIN_PROJECT",
)

WsgiApp = Callable[[dict, Callable], Iterable[bytes]]


def roles_for(user: str) -> str:
    """Roles the fake token grants: admin gets admin+member+reader, anyone else member+reader."""
    return "admin,member,reader" if user == "admin" else "member,reader"


class FakeAuthToken:
    """WSGI middleware: `X-Auth-Token: user:project` -> Keystone identity headers (test only)."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        for header in [key for key in environ if key.startswith(_IDENTITY_HEADER_PREFIXES)]:
            del environ[header]
        user, sep, project = environ.get("HTTP_X_AUTH_TOKEN", "").partition(":")
        if not (sep and user and project):
            body = b'{"error": {"code": 401, "message": "X-Auth-Token must be <user>:<project> (test Nova)"}}'
            start_response("401 Unauthorized", [("Content-Type", "application/json"),
                                                ("Content-Length", str(len(body)))])
            return [body]
        environ.update({
            "HTTP_X_IDENTITY_STATUS": "Confirmed",
            "HTTP_X_USER_ID": user,
            "HTTP_X_USER_NAME": user,
            "HTTP_X_USER_DOMAIN_ID": "default",
            "HTTP_X_PROJECT_ID": project,
            "HTTP_X_PROJECT_NAME": project,
            "HTTP_X_PROJECT_DOMAIN_ID": "default",
            "HTTP_X_ROLES": roles_for(user),
        })
        return self.app(environ, start_response)


def filter_factory(global_conf: dict, **local_conf: str) -> Callable[[WsgiApp], FakeAuthToken]:
    """paste.deploy entry point (`paste.filter_factory = fake_authtoken:filter_factory`)."""
    return FakeAuthToken
