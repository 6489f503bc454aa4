"""The console in a real browser (tests/browser.py): a transaction is left open; the
console shows it Ongoing and the LSO stuck below the high watermark; pressing Abort (and
accepting the confirmation) fences it, and the LSO catches up. Screenshots are kept in
``test-artifacts/``: ``console.png`` (after the abort) and ``console-blocked.png``
(before it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from exactly.app import Broker
from exactly.app.http import create_app
from exactly.storage.errors import KafkaError
from tests.browser import ARTIFACTS, PNG_MAGIC, SEE_MS, chromium, open_page, served  # noqa: F401 -- a fixture
from tests.conftest import SMALL_INTERNAL_TOPICS
from tests.waiting import eventually


@pytest.fixture
def console(tmp_path: Path) -> Iterator[tuple[Broker, str]]:
    """A broker and the console served by waitress on 127.0.0.1 at a free port."""
    broker = Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS)
    app = create_app(broker.engine)  # not TESTING: the LSO sampler runs as in production
    try:
        with served(app) as base:
            yield broker, base
    finally:
        app.extensions["exactly.history"].stop()
        broker.close()


def test_abort_a_transaction_that_holds_the_lso_from_the_browser(console, chromium):  # noqa: F811
    from playwright.sync_api import expect

    broker, base = console
    broker.create_topic("orders", 1)
    broker.producer().send("orders", b"before", partition=0).get(timeout=10)
    producer = broker.producer(transactional_id="orders-tx", transaction_timeout_ms=300_000)
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(3):
        producer.send("orders", b"inside-%d" % i, partition=0).get(timeout=10)  # left open
    log = broker.engine.partitions.log("orders", 0)
    assert log.last_stable_offset == 1 < log.high_watermark == 4

    screenshot = ARTIFACTS / "console.png"
    screenshot.unlink(missing_ok=True)
    with open_page(chromium, 1360) as (page, problems):
        # the transaction is Ongoing
        page.goto(base + "/transactions")
        row = page.locator('tr[data-txn="orders-tx"]')
        expect(row).to_contain_text("Ongoing")
        expect(row).to_contain_text("holds LSO")

        # the overview: the LSO stuck below the high watermark, and who holds it
        page.goto(base + "/")
        expect(page.locator("#status-badge")).to_contain_text("1 partition blocked")
        blocked = page.locator('#stuck tbody[data-partition="orders-0"]')
        expect(blocked).to_contain_text("orders-tx")
        expect(blocked).to_contain_text("3 held back")
        expect(page.locator("#topic-orders [data-gap]")).to_have_text("3")
        page.screenshot(path=str(ARTIFACTS / "console-blocked.png"), full_page=True)

        # Abort, accepting the confirmation
        dialogs: list[str] = []

        def accept(dialog):
            dialogs.append(dialog.message)
            dialog.accept()

        page.once("dialog", accept)
        blocked.locator('button[data-abort="orders-tx"]').click()

        # the LSO catches up: the gap is gone and the badge says so
        expect(page.locator("#status-badge")).to_contain_text("All partitions stable", timeout=SEE_MS)
        expect(page.locator("#topic-orders [data-gap]")).to_have_text("0", timeout=SEE_MS)
        expect(page.locator("#stuck")).to_contain_text("Nothing is holding consumers back.")
        expect(page.locator(".flash-success")).to_contain_text("Aborted orders-tx")
        assert dialogs and "Abort transaction “orders-tx”" in dialogs[0]
        assert log.last_stable_offset == log.high_watermark == 5  # the ABORT marker took offset 4
        page.screenshot(path=str(screenshot), full_page=True)

        page.goto(base + "/transactions/orders-tx")
        expect(page.locator(".txn-state")).to_contain_text("CompleteAbort")
        assert not problems, f"the browser reported errors: {problems}"

    with pytest.raises(KafkaError):
        producer.commit_transaction()  # fenced by the abort's epoch bump
    assert screenshot.exists() and screenshot.read_bytes()[:8] == PNG_MAGIC


def test_a_browser_error_fails_a_test_and_a_navigation_abort_does_not(chromium):  # noqa: F811
    """What tests/browser.py counts: htmx's log of a request the test's own navigation
    aborted is skipped; any other console error and any uncaught exception is kept."""
    with open_page(chromium, 800) as (page, problems):
        page.set_content("<script>console.error('htmx:afterRequest, [object HTMLDivElement]');"
                         "console.error('htmx:sendAbort, [object HTMLDivElement]');"
                         "console.error('htmx:responseError, [object HTMLDivElement]');"
                         "setTimeout(() => { throw new Error('boom'); });</script>")
        # each call into Playwright lets it deliver the events it has received
        eventually(lambda: page.evaluate("1") and len(problems) >= 2, what="the page's errors")
        assert problems[0].startswith("htmx:responseError") and "boom" in problems[1]
        assert len(problems) == 2
