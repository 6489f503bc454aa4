"""The console's blueprint and what its views share: registering a view with what it
needs (a page with its live fragment), rendering either, calling the engine, and
answering a POST form with a flash and a way back.

What a view needs is declared where it is registered (``exactly/app/http/access.py``):
what the Kafka API of the same act needs (a topic's page: Metadata's Describe on the
topic; its record browser: Fetch's Read; New topic: CreateTopics' Create on the
topic or on the cluster), or, for a page Kafka has no API for, a rule of its own --
the broker-wide pages (the audit) show every topic, transaction and group at
once, so they need Describe on the Cluster (as ListGroups does to list every group);
the lists (topics, transactions, groups, history, clients) show what the principal
may Describe.

The console's views live beside it: ``views.py`` (overview, transactions, groups,
sign-in, error pages), ``topics.py`` (topics, the record browser, produce),
``groups.py`` (consumer-group writes), ``configs.py`` (what a config value means),
``faults.py`` (faults), ``events.py``, ``security.py`` and ``audit.py``; all join
:data:`bp` through these helpers.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from flask import Blueprint, Response, flash, redirect, render_template, request
from flask.blueprints import BlueprintSetupState
from werkzeug.routing import PathConverter
from werkzeug.wrappers import Response as BaseResponse

from exactly.app.http import access, current_engine
from exactly.app.http.access import GROUP, O, TOPIC, TXN, Needs, own

V = TypeVar("V", bound=Callable[..., Any])

bp = Blueprint("ui", __name__)
#: the prefix of a page's live part (``/fragments/transactions`` for ``/transactions``)
FRAGMENTS = "/fragments"

#: the console names the resource in these path arguments
ON_TOPIC = access.path(TOPIC, "topic")
ON_GROUP = access.path(GROUP, "group_id")
ON_TXN = access.path(TXN, "txn_id")
#: a page that shows every topic, transaction and group, or the broker's own state
BROKER_WIDE = own(O.DESCRIBE)


class ConsolePathConverter(PathConverter):
    """A path outside the API and the static files: the catch-all 404 page takes
    only these, so ``/v3`` keeps its own 404 and 405 answers."""

    regex = r"(?!v3(?:/|$)|openapi\.json$|metrics$|static/)[^/].*?"


def _register_console_path(state: BlueprintSetupState) -> None:
    state.app.url_map.converters.setdefault("console_path", ConsolePathConverter)


# registered before any route is added (a deferred function of the blueprint)
bp.record_once(_register_console_path)


# -- reading --------------------------------------------------------------------------------


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(engine, *args, **kwargs)`` on the engine's loop (one of ``exactly/app/engine/read_models.py``)."""
    engine = current_engine()
    return engine.call(fn, engine, *args, **kwargs)


def _is_fragment() -> bool:
    return request.path.startswith(FRAGMENTS + "/")


def _page_path() -> str:
    """The page's own path and query (a fragment's URL without ``/fragments``)."""
    path = request.full_path.rstrip("?")
    return path.removeprefix(FRAGMENTS) if _is_fragment() else path


def view(rule: str, needs: Needs, methods: tuple[str, ...] = ("GET",)) -> Callable[[V], V]:
    """Register a view at ``rule`` (endpoint: its name), needing ``needs``."""
    def register(function: V) -> V:
        bp.add_url_rule(rule, function.__name__, function, methods=list(methods))
        access.declare(function, needs)
        return function
    return register


def page(rule: str, needs: Needs) -> Callable[[V], V]:
    """Register a view at ``rule`` (endpoint: its name) and at ``/fragments<rule>``
    (endpoint: its name + ``_fragment``), so ``url_for`` always builds the page's URL;
    the live part needs what the page does."""
    def register(function: V) -> V:
        view(rule, needs)(function)
        bp.add_url_rule(FRAGMENTS + rule, function.__name__ + "_fragment", function, methods=["GET"])
        return function
    return register


def render(name: str, **context: Any) -> str:
    """The page ``<name>.html``, or only its live part when the fragment was asked for."""
    page_path = _page_path()
    context.update(page_path=page_path, fragment_url=FRAGMENTS + page_path)
    if _is_fragment():
        return render_template(f"fragments/{name}.html", **context)
    return render_template(f"{name}.html", **context)


# -- formatting (template filters the views share) ----------------------------------------------


@bp.app_template_filter("duration")
def duration(ms: int | None) -> str:
    """``1 h 02 min``, ``3 min 05 s``, ``12.4 s``, ``350 ms``."""
    if ms is None or ms < 0:
        return "—"
    if ms < 1000:
        return f"{ms} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    minutes, seconds = divmod(int(s), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours // 24} d {hours % 24} h"


@bp.app_template_filter("size")
def size(n: float | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# -- writes ---------------------------------------------------------------------------------


def is_local(target: str) -> bool:
    """A path on this server (``//host`` and ``/\\host`` are other hosts to a browser)."""
    return target.startswith("/") and target[1:2] not in ("/", "\\")


def actor() -> str:
    """Who a write from the console is (an Abort, an event), for the abort's recorded reason."""
    return f"the console, from {request.remote_addr}"


def back(default: str) -> str:
    """Where a form goes back to: its ``next`` field if that is a path on this server."""
    target = request.form.get("next", "")
    return target if is_local(target) else default


def done(message: str, category: str, target: str) -> BaseResponse:
    """Flash ``message`` and go back to ``target``: htmx follows ``HX-Redirect``, a
    plain form a 303."""
    flash(message, category)
    if request.headers.get("HX-Request"):
        response = Response(status=204)
        response.headers["HX-Redirect"] = target
        return response
    return redirect(target, code=303)
