"""Chromium for the console's browser tests: Debian's Chromium driven by Playwright,
against waitress serving the app over a real broker.

One browser per test module (:func:`chromium`; launching one costs 1.5 s and half a
dozen processes), and a new context per test (:func:`open_page`, 0.4 s): its own
cookies, storage and viewport, so tests share nothing but the browser process.

``make test`` installs Chromium (``apt-get install chromium``) and the Playwright
package; without them a browser test fails and says so -- it never skips.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
from flask import Flask

from exactly.app.http.server import HttpServer
from exactly.app.listeners import bind

CHROMIUM = Path("/usr/bin/chromium")
#: Debian's Chromium as root, with nothing reaching out to the network (BROWSER-NOTES.md)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
#: how long the console may take to show a change (it refreshes every 2 s)
SEE_MS = 15_000
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: what htmx logs as errors when the page navigates away while a 2 s refresh is in
#: flight: the browser aborted the request (the test's own page.goto did), the console
#: did nothing wrong; htmx:sendError, htmx:responseError and page errors still count
NAVIGATION_ABORT = ("htmx:afterRequest", "htmx:sendAbort")


def require_playwright():
    """Playwright's ``sync_playwright``, or a failure that says how to get the browser."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make test` (it installs Debian's chromium package), "
                    f"or `sudo apt-get install chromium`", pytrace=False)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: run `make test` "
                    "(or `.venv/bin/pip install -e '.[test]'`); do not run `playwright install`",
                    pytrace=False)
    return sync_playwright


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium for the module's tests."""
    sync_playwright = require_playwright()
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def watch_errors(page: Any) -> list[str]:
    """The errors the page reports from now on (console errors and uncaught exceptions)."""
    problems: list[str] = []

    def console(message: Any) -> None:
        if message.type == "error" and not message.text.startswith(NAVIGATION_ABORT):
            problems.append(message.text)

    page.on("console", console)
    page.on("pageerror", lambda error: problems.append(str(error)))
    return problems


@contextmanager
def open_page(browser: Any, width: int, height: int = 900) -> Iterator[tuple[Any, list[str]]]:
    """A page of a new context of ``width`` x ``height``, and the errors it reports."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        yield page, watch_errors(page)
    finally:
        context.close()


@contextmanager
def served(app: Flask, threads: int = 8) -> Iterator[str]:
    """``app`` served by waitress (``threads`` threads) on 127.0.0.1 at a free port: its base URL."""
    sock = bind("127.0.0.1", 0, "HTTP")
    host, port = sock.getsockname()[:2]
    server = HttpServer(app, sock, threads=threads).start()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.close()
