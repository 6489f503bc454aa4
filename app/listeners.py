"""Listening sockets. The ports are taken at start-up so a port in use is a clear
error before anything else happens; until the Kafka listener arrives, its port
accepts and closes connections so that no client hangs on it."""

from __future__ import annotations

import errno
import socket
import threading


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


def refuse_connections(sock: socket.socket) -> None:
    """Accept and close connections on a port whose listener is not there yet."""
    threading.Thread(target=_refuse, args=(sock,), daemon=True, name="reserved").start()


def _refuse(sock: socket.socket) -> None:
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        conn.close()
