"""The console's right answers in Chromium (Playwright), at 1440 px and at 390 px.

* The stuck-consumer flow from a group page: a group caught up to a held-back LSO
  does not look done (lag 0, but records held back, in amber, with the transaction
  holding them); the transaction is one click away, its Abort on the first screen;
  after the Abort the LSO is free and the lag counts the record that was waiting.
* Refreshes morph the page in place: keyboard focus, a table's scroll position and a
  text selection survive two refreshes (counted from htmx's own events, not slept).
* At 390 px the timeline's labels do not overlap and a wide table shows it scrolls
  (records are cards there: tests/test_console_layouts_browser.py).

Screenshots go to ``test-artifacts/`` (``answers-*.png``); like tests/test_browser.py
this fails, never skips, without Chromium and Playwright.
"""

from __future__ import annotations

import pytest

from exactly.app import Broker
from tests.browser import ARTIFACTS, PNG_MAGIC, SEE_MS, chromium, open_page  # noqa: F401 -- a fixture
from tests.test_browser import console  # noqa: F401 -- the fixture

#: (name, width, height): a desktop and a phone
VIEWPORTS = [("desktop", 1440, 900), ("phone", 390, 844)]
#: counts htmx's settled swaps, so a test waits for refreshes instead of sleeping
COUNT_REFRESHES = """() => { window.__refreshes = 0;
    document.body.addEventListener('htmx:afterSettle', () => { window.__refreshes += 1; }); }"""


def _stuck_consumer(broker: Broker) -> None:
    """orders-0: 0 plain, 1 open transaction of stuck-tx (pins the LSO), 2 plain
    (waits behind it); group billing committed at 1, the LSO."""
    broker.create_topic("orders", 1)
    plain = broker.producer()
    plain.send("orders", b"before", partition=0).get(timeout=10)
    producer = broker.producer(transactional_id="stuck-tx", transaction_timeout_ms=600_000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("orders", b"inside", partition=0).get(timeout=10)
    plain.send("orders", b"after", partition=0).get(timeout=10)
    consumer = broker.consumer(group_id="billing", enable_auto_commit=False)
    consumer.commit({("orders", 0): 1})
    consumer.close()


def _on_first_screen(page, locator) -> None:
    box = locator.bounding_box()
    viewport = page.viewport_size
    assert box is not None, "not rendered"
    assert 0 <= box["x"] and box["x"] + box["width"] <= viewport["width"], box
    assert 0 <= box["y"] and box["y"] + box["height"] <= viewport["height"], (box, viewport)


@pytest.mark.parametrize("name, width, height", VIEWPORTS)
def test_a_stuck_consumer_from_its_group_page_to_abort(console, chromium, name, width, height):  # noqa: F811
    from playwright.sync_api import expect

    broker, base = console
    _stuck_consumer(broker)
    with open_page(chromium, width, height) as (page, problems):
        page.goto(base + "/groups/billing")
        lag = page.locator('tr[data-offsets="orders-0"] [data-lag]')
        expect(lag).to_contain_text("0")
        expect(lag).to_contain_text("+ 2 held back")
        assert "amber" in (lag.get_attribute("class") or "")            # not green: not done
        assert "stat-amber" in page.locator("[data-group-lag]").get_attribute("class")
        held = page.locator('#held-back [data-held="orders-0"]')
        expect(held).to_contain_text("2 records held back")
        expect(held).to_contain_text("stuck-tx")
        _on_first_screen(page, held.locator('button[data-abort="stuck-tx"]'))
        page.screenshot(path=str(ARTIFACTS / f"answers-group-held-{name}.png"), full_page=True)

        held.get_by_role("link", name="stuck-tx").click()
        expect(page).to_have_url(base + "/transactions/stuck-tx")
        abort = page.locator('.txn-action button[data-abort="stuck-tx"]')
        _on_first_screen(page, abort)
        page.screenshot(path=str(ARTIFACTS / f"answers-transaction-{name}.png"))
        dialogs: list[str] = []
        page.once("dialog", lambda d: (dialogs.append(d.message), d.accept()))
        abort.click()
        expect(page.locator(".txn-state")).to_contain_text("CompleteAbort", timeout=SEE_MS)
        assert dialogs and "stuck-tx" in dialogs[0]

        page.goto(base + "/groups/billing")
        lag = page.locator('tr[data-offsets="orders-0"] [data-lag]')
        expect(lag).to_have_text("1")     # "after" (2); the aborted 1 and the marker 3 are not lag
        expect(page.locator("#held-back")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / f"answers-group-freed-{name}.png"), full_page=True)
        assert not problems, f"the browser reported errors: {problems}"
    log = broker.engine.partitions.log("orders", 0)
    assert log.last_stable_offset == log.high_watermark == 4
    assert (ARTIFACTS / f"answers-group-held-{name}.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("name, width, height", VIEWPORTS)
def test_focus_scroll_and_selection_survive_refreshes(console, chromium, name, width, height):  # noqa: F811
    from playwright.sync_api import expect

    broker, base = console
    _stuck_consumer(broker)
    plain = broker.producer()
    for i in range(30):
        plain.send("orders", b"a-long-value-that-makes-the-records-table-wide-%03d" % i, partition=0).get(timeout=10)
    with open_page(chromium, width, height) as (page, problems):
        page.goto(base + "/topics/orders/partitions/0")
        expect(page.locator("table.records")).to_be_visible()
        page.evaluate(COUNT_REFRESHES)
        # focus: the Abort button of the open transaction
        page.locator('button[data-abort="stuck-tx"]').first.focus()
        # scroll: the page down to the segments, their table sideways where it is wider (a
        # phone shows records as cards, which never scroll sideways)
        segments = page.locator("table.segments")
        segments.scroll_into_view_if_needed()
        page.evaluate("() => window.scrollBy(0, 120)")
        sideways = segments.evaluate("t => { t.scrollLeft = 90; return t.scrollLeft; }")
        page_y = page.evaluate("() => window.scrollY")
        assert page_y > 0
        # select: the transactional id in the producers table
        selected = page.evaluate("""() => {
            const link = [...document.querySelectorAll('.live a')].find(a => a.textContent === 'stuck-tx');
            const range = document.createRange(); range.selectNodeContents(link);
            const selection = window.getSelection(); selection.removeAllRanges(); selection.addRange(range);
            return selection.toString(); }""")
        assert selected == "stuck-tx"

        page.wait_for_function("() => window.__refreshes >= 2", timeout=SEE_MS)

        assert page.evaluate("() => document.activeElement && document.activeElement.dataset.abort") == "stuck-tx"
        assert page.evaluate("() => window.getSelection().toString()") == "stuck-tx"
        assert page.evaluate("() => window.scrollY") == page_y
        assert segments.evaluate("t => t.scrollLeft") == sideways
        if name == "phone":
            assert sideways == 90  # the table really is wider than the screen there
        page.screenshot(path=str(ARTIFACTS / f"answers-refresh-kept-{name}.png"))
        assert not problems, f"the browser reported errors: {problems}"


#: every page that shows the stuck transaction, and the button that aborts it there
ABORT_ON = [("/", 'button[data-abort="stuck-tx"]'), ("/transactions", 'button[data-abort="stuck-tx"]'),
            ("/transactions/stuck-tx", 'button[data-abort="stuck-tx"]'),
            ("/topics/orders/partitions/0", 'button[data-abort="stuck-tx"]'),
            ("/groups/billing", 'button[data-abort="stuck-tx"]')]


def test_at_390_px_the_abort_of_a_stuck_transaction_is_on_the_first_screen(console, chromium):  # noqa: F811
    broker, base = console
    _stuck_consumer(broker)
    with open_page(chromium, 390, 844) as (page, problems):
        for path, button in ABORT_ON:
            page.goto(base + path)
            _on_first_screen(page, page.locator(button).first)
            page.screenshot(path=str(ARTIFACTS / f"answers-first-screen{path.replace('/', '-')}.png"))
        # the overview's Abort names what it aborts: its row's "Held by" is scrolled out of view
        page.goto(base + "/")
        assert "stuck-tx" in page.locator('.blockers button[data-abort="stuck-tx"]').first.inner_text()
        assert not problems, f"the browser reported errors: {problems}"


def test_at_1440_px_the_overviews_abort_is_one_word(console, chromium):  # noqa: F811
    """The name beside the overview's Abort is for a phone; on a desktop its row shows it."""
    broker, base = console
    _stuck_consumer(broker)
    with open_page(chromium, 1440, 900) as (page, problems):
        page.goto(base + "/")
        assert page.locator('.blockers button[data-abort="stuck-tx"]').first.inner_text().strip() == "Abort"
        assert not problems, f"the browser reported errors: {problems}"


def test_at_390_px_the_timeline_reads_and_wide_tables_show_they_scroll(console, chromium):  # noqa: F811
    from playwright.sync_api import expect

    broker, base = console
    _stuck_consumer(broker)
    with open_page(chromium, 390, 844) as (page, problems):
        page.goto(base + "/transactions/stuck-tx")
        labels = page.locator(".timeline .step-name")
        expect(labels).to_have_count(4)
        # where each label's text is drawn (its box may be wider than the text)
        boxes = page.evaluate("""() => [...document.querySelectorAll('.timeline .step-name')].map(el => {
            const range = document.createRange(); range.selectNodeContents(el);
            const r = range.getBoundingClientRect(); return {x: r.x, width: r.width}; })""")
        for left, right in zip(boxes, boxes[1:]):
            assert left["x"] + left["width"] + 4 <= right["x"], f"timeline labels collide: {left} {right}"
        assert all(b["x"] >= 0 and b["x"] + b["width"] <= 390 for b in boxes), boxes
        page.screenshot(path=str(ARTIFACTS / "answers-timeline-phone.png"))

        page.goto(base + "/topics/orders/partitions/0")
        table = page.locator("table.segments")
        wide = table.evaluate("t => ({scroll: t.scrollWidth, client: t.clientWidth, "
                              "overflow: getComputedStyle(t).overflowX, "
                              "hint: getComputedStyle(t).backgroundImage})")
        assert wide["scroll"] > wide["client"] and wide["overflow"] == "auto", wide
        assert wide["hint"].count("gradient") >= 2, wide   # the edge shadows that say "more this way"
        page.screenshot(path=str(ARTIFACTS / "answers-wide-table-phone.png"), full_page=True)
        assert not problems, f"the browser reported errors: {problems}"
