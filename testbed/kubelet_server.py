"""The node agent's HTTPS endpoint, the part of a kubelet's API that the API server calls for
`pods/log`: GET /containerLogs/{namespace}/{pod}/{container}. The API server finds it through the
Node's InternalIP and `status.daemonEndpoints.kubeletEndpoint.Port`, so `kubectl logs` and the
operator's log reads take the real server's path, query handling and errors included.

Invariants:
- It serves what `log_of(namespace, pod, container)` returns (None: 404, as a kubelet answers for
  a container it does not know; LogRefused: 400 with its message, as for a container waiting to
  start), cut as the kubelet does for `tailLines` and `limitBytes`.
- Its serving certificate is its own (a CA made for it), as a kubelet's self-signed one is: the
  test bed's API server, like kubeadm's by default, does not verify kubelets' certificates.
"""

from __future__ import annotations

import ssl
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from testbed.certificates import CertificateAuthority

LogSource = Callable[[str, str, str], "str | None"]


class LogRefused(Exception):
    """What a kubelet answers 400 to: a container that has not started (message as the kubelet's)."""


def cut(text: str, tail_lines: int | None, limit_bytes: int | None) -> bytes:
    """A container log as a kubelet answers with `tailLines` (the last N lines) and `limitBytes`
    (at most N bytes from the start of what is left)."""
    if tail_lines is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-tail_lines:]) if tail_lines > 0 else ""
    data = text.encode()
    return data[:limit_bytes] if limit_bytes is not None else data


class KubeletServer:
    """One HTTPS listener on 127.0.0.1 for every Node of one node agent (they share its address)."""

    def __init__(self, log_of: LogSource) -> None:
        self._log_of = log_of
        self._directory = tempfile.TemporaryDirectory(prefix="kubelet-serving-")
        here = Path(self._directory.name)
        ca = CertificateAuthority.create(here, "testbed node agent")
        issued = ca.issue(here, "serving", "kubelet", hosts=("127.0.0.1", "localhost"), server=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(issued.cert, issued.key)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server._answer(self)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kubelet-server", daemon=True)

    def start(self) -> KubeletServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._directory.cleanup()

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self._send(request, 404, b"404 page not found\n")
        query = parse_qs(url.query)

        def number(name: str) -> int | None:
            values = query.get(name)
            return int(values[0]) if values else None

        try:
            text = self._log_of(parts[1], parts[2], parts[3])
        except LogRefused as refused:
            return self._send(request, 400, str(refused).encode())
        if text is None:
            message = f"container {parts[3]} of pod {parts[1]}/{parts[2]} is not known to this kubelet\n"
            return self._send(request, 404, message.encode())
        self._send(request, 200, cut(text, number("tailLines"), number("limitBytes")))

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
        request.send_response(code)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
