"""ServiceAccount tokens for a process under test, as the kubelet provides them to a pod: asked
with a TokenRequest and bound to an object, so that deleting that object revokes the token at
once (a real API server, and the fake one, then answer 401). Rotation is `issue()` of a new
token, `write_kubeconfig()` over the file the process reads, and `revoke()` of the old one.
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.kube_client import KubeClient


@dataclass(frozen=True)
class BoundToken:
    token: str
    namespace: str
    bound_secret: str  # deleting this Secret revokes the token


def issue(client: KubeClient, namespace: str, service_account: str = 'default',
          seconds: int = 3600) -> BoundToken:
    """A new token of `service_account`, bound to a new Secret of its own."""
    secret = f'token-binding-{uuid.uuid4().hex[:8]}'
    created = client.create(f'/api/v1/namespaces/{namespace}/secrets',
                            {'apiVersion': 'v1', 'kind': 'Secret', 'metadata': {'name': secret}})
    answer = client.create(
        f'/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token',
        {'apiVersion': 'authentication.k8s.io/v1', 'kind': 'TokenRequest',
         'spec': {'expirationSeconds': seconds,
                  'boundObjectRef': {'apiVersion': 'v1', 'kind': 'Secret', 'name': secret,
                                     'uid': created['metadata']['uid']}}})
    return BoundToken(answer['status']['token'], namespace, secret)


def revoke(client: KubeClient, token: BoundToken) -> None:
    client.delete(f'/api/v1/namespaces/{token.namespace}/secrets/{token.bound_secret}')


def write_kubeconfig(path: Path, base: Path, token: BoundToken) -> None:
    """Write (atomically, as the kubelet swaps a projected token) a copy of kubeconfig `base`
    whose current user authenticates with `token` only."""
    config = yaml.safe_load(base.read_text())
    context = next(c['context'] for c in config['contexts'] if c['name'] == config['current-context'])
    user = f'{context["user"]}-token'
    config['users'] = [u for u in config.get('users') or [] if u['name'] != user] + [
        {'name': user, 'user': {'token': token.token}}]
    context['user'] = user
    scratch = path.with_name(f'.{path.name}.{uuid.uuid4().hex[:6]}')
    scratch.write_text(yaml.safe_dump(config))
    os.replace(scratch, path)
