"""The admin console (exactly/app/http/console/views.py) through Flask's test client, over a real broker.

Every page and every fragment renders real broker state; the Abort buttons need the
session's CSRF token; with a token configured the console needs a login; unknown
topics, partitions, transactional ids and groups are 404 pages, never a 500.
"""

from __future__ import annotations

import re

import pytest

from exactly.app import Broker
from exactly.app.engine import read_models
from exactly.app.http import HttpSettings, create_app
from exactly.app.http.console.history import History, chart, init_app
from exactly.storage.clock import FakeClock
from exactly.storage.errors import InvariantViolation, ProducerFencedError
from tests.conftest import SMALL_INTERNAL_TOPICS, data_batch
from tests.storage_log import DurableLogs

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def app(broker: Broker):
    return create_app(broker.engine, test_config={"TESTING": True})


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def scenario(broker: Broker, clock: FakeClock) -> dict:
    """orders (2 partitions) with plain records, a committed and an aborted
    transaction of ``billing`` (with group offsets), and ``enricher`` left open."""
    broker.create_topic("orders", 2)
    plain = broker.producer()
    for i in range(5):
        plain.send("orders", b"plain-%d" % i, partition=0).get(timeout=10)
    billing = broker.producer(transactional_id="billing", transaction_timeout_ms=60_000)
    billing.init_transactions()
    billing.begin_transaction()
    billing.send("orders", b"paid", key=b"k", partition=0).get(timeout=10)
    billing.send_offsets_to_transaction({("orders", 0): 3}, "svc")
    billing.commit_transaction()
    billing.begin_transaction()
    billing.send("orders", b"refund", key=b"k", partition=1).get(timeout=10)
    billing.abort_transaction()
    enricher = broker.producer(transactional_id="enricher", transaction_timeout_ms=100_000)
    enricher.init_transactions()
    enricher.begin_transaction()
    enricher.send("orders", b"open-1", key=b"k", partition=0).get(timeout=10)
    enricher.send_offsets_to_transaction({("orders", 0): 5}, "svc")
    clock.advance(30_000)
    return {"enricher": enricher, "billing": billing}


def _csrf(client, path: str = "/") -> str:
    match = CSRF.search(client.get(path).get_data(as_text=True))
    assert match, f"no CSRF token in the forms of {path}"
    return match.group(1)


def _partition(broker: Broker, topic: str, partition: int):
    return broker.engine.partitions.log(topic, partition)


# -- pages and fragments ------------------------------------------------------------------


def test_overview_shows_the_blocked_partition_and_who_holds_it(client, broker, scenario):
    log = _partition(broker, "orders", 0)
    assert log.last_stable_offset < log.high_watermark
    html = client.get("/").get_data(as_text=True)
    stuck = html[html.index('id="stuck"'):html.index("<h2>Topics</h2>")]
    assert "Why is my read_committed consumer stuck?" in stuck
    assert 'data-partition="orders-0"' in stuck and "enricher" in stuck
    assert "billing" not in stuck  # finished transactions hold nothing back
    assert f"{log.high_watermark - log.last_stable_offset} held back" in stuck
    assert "30 s" in stuck and "1 min 40 s" in stuck  # age against the 100 s timeout
    assert 'data-abort="enricher"' in stuck and 'name="next" value="/"' in stuck  # back here after Abort
    assert "partitions blocked" in html  # orders-0 and the __consumer_offsets partition
    assert f'data-gap="{log.high_watermark - log.last_stable_offset}"' in html
    counts = html[html.index('class="stats"'):html.index('id="stuck"')]
    assert re.search(r"Committed</span>\s*<span class=\"stat-value\">1<", counts)
    assert re.search(r"Aborted</span>\s*<span class=\"stat-value\">1<", counts)
    assert re.search(r"Open transactions</span>\s*<span class=\"stat-value\">1<", counts)
    assert '<span class="stat-sub">1 Ongoing</span>' in counts  # billing, complete, is not open


def test_transactions_page_lists_and_filters_by_state(client, scenario):
    html = client.get("/transactions").get_data(as_text=True)
    assert 'data-txn="billing"' in html and 'data-txn="enricher"' in html
    assert "CompleteAbort" in html and "Ongoing" in html
    assert "holds LSO" in html
    ongoing = client.get("/transactions?state=Ongoing").get_data(as_text=True)
    assert 'data-txn="enricher"' in ongoing and 'data-txn="billing"' not in ongoing
    opened = client.get("/transactions?state=open").get_data(as_text=True)
    assert 'data-txn="enricher"' in opened and 'data-txn="billing"' not in opened
    none = client.get("/transactions?state=PrepareCommit").get_data(as_text=True)
    assert "No transaction is PrepareCommit right now." in none


def test_transaction_page_shows_timeline_partitions_and_pending_offsets(client, broker, scenario):
    html = client.get("/transactions/enricher").get_data(as_text=True)
    assert "step-current step-Ongoing" in html
    assert "PrepareCommit" in html and "CompleteCommit" in html
    first = _partition(broker, "orders", 0).last_stable_offset
    assert re.search(rf'orders<span class="tp-sep">-</span>0</a></td>\s*<td class="num mono">{first}<', html)
    assert "pins LSO" in html
    pending = html[html.index("Pending group offsets"):html.index("<h2>History</h2>")]
    assert "svc" in pending and ">5<" in pending
    assert "History needs the SQLite mirror." in html  # no mirror configured
    assert 'data-abort="enricher"' in html and 'hx-confirm="Abort transaction' in html

    done = client.get("/transactions/billing").get_data(as_text=True)
    assert "step-current step-CompleteAbort" in done and "data-abort=" not in done


def test_partition_page_shows_segments_producers_aborted_index_records_and_chart(client, broker, scenario):
    html = client.get("/topics/orders/partitions/0").get_data(as_text=True)
    log = _partition(broker, "orders", 0)
    assert f"data-lso>{log.last_stable_offset}<" in html and f"data-hw>{log.high_watermark}<" in html
    assert "00000000000000000000" in html  # the segment's base offset, as its file name
    assert "enricher" in html and "billing" in html  # DescribeProducers, with transactional ids
    for status in ("visible", "committed", "COMMIT marker", "open · own transaction undecided"):
        assert status in html
    assert "<svg" in html and 'class="line-lso"' in html and 'class="gap"' in html
    aborted = client.get("/topics/orders/partitions/1").get_data(as_text=True)
    assert "aborted · never delivered" in aborted and "ABORT marker" in aborted
    index = aborted[aborted.index("<h2>Aborted transactions</h2>"):aborted.index("<h2>Segments</h2>")]
    assert "No aborted transactions here." not in index
    # an explicit starting offset
    from_two = client.get("/topics/orders/partitions/0?offset=2").get_data(as_text=True)
    assert "From offset <span class=\"mono\">2</span>" in from_two


def test_groups_pages_show_committed_pending_and_lag_against_the_lso(client, broker, scenario):
    html = client.get("/groups").get_data(as_text=True)
    assert 'data-group="svc"' in html and "Lag (read_committed)" in html
    assert "+ 1 held back" in html  # enricher's open record at the LSO
    detail = client.get("/groups/svc").get_data(as_text=True)
    log = _partition(broker, "orders", 0)
    assert (log.last_stable_offset, log.high_watermark) == (7, 8)  # plain 0-4, paid 5, marker 6, open 7
    assert "enricher" in detail  # its pending offset 5
    # from the committed offset 3: records 3, 4 and 5 -- the COMMIT marker at 6 is no record to read
    assert re.search(r'<td class="num mono amber strong" data-lag>3<div class="held-note">\+ 1 held back</div>',
                     detail)
    held = detail[detail.index('data-held="orders-0"'):]
    held = held[:held.index("</li>")]
    assert "1</span> record held back" in held and "enricher" in held and 'data-abort="enricher"' in held
    assert detail.index('id="held-back"') < detail.index('class="stats"')  # first thing on the page
    assert "Lag = the records a read_committed consumer would still receive" in detail


def test_every_fragment_refreshes_itself(client, scenario):
    pages = ["/", "/transactions", "/transactions?state=Ongoing", "/transactions/enricher",
             "/topics/orders/partitions/0", "/groups", "/groups/svc"]
    for page in pages:
        full = client.get(page)
        assert full.status_code == 200, page
        fragment_url = "/fragments" + page
        assert f'hx-get="{fragment_url.replace("&", "&amp;")}" hx-trigger="every 2s" hx-swap="morph:outerHTML"' in \
            full.get_data(as_text=True), page
        fragment = client.get(fragment_url)
        body = fragment.get_data(as_text=True)
        assert fragment.status_code == 200, fragment_url
        assert "<html" not in body and body.lstrip().startswith('<div class="live"'), fragment_url
        assert f'hx-get="{fragment_url.replace("&", "&amp;")}"' in body, fragment_url
        assert 'href="/fragments' not in body and 'action="/fragments' not in body, fragment_url
    refreshed = client.get("/fragments/transactions?state=Ongoing").get_data(as_text=True)
    assert 'name="next" value="/transactions?state=Ongoing"' in refreshed  # the page, not the fragment
    badge = client.get("/fragments/status").get_data(as_text=True)
    assert 'id="status-badge"' in badge and "partitions blocked" in badge


def test_every_live_part_morphs_in_place():
    """A refresh that replaced the live part (outerHTML) would reset scroll positions,
    selection and focus; every fragment, present and future, morphs instead."""
    from pathlib import Path

    fragments = Path(__file__).resolve().parents[1] / "exactly/web/templates/fragments"
    polling = {f.name: f.read_text() for f in fragments.glob("*.html") if 'hx-trigger="every' in f.read_text()}
    assert len(polling) >= 7
    for name, text in polling.items():
        swaps = re.findall(r'hx-swap="([^"]+)"', text)
        assert swaps and all(swap == "morph:outerHTML" for swap in swaps), (name, swaps)


def test_pages_load_no_inline_script_and_send_the_csp(client, scenario):
    for page in ("/", "/transactions", "/transactions/enricher", "/topics/orders/partitions/0",
                 "/groups", "/groups/svc", "/login", "/nope"):
        response = client.get(page)
        html = response.get_data(as_text=True)
        scripts = re.findall(r"<script[^>]*>", html)
        assert all("src=" in tag for tag in scripts), page
        assert "script-src 'self'" in response.headers["Content-Security-Policy"], page
        assert "//cdn" not in html and "https://" not in html, page


def test_empty_broker_explains_what_to_do(client):
    html = client.get("/").get_data(as_text=True)
    assert "All partitions stable" in html and "No topics yet." in html
    assert "Nothing is holding consumers back." in html
    assert "No transactional ids yet." in client.get("/transactions").get_data(as_text=True)
    assert "No consumer groups yet." in client.get("/groups").get_data(as_text=True)


# -- the Abort buttons -------------------------------------------------------------------


def test_abort_needs_the_csrf_token(client, broker, scenario):
    refused = client.post("/transactions/enricher/abort")
    assert refused.status_code == 403 and "text/html" in refused.content_type
    assert "CSRF" in refused.get_data(as_text=True)
    wrong = client.post("/transactions/enricher/abort", data={"csrf_token": "forged"})
    assert wrong.status_code == 403
    assert broker.engine.transactions.coordinator.describe("enricher").state.display == "Ongoing"

    token = _csrf(client, "/transactions/enricher")
    done = client.post("/transactions/enricher/abort", data={"csrf_token": token, "next": "/transactions/enricher"})
    assert done.status_code == 303 and done.headers["Location"].endswith("/transactions/enricher")
    assert broker.engine.transactions.coordinator.describe("enricher").state.display == "CompleteAbort"
    log = _partition(broker, "orders", 0)
    assert log.last_stable_offset == log.high_watermark
    page = client.get("/transactions/enricher").get_data(as_text=True)
    assert "Aborted enricher" in page  # the flashed message
    assert "All partitions stable" in client.get("/fragments/status").get_data(as_text=True)
    with pytest.raises(ProducerFencedError):
        scenario["enricher"].commit_transaction()  # its producer is fenced


def test_abort_over_htmx_uses_the_header_and_redirects(client, broker, scenario):
    token = _csrf(client)
    response = client.post("/transactions/enricher/abort", data={"next": "/"},
                           headers={"HX-Request": "true", "X-CSRF-Token": token})
    assert response.status_code == 204 and response.headers["HX-Redirect"] == "/"
    again = client.post("/transactions/enricher/abort", data={"next": "//evil.example"},
                        headers={"HX-Request": "true", "X-CSRF-Token": token})
    assert again.status_code == 204  # nothing open any more: a flashed error, not a 500
    assert again.headers["HX-Redirect"] == "/transactions/enricher"  # never off this server
    assert "Could not abort enricher" in client.get("/").get_data(as_text=True)


def test_a_polled_fragment_of_a_deleted_topic_stops_polling_and_keeps_the_flash(client, broker):
    """A topic's page polls its fragment; when the topic is deleted under it (from this very
    page: the delete's redirect carries a flash), the poll gets one line and htmx's "stop
    polling" status, not the whole 404 page -- whose layout would take the flash."""
    broker.create_topic("doomed", 1)
    fragment = "/fragments/topics/doomed"
    assert client.get(fragment, headers={"HX-Request": "true"}).status_code == 200
    token = _csrf(client, "/topics/doomed")
    assert client.post("/topics/doomed/delete", data={"csrf_token": token}).status_code == 303
    gone = client.get(fragment, headers={"HX-Request": "true"})
    assert gone.status_code == 286
    assert "<html" not in gone.get_data(as_text=True) and "doomed" in gone.get_data(as_text=True)
    assert "Deleted topic doomed" in client.get("/").get_data(as_text=True)  # the flash survived the poll
    assert client.get("/topics/doomed").status_code == 404  # a page is still a 404 page


def test_a_hanging_transaction_is_aborted_on_its_partition(tmp_path, clock):
    data = tmp_path / "legacy"
    # a log written without verification: no coordinator knows its producer
    with DurableLogs(data, clock=clock) as logs:
        logs.create_topic("legacy", 1)
        logs.produce("legacy", 0, data_batch([b"a", b"b"], producer_id=777_000, epoch=3, sequence=0,
                                             transactional=True))
    with Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS) as broker:
        client = create_app(broker.engine, test_config={"TESTING": True}).test_client()
        html = client.get("/topics/legacy/partitions/0").get_data(as_text=True)
        assert "hanging" in html and 'data-abort-producer="777000"' in html
        assert "hanging" in client.get("/").get_data(as_text=True)
        token = _csrf(client, "/topics/legacy/partitions/0")
        assert client.post("/topics/legacy/partitions/0/producers/777000/abort").status_code == 403
        done = client.post("/topics/legacy/partitions/0/producers/777000/abort", data={"csrf_token": token})
        assert done.status_code == 303
        log = _partition(broker, "legacy", 0)
        assert log.last_stable_offset == log.high_watermark == 3
        assert "wrote an ABORT marker on legacy-0; epoch 4 fences it" in client.get("/").get_data(as_text=True)


def test_the_partition_abort_of_a_transactional_producer_aborts_its_transaction(client, broker, scenario):
    pid = broker.engine.transactions.coordinator.describe("enricher").producer_id
    token = _csrf(client, "/topics/orders/partitions/0")
    done = client.post(f"/topics/orders/partitions/0/producers/{pid}/abort", data={"csrf_token": token})
    assert done.status_code == 303
    assert "aborted the transaction of enricher" in client.get("/").get_data(as_text=True)
    assert broker.engine.transactions.coordinator.describe("enricher").state.display == "CompleteAbort"
    log = _partition(broker, "orders", 0)
    assert log.last_stable_offset == log.high_watermark
    with pytest.raises(ProducerFencedError):
        scenario["enricher"].commit_transaction()


# -- login ----------------------------------------------------------------------------------


def test_with_a_token_the_console_needs_a_login(broker, scenario):
    app = create_app(broker.engine, HttpSettings(token="s3cret"), test_config={"TESTING": True})
    client = app.test_client()
    for page in ("/", "/transactions/enricher", "/groups", "/fragments/status"):
        response = client.get(page)
        assert response.status_code == 302 and "/login" in response.headers["Location"], page
    htmx = client.get("/fragments/", headers={"HX-Request": "true"})
    assert "/login" in htmx.headers["HX-Redirect"]  # a whole-page redirect, not a login form in a fragment
    login_page = client.get("/login").get_data(as_text=True)
    assert 'type="password"' in login_page and "http.auth.token" in login_page
    wrong = client.post("/login?next=/groups", data={"user": "admin", "password": "guess"})
    assert wrong.status_code == 200 and "That user and password do not sign in." in wrong.get_data(as_text=True)
    other = client.post("/login?next=/groups", data={"user": "mallory", "password": "s3cret"})
    assert other.status_code == 200  # the token is the password of http.auth.token.principal only
    ok = client.post("/login?next=/groups", data={"user": "admin", "password": "s3cret"})
    assert ok.status_code == 302 and ok.headers["Location"].endswith("/groups")
    assert client.get("/").status_code == 200
    assert "Log out" in client.get("/").get_data(as_text=True)
    for offsite in ("//evil.example", "/\\evil.example", "https://evil.example"):
        response = client.post("/login", query_string={"next": offsite}, data={"user": "admin", "password": "s3cret"})
        assert response.headers["Location"] == "/", offsite
    assert client.post("/logout").status_code == 403  # CSRF applies to logout too
    out = client.post("/logout", data={"csrf_token": _csrf(client)})
    assert out.status_code == 303 and out.headers["Location"].endswith("/login")
    assert client.get("/").status_code == 302


def test_without_a_token_the_login_page_says_the_console_is_open(client):
    html = client.get("/login").get_data(as_text=True)
    assert "needs no login" in html and "the console is open" in html
    assert "http.auth.token" not in html, "no token to ask for"
    assert "Log out" not in client.get("/").get_data(as_text=True)


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path, title", [
    ("/topics/nope/partitions/0", "No such topic or partition"),
    ("/topics/orders/partitions/9", "No such topic or partition"),
    ("/fragments/topics/nope/partitions/0", "No such topic or partition"),
    ("/topics/nope", "No such topic or partition"),
    ("/transactions/nope", "No such transactional id"),
    ("/fragments/transactions/nope", "No such transactional id"),
    ("/groups/nope", "No such consumer group"),
    ("/no/such/page", "Page not found"),
])
def test_unknown_things_are_friendly_404_pages(client, scenario, path, title):
    response = client.get(path)
    assert response.status_code == 404
    assert "text/html" in response.content_type
    html = response.get_data(as_text=True)
    assert title in html and "Back to the overview" in html


def test_other_console_errors_are_pages_and_the_api_keeps_json(client, scenario):
    out_of_range = client.get("/topics/orders/partitions/0?offset=999")
    assert out_of_range.status_code == 416 and "Offset out of range" in out_of_range.get_data(as_text=True)
    unknown_txn_abort = client.post("/transactions/nope/abort", data={"csrf_token": _csrf(client)})
    assert unknown_txn_abort.status_code == 303  # flashed: nothing to abort
    api = client.get("/v3/no-such-thing")
    assert api.status_code == 404 and api.is_json and api.get_json()["error_code"] == 404
    assert client.get("/static/no-such-file.css").status_code == 404


def test_a_console_bug_is_a_500_page_with_a_reference_not_the_exception_s_text(
        client, scenario, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    async def broken(engine, txn_id):
        raise InvariantViolation("/srv/secret internals")

    monkeypatch.setattr(read_models, "transaction_detail", broken)
    with caplog.at_level("ERROR", logger="exactly.app.http.errors"):
        page = client.get("/transactions/billing")
    html = page.get_data(as_text=True)
    assert page.status_code == 500 and "Something broke" in html
    assert "secret" not in html and "InvariantViolation" not in html
    reference = re.search(r"under reference ([0-9a-f]{8})", html).group(1)
    assert any(reference in r.getMessage() for r in caplog.records)


# -- the LSO history -------------------------------------------------------------------------


def test_history_samples_every_partition_and_draws_the_gap(broker, clock, scenario):
    history = History(broker.engine)
    history.sample()
    clock.advance(2_000)
    scenario["enricher"].send("orders", b"more", key=b"k", partition=0).get(timeout=10)
    history.sample()
    samples = history.series("orders", 0)
    assert len(samples) == 2 and samples[1].high_watermark > samples[0].high_watermark
    assert samples[1].last_stable_offset == samples[0].last_stable_offset  # pinned by enricher
    assert history.series("__consumer_offsets", 0) or history.series("__consumer_offsets", 1) \
        or history.series("__consumer_offsets", 2)
    drawn = chart(samples, clock.now_ms())
    assert not drawn["empty"] and drawn["gap_now"] == samples[1].high_watermark - samples[1].last_stable_offset
    assert drawn["hw_path"].startswith("M") and drawn["gap_path"].endswith("Z")
    assert chart([], clock.now_ms())["empty"]
    clock.advance(11 * 60_000)  # older than the window: dropped
    history.observe("orders", 0, clock.now_ms(), 9, 9)
    assert len(history.series("orders", 0)) == 1


def test_the_sampler_starts_outside_testing_and_stops(broker):
    from flask import Flask

    testing = Flask("t")
    testing.testing = True
    testing.extensions["exactly.engine"] = broker.engine
    assert not init_app(testing).running
    live = Flask("l")
    live.extensions["exactly.engine"] = broker.engine
    history = init_app(live)
    try:
        assert history.running and live.extensions["exactly.history"] is history
    finally:
        history.stop()
    assert not history.running
    history.stop()  # idempotent


def test_the_sampler_ends_when_the_broker_closes(tmp_path):
    broker = Broker(tmp_path / "d", **SMALL_INTERNAL_TOPICS)
    history = History(broker.engine, interval_s=0.01).start()
    broker.close()
    thread = history._thread
    thread.join(timeout=10)  # a sample caught in the shutdown gives up after CALL_TIMEOUT_S
    assert not thread.is_alive()


# -- with the SQLite mirror -------------------------------------------------------------------


def test_transaction_history_and_counts_come_from_the_mirror(broker, scenario):
    broker.mirror.catch_up()  # now, rather than at the broker's next mirror round
    client = create_app(broker.engine, test_config={"TESTING": True}, mirror=broker.mirror).test_client()
    html = client.get("/transactions/billing").get_data(as_text=True)
    history = html[html.index("<h2>History</h2>"):]
    assert "history-commit" in history and "history-abort" in history
    assert history.index("history-abort") < history.index("history-commit")  # newest first
    overview = client.get("/").get_data(as_text=True)
    assert "all time" in overview
    assert "No finished transactions yet." in client.get("/transactions/enricher").get_data(as_text=True)
