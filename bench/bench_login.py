#!/usr/bin/env python3
"""Does a failed login take as long for a user that does not exist as for one that does?
(issue 29's login policy: "constant-time for unknown users"), on each face.

    .venv/bin/python bench/bench_login.py            # about a minute and a half
    .venv/bin/python bench/bench_login.py --quick    # for checking the script

An in-process broker (the authorizer on, Kafka's default
``connection.failed.authentication.delay.ms`` of 100 ms) serves a SASL_PLAINTEXT
listener and its HTTP face on the real server (waitress); user ``alice`` has
SCRAM-SHA-256 and SCRAM-SHA-512 credentials at Kafka's default 4096 iterations. Each
face gets a wrong password for ``alice`` and for ``nobody``, a new connection per login,
timed from connect to the answer:

* Kafka PLAIN: ApiVersions, SaslHandshake, SaslAuthenticate (the broker derives);
* Kafka SCRAM-SHA-256: the same, two SaslAuthenticate round trips (the client derives,
  with the salt and iterations the broker sends -- a dummy's for an unknown user);
* HTTP Basic: ``GET /v3/clusters`` with ``Authorization: Basic``;
* console form: ``POST /login``.

After a warm-up of each, the rounds are paired -- one login of each user, the order
alternating -- and the figure is the median of the pairs' differences (unknown minus
existing; the median, as a shared machine's stalls land in few pairs but move a mean)
with a 95% bootstrap interval: an interval holding 0 means no difference could be seen
at that resolution. One key derivation (PBKDF2, 4096 iterations) is a few milliseconds.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_authorizer_wire import confidence_interval  # noqa: E402
from exactly.app.cli.admin_connection import authenticate  # noqa: E402
from exactly.app.http import HttpSettings, create_app  # noqa: E402
from exactly.app.http.server import HttpServer  # noqa: E402
from exactly.app.spark.kafka_client import KafkaConnection  # noqa: E402
from exactly.storage.errors import KafkaError  # noqa: E402
from tests.sasl_support import ListenersBroker  # noqa: E402

CONFIG = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
          "super.users": "User:admin", "connection.failed.authentication.delay.ms": 100}
SOFTWARE = {"client_software_name": "bench-login", "client_software_version": "1.0"}
USERS = ("alice", "nobody")


def kafka_login(port: int, mechanism: str) -> Callable[[str], None]:
    def login(user: str) -> None:
        connection = KafkaConnection("127.0.0.1", port, "bench-login", 30.0)
        try:
            connection.request(18, 3, SOFTWARE)
            authenticate(connection, mechanism, user, "a-guess")
        except KafkaError:
            pass
        else:
            raise AssertionError(f"{mechanism} accepted a wrong password for {user}")
        finally:
            connection.close()
    return login


def http_login(port: int, method: str, path: str, form: bool) -> Callable[[str], None]:
    def login(user: str) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            if form:
                connection.request(method, path, urlencode({"user": user, "password": "a-guess"}),
                                   {"Content-Type": "application/x-www-form-urlencoded"})
            else:
                token = base64.b64encode(f"{user}:a-guess".encode()).decode()
                connection.request(method, path, headers={"Authorization": f"Basic {token}"})
            answer = connection.getresponse()
            answer.read()
            assert answer.status in (200, 401), f"{path}: {answer.status}"
        finally:
            connection.close()
    return login


def timed_ms(login: Callable[[str], None], user: str) -> float:
    started = time.perf_counter()
    login(user)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=80)
    parser.add_argument("--quick", action="store_true", help="5 pairs")
    args = parser.parse_args()
    pairs = 5 if args.quick else args.pairs
    with tempfile.TemporaryDirectory() as tmp, ListenersBroker(
            Path(tmp) / "data", listeners="SASL_PLAINTEXT://127.0.0.1:0", **CONFIG) as kafka:
        kafka.add_user("alice", "alice-secret")
        sock = socket.create_server(("127.0.0.1", 0))
        server = HttpServer(create_app(kafka.engine, HttpSettings()), sock, threads=4).start()
        http_port = sock.getsockname()[1]
        faces = {"Kafka PLAIN": kafka_login(kafka.port("SASL_PLAINTEXT"), "PLAIN"),
                 "Kafka SCRAM-SHA-256": kafka_login(kafka.port("SASL_PLAINTEXT"), "SCRAM-SHA-256"),
                 "HTTP Basic": http_login(http_port, "GET", "/v3/clusters", form=False),
                 "console form": http_login(http_port, "POST", "/login", form=True)}
        try:
            print(f"a wrong password for an existing user (alice) and an unknown one (nobody), a new connection "
                  f"each; a warm-up pair, then {pairs} pairs per face (order alternating); medians, and the median "
                  f"of the pairs' differences (unknown - existing) with its 95% bootstrap CI\n")
            print("| face | existing | unknown | unknown - existing | 95% CI |\n| --- | --- | --- | --- | --- |")
            for face, login in faces.items():
                for user in USERS:  # warm-up, untimed
                    login(user)
                times: dict[str, list[float]] = {user: [] for user in USERS}
                for n in range(pairs):
                    for user in USERS if n % 2 == 0 else reversed(USERS):
                        times[user].append(timed_ms(login, user))
                differences = [unknown - known for known, unknown in zip(times["alice"], times["nobody"])]
                low, high = confidence_interval(differences, statistic=statistics.median)
                print(f"| {face} | {statistics.median(times['alice']):.1f} ms | "
                      f"{statistics.median(times['nobody']):.1f} ms | {statistics.median(differences):+.2f} ms | "
                      f"[{low:+.2f}, {high:+.2f}] ms |", flush=True)
        finally:
            server.close()


if __name__ == "__main__":
    main()
