"""Authorization by RBAC, as a real API server's RBAC authorizer decides it (bindings and rules
over the stored RBAC objects, the bootstrap policy, refusals worded as a real server words them),
and the record of every decision about a token holder, for tests to read (`refused`,
`unused_grants`). A request without credentials is the cluster administrator's. Details:
README.md, "Authorization"."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from testbed.kube_emulator.authn import IssuedToken
from testbed.kube_emulator.errors import ApiError

RBAC_GROUP = 'rbac.authorization.k8s.io'
DECISIONS_KEPT = 200_000
BOOTSTRAP_LABEL = 'kubernetes.io/bootstrapping'
NAMESPACE_SUBRESOURCES = ('status', 'finalize')  # /api/v1/namespaces/NS/status is the Namespace's own

# (plural, namespace or None for all) -> the stored RBAC objects of that plural there.
RbacObjects = Callable[[str, str | None], Iterable[dict[str, Any]]]


@dataclasses.dataclass(frozen=True)
class RequestInfo:
    """The attributes an authorizer decides on (kube-apiserver's RequestInfo)."""
    is_resource_request: bool
    verb: str
    path: str = ''
    api_group: str = ''
    resource: str = ''
    subresource: str = ''
    namespace: str = ''
    name: str = ''

    @property
    def combined_resource(self) -> str:
        return f'{self.resource}/{self.subresource}' if self.subresource else self.resource


def _field_selector_name(query: dict[str, str]) -> str:
    """The name a list or watch asks for with `fieldSelector=metadata.name=NAME` alone."""
    requirements = [r.strip() for r in (query.get('fieldSelector') or '').split(',') if r.strip()]
    for requirement in requirements:
        field, op, value = requirement.partition('==') if '==' in requirement else requirement.partition('=')
        if field.strip() == 'metadata.name' and op and not field.endswith('!'):
            return value.strip()
    return ''


def request_info(method: str, path: str, query: dict[str, str]) -> RequestInfo:
    """The attributes of one request, derived as kube-apiserver's RequestInfoFactory does."""
    parts = [part for part in path.split('/') if part]
    if len(parts) < 3 or parts[0] not in ('api', 'apis'):
        return RequestInfo(False, method.lower(), path)
    prefix, parts = parts[0], parts[1:]
    group = ''
    if prefix == 'apis':
        if len(parts) < 3:
            return RequestInfo(False, method.lower(), path)
        group, parts = parts[0], parts[1:]
    parts = parts[1:]  # the version
    verb = {'POST': 'create', 'GET': 'get', 'HEAD': 'get', 'PUT': 'update', 'PATCH': 'patch',
            'DELETE': 'delete'}.get(method.upper(), method.lower())
    namespace = ''
    if parts[0] == 'namespaces':
        if len(parts) > 1:
            namespace = parts[1]
            if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
                parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) > 1 else ''
    subresource = parts[2] if len(parts) > 2 else ''
    if not name and verb == 'delete':
        verb = 'deletecollection'
    if not name and verb == 'get':
        verb = 'watch' if query.get('watch') in ('true', '1') else 'list'
        name = _field_selector_name(query)
    return RequestInfo(True, verb, path, group, resource, subresource, namespace, name)


@dataclasses.dataclass(frozen=True)
class ServiceAccountUser:
    """A ServiceAccount as a user (what an IssuedToken authenticates as)."""
    namespace: str
    service_account: str

    @property
    def username(self) -> str:
        return f'system:serviceaccount:{self.namespace}:{self.service_account}'


User = IssuedToken | ServiceAccountUser


@dataclasses.dataclass(frozen=True)
class Grant:
    """One rule as a binding grants it: `binding` and `role` are (kind, namespace, name)."""
    binding: tuple[str, str, str]
    role: tuple[str, str, str]
    index: int  # of the rule in the role
    rule: dict[str, Any] = dataclasses.field(compare=False, hash=False)

    def describe(self) -> str:
        b_kind, b_ns, b_name = self.binding
        r_kind, r_ns, r_name = self.role
        where = f'{b_ns}/' if b_ns else ''
        return f'{b_kind} {where}{b_name} -> {r_kind} {r_name} rule {self.index}'


@dataclasses.dataclass(frozen=True)
class Decision:
    username: str
    request: RequestInfo
    allowed: bool
    grant: Grant | None = None
    message: str = ''  # of the 403 answered, for a refusal


# -- rule matching (k8s.io/kubernetes/pkg/apis/rbac/v1 helpers, RuleAllows) -------------------

def _any(values: Iterable[str], wanted: str) -> bool:
    return any(value == '*' or value == wanted for value in values)


def _resource_matches(rule_resources: Iterable[str], combined: str, subresource: str) -> bool:
    for resource in rule_resources:
        if resource in ('*', combined):
            return True
        if subresource and resource == f'*/{subresource}':
            return True
    return False


def _url_matches(rule_urls: Iterable[str], path: str) -> bool:
    for url in rule_urls:
        if url in ('*', path) or (url.endswith('*') and path.startswith(url.rstrip('*'))):
            return True
    return False


def rule_allows(rule: dict[str, Any], request: RequestInfo) -> bool:
    verbs = rule.get('verbs') or ()
    if not _any(verbs, request.verb):
        return False
    if not request.is_resource_request:
        return _url_matches(rule.get('nonResourceURLs') or (), request.path)
    names = rule.get('resourceNames') or ()
    return (_any(rule.get('apiGroups') or (), request.api_group)
            and _resource_matches(rule.get('resources') or (), request.combined_resource, request.subresource)
            and (not names or request.name in names))


def _applies_to(subject: dict[str, Any], user: User, groups: tuple[str, ...], namespace: str) -> bool:
    kind, name = subject.get('kind'), subject.get('name')
    if kind == 'User':
        return name == user.username
    if kind == 'Group':
        return name in groups
    if kind == 'ServiceAccount':
        sa_namespace = subject.get('namespace') or namespace  # a RoleBinding's own namespace by default
        return bool(sa_namespace) and (sa_namespace, name) == (user.namespace, user.service_account)
    return False


def user_groups(user: User) -> tuple[str, ...]:
    return ('system:serviceaccounts', f'system:serviceaccounts:{user.namespace}', 'system:authenticated')


def forbidden(username: str, request: RequestInfo, reason: str) -> ApiError:
    """The 403 a real server answers (apiserver's responsewriters.Forbidden and errors.NewForbidden)."""
    if request.is_resource_request:
        scope = (f'in the namespace "{request.namespace}"' if request.namespace else 'at the cluster scope')
        why = (f'User "{username}" cannot {request.verb} resource "{request.combined_resource}" '
               f'in API group "{request.api_group}" {scope}')
    else:
        why = f'User "{username}" cannot {request.verb} path "{request.path}"'
    why = why.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')
    if reason:
        why = f'{why}: {reason}'
    if not request.is_resource_request:
        return ApiError(403, 'Forbidden', f'forbidden: {why}', {})
    qualified = f'{request.resource}.{request.api_group}' if request.api_group else request.resource
    named = f' "{request.name}"' if request.name else ''
    details = {key: value for key, value in (('name', request.name), ('group', request.api_group),
                                             ('kind', request.resource)) if value}
    return ApiError(403, 'Forbidden', f'{qualified}{named} is forbidden: {why}', details)


class Authorizer:
    """RBAC over the stored Roles, ClusterRoles and their bindings (`rbac_objects`), and the record."""

    def __init__(self, rbac_objects: RbacObjects) -> None:
        self._objects = rbac_objects
        self.decisions: list[Decision] = []

    def authorize(self, user: IssuedToken | None, method: str, path: str, query: dict[str, str]) -> None:
        """Return if `user` may make the request, else raise the 403 a real server answers."""
        if user is None:
            return  # the administrator (see the module's doc)
        request = request_info(method, path, query)
        errors: list[str] = []
        grants = self._grants_for(user, request.namespace, errors)
        grant = next((g for g in grants if rule_allows(g.rule, request)), None)
        refusal = None
        if grant is None:
            reason = ('RBAC: ' + (errors[0] if len(errors) == 1 else f'[{", ".join(errors)}]')) if errors else ''
            refusal = forbidden(user.username, request, reason)
        self.decisions.append(Decision(user.username, request, grant is not None, grant,
                                       refusal.message if refusal is not None else ''))
        if len(self.decisions) > DECISIONS_KEPT:
            del self.decisions[:DECISIONS_KEPT // 2]
        if refusal is not None:
            raise refusal

    def _grants_for(self, user: User, namespace: str | None, errors: list[str]) -> Iterator[Grant]:
        """The rules granted to `user` where a request in `namespace` is decided ('' : cluster scope;
        None: in every namespace), in the order a real server visits them."""
        groups = user_groups(user)
        bindings = [('ClusterRoleBinding', b) for b in self._objects('clusterrolebindings', '')]
        if namespace != '':
            bindings += [('RoleBinding', b) for b in self._objects('rolebindings', namespace)]
        for kind, binding in bindings:
            binding_ns = binding['metadata'].get('namespace') or ''
            if not any(_applies_to(s, user, groups, binding_ns) for s in binding.get('subjects') or ()):
                continue
            ref = binding.get('roleRef') or {}
            role_kind, role_ns = ref.get('kind'), binding_ns if ref.get('kind') == 'Role' else ''
            plural = 'roles' if role_kind == 'Role' else 'clusterroles'
            role = next((r for r in self._objects(plural, role_ns) if r['metadata']['name'] == ref.get('name')),
                        None)
            if role is None:
                kind = role_kind.lower() if role_kind else 'role'
                errors.append(f'{kind}.{RBAC_GROUP} "{ref.get("name")}" not found')
                continue
            for index, rule in enumerate(role.get('rules') or ()):
                yield Grant((kind, binding_ns, binding['metadata']['name']), (role_kind, role_ns, ref['name']),
                            index, rule)

    # -- questions tests ask -------------------------------------------------------------

    def refused(self, username: str) -> list[Decision]:
        """The requests of `username` that were refused."""
        return [d for d in self.decisions if d.username == username and not d.allowed]

    def allowed(self, username: str) -> list[Decision]:
        return [d for d in self.decisions if d.username == username and d.allowed]

    def unused_grants(self, namespace: str, service_account: str, *, include_bootstrap: bool = False) -> list[str]:
        """What the bindings of ServiceAccount `namespace/service_account` grant, one line per (rule,
        API group, resource, verb), that no
        allowed request of the user used; the bootstrap policy (discovery...) is left out unless
        asked for. A line reads `RoleBinding NS/B -> Role R rule N: VERB RESOURCE in API group "G"`."""
        user = ServiceAccountUser(namespace, service_account)
        used: set[tuple[Grant, str, str, str]] = set()
        for decision in self.allowed(user.username):
            grant, request = decision.grant, decision.request
            if grant is None:
                continue
            rule = grant.rule
            for group in rule.get('apiGroups') or ():
                for resource in rule.get('resources') or ():
                    for verb in rule.get('verbs') or ():
                        narrowed = dict(rule, apiGroups=[group], resources=[resource], verbs=[verb])
                        if request.is_resource_request and rule_allows(narrowed, request):
                            used.add((grant, group, resource, verb))
            for url in rule.get('nonResourceURLs') or ():
                for verb in rule.get('verbs') or ():
                    if rule_allows(dict(rule, nonResourceURLs=[url], verbs=[verb]), request):
                        used.add((grant, '', url, verb))
        unused = []
        for grant in self._grants_for(user, None, []):
            if not include_bootstrap and self._is_bootstrap(grant):
                continue
            rule = grant.rule
            names = f' named {sorted(rule["resourceNames"])}' if rule.get('resourceNames') else ''
            for group in rule.get('apiGroups') or ():
                for resource in rule.get('resources') or ():
                    for verb in rule.get('verbs') or ():
                        if (grant, group, resource, verb) not in used:
                            unused.append(f'{grant.describe()}: {verb} {resource} in API group "{group}"{names}')
            for url in rule.get('nonResourceURLs') or ():
                for verb in rule.get('verbs') or ():
                    if (grant, '', url, verb) not in used:
                        unused.append(f'{grant.describe()}: {verb} path {url}')
        return unused

    def _is_bootstrap(self, grant: Grant) -> bool:
        kind, namespace, name = grant.role
        plural = 'roles' if kind == 'Role' else 'clusterroles'
        role = next((r for r in self._objects(plural, namespace) if r['metadata']['name'] == name), None)
        return role is not None and BOOTSTRAP_LABEL in (role['metadata'].get('labels') or {})


def bootstrap_policy() -> list[tuple[str, dict[str, Any]]]:
    """(plural, object) of the default RBAC objects a real server creates at start (those clients use)."""
    meta = {'labels': {BOOTSTRAP_LABEL: 'rbac-defaults'},
            'annotations': {'rbac.authorization.kubernetes.io/autoupdate': 'true'}}

    def role(name: str, rules: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        return 'clusterroles', {'apiVersion': f'{RBAC_GROUP}/v1', 'kind': 'ClusterRole',
                                'metadata': dict(meta, name=name), 'rules': rules}

    def binding(name: str, *groups: str) -> tuple[str, dict[str, Any]]:
        return 'clusterrolebindings', {
            'apiVersion': f'{RBAC_GROUP}/v1', 'kind': 'ClusterRoleBinding', 'metadata': dict(meta, name=name),
            'roleRef': {'apiGroup': RBAC_GROUP, 'kind': 'ClusterRole', 'name': name},
            'subjects': [{'apiGroup': RBAC_GROUP, 'kind': 'Group', 'name': g} for g in groups]}

    public = ['/healthz', '/livez', '/readyz', '/version', '/version/']
    return [
        role('cluster-admin', [{'apiGroups': ['*'], 'resources': ['*'], 'verbs': ['*']},
                               {'nonResourceURLs': ['*'], 'verbs': ['*']}]),
        binding('cluster-admin', 'system:masters'),
        role('system:discovery', [{'nonResourceURLs': ['/api', '/api/*', '/apis', '/apis/*', '/healthz',
                                                       '/livez', '/openapi', '/openapi/*', '/readyz', '/version',
                                                       '/version/'],
                                   'verbs': ['get']}]),
        binding('system:discovery', 'system:authenticated'),
        role('system:basic-user', [
            {'apiGroups': ['authentication.k8s.io'], 'resources': ['selfsubjectreviews'], 'verbs': ['create']},
            {'apiGroups': ['authorization.k8s.io'],
             'resources': ['selfsubjectaccessreviews', 'selfsubjectrulesreviews'], 'verbs': ['create']}]),
        binding('system:basic-user', 'system:authenticated'),
        role('system:public-info-viewer', [{'nonResourceURLs': public, 'verbs': ['get']}]),
        binding('system:public-info-viewer', 'system:authenticated', 'system:unauthenticated'),
    ]
