"""The pages a new user opens first -- Topics, History, Transactions, Clients, a
group and a transaction -- in a real browser (Debian Chromium driven by Playwright,
as tests/test_browser.py), at 1440 and 390 px: no horizontal overflow of the page,
every table row whole (each cell's box spans its row's; on a phone a table of cards'
cells each inside its card), and the expected rows
there. One broker, one server and one browser for the whole module (start-up is the
slow part). Screenshots go to ``test-artifacts/`` (``first-hour-<page>-<width>.png``).
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from confluent_kafka import Producer

from exactly.app.http import create_app
from tests.kafka_support import KafkaBroker
from tests.browser import ARTIFACTS, PNG_MAGIC, chromium, open_page, served  # noqa: F401 -- a fixture

pytestmark = pytest.mark.timeout(180)

WIDTHS = (1440, 390)
#: page name -> (path, a selector that must show a row there)
PAGES = {
    "topics": ("/topics", 'tr[data-topic="orders"]'),
    "history": ("/history", 'tr[data-finished="billing"]'),
    "transactions": ("/transactions", 'tr[data-txn="enricher"]'),
    "clients": ("/clients", 'tr[data-client="first-hour-app"]'),
    "group": ("/groups/svc", 'tr[data-offsets="orders-1"]'),
    "transaction": ("/transactions/billing", ".history-item"),
}

#: every table row's cells, as boxes: a cell cut from its row (a display:flex cell) or
#: a page wider than the viewport shows here. A table of cards (class "cards": on a phone
#: each row a grid, its cells lines of it) keeps its rows whole when every cell shown is
#: inside its card
LAYOUT = """() => ({
  overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  wide: [...document.querySelectorAll('body *')].filter(el => el.getBoundingClientRect().right
    > document.documentElement.clientWidth + 1).slice(0, 4).map(el => el.outerHTML.slice(0, 80)),
  cut: [...document.querySelectorAll('table.table tbody tr')].flatMap(row => {
    const r = row.getBoundingClientRect();
    const card = row.closest('table').classList.contains('cards') && getComputedStyle(row).display === 'grid';
    return [...row.children].filter(cell => {
      const c = cell.getBoundingClientRect();
      if (card) return getComputedStyle(cell).display !== 'none' && (c.top < r.top - 1 || c.bottom > r.bottom + 1
        || c.left < r.left - 1 || c.right > r.right + 1);
      return getComputedStyle(cell).display !== 'table-cell' || Math.abs(c.top - r.top) > 1
        || Math.abs(c.bottom - r.bottom) > 1;
    }).map(cell => row.outerHTML.slice(0, 80) + ' / ' + cell.outerHTML.slice(0, 60));
  }),
})"""


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    """A broker with its Kafka listener, its state (:func:`_scenario`), and the console
    served by waitress on 127.0.0.1 at a free port."""
    with KafkaBroker(tmp_path_factory.mktemp("first-hour") / "data") as kafka:
        keep = _scenario(kafka)
        app = create_app(kafka.engine, test_config={"TESTING": True}, mirror=kafka.broker.mirror)
        try:
            with served(app) as base:
                yield kafka, base
        finally:
            keep[0].close()


def _scenario(kafka: KafkaBroker) -> list[Any]:
    """orders (2 partitions): ``billing`` commits, aborts; ``enricher`` stays open with
    a long name of its partitions; group ``svc`` assigned both partitions, one committed;
    a librdkafka producer connected."""
    broker = kafka.broker
    broker.create_topic("orders", 2)
    for i in range(8):
        broker.create_topic(f"payments.eu-west.v{i}", 4)
    billing = broker.producer(transactional_id="billing")
    billing.init_transactions()
    for commit in (True, False, True):
        billing.begin_transaction()
        billing.send("orders", b"x", partition=0).get(timeout=10)
        billing.commit_transaction() if commit else billing.abort_transaction()
    enricher = broker.producer(transactional_id="enricher", transaction_timeout_ms=600_000)
    enricher.init_transactions()
    enricher.begin_transaction()
    for i in range(8):
        enricher.send(f"payments.eu-west.v{i}", b"y", partition=i % 4).get(timeout=10)
    consumer = broker.consumer(group_id="svc", enable_auto_commit=False)
    consumer.subscribe(["orders"])
    consumer.poll(timeout_ms=3000, max_records=1)
    consumer.commit({("orders", 0): 1})
    rdkafka = Producer({"bootstrap.servers": kafka.bootstrap, "client.id": "first-hour-app",
                        "transactional.id": "rdkafka-tx"})
    rdkafka.init_transactions(10)
    broker.mirror.catch_up()
    return [consumer, enricher, rdkafka]  # kept open (and referenced) until the module ends


@pytest.mark.parametrize("width", WIDTHS)
def test_the_first_pages_fit_and_keep_their_rows_whole(console, chromium, width: int):  # noqa: F811
    from playwright.sync_api import expect

    _, base = console
    with open_page(chromium, width) as (page, problems):
        for name, (path, row) in PAGES.items():
            page.goto(base + path, wait_until="domcontentloaded")
            expect(page.locator(row).first).to_be_visible()
            shot = ARTIFACTS / f"first-hour-{name}-{width}.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes()[:8] == PNG_MAGIC
            layout = page.evaluate(LAYOUT)
            assert layout["overflow"] <= 0, f"{path} at {width} px is {layout['overflow']} px too wide: {layout['wide']}"
            assert not layout["cut"], f"{path} at {width} px cuts rows: {layout['cut'][:3]}"
        assert not problems, f"the browser reported errors: {problems}"


#: the navigation's row: its entries' boxes, and those of the open menu's links
NAV = """() => {
  const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const nav = document.querySelector('nav.nav');
  return {
    entries: [...nav.querySelectorAll(':scope > a, :scope > details > summary')].map(e => [e.textContent.trim(), box(e)]),
    open: [...nav.querySelectorAll('details[open] .nav-items a')].map(a => [a.textContent.trim(), box(a)]),
    current: [...nav.querySelectorAll('details[data-current] > summary')].map(s => s.textContent.trim()),
    width: document.documentElement.clientWidth,
  };
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_navigation_fits_one_row_and_its_menus_open_on_the_screen(console, chromium, width: int):  # noqa: F811
    """Issue 35: eleven top-level entries wrapped at 1440 px ("Who may do what" on four
    lines). Overview and three menus (Data, Security, Testing) fit one row at 1440 and 390
    px; the menu holding the page is marked; a menu's links open inside the screen."""
    _, base = console
    with open_page(chromium, width) as (page, problems):
        page.goto(base + "/groups/svc", wait_until="domcontentloaded")
        nav = page.evaluate(NAV)
        names = [name for name, _ in nav["entries"]]
        assert names == ["Overview", "Data", "Security", "Testing"], names
        tops = {round(b[1]) for _, b in nav["entries"]}
        heights = {round(b[3] - b[1]) for _, b in nav["entries"]}
        assert len(tops) == 1 and max(heights) < 40, f"the navigation wraps at {width} px: {nav['entries']}"
        assert all(b[2] <= nav["width"] for _, b in nav["entries"]), nav["entries"]
        assert nav["current"] == ["Data"]  # Consumer groups is in it
        for menu, links in (("Data", ["Topics", "Transactions", "History", "Consumer groups", "Clients"]),
                            ("Security", ["ACLs", "Users", "Who may do what"]), ("Testing", ["Faults", "Audit"])):
            page.locator("nav.nav summary", has_text=menu).click()
            opened = page.evaluate(NAV)["open"]
            assert [name for name, _ in opened] == links, opened
            assert all(0 <= b[0] and b[2] <= nav["width"] for _, b in opened), f"{menu} leaves the screen: {opened}"
            page.locator("nav.nav summary", has_text=menu).click()  # closed again
        page.locator("nav.nav summary", has_text="Security").click()
        page.get_by_role("link", name="Who may do what").click()
        page.wait_for_url(base + "/access")
        assert page.evaluate(NAV)["current"] == ["Security"]
        assert not problems, f"the browser reported errors: {problems}"
