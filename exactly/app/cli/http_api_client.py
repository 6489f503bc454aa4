"""The broker's HTTP API as the ``exactly`` commands that drive a running broker call it
(``exactly faults``, ``exactly events``, ``exactly audit``): one place for where the
broker is, its token, JSON calls, and how a refusal reads on one line.

The address is ``--http``, else the environment's ``EXACTLY_HTTP``, else the one
``make run`` serves; Kafka's tools take ``--bootstrap-server`` the same way for every
command, and a shell that exports the address once drives another broker with the
commands exactly as the docs write them."""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

DEFAULT_HTTP = "http://127.0.0.1:8080"
#: the environment variable that points the commands at another broker
HTTP_ENV = "EXACTLY_HTTP"
TIMEOUT_S = 30.0


class HttpApiError(Exception):
    """The broker refused the call (its Kafka error name and message), or could not be
    reached."""


#: the commands that call the HTTP API: they take ``--http`` and ``--token``
COMMANDS = ("audit", "events", "faults")


def options() -> argparse.ArgumentParser:
    """``--http`` and ``--token`` as a parent parser, for ``exactly`` itself and every
    (sub)command that calls the HTTP API, so they go before or after the subcommand
    alike (``exactly --http URL faults list``, ``exactly faults list --http URL``).
    Their defaults are suppressed, so a level that was not given them never overwrites
    a value given at another; :func:`api` applies the defaults."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--http", default=argparse.SUPPRESS,
                        help=f"the broker's HTTP API (default ${HTTP_ENV}, else {DEFAULT_HTTP})")
    parent.add_argument("--token", default=argparse.SUPPRESS, help="the broker's http.auth.token, when it has one")
    return parent


def given(args: argparse.Namespace) -> list[str]:
    """The HTTP API options given on the command line."""
    return [f"--{name}" for name in ("http", "token") if name in vars(args)]


def api(args: argparse.Namespace) -> "HttpApi":
    """The client for the broker the command line (or ``EXACTLY_HTTP``, else the
    default) names."""
    return HttpApi(getattr(args, "http", None) or os.environ.get(HTTP_ENV) or DEFAULT_HTTP, getattr(args, "token", ""))


class HttpApi:
    """JSON calls to one broker's HTTP API."""

    def __init__(self, base: str, token: str = "") -> None:
        self.base = base.rstrip("/")
        self.headers = {"Content-Type": "application/json", "Accept": "application/json",
                        **({"Authorization": f"Bearer {token}"} if token else {})}
        self._cluster: str | None = None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             params: dict[str, Any] | None = None, timeout: float = TIMEOUT_S) -> Any:
        """The decoded answer of ``method path`` (None for an empty one); parameters whose
        value is None are left out, a list is the parameter repeated."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        url = self.base + path + ("?" + urllib.parse.urlencode(query, doseq=True) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data, self.headers, method=method),
                                        timeout=timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as e:
            raise HttpApiError(_refusal(e)) from None
        except (urllib.error.URLError, OSError) as e:
            raise HttpApiError(f"cannot reach {self.base}: {getattr(e, 'reason', e)}") from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise HttpApiError(f"{self.base}{path} did not answer JSON: is it an Exactly broker?") from None

    def cluster(self) -> str:
        """``/v3/clusters/<the cluster id>``: every resource lives under it."""
        if self._cluster is None:
            cluster_id = self.call("GET", "/v3/clusters")["data"][0]["cluster_id"]
            self._cluster = f"/v3/clusters/{urllib.parse.quote(cluster_id, safe='')}"
        return self._cluster


def quote(name: str) -> str:
    """A topic, group or transactional id as one path segment."""
    return urllib.parse.quote(name, safe="")


def _refusal(error: urllib.error.HTTPError) -> str:
    """``ERROR_NAME: message`` from the broker's JSON error, else the HTTP status."""
    try:
        answer = json.load(error)
        return f"{answer.get('error_name') or error.code}: {answer.get('message', '')}"
    except ValueError:
        return f"HTTP {error.code} from {error.url}"
