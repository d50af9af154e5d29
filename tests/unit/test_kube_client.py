"""The test bed's client (testbed/kube_client.py) is the official `kubernetes` client: its
requests are the official client's, and its strict parsing checks every answer of the fake API
server, so a fake that answers as a real API server does not fails the test that asked.

Shown against the fake of testbed/kube_emulator/ (started here) behind an HTTP proxy that hands
on every request and answer untouched, except the one answer a test changes into something a
real API server never sends. The same requests, answered untouched, pass: the refusal is the
official model's verdict on the change, not on the request.
"""
from __future__ import annotations

import http.client
import http.server
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pydantic
import pytest
from kubernetes.client import ApiClient

from testbed.kube_client import KubeAPIError, KubeClient, MalformedAnswer
from testbed.kube_emulator import EmulatorThread, kubeconfig_text, store

NS = 'default'
PODS = f'/api/v1/namespaces/{NS}/pods'
# A change of one answer: (its request path, what the proxy makes of its body and content type).
Change = Callable[[bytes, str], tuple[bytes, str]]
HOP_BY_HOP = {'connection', 'keep-alive', 'transfer-encoding', 'content-length', 'host'}


class AnswerChanger(http.server.ThreadingHTTPServer):
    """An HTTP proxy on 127.0.0.1 in front of `upstream`: each request forwarded as it came (its
    User-Agent noted), each answer handed back as it came but for those `change` matches."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(('127.0.0.1', 0), _Forward)
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or '127.0.0.1', parts.port or 80)
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
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
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


@pytest.fixture(scope='module')
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeClient, AnswerChanger]]:
    """A client whose kubeconfig points at the proxy in front of a fake API server of its own."""
    with EmulatorThread() as emulator:
        proxy = AnswerChanger(emulator.url)
        thread = threading.Thread(target=proxy.serve_forever, name='answer-changer', daemon=True)
        thread.start()
        try:
            kubeconfig = tmp_path_factory.mktemp('kube-client') / 'kubeconfig'
            kubeconfig.write_text(kubeconfig_text(proxy.url))
            yield KubeClient(kubeconfig), proxy
        finally:
            proxy.shutdown()
            proxy.server_close()
            thread.join(timeout=30)


@pytest.fixture
def pod(fake: tuple[KubeClient, AnswerChanger]) -> Iterator[str]:
    """A pod of this test (answers untouched while it is made), deleted afterwards."""
    client, proxy = fake
    name = f'pod-{uuid.uuid4().hex[:8]}'
    client.create(PODS, {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name}, 'spec': {
        'containers': [{'name': 'main', 'image': 'registry.k8s.io/pause:3.10', 'ports': [{'containerPort': 8080}]}]}})
    yield name
    proxy.changes.clear()
    client.delete(f'{PODS}/{name}')


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


def test_requests_are_the_official_clients(fake: tuple[KubeClient, AnswerChanger]) -> None:
    client, proxy = fake
    proxy.user_agents.clear()
    assert client.get('/version')['major'] == '1'
    assert client.get(PODS)['kind'] == 'PodList'
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
def test_an_answer_no_real_server_gives_is_refused(fake: tuple[KubeClient, AnswerChanger], pod: str,
                                                   wrong: str) -> None:
    client, proxy = fake
    which, change, named = WRONG_ANSWERS[wrong]
    path = f'{PODS}/{pod}' if which == 'object' else PODS
    untouched = client.get(path)  # the fake's own answer passes, and is handed on as it was sent
    assert (untouched['metadata']['name'] == pod) if which == 'object' else untouched['kind'] == 'PodList'

    proxy.changes[path] = change
    with pytest.raises(MalformedAnswer) as refused:
        client.get(path)
    assert named in str(refused.value)
    if wrong != 'JSON served as bytes':  # the model's own validation said no
        assert isinstance(refused.value.__cause__, pydantic.ValidationError)


def test_watch_events_are_parsed_as_the_official_watch_parses_them(
        fake: tuple[KubeClient, AnswerChanger], pod: str) -> None:
    client, proxy = fake
    since = client.get(PODS)['metadata']['resourceVersion']
    client.patch(f'{PODS}/{pod}', {'metadata': {'labels': {'seen': 'once'}}})
    client.patch(f'{PODS}/{pod}', {'metadata': {'labels': {'seen': 'twice'}}})

    def watched() -> list[tuple[str, str]]:
        stream = client.watch(PODS, timeout_seconds=1, resourceVersion=since)
        return [(e['type'], e['object']['metadata']['labels']['seen']) for e in stream]
    assert watched() == [('MODIFIED', 'once'), ('MODIFIED', 'twice')]

    # Events are JSON lines (one per line: https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes);
    # two on one line are no event the official Watch can read.
    proxy.changes[PODS] = lambda data, content_type: (data.replace(b'}\n{', b'}{'), content_type)
    with pytest.raises(MalformedAnswer):
        watched()
    # An event's object is parsed as a V1Pod: a node name is a string.
    proxy.changes[PODS] = events_changed(lambda event: event['object']['spec'].update(nodeName=['a', 'list']))
    with pytest.raises(MalformedAnswer) as refused:
        watched()
    assert isinstance(refused.value.__cause__, pydantic.ValidationError)


def test_an_expired_watch_ends_with_the_servers_status(fake: tuple[KubeClient, AnswerChanger], pod: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the events after a resourceVersion are no longer kept, a watch from there gets an
    ERROR event with a 410 Expired Status (as the watch cache answers) and the client says so,
    as the official Watch does: the fake kubelet lists again when it does."""
    client, _ = fake
    since = client.get(PODS)['metadata']['resourceVersion']
    # Read at each write: past 10 events, each write drops the oldest 5 (200 writes drop 800 at least).
    monkeypatch.setattr(store, 'HISTORY_KEPT', 10)
    for i in range(200):
        client.patch(f'{PODS}/{pod}', {'metadata': {'labels': {'write': str(i)}}})
    with pytest.raises(KubeAPIError) as expired:
        list(client.watch(PODS, timeout_seconds=1, resourceVersion=since))
    assert (expired.value.status, expired.value.reason) == (410, 'Expired')
    assert expired.value.body['message'].startswith(f'too old resource version: {since} (')

