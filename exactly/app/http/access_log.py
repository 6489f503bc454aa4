"""The HTTP access log: one INFO line per request on the server log, as web servers
keep one -- who asked (remote address), what (method and path with its query),
the answer's status and how long it took::

    127.0.0.1 "POST /v3/clusters/x/topics/orders/records" 200 3.1 ms

On by default; ``exactly.http.access.log.enable=false`` turns it off. An open
console tab polls its page's live part every few seconds: those answers (a
successful ``GET /fragments/...``) are logged at DEBUG, so an idle tab writes no
line; a poll that fails, and every write, still does.
"""

from __future__ import annotations

import logging
import time

from flask import Flask, Response, g, request

from exactly.app.http.console.blueprint import FRAGMENTS

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
        log.log(_level(response), '%s "%s %s" %d %.1f ms', request.remote_addr or "-", request.method, path,
                response.status_code, elapsed_ms)
        return response


def _level(response: Response) -> int:
    """DEBUG for a console poll that succeeded, INFO for everything else."""
    polling = request.method in ("GET", "HEAD") and request.path.startswith(FRAGMENTS + "/")
    return logging.DEBUG if polling and response.status_code < 400 else logging.INFO
