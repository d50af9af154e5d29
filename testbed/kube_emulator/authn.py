"""Authentication by ServiceAccount tokens, as a real API server does it: TokenRequest issues
them; a bearer token is refused (401) once unknown, expired, or its ServiceAccount or bound object
is gone; a request without credentials is anonymous. Every write of a token holder is audited,
for tests to count who wrote what. Details: README.md, "Authentication"."""
import dataclasses
import datetime
import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

from testbed.kube_emulator.errors import ApiError, bad_request

MIN_EXPIRATION_SECONDS = 600
DEFAULT_EXPIRATION_SECONDS = 3600
BOUND_KINDS = {'Secret': 'secrets', 'Pod': 'pods'}
AUDIT_KEPT = 100_000
WRITE_VERBS = {'POST': 'create', 'PUT': 'update', 'PATCH': 'patch', 'DELETE': 'delete'}

# (plural, namespace, name) -> the uid of that object now, or None when it does not exist.
UidOf = Callable[[str, str, str], str | None]


@dataclasses.dataclass(frozen=True)
class IssuedToken:
    namespace: str
    service_account: str
    service_account_uid: str
    credential_id: str
    expires: float                          # wall-clock seconds
    bound: tuple[str, str, str] | None      # (plural, name, uid) of the bound object

    @property
    def username(self) -> str:
        return f'system:serviceaccount:{self.namespace}:{self.service_account}'


def unauthorized() -> ApiError:
    return ApiError(401, 'Unauthorized', 'Unauthorized', {})


def _timestamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')


class Authenticator:
    """The tokens issued, the check of each request's bearer token, and the audit of writes."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._tokens: dict[str, IssuedToken] = {}
        self._clock = clock
        self.audit: list[dict[str, Any]] = []

    def issue(self, namespace: str, service_account: dict[str, Any], request: Any,
              uid_of: UidOf) -> dict[str, Any]:
        """Answer a TokenRequest for `service_account` (the stored object)."""
        name = service_account['metadata']['name']
        spec = dict((request or {}).get('spec') or {})
        seconds = spec.get('expirationSeconds', DEFAULT_EXPIRATION_SECONDS)
        if not isinstance(seconds, int) or seconds < MIN_EXPIRATION_SECONDS:
            raise ApiError(422, 'Invalid', f'TokenRequest.authentication.k8s.io "{name}" is invalid: '
                           f'spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration '
                           f'less than 10 minutes', {'name': name, 'group': 'authentication.k8s.io',
                                                     'kind': 'TokenRequest'})
        bound = None
        ref = spec.get('boundObjectRef')
        if ref:
            plural = BOUND_KINDS.get(ref.get('kind'))
            if plural is None:
                raise bad_request(f'cannot bind token object of kind {ref.get("kind")!r}: '
                                  f'only Secret and Pod are supported here')
            uid = uid_of(plural, namespace, ref.get('name') or '')
            if uid is None or (ref.get('uid') and ref['uid'] != uid):
                raise ApiError(404, 'NotFound', f'{plural} "{ref.get("name")}" not found',
                               {'name': ref.get('name'), 'kind': plural})
            bound = (plural, ref['name'], uid)
            spec['boundObjectRef'] = dict(ref, uid=uid)
        token = f'fake-sa-token.{secrets.token_urlsafe(24)}'
        expires = self._clock() + seconds
        self._tokens[token] = IssuedToken(namespace, name, service_account['metadata']['uid'],
                                          str(uuid.uuid4()), expires, bound)
        return {'kind': 'TokenRequest', 'apiVersion': 'authentication.k8s.io/v1',
                'metadata': {'name': name, 'namespace': namespace, 'creationTimestamp': None},
                'spec': dict(spec, expirationSeconds=seconds, audiences=spec.get('audiences') or []),
                'status': {'token': token, 'expirationTimestamp': _timestamp(expires)}}

    def authenticate(self, authorization: str | None, uid_of: UidOf) -> IssuedToken | None:
        """The token holder of a request, None for an anonymous one; raises 401 for a token
        that is unknown, expired, or whose ServiceAccount or bound object is gone."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(' ')
        if scheme.lower() != 'bearer':
            raise unauthorized()  # no basic auth or client certificates here
        issued = self._tokens.get(token.strip())
        if issued is None or issued.expires <= self._clock():
            raise unauthorized()
        if uid_of('serviceaccounts', issued.namespace, issued.service_account) != issued.service_account_uid:
            raise unauthorized()
        if issued.bound is not None:
            plural, name, uid = issued.bound
            if uid_of(plural, issued.namespace, name) != uid:
                raise unauthorized()
        return issued

    def record(self, user: IssuedToken | None, method: str, uri: str, code: int) -> None:
        """Audit one answered request, if it was a write of a token holder."""
        verb = WRITE_VERBS.get(method)
        if user is None or verb is None:
            return
        self.audit.append({
            'verb': verb, 'requestURI': uri, 'code': code, 'time': self._clock(),
            'user': {'username': user.username,
                     'extra': {'authentication.kubernetes.io/credential-id': [f'JTI={user.credential_id}']}},
        })
        del self.audit[:-AUDIT_KEPT]

    def writes_by_token(self, token: str) -> list[dict[str, Any]]:
        """The audited writes made with `token` (for tests: who wrote what)."""
        issued = self._tokens.get(token)
        if issued is None:
            return []
        credential = [f'JTI={issued.credential_id}']
        return [event for event in self.audit
                if event['user']['extra']['authentication.kubernetes.io/credential-id'] == credential]

