"""The HTTP access log: one INFO line per request on the server log, as web servers
keep one -- who asked (remote address), what (method and path with its query),
the answer's status and how long it took::

    127.0.0.1 "POST /v3/clusters/x/topics/orders/records" 200 3.1 ms

On by default; ``exactly.http.access.log.enable=false`` turns it off.
"""

from __future__ import annotations

import logging
import time

from flask import Flask, Response, g, request

log = logging.getLogger(__name__)


def init_app(app: Flask) -> None:
    """Log every request of ``app`` unless its broker's config turns the log off."""
    if not app.extensions["exactly.engine"].config.exactly_http_access_log_enable:
        return

    @app.before_request
    def _start() -> None:
        g.access_started = time.perf_counter()

    @app.after_request
    def _log(response: Response) -> Response:
        elapsed_ms = (time.perf_counter() - g.get("access_started", time.perf_counter())) * 1000
        path = request.full_path if request.query_string else request.path
        path = path.encode("unicode_escape").decode("ascii")  # a decoded %0A must not forge a log line
        log.info('%s "%s %s" %d %.1f ms', request.remote_addr or "-", request.method, path,
                 response.status_code, elapsed_ms)
        return response
