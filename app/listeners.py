"""Listening sockets. The ports are taken at start-up so a port in use is a clear
error before anything else happens (connections arriving while the data directory
recovers wait in the listen backlog)."""

from __future__ import annotations

import errno
import socket


class PortInUseError(Exception):
    pass


def bind(host: str, port: int, what: str) -> socket.socket:
    """Bind and listen on ``host:port``; raise PortInUseError with a clear message."""
    try:
        return socket.create_server((host, port), reuse_port=False)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise PortInUseError(f"{what} port {host}:{port} is already in use") from None
        raise PortInUseError(f"cannot listen for {what} on {host}:{port}: {e.strerror}") from None
