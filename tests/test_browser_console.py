"""The console's topic, record-browser, produce and group pages in a real browser
(Debian Chromium driven by Playwright, as tests/test_browser.py), at 1440 and 390 px.

A record-browser session (what read_committed gets, page back, jump to an offset and
to a time, filter, hex, a record's detail, the live tail adding a new record without
redrawing the others), producing a record inside a transaction from the topic page,
previewing and resetting an Empty group's offsets, creating and deleting a topic. Screenshots go to ``test-artifacts/`` (``console-<page>-<width>.png``).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.browser import ARTIFACTS, PNG_MAGIC, SEE_MS, chromium, open_page  # noqa: F401 -- a fixture
from tests.test_browser import console  # noqa: F401 -- a fixture
from exactly.storage.record_batch import SimpleRecord, encode_batch

WIDTHS = (1440, 390)
T0 = 1_700_000_000_000


@pytest.fixture
def browser_page(request, chromium):  # noqa: F811
    """A Chromium page of the parametrized width that accepts every dialog, and the errors
    the browser reports: any left at the end fail the test (a test takes out those it expects)."""
    width = request.param
    with open_page(chromium, width) as (page, problems):
        page.on("dialog", lambda dialog: dialog.accept())
        yield page, width, problems
        assert not problems, f"the browser reported errors: {problems}"


def _shot(page, name: str, width: int) -> None:
    path = ARTIFACTS / f"console-{name}-{width}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == PNG_MAGIC


def _rows(page) -> list[int]:
    return [int(o) for o in page.locator("#records tr[data-offset]").evaluate_all(
        "rows => rows.map(r => r.dataset.offset)")]


@pytest.mark.parametrize("browser_page", WIDTHS, indirect=True)
def test_a_record_browser_session(console, browser_page):
    from playwright.sync_api import expect

    broker, base = console
    page, width, problems = browser_page
    broker.create_topic("orders", 2)
    for i in range(45):
        value = b"\x00\x01binary" if i == 7 else b'{"order": %d, "customer": "customer-%d"}' % (i, i % 5)
        broker.produce("orders", 0, encode_batch([SimpleRecord(value, key=b"order-%d" % i, headers=(("source", b"shop"),),
                                                               timestamp=T0 + 1000 * i)]))
    aborted = broker.producer(transactional_id="refunds")
    aborted.init_transactions()
    aborted.begin_transaction()
    aborted.send("orders", b'{"refund": 1}', key=b"r", partition=0).get(timeout=10)
    aborted.abort_transaction()  # 45 aborted, 46 its marker

    page.goto(base + "/")
    page.locator('a[href="/topics/orders"]').first.click()
    expect(page.locator("h1")).to_have_text("orders")
    page.locator('a[href="/topics/orders/partitions/0/records"]').click()
    expect(page.locator("#range")).to_have_text("27–46")  # the newest 20
    assert _rows(page) == list(range(27, 47))
    expect(page.locator('tr[data-offset="45"]')).to_contain_text("aborted · never delivered")
    expect(page.locator('tr[data-offset="46"]')).to_contain_text("ABORT marker")

    page.get_by_role("link", name="what read_committed gets").click()  # no marker, no aborted record
    expect(page.locator("#records tr[data-offset]").last).to_have_attribute("data-offset", "44")
    assert _rows(page) == list(range(25, 45))
    page.get_by_role("link", name="every record").click()
    expect(page.locator("#records tr[data-offset]").last).to_have_attribute("data-offset", "46")

    page.locator('a[rel="prev"]').click()
    expect(page.locator("#range")).to_have_text("7–26")
    expect(page.locator('tr[data-offset="7"] [data-value]')).to_contain_text("00 01 62 69 6e")  # binary: hex

    page.fill("#offset", "12")
    page.locator("#jump-offset button").click()
    expect(page.locator("#range")).to_have_text("12–31")

    moment = datetime.fromtimestamp((T0 + 31_000) / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    page.fill("#time", moment)
    page.locator("#jump-time button").click()
    expect(page.locator("#records tr[data-offset]").first).to_have_attribute("data-offset", "31")

    page.fill("#q", "customer-3")
    page.locator("#filter button").click()
    expect(page.locator("#records tr[data-offset]").first).to_contain_text("customer-3")
    assert all(o % 5 == 3 for o in _rows(page)) and _rows(page)
    page.get_by_role("link", name="hex", exact=True).click()
    expect(page.locator("#records tr[data-offset]").first.locator("[data-value]")).to_contain_text("7b 22 6f")
    _shot(page, "records", width)

    page.locator('#records tr[data-offset="38"] a').click()
    expect(page.locator("h1")).to_have_text("orders-0 @ 38")
    expect(page.locator("#verdict")).to_contain_text("Not transactional: every consumer reads it")
    expect(page.locator("#headers")).to_contain_text("source")
    expect(page.locator("#batch")).to_contain_text("38–38")
    page.goto(base + "/topics/orders/partitions/0/records/45")
    expect(page.locator("#verdict")).to_contain_text("read_committed consumers never see it")
    expect(page.locator("#batch [data-transactional]")).to_have_text("yes")
    _shot(page, "record", width)

    # the live tail: a record produced now appears at the bottom; the rows shown stay as they are
    page.goto(base + "/topics/orders/partitions/0/records")
    page.locator('tr[data-offset="30"]').evaluate("row => row.dataset.seen = 'yes'")
    broker.produce("orders", 0, encode_batch([SimpleRecord(b'{"order": "live"}', key=b"live")]))
    expect(page.locator('tr[data-offset="47"]')).to_contain_text("live", timeout=SEE_MS)
    expect(page.locator('tr[data-offset="30"]')).to_have_attribute("data-seen", "yes")
    assert _rows(page)[-2:] == [46, 47]


@pytest.mark.parametrize("browser_page", WIDTHS, indirect=True)
def test_produce_a_record_in_a_transaction_from_the_console(console, browser_page):
    from playwright.sync_api import expect

    broker, base = console
    page, width, problems = browser_page
    broker.create_topic("payments", 2)
    page.goto(base + "/topics/payments")
    page.select_option("#produce-partition", "1")
    page.fill("#produce-key", "invoice-9")
    page.fill("#produce-value", '{"amount": 120, "currency": "EUR"}')
    page.fill("#produce-headers", "source: console")
    page.fill("#produce-txn", "console-tx")
    page.locator("#produce-submit").click()
    expect(page.locator(".flash-success")).to_have_text(
        "Produced to payments-1 at offset 0 in a transaction of console-tx, committed.")
    expect(page.locator("h1")).to_have_text("payments-1 @ 0")
    expect(page.locator("#verdict")).to_contain_text("Committed")
    expect(page.locator("#value")).to_contain_text('"currency": "EUR"')
    expect(page.locator("#batch [data-transactional]")).to_have_text("yes")
    _shot(page, "produce", width)
    log = broker.engine.partitions.log("payments", 1)
    assert log.last_stable_offset == log.high_watermark == 2  # the record and its COMMIT marker


@pytest.mark.parametrize("browser_page", WIDTHS, indirect=True)
def test_reset_an_empty_groups_offsets_from_the_console(console, browser_page):
    from playwright.sync_api import expect

    broker, base = console
    page, width, problems = browser_page
    broker.create_topic("orders", 1)
    for i in range(8):
        broker.produce("orders", 0, encode_batch([SimpleRecord(b"v%d" % i)]))
    consumer = broker.consumer(group_id="billing", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe(["orders"])
    consumer.poll(timeout_ms=2000)  # joins the group
    consumer.commit({("orders", 0): 8})
    consumer.close()  # the group is Empty now
    coordinator = broker.engine.groups.coordinator
    assert coordinator.describe("billing").committed[("orders", 0)].offset == 8

    page.goto(base + "/groups/billing")
    page.select_option("#reset-to", "offset")
    page.fill("#reset-value", "3")
    page.locator("#reset-preview").click()  # the dry run: the plan, nothing committed
    expect(page.locator("#reset-plan tbody tr")).to_contain_text("8")
    expect(page.locator("#reset-plan tbody tr td").nth(2)).to_have_text("3")
    assert coordinator.describe("billing").committed[("orders", 0)].offset == 8
    _shot(page, "group-preview", width)
    expect(page.locator("#reset-value")).to_have_value("3")  # the form as it was sent
    page.locator("#reset-submit").click()
    expect(page.locator(".flash-success")).to_contain_text("Reset the offsets of billing to offset: orders-0 → 3")
    committed = page.locator("#group tr", has_text="orders-0").locator("td").nth(1)
    expect(committed).to_have_text("3")  # the live part shows it too
    assert coordinator.describe("billing").committed[("orders", 0)].offset == 3
    _shot(page, "group-reset", width)


@pytest.mark.parametrize("browser_page", WIDTHS, indirect=True)
def test_create_and_delete_a_topic_from_the_console(console, browser_page):
    from playwright.sync_api import expect

    broker, base = console
    page, width, problems = browser_page
    broker.create_topic("orders", 1)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    page.goto(base + "/")
    page.locator("#new-topic").click()
    page.fill("#topic-name", "orders")
    page.locator("#create-submit").click()
    expect(page.locator("#create-error")).to_have_text("TOPIC_ALREADY_EXISTS (36): topic 'orders' already exists")
    assert problems == ["Failed to load resource: the server responded with a status of 400 (BAD REQUEST)"]
    problems.clear()  # the form came back as a 400, as it should
    page.fill("#topic-name", "audit")
    page.fill("#topic-partitions", "3")
    page.fill("#topic-configs", "retention.ms=86400000")
    page.locator("#create-submit").click()
    expect(page.locator(".flash-success")).to_have_text("Created topic audit.")
    expect(page.locator('[data-config="retention.ms"]')).to_contain_text("set")
    _shot(page, "topic", width)

    page.locator('button[data-delete-topic="audit"]').click()
    expect(page.locator(".flash-success")).to_contain_text("Deleted topic audit", timeout=SEE_MS)
    assert dialogs and "Delete topic “audit”?" in dialogs[0]
    assert "audit" not in broker.engine.topics.topic_names()
