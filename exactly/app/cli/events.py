"""``exactly events``: make an event happen now on a running broker, through its HTTP
API (``exactly/app/http/api/events.py``)::

    exactly events fence ID [--http URL]      as a new instance's InitProducerId would
    exactly events timeout ID                 as transaction.timeout.ms expiring would
    exactly events restart [--unclean]        in place, same ports; waits until it is back

``--http`` defaults to ``$EXACTLY_HTTP``, else ``http://127.0.0.1:8080``; ``--token`` is the broker's
``http.auth.token`` when it has one. Exit status 0 when the event happened; 1 with one
line on stderr when the broker refused it or could not be reached.
"""

from __future__ import annotations

import argparse
import sys
import time

from exactly.app.cli import http_api_client
from exactly.app.cli.http_api_client import HttpApi, HttpApiError, quote

#: how often ``restart`` asks whether the broker is back
POLL_S = 0.05


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """The events, each taking ``common``'s ``--http`` and ``--token`` too."""
    sub = parser.add_subparsers(dest="event", required=True)
    for name, words in (("fence", "fence the transactional id's producer, as a new instance would"),
                        ("timeout", "time the transactional id's open transaction out, as its timeout would")):
        sub.add_parser(name, help=words, parents=[common]).add_argument("transactional_id")
    restart = sub.add_parser("restart", help="restart the broker in place (same ports)", parents=[common])
    restart.add_argument("--unclean", action="store_true", help="as a SIGKILL would leave it")
    restart.add_argument("--wait", type=float, default=60.0, help="seconds to wait for it to be back (default 60)")


def _restart(api: HttpApi, clean: bool, wait_s: float) -> str:
    """Ask for the restart, then wait until the server says it is done."""
    server = api.cluster() + "/server"
    started = time.monotonic()
    before = api.call("POST", server + ":restart", {"clean": clean})["restarts"]
    while time.monotonic() - started < wait_s:
        try:
            if api.call("GET", server, timeout=5)["restarts"] > before:
                how = "cleanly" if clean else "uncleanly"
                return f"restarted {how} in {(time.monotonic() - started) * 1000:.0f} ms"
        except HttpApiError:
            pass  # stopped for the restart: not answering yet
        time.sleep(POLL_S)
    raise HttpApiError(f"the broker did not come back within {wait_s:g} s")


def run(args: argparse.Namespace) -> int:
    """The ``exactly events`` command."""
    api = http_api_client.api(args)
    try:
        if args.event == "restart":
            said = _restart(api, not args.unclean, args.wait)
        else:
            path = f"{api.cluster()}/transactions/{quote(args.transactional_id)}:{args.event}"
            txn = api.call("POST", path)
            said = (f"{args.transactional_id}: {txn['state']}, producer {txn['producer_id']} epoch "
                    f"{txn['producer_epoch']}")
    except HttpApiError as e:
        print(f"exactly events {args.event}: {e}", file=sys.stderr)
        return 1
    print(f"exactly events {args.event}: {said}", flush=True)
    return 0
