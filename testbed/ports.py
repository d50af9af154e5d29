"""A TCP port for a local service to listen on. Only the standard library (see procgroup.py)."""

from __future__ import annotations

import socket


def free_port(host_ip: str = "127.0.0.1") -> int:
    """A TCP port on `host_ip` that nothing listens on at the moment of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host_ip, 0))
        return sock.getsockname()[1]
