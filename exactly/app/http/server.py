"""Serving the Flask app with waitress on a socket bound at start-up (exactly/app/listeners.py)."""

from __future__ import annotations

import logging
import socket
import threading

from flask import Flask
from waitress import wasyncore
from waitress.server import create_server
from waitress.trigger import trigger

log = logging.getLogger(__name__)


class HttpServer:
    """waitress in a background thread; ``close`` stops it."""

    def __init__(self, app: Flask, sock: socket.socket, threads: int = 8) -> None:
        self._map: dict = {}  # waitress' socket map: its loop runs while it is not empty
        self._server = create_server(app, map=self._map, sockets=[sock], threads=threads, ident="exactly",
                                     clear_untrusted_proxy_headers=True)
        self._thread = threading.Thread(target=self._server.run, name="http", daemon=True)

    def start(self) -> "HttpServer":
        self._thread.start()
        return self

    def close(self) -> None:
        """Let requests in progress finish, then close every socket and stop the thread.

        The sockets are closed on waitress' own loop thread (a thunk through its
        trigger): closing them from here, under its ``select()``, fails the loop with
        EBADF -- or lets it poll a descriptor number the process has reused meanwhile.
        """
        self._server.task_dispatcher.shutdown()
        wakers = [d for d in self._map.values() if isinstance(d, trigger)]
        if self._thread.is_alive() and wakers:
            def close_all() -> None:
                wasyncore.close_all(self._map)
            try:
                # arg-type: types-waitress 3.0.1 has the thunk take an argument; waitress calls thunk()
                wakers[0].pull_trigger(close_all)  # type: ignore[arg-type]
            except OSError as e:  # its loop ended meanwhile and closed the map, trigger included
                log.warning("HTTP server loop had already stopped at shutdown: %s", e)
            self._thread.join(timeout=10)
        else:
            wasyncore.close_all(self._map)
