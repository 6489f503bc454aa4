"""The HTTP face of the broker: a Flask app (API, admin UI, metrics) served by waitress.

``create_app(engine)`` builds the app; nothing exists at import time. The engine is
reached through ``current_engine()``; every broker call goes through it, onto the
engine's loop. Blueprints: ``api`` (REST v3 under ``/v3``, ``/openapi.json``),
``ui`` (the console at ``/``), ``metrics`` (``/metrics``). Errors are translated to
JSON at this edge only (``exactly/app/http/errors.py``); authentication and CSRF live in
``exactly/app/http/auth.py``, authorization (each request as its principal) in ``exactly/app/http/access.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flask import Flask, current_app
from flask.json.provider import DefaultJSONProvider

if TYPE_CHECKING:
    from sqlalchemy import Engine as SqlEngine

    from exactly.app.engine import Engine
    from exactly.coordinator.mirror import Mirror

#: the console's templates and static files, package data of ``exactly`` (``exactly/web/``,
#: so an installed broker finds them wherever it runs)
WEB = Path(__file__).resolve().parents[2] / "web"
#: the largest request body accepted (Kafka's default max.message.bytes, plus JSON overhead)
MAX_CONTENT_LENGTH = 4 * 1024 * 1024


@dataclass(frozen=True)
class HttpSettings:
    #: when set, every API request needs ``Authorization: Bearer <token>`` (or Basic) and the UI a login
    token: str = ""
    #: the principal the token authenticates as (``http.auth.token.principal``): authorized
    #: like any other, so with an authorizer on it belongs in ``super.users``
    token_principal: str = "User:admin"
    #: secret for the UI session and CSRF tokens (random per process when empty)
    secret_key: str = ""
    #: Host names the server answers to; None answers any (see exactly/app/http/auth.py)
    allowed_hosts: frozenset[str] | None = None


def create_app(engine: "Engine", settings: HttpSettings | None = None,
               test_config: dict[str, Any] | None = None, mirror: "Mirror | None" = None) -> Flask:
    """The Flask app over ``engine``; with ``mirror`` (the SQLite mirror of the same
    data directory) it also shows finished transactions, read from its database."""
    import secrets

    from exactly.app.http import access, access_log, auth, errors, metrics
    from exactly.app.http.api import clusters
    from exactly.app.http.console import blueprint, history
    from exactly.app.http.console import (audit, configs, events, faults, groups,  # noqa: F401 -- their pages
                                          security, topics, views)  # join blueprint.bp

    settings = settings or HttpSettings()
    app = Flask(__name__, template_folder=str(WEB / "templates"), static_folder=str(WEB / "static"),
                static_url_path="/static")
    app.config.update(SECRET_KEY=settings.secret_key or secrets.token_hex(32),
                      MAX_CONTENT_LENGTH=MAX_CONTENT_LENGTH,
                      SESSION_COOKIE_SAMESITE="Strict", SESSION_COOKIE_HTTPONLY=True)
    app.json = provider = DefaultJSONProvider(app)
    provider.sort_keys = False  # keep Kafka's field order in responses
    if test_config:
        app.config.update(test_config)
    app.extensions["exactly.engine"] = engine
    app.extensions["exactly.settings"] = settings
    app.extensions["exactly.mirror"] = mirror
    access_log.init_app(app)  # first: its clock starts before auth may answer
    errors.init_app(app)
    auth.init_app(app)
    access.init_app(app)  # after authentication: it authorizes the principal found
    history.init_app(app)  # the console's LSO/high-watermark sampler (not under TESTING)
    access.declare(app.view_functions["static"], access.OPEN)  # Flask's own: the login page's styles
    app.register_blueprint(clusters.bp)
    app.register_blueprint(metrics.bp)
    app.register_blueprint(blueprint.bp)
    return app


def current_engine() -> "Engine":
    return current_app.extensions["exactly.engine"]


def current_settings() -> HttpSettings:
    return current_app.extensions["exactly.settings"]


def mirror_db() -> "SqlEngine | None":
    """A read-only SQLAlchemy engine on the mirror's database (None without a mirror);
    made on first use. Queries run on the request's thread, never the engine's loop."""
    mirror = current_app.extensions.get("exactly.mirror")
    if mirror is None:
        return None
    db = current_app.extensions.get("exactly.mirror_db")
    if db is None:
        from exactly.coordinator.mirror_db import reader_engine  # only when a mirror is configured

        db = current_app.extensions["exactly.mirror_db"] = reader_engine(mirror.path)
    return db
