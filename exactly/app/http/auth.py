"""Who may talk to the HTTP server.

Without a configured token or authorizer (the default, listening on 127.0.0.1 only)
everything is open, and a request that does not authenticate is ``User:ANONYMOUS`` --
as a PLAINTEXT client on the Kafka port, so nothing changes. An API request may always
authenticate: ``Authorization: Bearer <token>``, or ``Basic`` (RFC 7617) with a user's
SCRAM password (the users of ``exactly users``) -- a wrong one is 401 with the usual
JSON error body. With ``http.auth.token`` set, the API (``/v3``, ``/openapi.json``,
``/metrics``) needs one of them; with the token or the authorizer on, the console
needs a login (``/login``, user and password) kept in the session cookie.

Whoever authenticates is a Kafka principal (:func:`request_principal`), authorized as
the same request on the Kafka port would be (``exactly/app/http/access.py``). The token is the
password of ``http.auth.token.principal`` (``User:admin`` by default); every password
is checked in one place, :func:`password_principal`.

Console writes (the Abort button) always need the session's CSRF token, sent as the
``csrf_token`` form field or the ``X-CSRF-Token`` header (htmx sends the header). The
login form is protected against login CSRF (another site's page signing the browser in
as the attacker) by refusing a ``POST /login`` a browser sends from another site
(``Sec-Fetch-Site``/``Origin``, below): there is no session to hold a token yet.

A failed login on any face -- HTTP Basic or Bearer, the console's form, SASL on the
Kafka port -- follows one policy (``Access.login_failed``): answered only after
``connection.failed.authentication.delay.ms``, counted in
``exactly_authentication_failures_total`` with the face, mechanism and principal; an
unknown user's password is derived against a dummy credential, so the time does not
tell which users exist.
API writes need a JSON body: a cross-site form cannot send ``application/json``
without a CORS preflight this server never grants. A write a browser sends from
another site's page (``Sec-Fetch-Site``/``Origin``) is refused outright (403), so an
empty-bodied one -- an admin abort -- cannot be forged either.

When the server listens on a loopback address (the default), a request whose ``Host``
is not a loopback name is refused (421): a web page cannot reach the broker through
DNS rebinding (a name of its own that resolves to 127.0.0.1), whatever the token.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from urllib.parse import urlsplit

from flask import Flask, Response, abort, g, redirect, request, session, url_for
from werkzeug.wrappers import Response as BaseResponse

from exactly.app.http import current_engine, current_settings, errors
from exactly.app.security.principal import ANONYMOUS, KafkaPrincipal

API_PREFIXES = ("/v3", "/openapi.json", "/metrics")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
OPEN_PATHS = ("/login", "/static/")


def _is_api(path: str) -> bool:
    return path.startswith(API_PREFIXES)


#: the names a loopback-only server answers to
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def _host_name(host: str) -> str:
    """``Host`` without its port (``[::1]:8080`` -> ``::1``)."""
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def csrf_token() -> str:
    """The session's CSRF token (made on first use); templates put it in forms."""
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def password_principal(user: str, password: str, face: str = "http", mechanism: str = "BASIC"
                       ) -> KafkaPrincipal | None:
    """Who ``user`` with ``password`` is, or None: the one place a password is checked
    (HTTP Basic and the console's login both come here). The broker's token is the
    password of its principal's name (``admin`` for ``User:admin``); every other user is
    checked against the SCRAM credentials the Kafka port's SASL logins use (against a
    dummy one for an unknown user: the same time). A failure goes through the login
    policy of every face (``Access.login_failed``: counted with the principal, answered
    after ``connection.failed.authentication.delay.ms``)."""
    settings = current_settings()
    principal = KafkaPrincipal.parse(settings.token_principal)
    is_token_user = bool(settings.token) and user == principal.name
    if is_token_user and _same(password, settings.token):
        return principal
    access = current_engine().access
    found = access.authenticate_password(user, password)
    if found is None:
        access.record_failed_login(face, mechanism, user, known=is_token_user)
    return found


def login_required() -> bool:
    """Whether a request must say who it is: with a token configured, or with the
    authorizer on (a shared broker, where anonymous requests get only what ACLs grant
    User:ANONYMOUS -- the console asks for a login instead of answering 403s)."""
    return bool(current_settings().token) or current_engine().access.authorizer_enabled


def header_principal(authorization: str) -> KafkaPrincipal | None:
    """Who an ``Authorization`` header authenticates (schemes are case-insensitive, RFC
    7235): ``Bearer <token>`` the token's principal, ``Basic`` a user and password;
    None for anything else -- a bare token is not accepted."""
    scheme, _, credentials = authorization.partition(" ")
    scheme, credentials = scheme.lower(), credentials.strip()
    if not credentials:
        return None
    if scheme == "bearer":
        settings = current_settings()
        principal = KafkaPrincipal.parse(settings.token_principal)
        if settings.token and _same(credentials, settings.token):
            return principal
        current_engine().access.record_failed_login("http", "BEARER", principal.name, known=bool(settings.token))
        return None
    if scheme == "basic":
        try:
            user, sep, password = base64.b64decode(credentials, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return password_principal(user, password) if sep else None
    return None


def request_principal() -> KafkaPrincipal:
    """The principal this request runs as: ANONYMOUS unless it authenticated."""
    return g.get("principal", ANONYMOUS)


def _cross_site() -> bool:
    """A browser sent this from another site's page (Fetch metadata, else Origin). Tools
    like curl send neither header. This closes what the JSON-body rule leaves open: a
    cross-site form POST with an empty body (an admin abort needs no body)."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("Origin")
    return origin is not None and urlsplit(origin).netloc != request.host


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


def init_app(app: Flask) -> None:
    app.jinja_env.globals["csrf_token"] = csrf_token

    @app.before_request
    def _authenticate() -> BaseResponse | None:
        settings = current_settings()
        if settings.allowed_hosts is not None and _host_name(request.host) not in settings.allowed_hosts:
            return errors.http_error_response(421, "MISDIRECTED_REQUEST",
                                              f"this broker answers only to {sorted(settings.allowed_hosts)}")
        token = settings.token
        path = request.path
        if _is_api(path):
            header = request.headers.get("Authorization", "")
            principal = header_principal(header) if header or token else ANONYMOUS
            if principal is None:
                response = errors.http_error_response(
                    401, "UNAUTHORIZED", "send Authorization: Bearer <token>, or Basic with a user and password")
                response.headers["WWW-Authenticate"] = 'Bearer realm="exactly", Basic realm="exactly"'
                return response
            g.principal = principal
            if request.method not in SAFE_METHODS and _cross_site():
                abort(403, "the API does not take writes from another site's pages")
            if request.method in ("POST", "PUT", "PATCH") and request.content_length and not request.is_json:
                abort(415, "send the request body as application/json")
            return None
        if session.get("principal"):
            g.principal = KafkaPrincipal.parse(session["principal"])
        elif not path.startswith(OPEN_PATHS) and login_required():
            return redirect(url_for("ui.login", next=path))
        if request.method == "POST" and path == "/login" and _cross_site():
            abort(403, "the console does not take logins from another site's pages (login CSRF)")
        if request.method == "POST" and path != "/login":
            sent = request.form.get("csrf_token") or request.headers.get("X-CSRF-Token")
            if not _same(sent, session.get("csrf", "")) or not session.get("csrf"):
                abort(403, "missing or wrong CSRF token; reload the page")
        return None

    @app.after_request
    def _headers(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        if not _is_api(request.path):
            response.headers.setdefault(
                "Content-Security-Policy",
                "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                "script-src 'self'; frame-ancestors 'none'")
        return response
