"""``--http`` and ``--token`` go before or after the subcommand on every ``exactly``
command that calls a running broker's HTTP API (``exactly/app/cli/http_api_client.py``):
``exactly faults list --http URL`` was refused while ``exactly audit ... --http URL``
was taken. Every position is parsed here for every such command, and one call per
command reaches a served broker through each position."""

from __future__ import annotations

import contextlib
import io
from typing import Iterator

import pytest

from exactly.app.cli import http_api_client
from exactly.app.cli.main import build_parser, main
from exactly.app.http import create_app
from tests.browser import served
from tests.kafka_support import KafkaBroker

pytestmark = pytest.mark.timeout(60)

URL, TOKEN = "http://127.0.0.1:1", "s3cret"
#: each command that calls the HTTP API, as words before and after where the options may go
COMMANDS = [
    (["faults"], ["list"]), (["faults"], ["clear"]), (["faults"], ["remove", "3"]),
    (["faults"], ["add", "--error", "NOT_ENOUGH_REPLICAS"]), (["faults"], ["event", "pause"]),
    (["events"], ["fence", "t"]), (["events"], ["timeout", "t"]), (["events"], ["restart"]),
    (["audit"], ["g", "--input", "in", "--output", "out"]),
]
OPTIONS = ["--http", URL, "--token", TOKEN]


def positions(head: list[str], tail: list[str], options: list[str] = OPTIONS) -> list[list[str]]:
    """The command line with the options before the command, between its words, after them
    (and split: one before, one after)."""
    sub, rest = tail[:1], tail[1:]
    return [options + head + tail, head + options + tail, head + sub + options + rest, head + tail + options,
            options[:2] + head + tail + options[2:]]


@pytest.mark.parametrize(("head", "tail"), COMMANDS, ids=[" ".join(h + t[:1]) for h, t in COMMANDS])
def test_every_position_is_taken(head: list[str], tail: list[str]) -> None:
    for argv in positions(head, tail):
        api = http_api_client.api(build_parser().parse_args(argv))
        assert (api.base, api.headers.get("Authorization")) == (URL, f"Bearer {TOKEN}"), argv


def test_the_default_is_the_environment_then_the_local_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(http_api_client.HTTP_ENV, "http://127.0.0.1:2")
    assert http_api_client.api(build_parser().parse_args(["faults", "list"])).base == "http://127.0.0.1:2"
    monkeypatch.delenv(http_api_client.HTTP_ENV)
    args = build_parser().parse_args(["faults", "list"])
    assert (http_api_client.api(args).base, "Authorization" in http_api_client.api(args).headers) == \
        (http_api_client.DEFAULT_HTTP, False)


def test_a_command_without_an_http_api_refuses_them(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["--http", URL, "db", "upgrade"])
    assert usage.value.code == 2 and "--http: only for the commands that call" in capsys.readouterr().err


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with KafkaBroker(tmp_path_factory.mktemp("cli-http") / "data") as kafka:
        kafka.broker.create_topic("in", 1)
        with served(create_app(kafka.engine, test_config={"TESTING": True}), threads=2) as address:
            yield address


def test_each_position_reaches_the_broker(url: str) -> None:
    """The broker answers each command (an audit of a group that never ran: violated, 1)."""
    for head, tail in [(["faults"], ["list"]), (["events"], ["fence", "t"]),
                       (["audit"], ["g", "--input", "in", "--output", "in"])]:
        for argv in positions(head, tail, ["--http", url]):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
            assert code in (0, 1) and "cannot reach" not in err.getvalue(), (argv, err.getvalue())
