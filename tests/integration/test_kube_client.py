"""The test bed's client (testbed/kube_client.py) is the official `kubernetes` client: its
requests are the official client's, and its strict parsing checks every answer of an API server,
so an answer no real API server gives fails the test that asked.

Shown against the session's API server (tests/support/kube_api.py: the test bed's real control
plane, or the cluster of KUBECONFIG) behind an HTTP proxy started here: the client under test
speaks plain HTTP to the proxy with no credentials of its own, and the proxy speaks HTTPS to the
API server with the session's credentials (its kubeconfig's client certificate or token), handing
on every request and answer untouched, except the one answer a test changes into something a real
API server never sends. The same requests, answered untouched, pass: the refusal is the official
model's verdict on the change, not on the request.
"""
from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pydantic
import pytest
import yaml
from kubernetes.client import ApiClient, Configuration

from testbed.kube_client import KubeAPIError, KubeClient, MalformedAnswer, restricted_container
from testbed.waiting import wait_for
from tests.support.kube_api import KubeAPI

pytestmark = pytest.mark.integration

CRDS = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions'
# A change of one answer: (its request path, what the proxy makes of its body and content type).
Change = Callable[[bytes, str], tuple[bytes, str]]
HOP_BY_HOP = {'connection', 'keep-alive', 'transfer-encoding', 'content-length', 'host'}


class AnswerChanger(http.server.ThreadingHTTPServer):
    """An HTTP proxy on 127.0.0.1 in front of the API server of `upstream` (the official client's
    Configuration of a kubeconfig: its URL, CA and credentials): each request forwarded as it came
    (its User-Agent noted) over HTTPS with those credentials, each answer handed back as it came
    but for those `change` matches."""

    daemon_threads = True

    def __init__(self, upstream: Configuration) -> None:
        super().__init__(('127.0.0.1', 0), _Forward)
        parts = urlsplit(upstream.host)
        self.upstream = (parts.hostname or '127.0.0.1', parts.port or 443)
        self.tls = ssl.create_default_context(cafile=upstream.ssl_ca_cert)
        if not upstream.verify_ssl:
            self.tls.check_hostname, self.tls.verify_mode = False, ssl.CERT_NONE
        if upstream.cert_file:
            self.tls.load_cert_chain(upstream.cert_file, upstream.key_file)
        self.credentials = upstream.auth_settings  # {'BearerToken': {...}} where a token signs
        self.user_agents: list[str] = []
        self.changes: dict[str, Change] = {}  # request path -> how its answer is changed
        self.url = f'http://127.0.0.1:{self.server_address[1]}'


class _Forward(http.server.BaseHTTPRequestHandler):
    server: AnswerChanger
    protocol_version = 'HTTP/1.1'
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms wait for a delayed ACK

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
        self.server.user_agents.append(self.headers.get('User-Agent', ''))
        upstream = http.client.HTTPSConnection(*self.server.upstream, timeout=60, context=self.server.tls)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            headers.update({auth['key']: auth['value'] for auth in self.server.credentials().values()
                            if auth['in'] == 'header'})
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            data, content_type = answer.read(), answer.getheader('Content-Type', '')
            change = self.server.changes.get(urlsplit(self.path).path)
            if change is not None:
                data, content_type = change(data, content_type)
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in HOP_BY_HOP | {'content-type'}:
                    self.send_header(key, value)
            self.send_header('Content-Type', content_type)
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        finally:
            upstream.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    def log_message(self, *args: Any) -> None:
        pass


def proxy_kubeconfig(url: str) -> str:
    """A kubeconfig for the proxy: plain HTTP on localhost, no credentials (the proxy adds them)."""
    return yaml.safe_dump({
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'answer-changer',
        'clusters': [{'name': 'answer-changer', 'cluster': {'server': url}}],
        'users': [{'name': 'answer-changer', 'user': {}}],
        'contexts': [{'name': 'answer-changer', 'context': {'cluster': 'answer-changer', 'user': 'answer-changer'}}],
    })


@pytest.fixture(scope='module')
def namespace(kube_api: KubeAPI) -> Iterator[str]:
    """This module's namespace (made and deleted by the session's client, not through the proxy)."""
    name = kube_api.create_namespace('kube-client')
    yield name
    kube_api.delete_namespace(name)
    kube_api.namespaces.remove(name)


@pytest.fixture(scope='module')
def fake(kube_api: KubeAPI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeClient, AnswerChanger]]:
    """A client whose kubeconfig points at the proxy in front of the session's API server."""
    proxy = AnswerChanger(kube_api.client.api.configuration)
    thread = threading.Thread(target=proxy.serve_forever, name='answer-changer', daemon=True)
    thread.start()
    try:
        kubeconfig = tmp_path_factory.mktemp('kube-client') / 'kubeconfig'
        kubeconfig.write_text(proxy_kubeconfig(proxy.url))
        yield KubeClient(kubeconfig), proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(timeout=30)


def pods_of(namespace: str) -> str:
    return f'/api/v1/namespaces/{namespace}/pods'


@pytest.fixture
def pod(fake: tuple[KubeClient, AnswerChanger], namespace: str) -> Iterator[str]:
    """A pod of this test (answers untouched while it is made), deleted afterwards. Its scheduler
    is one nobody runs: no scheduler or kubelet writes it, so every change to it is the test's."""
    client, proxy = fake
    name = f'pod-{uuid.uuid4().hex[:8]}'
    client.create(pods_of(namespace), {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name}, 'spec': {
        'schedulerName': 'no-scheduler-runs-this',
        'containers': [restricted_container('main', 'registry.k8s.io/pause:3.10',
                                            ports=[{'containerPort': 8080}])]}})
    yield name
    proxy.changes.clear()
    client.delete(f'{pods_of(namespace)}/{name}')


def json_changed(edit: Callable[[Any], None]) -> Change:
    """A change of a JSON answer's document (`edit` changes it in place); its content type kept."""
    def change(data: bytes, content_type: str) -> tuple[bytes, str]:
        document = json.loads(data)
        edit(document)
        return json.dumps(document).encode(), content_type
    return change


def events_changed(edit: Callable[[Any], None]) -> Change:
    """A change of each event of a watch answer (JSON lines): `edit` changes it in place."""
    def change(data: bytes, content_type: str) -> tuple[bytes, str]:
        events = [json.loads(line) for line in data.splitlines() if line.strip()]
        for event in events:
            edit(event)
        return b''.join(json.dumps(event).encode() + b'\n' for event in events), content_type
    return change


def test_requests_are_the_official_clients(fake: tuple[KubeClient, AnswerChanger], namespace: str) -> None:
    client, proxy = fake
    proxy.user_agents.clear()
    assert client.get('/version')['major'] == '1'
    assert client.get(pods_of(namespace))['kind'] == 'PodList'
    assert proxy.user_agents and set(proxy.user_agents) == {ApiClient().user_agent}  # OpenAPI-Generator/<version>/python


# Each: an answer changed into one a real API server never gives, and where the official model says so.
WRONG_ANSWERS = {
    'resourceVersion a number': ('object', json_changed(
        lambda pod: pod['metadata'].update(resourceVersion=int(pod['metadata']['resourceVersion']))),
        'resourceVersion'),
    'creationTimestamp no time': ('object', json_changed(
        lambda pod: pod['metadata'].update(creationTimestamp='yesterday')), 'creationTimestamp'),
    'containerPort a string': ('object', json_changed(
        lambda pod: pod['spec']['containers'][0]['ports'][0].update(containerPort='8080')), 'containerPort'),
    'list items null': ('list', json_changed(lambda listing: listing.update(items=None)), 'items'),
    'JSON served as bytes': ('object', lambda data, _: (data, 'application/octet-stream'),
                             'Unsupported content type'),
}


@pytest.mark.parametrize('wrong', WRONG_ANSWERS, ids=list(WRONG_ANSWERS))
def test_an_answer_no_real_server_gives_is_refused(fake: tuple[KubeClient, AnswerChanger], namespace: str,
                                                   pod: str, wrong: str) -> None:
    client, proxy = fake
    which, change, named = WRONG_ANSWERS[wrong]
    path = f'{pods_of(namespace)}/{pod}' if which == 'object' else pods_of(namespace)
    untouched = client.get(path)  # the server's own answer passes, and is handed on as it was sent
    assert (untouched['metadata']['name'] == pod) if which == 'object' else untouched['kind'] == 'PodList'

    proxy.changes[path] = change
    with pytest.raises(MalformedAnswer) as refused:
        client.get(path)
    assert named in str(refused.value)
    if wrong != 'JSON served as bytes':  # the model's own validation said no
        assert isinstance(refused.value.__cause__, pydantic.ValidationError)


def test_watch_events_are_parsed_as_the_official_watch_parses_them(
        fake: tuple[KubeClient, AnswerChanger], namespace: str, pod: str) -> None:
    client, proxy = fake
    pods = pods_of(namespace)
    since = client.get(pods)['metadata']['resourceVersion']
    client.patch(f'{pods}/{pod}', {'metadata': {'labels': {'seen': 'once'}}})
    client.patch(f'{pods}/{pod}', {'metadata': {'labels': {'seen': 'twice'}}})

    def watched() -> list[tuple[str, str]]:
        stream = client.watch(pods, timeout_seconds=1, resourceVersion=since)
        return [(e['type'], e['object']['metadata']['labels']['seen']) for e in stream]
    assert watched() == [('MODIFIED', 'once'), ('MODIFIED', 'twice')]

    # Events are JSON lines (one per line: https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes);
    # two on one line are no event the official Watch can read.
    proxy.changes[pods] = lambda data, content_type: (data.replace(b'}\n{', b'}{'), content_type)
    with pytest.raises(MalformedAnswer):
        watched()
    # An event's object is parsed as a V1Pod: a node name is a string.
    proxy.changes[pods] = events_changed(lambda event: event['object']['spec'].update(nodeName=['a', 'list']))
    with pytest.raises(MalformedAnswer) as refused:
        watched()
    assert isinstance(refused.value.__cause__, pydantic.ValidationError)


@contextlib.contextmanager
def custom_resource(client: KubeClient, namespace: str) -> Iterator[str]:
    """A custom resource made for this test (its CRD deleted afterwards): the path of its
    collection in `namespace`, once served."""
    group = f'k{uuid.uuid4().hex[:8]}.kube-client.tests.ironicshards.io'
    client.create(CRDS, {
        'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
        'metadata': {'name': f'probes.{group}'},
        'spec': {'group': group, 'scope': 'Namespaced',
                 'names': {'plural': 'probes', 'singular': 'probe', 'kind': 'Probe', 'listKind': 'ProbeList'},
                 'versions': [{'name': 'v1', 'served': True, 'storage': True, 'schema': {
                     'openAPIV3Schema': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}]}})
    path = f'/apis/{group}/v1/namespaces/{namespace}/probes'
    try:
        wait_for(lambda: client.exists(path), what=f'{path} to be served')
        yield path
    finally:
        client.delete(f'{CRDS}/probes.{group}')


def test_an_expired_watch_ends_with_the_servers_status(fake: tuple[KubeClient, AnswerChanger], namespace: str,
                                                       kube_api: KubeAPI) -> None:
    """Once the events after a resourceVersion are no longer kept, a watch from there gets an
    ERROR event with a 410 Expired Status (as the watch cache answers) and the client says so,
    as the official Watch does: the fake kubelet lists again when it does.

    A real API server keeps every event of the last 75 s at least (its watch cache grows while
    they come faster; etcd keeps them until its compaction, every 5 minutes): the events it does
    not keep here are those from before a resource's watch cache began, for a resource made after
    `since`."""
    client, _ = fake
    since = client.get(pods_of(namespace))['metadata']['resourceVersion']

    def refusal(resource: str) -> KubeAPIError | None:
        """What ended the watch from `since`; None while the resource's new watch cache is not
        ready yet (429 TooManyRequests: try again)."""
        try:
            events = list(client.watch(resource, timeout_seconds=1, resourceVersion=since))
        except KubeAPIError as error:
            return None if error.status == 429 else error
        pytest.fail(f'the watch from resourceVersion {since} ended without an error: {events}')

    with custom_resource(kube_api.client, namespace) as resource:
        expired = wait_for(lambda: refusal(resource), what=f'the watch cache of {resource} to answer')
    assert (expired.status, expired.reason) == (410, 'Expired')
    assert expired.body['message'].startswith(f'too old resource version: {since} (')
