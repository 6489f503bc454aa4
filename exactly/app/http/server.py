"""Serving the Flask app with waitress on a socket bound at start-up (exactly/app/listeners.py).

waitress reads every request -- head and body -- on its one I/O thread and hands it
to a worker thread only once it is complete, so a client that sends slowly holds a
socket, never a thread. What keeps that from becoming a ceiling (docs/architecture.md
has the measurements):

* **poll, not select** -- waitress' default loop calls ``select()``, which fails for
  good once any descriptor of the process is numbered above 1,023 (FD_SETSIZE): a
  topic of a few hundred partitions, or a thousand idle Kafka connections, killed HTTP.
  ``asyncore_use_poll`` has no such ceiling.
* **a connection cap** -- ``max.connections`` HTTP connections at most (waitress stops
  accepting at its ``connection_limit``, 100 by default: 100 slow clients blocked it);
* **a head deadline** -- a request whose head (request line and headers) has not
  arrived ``exactly.http.request.header.timeout.ms`` after its first byte is closed
  (:class:`_Server`'s maintenance, each second): a client trickling a header a byte at
  a time does not keep its socket;
* **silence** -- a connection that sends nothing for ``exactly.http.request.body.timeout.ms``
  in the middle of a request's body (or between two requests) is closed (waitress'
  ``channel_timeout``);
* **bodies** -- one over twice the app's ``MAX_CONTENT_LENGTH`` is refused (413) by
  waitress itself, before it spools gigabytes to a temporary file; the app refuses
  what is between with its JSON 413.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from typing import Any

from flask import Flask
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher
from waitress.trigger import trigger

from exactly.app.config import BrokerConfig
from exactly.app.http import MAX_CONTENT_LENGTH

log = logging.getLogger(__name__)

#: how often the I/O thread looks for connections past a deadline (seconds)
CHECK_INTERVAL_S = 1


class _Request(HTTPRequestParser):
    """waitress' request parser, knowing when the request's first byte came."""

    def __init__(self, adj: Adjustments) -> None:
        super().__init__(adj)
        self.started = time.monotonic()


class _Channel(HTTPChannel):
    parser_class = _Request


class _Server(TcpWSGIServer):
    """waitress' server on one bound socket, closing connections whose request head is late."""

    channel_class = _Channel
    header_timeout_s: float = 10.0
    #: waitress' socket map (descriptor -> dispatcher), the one given at construction
    sockets: dict[int, Any]

    def maintenance(self, now: int) -> None:
        super().maintenance(now)  # the silent ones (channel_timeout)
        cutoff = time.monotonic() - self.header_timeout_s
        late = [c for c in list(self.sockets.values()) if isinstance(c, _Channel) and isinstance(c.request, _Request)
                and not c.request.headers_finished and c.request.started < cutoff]
        for channel in late:
            channel.will_close = True
        if late:
            log.info("http: closing %d connection(s) whose request head did not arrive within %.0f s "
                     "(exactly.http.request.header.timeout.ms)", len(late), self.header_timeout_s)


class HttpServer:
    """waitress in a background thread; ``close`` stops it. ``config`` gives its limits
    (``max.connections``, the timeouts); None: the defaults."""

    def __init__(self, app: Flask, sock: socket.socket, threads: int = 8, config: BrokerConfig | None = None) -> None:
        config = config or BrokerConfig()
        self._map: dict = {}  # waitress' socket map: its loop runs while it is not empty
        adj = Adjustments(
            sockets=[sock], threads=threads, ident="exactly", clear_untrusted_proxy_headers=True,
            asyncore_use_poll=True,
            # the map holds the listening socket and the loop's waker besides the connections
            connection_limit=config.max_connections + 2,
            channel_timeout=max(1, math.ceil(config.exactly_http_request_body_timeout_ms / 1000)),
            cleanup_interval=CHECK_INTERVAL_S,
            max_request_body_size=2 * MAX_CONTENT_LENGTH)
        dispatcher = ThreadedTaskDispatcher()
        dispatcher.set_thread_count(threads)
        self._server = _Server(app, self._map, True, sock, dispatcher=dispatcher, adj=adj, bind_socket=False,
                               sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()))
        self._server.header_timeout_s = config.exactly_http_request_header_timeout_ms / 1000
        self._server.sockets = self._map
        self._thread = threading.Thread(target=self._server.run, name="http", daemon=True)

    def start(self) -> "HttpServer":
        self._thread.start()
        return self

    def close(self) -> None:
        """Let requests in progress finish, then close every socket and stop the thread.

        The sockets are closed on waitress' own loop thread (a thunk through its
        trigger): closing them from here, under its ``poll()``, fails the loop with
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
