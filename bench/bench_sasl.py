#!/usr/bin/env python3
"""How long a SASL login takes, per mechanism and listener (the Security issue's "SASL
handshake time").

    .venv/bin/python bench/bench_sasl.py            # about half a minute
    .venv/bin/python bench/bench_sasl.py --quick    # for checking the script

An in-process broker serves a SASL_PLAINTEXT and a SASL_SSL listener (its generated
certificate); one user has SCRAM-SHA-256 and SCRAM-SHA-512 credentials at Kafka's
default 4096 iterations. Each login is a new TCP connection (plus the TLS handshake on
SASL_SSL), ApiVersions, SaslHandshake v1 and SaslAuthenticate v2 -- one round trip for
PLAIN, two for SCRAM -- from the project's own client (``exactly/app/cli/admin_connection.py``),
timed from connect to the last answer; the figure is the median and the 90th percentile
of the rounds. PLAIN costs the broker a PBKDF2 (the password checked against the stored
SCRAM credential, on a worker thread); SCRAM costs the client one, the broker none.
"""

from __future__ import annotations

import argparse
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exactly.app.cli.admin_connection import authenticate  # noqa: E402
from exactly.app.spark.kafka_client import KafkaConnection  # noqa: E402
from tests.sasl_support import ListenersBroker  # noqa: E402

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SOFTWARE = {"client_software_name": "bench-sasl", "client_software_version": "1.0"}


def login_ms(port: int, context: ssl.SSLContext | None, mechanism: str) -> float:
    started = time.perf_counter()
    connection = KafkaConnection("127.0.0.1", port, "bench-sasl", 30.0)
    if context is not None:
        connection.sock = context.wrap_socket(connection.sock, server_hostname="127.0.0.1")
    connection.request(18, 3, SOFTWARE)
    authenticate(connection, mechanism, "bench", "bench-secret")
    elapsed = (time.perf_counter() - started) * 1000
    connection.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="10 rounds")
    args = parser.parse_args()
    rounds = 10 if args.quick else args.rounds
    with tempfile.TemporaryDirectory() as tmp, ListenersBroker(
            Path(tmp) / "data", listeners="SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0") as kafka:
        kafka.add_user("bench", "bench-secret")
        tls = ssl.create_default_context(cafile=kafka.ca)
        print(f"{rounds} logins each, a new connection per login\n")
        print("| listener | mechanism | median | p90 |\n| --- | --- | --- | --- |")
        for listener, context in (("SASL_PLAINTEXT", None), ("SASL_SSL", tls)):
            for mechanism in MECHANISMS:
                login_ms(kafka.port(listener), context, mechanism)  # warm-up
                times = sorted(login_ms(kafka.port(listener), context, mechanism) for _ in range(rounds))
                p90 = times[int(len(times) * 0.9) - 1]
                print(f"| {listener} | {mechanism} | {statistics.median(times):.2f} ms | {p90:.2f} ms |", flush=True)


if __name__ == "__main__":
    main()
