"""The admin console at ``/``: server-rendered pages that htmx refreshes in place.

Every page has a live part, rendered by ``exactly/web/templates/fragments/<page>.html``.
The same view serves the page (``/transactions``) and its fragment
(``/fragments/transactions``); the fragment's root element polls its own URL
every 2 s and morphs itself in place (``hx-swap="morph:outerHTML"``, the vendored
idiomorph extension), so scroll positions, text selection and keyboard focus
survive a refresh. Facts come from the
shared read models in ``exactly/app/engine/read_models.py`` through ``engine.call`` -- this module only
picks them and chooses templates.

Writes are two buttons, both POST forms carrying the session's CSRF token
(``exactly/app/http/auth.py`` refuses them without it) and confirmed in the browser with
``hx-confirm``: Abort of a transaction (the coordinator fences its producer and
aborts, ``TransactionCoordinator.admin_abort``) and Abort of whatever producer holds
a partition's LSO -- hanging (no coordinator knows it), outside its transaction, or
stuck completing -- which fences that producer too
(``Partitions.abort_hanging_transaction``, Kafka's AbortTransaction).

Errors on console routes are pages (404 for an unknown topic, transaction or group,
403 for a missing CSRF token); ``/v3`` keeps its JSON errors (``exactly/app/http/errors.py``).
"""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime, timezone
from typing import Any

from flask import Response, current_app, redirect, render_template, request, session, url_for
from werkzeug.exceptions import HTTPException, NotFound

from exactly.app.engine import mirror_reads, read_models
from exactly.app.http import access, current_engine, current_settings, mirror_db
from exactly.app.http.auth import login_required, password_principal, request_principal
from exactly.app.http.errors import log_mirror_error, log_server_error, status_for
from exactly.app.http.console.history import History, chart
from exactly.app.http.access import GROUP, OPEN, TOPIC, TXN, kafka
from exactly.app.http.console.blueprint import (FRAGMENTS, ON_GROUP, ON_TOPIC, ON_TXN, actor, back, bp,
                                                call, done, duration, is_local, page, render, view)
from exactly.app.kafka.wire import ApiKey
from exactly.app.security.acl import CLUSTER_NAME
from exactly.app.security.principal import KafkaPrincipal
from exactly.coordinator.transaction_state import TWO_PHASE_COMMIT_TIMEOUT_MS, AbortCause, TransactionState
from exactly.storage import errors as e
from exactly.storage.record_batch import ControlType

log = logging.getLogger(__name__)

#: transaction states, in Kafka's order (the filter chips)
STATES = tuple(state.display for state in TransactionState)
OPEN_STATES = tuple(state.display for state in TransactionState if state.is_open)
#: finished transactions shown on a transaction's page
HISTORY_LIMIT = 50


# -- rendering ------------------------------------------------------------------------------


def _history() -> History | None:
    return current_app.extensions.get("exactly.history")


@bp.app_template_global()
def status_badge() -> dict[str, Any]:
    """What the header's live badge says: how many partitions hold read_committed back,
    of the topics the principal may Describe (the badge is on every page, a signed-out one too)."""
    blockers = call(read_models.lso_blockers)
    shown = access.described_topics(b["topic_name"] for b in blockers)
    return {"blocked": sum(b["topic_name"] in shown for b in blockers), "topics": sorted(shown)}


@bp.app_template_global()
def storage_state() -> dict[str, Any]:
    """What the banner under the header says while writes are refused (none: no banner)."""
    return call(read_models.storage)


@bp.app_template_global()
def cluster_id() -> str:
    return current_engine().topics.cluster_id


@bp.app_template_global()
def auth_enabled() -> bool:
    return bool(current_settings().token)


@bp.app_template_filter("timeout")
def transaction_timeout(ms: int) -> str:
    """A transaction timeout as a duration, or -- for a two-phase transaction (KIP-939's
    enable2Pc, whose timeout is a sentinel) -- that it never times out."""
    return "never times out (two-phase)" if ms == TWO_PHASE_COMMIT_TIMEOUT_MS else duration(ms)


@bp.app_template_filter("clock")
def clock_time(ms: int | None) -> str:
    """``14:03:27`` (UTC) of an epoch-ms time; ``—`` when unknown."""
    if ms is None or ms < 0:
        return "—"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%H:%M:%S")


@bp.app_template_filter("datetime")
def date_time(ms: int | None) -> str:
    """``2026-11-27 14:03:27 UTC`` of an epoch-ms time; ``—`` when unknown."""
    if ms is None or ms < 0:
        return "—"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@bp.app_template_filter("iso")
def iso_time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return ""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


@bp.app_template_filter("num")
def number(n: int | None) -> str:
    """Offsets and counts with thin spaces between thousands: ``1 204 311``."""
    return "—" if n is None else f"{n:,}".replace(",", "\u2009")


@bp.app_template_filter("abort_label")
def abort_label(cause: str) -> str:
    """``timeout`` -> ``its transaction timed out`` (an ``AbortCause`` value, as the mirror keeps it)."""
    return AbortCause(cause).label


@bp.app_template_filter("pct")
def percent(part: int | None, whole: int | None) -> int:
    """``part`` of ``whole`` in whole percent, clamped to 0..100."""
    if not part or not whole or whole <= 0:
        return 0
    return max(0, min(100, round(100 * part / whole)))


# -- pages ----------------------------------------------------------------------------------


@page("/", access.TOPICS_NAMED)
def overview():
    """The broker at a glance -- for a principal that may Describe the cluster (it shows
    every topic, transaction and group); any other lands on the topics it may Describe."""
    if not access.may("DESCRIBE", "CLUSTER", CLUSTER_NAME):
        return redirect(url_for("ui.topics"))
    data = call(read_models.dashboard)
    counts = None
    db = mirror_db()
    if db is not None:
        try:
            counts = mirror_reads.finished_counts(db)
        except Exception as error:  # the mirror is optional: it never breaks the first page
            log_mirror_error(log, error, "reading the SQLite mirror failed")
    return render("overview", data=data, mirror_counts=counts)


@view(FRAGMENTS + "/status", OPEN)
def status():
    return render_template("fragments/status.html")


@view(FRAGMENTS + "/storage", OPEN)
def storage_banner():
    return render_template("fragments/storage.html")


@page("/transactions", kafka(ApiKey.LIST_TRANSACTIONS, access.listed(TXN)))
def transactions():
    """Every transactional id the principal may Describe (as ListTransactions filters
    them), by state (``?state=``) and id substring (``?q=``), with its commits and aborts
    counted from the mirror's history."""
    state = request.args.get("state", "")
    q = request.args.get("q", "").strip()[:200]
    everything = call(read_models.transactions)
    described = access.visible(TXN, (t["transactional_id"] for t in everything))
    everything = [t for t in everything if t["transactional_id"] in described]
    counts = {s: sum(1 for t in everything if t["state"] == s) for s in STATES}
    if state == "open":
        shown = [t for t in everything if t["state"] in OPEN_STATES]
    elif state:
        shown = [t for t in everything if t["state"] == state]
    else:
        shown = everything
    shown = [t for t in shown if q.lower() in t["transactional_id"].lower()]
    holding = {h["transactional_id"] for b in call(read_models.lso_blockers) for h in b["holders"]}
    return render("transactions", transactions=shown, total=len(everything), state=state, q=q,
                   counts=counts, open_count=sum(counts[s] for s in OPEN_STATES), outcomes=_outcome_counts(),
                   holding=holding, states=[s for s in STATES if counts[s] or s == state])


def _outcome_counts() -> dict[str, dict[str, int]] | None:
    """Commits and aborts per transactional id from the mirror (None without one)."""
    db = mirror_db()
    if db is None:
        return None
    try:
        return mirror_reads.outcome_counts(db)
    except Exception as error:  # the mirror is optional: the live states still show
        log_mirror_error(log, error, "reading the SQLite mirror failed")
        return None


@page("/transactions/<path:txn_id>", kafka(ApiKey.DESCRIBE_TRANSACTIONS, ON_TXN, access.listed(TOPIC)))
def transaction(txn_id: str):
    """A transaction's state, partitions, pending offsets and history: only what is on
    topics the principal may Describe (DescribeTransactions leaves the others out)."""
    detail, = access.visible_partitions([call(read_models.transaction_detail, txn_id)], mark_hidden=True)
    detail, = access.visible_partitions([detail], "pending_offsets")
    history, history_error = None, None
    db = mirror_db()
    if db is not None:
        try:
            history = access.visible_partitions(mirror_reads.transaction_history(db, txn_id, HISTORY_LIMIT),
                                                mark_hidden=True)
        except Exception as error:  # the mirror is optional: the live state still shows
            history_error = f"reference {log_server_error(error)} in the broker's log"
    return render("transaction", txn=detail, history=history, history_error=history_error,
                   mirror=db is not None, timeline=_timeline(detail["state"]))


@page("/history", kafka(ApiKey.LIST_TRANSACTIONS, access.listed(TXN)) + access.TOPICS_NAMED)
def history():
    """Finished transactions from the SQLite mirror, newest first, a page at a time:
    those of the transactional ids the principal may Describe (as ListTransactions
    filters them), each with the partitions of the topics it may Describe (as
    DescribeTransactions leaves out the others); filtered by transactional id (a
    substring, ``?txn=``), ``?outcome=COMMIT|ABORT`` and abort ``?cause=`` (an
    ``AbortCause`` value)."""
    txn = request.args.get("txn", "").strip()[:200]
    outcome = request.args.get("outcome", "")
    outcome = outcome if outcome in ("COMMIT", "ABORT") else ""
    cause = request.args.get("cause", "")
    cause = cause if cause in {c.value for c in AbortCause} else ""
    number = max(1, request.args.get("page", 1, type=int))
    rows: list[dict[str, Any]] = []
    total, error = 0, None
    db = mirror_db()
    if db is not None:
        try:
            ids = set(mirror_reads.finished_transactional_ids(db))
            described = access.visible(TXN, ids)
            rows, total = mirror_reads.finished_transactions(db, txn, outcome, cause, HISTORY_LIMIT,
                                                             (number - 1) * HISTORY_LIMIT,
                                                             None if described == ids else described)
        except Exception as failure:  # the mirror is optional: say so on the page
            error = f"reference {log_server_error(failure)} in the broker's log"
        rows = access.visible_partitions(rows, mark_hidden=True)
    filters = {"txn": txn, "outcome": outcome, "cause": cause}
    return render("history", rows=rows, total=total, error=error, mirror=db is not None, number=number,
                   pages=max(1, -(-total // HISTORY_LIMIT)), causes=list(AbortCause), **filters,
                   link=lambda **changes: url_for("ui.history", **{k: v for k, v in {**filters, **changes}.items()
                                                                   if v not in ("", None, 1)}))


def _timeline(state: str) -> list[dict[str, Any]]:
    """The steps of the current transaction, each ``done``, ``current`` or ``todo``;
    the branch (commit or abort) follows the state."""
    aborting = TransactionState.from_display(state).outcome is ControlType.ABORT
    steps = ["Empty", "Ongoing"]
    if state == "PrepareEpochFence":
        steps.append("PrepareEpochFence")
    steps += ["PrepareAbort", "CompleteAbort"] if aborting else ["PrepareCommit", "CompleteCommit"]
    if state == "Dead":
        steps = ["Empty", "Dead"]
    position = steps.index(state) if state in steps else 0
    return [{"state": s, "status": "done" if i < position else "current" if i == position else "todo",
             "words": re.findall(r"[A-Z][a-z]*", s)}  # where a narrow screen may break the label
            for i, s in enumerate(steps)]


@page("/topics/<topic>/partitions/<int:partition>", kafka(ApiKey.FETCH, ON_TOPIC))  # its last records
def partition(topic: str, partition: int):
    detail = call(read_models.partition, topic, partition)
    now = current_engine().clock.now_ms()
    history = _history()
    samples = []
    if history is not None:
        history.observe(topic, partition, now, detail["high_watermark"], detail["last_stable_offset"])
        samples = history.series(topic, partition)
    holders: list[dict[str, Any]] = next((b["holders"] for b in call(read_models.lso_blockers)
                    if (b["topic_name"], b["partition_id"]) == (topic, partition)), [])
    offset = request.args.get("offset", type=int)
    return render("partition", p=detail, holders=holders,
                   segments=call(read_models.segments, topic, partition),
                   producers=call(read_models.producers, topic, partition),
                   aborted=call(read_models.aborted_transactions, topic, partition),
                   records=call(read_models.records, topic, partition, offset),
                   chart=chart(samples, now), now_ms=now)


@page("/groups", kafka(ApiKey.LIST_GROUPS, access.listed(GROUP), or_cluster=True))
def groups():
    """The groups the principal may Describe (every one with Describe on the cluster), as
    ListGroups lists them."""
    everything = call(read_models.groups_summary)
    described = access.visible(GROUP, (g["group_id"] for g in everything))
    return render("groups", groups=[g for g in everything if g["group_id"] in described])


@page("/clients", kafka(ApiKey.LIST_GROUPS, access.listed(GROUP), or_cluster=True)
      + kafka(ApiKey.LIST_TRANSACTIONS, access.listed(TXN)))
def clients():
    """The connected clients: every one for a principal that may Describe the cluster,
    else those that authenticated as the principal itself (Kafka has no API listing
    connections); each with the transactional ids and groups the principal may Describe
    (as ListTransactions and ListGroups filter them)."""
    everyone = access.may("DESCRIBE", "CLUSTER", CLUSTER_NAME)
    me = str(request_principal())
    shown = [c for c in call(read_models.client_instances) if everyone or c["principal"] == me]
    txns = access.visible(TXN, {t for c in shown for t in c["transactional_ids"]})
    groups = access.visible(GROUP, {g for c in shown for g in c["groups"]})
    shown = [{**c, "transactional_ids": [t for t in c["transactional_ids"] if t in txns],
              "groups": [g for g in c["groups"] if g in groups]} for c in shown]
    return render("clients", clients=shown, everyone=everyone, now_ms=current_engine().clock.now_ms(),
                   window_ms=read_models.CLIENT_INSTANCE_WINDOW_MS)


@page("/groups/<path:group_id>", kafka(ApiKey.DESCRIBE_GROUPS, ON_GROUP) + access.GROUP_SHOWN)
def group(group_id: str):
    """A group's members and its offsets of the topics the principal may Describe (as OffsetFetch)."""
    return render("group", g=access.visible_group(call(read_models.group, group_id)))


# -- writes ---------------------------------------------------------------------------------


#: an operator's abort writes transaction markers: what kafka-transactions.sh abort (WriteTxnMarkers) needs
WRITE_TXN_MARKERS = kafka(ApiKey.WRITE_TXN_MARKERS)


@view("/transactions/<path:txn_id>/abort", WRITE_TXN_MARKERS, methods=("POST",))
def abort_transaction(txn_id: str):
    target = back(url_for("ui.transaction", txn_id=txn_id))
    engine = current_engine()
    started = time.monotonic()
    try:
        engine.call(engine.transactions.abort_transaction, txn_id, actor())
    except e.KafkaError as error:
        return done(f"Could not abort {txn_id}: {error.name} — {error}", "error", target)
    took = (time.monotonic() - started) * 1000
    state = engine.call(engine.transactions.describe_transaction, txn_id)
    if state is not None and state.state.outcome is ControlType.COMMIT:  # its commit was decided: completed
        return done(f"Completed the decided commit of {txn_id}: COMMIT markers are written "
                     f"({took:.0f} ms). read_committed consumers move on.", "success", target)
    return done(f"Aborted {txn_id}: its producer is fenced and ABORT markers are written "
                 f"({took:.0f} ms). read_committed consumers move on.", "success", target)


@view("/topics/<topic>/partitions/<int:partition>/producers/<int:producer_id>/abort", WRITE_TXN_MARKERS,
      methods=("POST",))
def abort_hanging(topic: str, partition: int, producer_id: int):
    target = back(url_for("ui.partition", topic=topic, partition=partition))
    engine = current_engine()
    try:
        result = engine.call(engine.partitions.abort_hanging_transaction, topic, partition, producer_id, actor())
    except e.KafkaError as error:
        return done(f"Could not abort producer {producer_id} on {topic}-{partition}: "
                     f"{error.name} — {error}", "error", target)
    how = (f"aborted the transaction of {result.transactional_id}" if result.transactional_id
           else f"wrote an ABORT marker on {topic}-{partition}")
    return done(f"Producer {producer_id}: {how}; epoch {result.producer_epoch} fences it. "
                 f"The LSO of {topic}-{partition} is {result.last_stable_offset}.", "success", target)


# -- session --------------------------------------------------------------------------------


@view("/login", OPEN, methods=("GET", "POST"))
def login():
    error = None
    settings = current_settings()
    if request.method == "POST":
        principal = password_principal(request.form.get("user", ""), request.form.get("password", ""),
                                       face="console", mechanism="FORM")
        if principal is not None:
            session.clear()
            session["principal"] = str(principal)
            target = request.args.get("next", "/")
            return redirect(target if is_local(target) else url_for("ui.overview"))
        error = "That user and password do not sign in."
    return render_template("login.html", error=error, token_configured=bool(settings.token),
                           login_required=login_required(),
                           token_user=KafkaPrincipal.parse(settings.token_principal).name)


@view("/logout", OPEN, methods=("POST",))
def logout():
    session.clear()
    return redirect(url_for("ui.login"), code=303)


# -- errors ---------------------------------------------------------------------------------


@view("/<console_path:unknown>", OPEN, methods=("GET", "POST", "PUT", "PATCH", "DELETE"))
def unknown_page(unknown: str):
    """Any other path: the console's 404 page (``/v3`` keeps its JSON errors)."""
    raise NotFound(f"There is no page at /{unknown}.")


@bp.after_app_request
def _htmx_login_redirect(response: Response) -> Response:
    """A fragment whose session ended must not swap the login page into the page:
    tell htmx to load the login page instead."""
    if (request.headers.get("HX-Request") and response.status_code in (301, 302, 303)
            and "/login" in response.headers.get("Location", "")):
        response.headers["HX-Redirect"] = response.headers["Location"]
    return response


#: htmx's "stop polling" status: what a polled fragment of something now gone answers
STOP_POLLING = 286


def _error_page(status: int, title: str, message: str) -> tuple[str, int]:
    """The error as a page, or as a line for a fragment htmx asked for: a whole page
    swapped into a table would be wrong, and its layout would take the flash messages a
    redirect in flight is carrying (a topic's page polling while the topic is deleted). A
    polled fragment of something that no longer exists stops the polling."""
    if not request.headers.get("HX-Request"):
        return render_template("error.html", status=status, title=title, message=message), status
    gone = status == 404 and request.method == "GET"
    return render_template("fragments/error.html", title=title, message=message), STOP_POLLING if gone else status


@bp.errorhandler(e.KafkaError)
def _kafka_error(error: e.KafkaError):
    status = status_for(error)
    titles = {e.UnknownTopicOrPartitionError: "No such topic or partition",
              e.TransactionalIdNotFoundError: "No such transactional id",
              e.GroupIdNotFoundError: "No such consumer group",
              e.OffsetOutOfRangeError: "Offset out of range"}
    if status == 500:
        return _unexpected(error)
    title = next((t for cls, t in titles.items() if isinstance(error, cls)), error.name)
    return _error_page(status, title, str(error))


@bp.errorhandler(HTTPException)
def _http_error(error: HTTPException):
    titles = {403: "Not allowed", 404: "Page not found", 405: "Method not allowed"}
    return _error_page(error.code or 500, titles.get(error.code or 500, error.name), error.description or "")


@bp.errorhandler(Exception)
def _unexpected(error: Exception):
    """A bug (or anything unforeseen): the page gives a reference id into the log, not the text."""
    reference = log_server_error(error)
    return _error_page(500, "Something broke", f"The broker's log has the details under reference {reference}.")
