"""Running the fake: served on 127.0.0.1 until told to stop (`serve`), from a daemon thread with
its own event loop (EmulatorThread: the tests, hack/kube-emulator.py and the demo), and a
kubeconfig that points kubectl, kopf or the operator at it (kubeconfig_text), anonymously or
with a ServiceAccount token.
"""
import asyncio
import threading
from typing import Any

import kmock
import yaml

from testbed.kube_emulator.server import FakeKubeAPI


def kubeconfig_text(url: str, token: str | None = None) -> str:
    """A kubeconfig for the fake: plain HTTP on localhost, no credentials or a bearer `token`."""
    return yaml.safe_dump({
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'fake-kube-api',
        'clusters': [{'name': 'fake-kube-api', 'cluster': {'server': url}}],
        'users': [{'name': 'fake-kube-api', 'user': {'token': token} if token else {}}],
        'contexts': [{'name': 'fake-kube-api',
                      'context': {'cluster': 'fake-kube-api', 'user': 'fake-kube-api', 'namespace': 'default'}}],
    })


async def serve(port: int = 0, started: Any = None, stop: asyncio.Event | None = None) -> None:
    """Run the fake on 127.0.0.1:port until `stop` is set; `started(url, api)` is called once listening."""
    stop = stop or asyncio.Event()
    async with FakeKubeAPI() as api, kmock.Server(api, port=port or None) as server:
        if started is not None:
            started(f'http://{server.host}:{server.port}', api)
        try:
            await stop.wait()
        finally:
            await api.close()


class EmulatorThread:
    """The fake served from a daemon thread with its own event loop, so that blocking test code
    (kubectl subprocesses, sync HTTP) never starves it. `stop()` leaves no thread or port behind.
    `api` is the running FakeKubeAPI (its `authn.audit` tells who wrote what)."""

    def __init__(self, port: int = 0) -> None:
        self.url = ''
        self.api: FakeKubeAPI | None = None
        self._port = port
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name='fake-kube-api', daemon=True)

    def start(self) -> 'EmulatorThread':
        self._thread.start()
        if not self._ready.wait(timeout=30) or self._error is not None:
            raise RuntimeError(f'the fake Kubernetes API did not start: {self._error!r}')
        return self

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def started(url: str, api: FakeKubeAPI) -> None:
                self.url, self.api = url, api
                self._ready.set()
            await serve(self._port, started, self._stop)
        try:
            asyncio.run(main())
        except BaseException as e:  # reported by start() if it happens before listening
            self._error = e
            self._ready.set()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        if self._thread.is_alive():
            raise RuntimeError('the fake Kubernetes API thread did not stop')

    def __enter__(self) -> 'EmulatorThread':
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
