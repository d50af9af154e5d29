"""ServiceAccount tokens for a process under test, as the kubelet provides them to a pod: asked
with a TokenRequest and bound to an object, so that deleting that object revokes the token at
once (a real API server, and the fake one, then answer 401). Rotation is `issue()` of a new
token, `write_kubeconfig()` over the file the process reads, and `revoke()` of the old one.
`issue_for_pod()` asks for a token bound to a Pod, as a kubelet does for a pod's projected
ServiceAccount token (testbed/operator_pods.py), and `write_token_kubeconfig()` writes a
kubeconfig holding that token and nothing else of the base kubeconfig's credentials.
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


# What a kubelet asks for a projected ServiceAccount token with no expirationSeconds of its own
# (3607: the API server then extends it, --service-account-extend-token-expiration).
POD_TOKEN_SECONDS = 3607


def issue_for_pod(client: KubeClient, pod: dict, seconds: int = POD_TOKEN_SECONDS) -> str:
    """A token of the pod's ServiceAccount bound to the pod (its name and uid), as a kubelet
    requests one: the API server refuses it (401) once that pod object is gone."""
    meta = pod['metadata']
    account = pod['spec'].get('serviceAccountName') or 'default'
    answer = client.create(
        f'/api/v1/namespaces/{meta["namespace"]}/serviceaccounts/{account}/token',
        {'apiVersion': 'authentication.k8s.io/v1', 'kind': 'TokenRequest',
         'spec': {'expirationSeconds': seconds,
                  'boundObjectRef': {'apiVersion': 'v1', 'kind': 'Pod', 'name': meta['name'],
                                     'uid': meta['uid']}}})
    return answer['status']['token']


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


def write_token_kubeconfig(path: Path, base: Path, token: str) -> None:
    """Write a kubeconfig with the cluster of `base`'s current context (its server URL and CA)
    and a user that authenticates with `token`: no other credential of `base` is copied."""
    config = yaml.safe_load(base.read_text())
    context = next(c['context'] for c in config['contexts'] if c['name'] == config['current-context'])
    cluster = next(c for c in config['clusters'] if c['name'] == context['cluster'])
    path.write_text(yaml.safe_dump({
        'apiVersion': 'v1', 'kind': 'Config', 'clusters': [cluster], 'current-context': 'pod',
        'contexts': [{'name': 'pod', 'context': {'cluster': cluster['name'], 'user': 'pod'}}],
        'users': [{'name': 'pod', 'user': {'token': token}}]}))
