"""A TCP forwarder in front of a real service (Nova's API, Keystone, Ironic) that a test can
switch off and on again, or have cut one request.

Used to take Nova away from the operator only (the computes talk to Nova through RabbitMQ
and the conductor, not through its API): while off, the port refuses connections and the
connections in flight are cut, as when nova-api goes down; on again, it listens on the same
port, as when nova-api comes back. `cut_once(marker)`: the next request whose first bytes
hold `marker` never reaches the service and its connection is closed without an answer, as
when a server closes an idle keep-alive connection just as a request is sent on it (the client
sees "Connection aborted"). `before_once(marker, action)`: the next request whose first bytes
hold `marker` waits until `action()` has run, then goes on: something happens to the service
exactly between a client's earlier request and this one (a build claiming a node between the
read before a write and the write). `delay(seconds)`: every request waits that long before it
is forwarded (a slow service: its answers come late). `hang()`: every request is held, never
forwarded nor answered (a service that accepts connections and never answers), until
`answer_again()`: the held requests' connections are then closed unanswered, as a hung server's
are once it is restarted, and new requests go through. `request_lines` keeps what was asked (method, path and
query of each request). Everything it forwards is the real service's answer.
"""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit, urlunsplit


class SwitchableProxy:
    """Forwards 127.0.0.1:<port> to `upstream_url`'s host and port while on.

    `url(upstream_url)` gives the same URL through the proxy. Use as a context manager;
    `off()` / `on()` switch it; every thread and socket is gone after exit.
    """

    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._cut_marker: bytes | None = None
        self.cuts = 0  # requests cut by cut_once
        self._before: tuple[bytes, object] | None = None
        self._delay = 0.0
        self._answering = threading.Event()  # cleared while hung
        self._answering.set()
        self.held = 0  # requests held by hang()
        self.befores = 0  # actions run by before_once
        self.request_lines: list[str] = []  # the request line of every HTTP request forwarded, in order

    def url(self, upstream_url: str) -> str:
        """`upstream_url` with its host and port replaced by the proxy's."""
        parts = urlsplit(upstream_url)
        return urlunsplit(parts._replace(netloc=f"127.0.0.1:{self.port}"))

    def __enter__(self) -> SwitchableProxy:
        self.on()
        return self

    def __exit__(self, *exc: object) -> None:
        self._answering.set()  # no thread stays held
        self.off()
        for thread in self._threads:
            thread.join(timeout=10)

    def on(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(16)
            self._listener = listener
        self._spawn(self._accept, listener)

    def off(self) -> None:
        """Refuse new connections and cut the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            open_sockets, self._sockets = self._sockets, set()
        for sock in ([listener] if listener else []) + list(open_sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def cut_once(self, marker: bytes) -> None:
        """Cut the connection of the next request whose first bytes hold `marker`, unanswered."""
        with self._lock:
            self._cut_marker = marker

    def delay(self, seconds: float) -> None:
        """Hold every request `seconds` before forwarding it (0: forward at once)."""
        with self._lock:
            self._delay = seconds

    def hang(self) -> None:
        """Hold every request from now on, unanswered, until `answer_again()`."""
        self._answering.clear()

    def answer_again(self) -> None:
        """End `hang()`: the held requests' connections are closed unanswered; new ones go through."""
        self._answering.set()

    def before_once(self, marker: bytes, action) -> None:
        """Run `action()` right before the next request whose first bytes hold `marker` is
        forwarded (on the proxy's thread: the request waits for it)."""
        with self._lock:
            self._before = (marker, action)

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="switchable-proxy")
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # switched off
            if not self._answering.is_set():  # hung: the service never sees this connection
                self._spawn(self._hold, client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # switched off meanwhile
                    client.close()
                    upstream.close()
                    return
                self._sockets |= {client, upstream}
            self._spawn(self._pipe, client, upstream, True)
            self._spawn(self._pipe, upstream, client, False)

    def _pipe(self, source: socket.socket, target: socket.socket, requests: bool) -> None:
        try:
            while data := source.recv(65536):
                if requests and self._cut(data):
                    break
                if not self._answering.is_set():  # hung: neither the request nor an answer passes
                    with self._lock:
                        self.held += requests
                    self._answering.wait()
                    break  # held until the service answers again: then its connection is closed
                if requests:
                    with self._lock:
                        delay = self._delay
                    if delay:
                        time.sleep(delay)  # a slow service: the request reaches it late
                    self._run_before(data)
                    self._note_request(data)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            with self._lock:
                self._sockets -= {source, target}

    def _hold(self, client: socket.socket) -> None:
        """A connection accepted while hung: its requests are read and never answered, until
        the service answers again; then it is closed."""
        with self._lock:
            self._sockets.add(client)
        try:
            while not self._answering.is_set():
                client.settimeout(0.5)
                try:
                    if client.recv(65536):
                        with self._lock:
                            self.held += 1
                    else:
                        break
                except TimeoutError:
                    continue
        except OSError:
            pass
        finally:
            try:
                client.close()
            finally:
                with self._lock:
                    self._sockets.discard(client)

    def _run_before(self, data: bytes) -> None:
        with self._lock:
            if self._before is None or self._before[0] not in data[:512]:
                return
            _, action = self._before
            self._before = None
            self.befores += 1
        action()
    def _note_request(self, data: bytes) -> None:
        """Keep the request line of a chunk that starts an HTTP request (`GET /path?query HTTP/1.1`)."""
        line = data.split(b"\r\n", 1)[0].decode("latin-1")
        method, _, rest = line.partition(" ")
        if method.isalpha() and method.isupper() and rest.endswith(("HTTP/1.1", "HTTP/1.0")):
            with self._lock:
                self.request_lines.append(line)

    def _cut(self, data: bytes) -> bool:
        with self._lock:
            if self._cut_marker is None or self._cut_marker not in data[:512]:
                return False
            self._cut_marker = None
            self.cuts += 1
            return True
