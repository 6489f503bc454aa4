"""What a phone and a desktop show of the pages a Kafka user reads cell by cell, checked
by geometry in Chromium (Playwright, tests/browser.py) at 1440 and 390 px (issue 35):

* Transactions: each row's state and LAST OUTCOME badges are whole, on the screen and
  covered by nothing -- on a phone the Abort sits beside the transactional id of its
  card, where a sticky action column covered the badges.
* Records (the record browser and the partition page): each record's key, value and
  read_committed state are on the screen without a sideways scroll, covered by nothing,
  their text not cut off (on a phone a card per record).
* Overview: the stuck-consumer panel's Abort says, on the screen, which transaction it aborts.
* A group's Audit page: the form is filled in from the group's own committed topics and
  the transactional ids it commits with, and its controls look like the console's others.

"Covered by nothing": the element the browser hit-tests at the centre of the box, at its
left and right ends (half its height in: a pill's corners are round) and at its top and
bottom (2 px in) is the element itself or inside it. Screenshots go to
``test-artifacts/layout-<page>-<width>.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from exactly.app import Broker
from exactly.app.http import create_app
from tests.browser import ARTIFACTS, PNG_MAGIC, chromium, open_page, served  # noqa: F401 -- a fixture
from tests.conftest import SMALL_INTERNAL_TOPICS

pytestmark = pytest.mark.timeout(180)

WIDTHS = (1440, 390)

#: the boxes of the elements ``selector`` finds (each scrolled to the screen's middle first),
#: whether anything covers them, whether their text is cut, and the page's sideways overflow
BOXES = """selector => {
  const width = document.documentElement.clientWidth;
  const hit = (el, x, y) => { const top = document.elementFromPoint(x, y); return !!top && (top === el || el.contains(top)); };
  return [...document.querySelectorAll(selector)].map(el => {
    el.scrollIntoView({block: 'center', inline: 'nearest'});
    const r = el.getBoundingClientRect();
    const cx = (r.left + r.right) / 2, cy = (r.top + r.bottom) / 2, end = Math.max(2, Math.min(r.width, r.height) / 2);
    const points = [[cx, cy], [r.left + end, cy], [r.right - end, cy], [cx, r.top + 2], [cx, r.bottom - 2]];
    return {html: el.outerHTML.slice(0, 90), left: r.left, right: r.right, width: r.width, height: r.height,
            covered: points.filter(([x, y]) => !hit(el, x, y)).length,
            cut: el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible',
            text: el.innerText, viewport: width,
            overflow: document.documentElement.scrollWidth - width};
  });
}"""


def on_screen_and_uncovered(page: Any, selector: str, *, whole_text: bool = True) -> list[dict[str, Any]]:
    """Every element ``selector`` finds is inside the viewport's width, has a box, is covered
    by nothing and (``whole_text``) shows its text uncut; the page never scrolls sideways."""
    boxes = page.evaluate(BOXES, selector)
    assert boxes, f"nothing matches {selector}"
    for box in boxes:
        assert box["width"] > 0 and box["height"] > 0, f"not rendered: {box}"
        assert 0 <= box["left"] and box["right"] <= box["viewport"], f"off the screen sideways: {box}"
        assert not box["covered"], f"covered by another element: {box}"
        assert not (whole_text and box["cut"]), f"its text is cut off: {box}"
        assert box["overflow"] <= 0, f"the page scrolls sideways: {box}"
    return boxes


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, str]]:
    """:func:`_scenario`'s broker and its console (with the SQLite mirror), served by waitress."""
    broker = Broker(Path(tmp_path_factory.mktemp("layouts")) / "data", **SMALL_INTERNAL_TOPICS)
    try:
        keep = _scenario(broker)
        app = create_app(broker.engine, test_config={"TESTING": True}, mirror=broker.mirror)
        with served(app) as base:
            yield broker, base
        for client in keep:
            client.close()
    finally:
        broker.close()


def _scenario(broker: Broker) -> list[Any]:
    """``orders`` (plain, committed, aborted records) read by group ``enrich`` whose
    ``enrich-tx`` writes ``enriched`` and commits the group's offsets in its transactions;
    ``payments`` written by ``billing`` (commits, then aborts) and held by ``stuck-tx``
    (open: an Abort on its rows)."""
    for topic in ("audit-log", "enriched", "orders", "payments"):  # "audit-log" sorts first: never a guess
        broker.create_topic(topic, 1)
    plain = broker.producer()
    for i in range(3):
        plain.send("orders", b'{"order": %d, "note": "a value long enough to wrap on a phone"}' % i,
                   key=b"customer-%d" % i, partition=0).get(timeout=10)
    enrich = broker.producer(transactional_id="enrich-tx")
    enrich.init_transactions()
    for end in (2, 3):
        enrich.begin_transaction()
        enrich.send("enriched", b"enriched-%d" % end, partition=0).get(timeout=10)
        enrich.send_offsets_to_transaction({("orders", 0): end}, "enrich")
        enrich.commit_transaction()
    billing = broker.producer(transactional_id="billing")
    billing.init_transactions()
    for commit in (True, False):
        billing.begin_transaction()
        billing.send("payments", b"paid", key=b"invoice-7", partition=0).get(timeout=10)
        billing.commit_transaction() if commit else billing.abort_transaction()
    stuck = broker.producer(transactional_id="stuck-tx", transaction_timeout_ms=600_000)
    stuck.init_transactions()
    stuck.begin_transaction()
    stuck.send("payments", b"inside", key=b"invoice-8", partition=0).get(timeout=10)
    broker.mirror.catch_up()
    return [plain, enrich, billing, stuck]


def show(page: Any, url: str, ready: str) -> None:
    """Open ``url`` and wait until the first element ``ready`` finds is there."""
    page.goto(url, wait_until="domcontentloaded")
    page.locator(ready).first.wait_for()


def _shot(page: Any, name: str, width: int) -> None:
    shot = ARTIFACTS / f"layout-{name}-{width}.png"
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("width", WIDTHS)
def test_transactions_abort_covers_no_outcome_badge(console, chromium, width: int):  # noqa: F811
    _, base = console
    with open_page(chromium, width) as (page, problems):
        show(page, base + "/transactions", 'tr[data-txn="stuck-tx"] button[data-abort]')
        badges = on_screen_and_uncovered(page, "tr[data-txn] [data-last-outcome] .pill, tr[data-txn] [data-state] .pill")
        assert {b["text"] for b in badges} >= {"COMMIT", "ABORT", "Ongoing"}, badges
        on_screen_and_uncovered(page, "tr[data-txn] td:first-child a")   # the key: each transactional id
        abort, = on_screen_and_uncovered(page, 'tr[data-txn="stuck-tx"] button[data-abort]')
        # the Abort is in stuck-tx's row, level with its transactional id
        row = page.locator('tr[data-txn="stuck-tx"]').bounding_box()
        name = page.locator('tr[data-txn="stuck-tx"] td:first-child a').bounding_box()
        assert row["y"] <= name["y"] and name["y"] + name["height"] <= row["y"] + row["height"]
        _shot(page, "transactions", width)
        assert not problems, f"the browser reported errors: {problems}"


#: each record's key, value and read_committed state (a marker has no key or value)
RECORD = "table.records tr[data-offset]:not(.rec-marker)"
RECORD_CELLS = f"{RECORD} [data-key], {RECORD} [data-value], table.records tr[data-offset] [data-rc] .pill"


@pytest.mark.parametrize("width", WIDTHS)
def test_records_key_value_and_read_committed_state_read_without_a_sideways_scroll(console, chromium, width: int):  # noqa: F811
    _, base = console
    with open_page(chromium, width) as (page, problems):
        for topic, states in (("orders", {"visible"}), ("payments", {"committed", "aborted · never delivered"})):
            show(page, f"{base}/topics/{topic}/partitions/0/records", "table.records tr[data-offset]")
            # at 1440 px a long value is cut with an ellipsis on purpose (its record's page has it
            # whole); on a phone the card has the width to show it
            on_screen_and_uncovered(page, RECORD_CELLS, whole_text=width < 760)
            pills = {b["text"] for b in on_screen_and_uncovered(page, "table.records [data-rc] .pill")}
            assert states <= pills, pills
            keys = {b["text"] for b in on_screen_and_uncovered(page, f"{RECORD} [data-key]")}
            assert any("customer-1" in k or "invoice-7" in k for k in keys), keys
            _shot(page, f"records-{topic}", width)
        show(page, base + "/topics/orders/partitions/0", "table.records [data-value]")
        on_screen_and_uncovered(page, "table.records [data-key], table.records [data-value], "
                                      "table.records [data-rc] .pill", whole_text=width < 760)
        _shot(page, "partition", width)
        assert not problems, f"the browser reported errors: {problems}"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_overviews_abort_says_on_the_screen_which_transaction_it_aborts(console, chromium, width: int):  # noqa: F811
    _, base = console
    with open_page(chromium, width) as (page, problems):
        show(page, base + "/", '.blockers button[data-abort="stuck-tx"]')
        abort, = on_screen_and_uncovered(page, '.blockers button[data-abort="stuck-tx"]')
        if width < 760:   # its row's "Held by" is scrolled out of view beside the sticky action
            assert "stuck-tx" in abort["text"], abort
        else:             # the row shows the transaction beside it
            assert abort["text"].strip() == "Abort"
            on_screen_and_uncovered(page, '.blockers a[href="/transactions/stuck-tx"]')
        _shot(page, "overview", width)
        assert not problems, f"the browser reported errors: {problems}"


#: what makes a form control look like the console's: font, border, radius, background
CONTROL_STYLE = """el => { const s = getComputedStyle(el);
  return [s.fontFamily, s.fontSize, s.borderTopWidth, s.borderTopColor, s.borderRadius, s.backgroundColor]; }"""


@pytest.mark.parametrize("width", WIDTHS)
def test_a_groups_audit_page_is_filled_from_the_group_and_styled_like_the_console(console, chromium, width: int):  # noqa: F811
    from playwright.sync_api import expect

    _, base = console
    with open_page(chromium, width) as (page, problems):
        page.goto(base + "/transactions")
        search = page.locator("#q").evaluate(CONTROL_STYLE)
        page.goto(base + "/groups/enrich")
        page.locator("#audit-link").click()
        page.wait_for_url(base + "/audit?group=enrich")
        assert page.locator("#input").input_value() == "orders"       # what enrich committed offsets for
        assert page.locator("#output").input_value() == "enriched"    # what enrich-tx, its committer, wrote
        expect(page.locator("#audit-suggested [data-committer]")).to_have_text(["enrich-tx"])
        for control in ("#group", "#input", "#output", "#ratio"):
            assert page.locator(control).evaluate(CONTROL_STYLE) == search, control
        on_screen_and_uncovered(page, "#audit-form input, #audit-form select, #audit-form button, #audit-form label")
        _shot(page, "audit-form", width)
        page.locator("#audit-form button[type=submit]").click()
        expect(page.locator("#verdict")).to_contain_text("exactly once")
        assert not problems, f"the browser reported errors: {problems}"
