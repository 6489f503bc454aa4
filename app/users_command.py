"""``exactly users``: SASL/SCRAM users of a running broker, over the Kafka protocol
(AlterUserScramCredentials, DescribeUserScramCredentials -- what Kafka's
``kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type
users`` sends)::

    exactly users add alice --mechanism SCRAM-SHA-256 --bootstrap-server 127.0.0.1:9092 < password.txt
    exactly users list --bootstrap-server 127.0.0.1:9092
    exactly users remove alice --mechanism SCRAM-SHA-256 --bootstrap-server 127.0.0.1:9092

The password is read from stdin (its first line) or ``--password-file``, never the
command line. As in Kafka, the client salts it and runs PBKDF2; the broker gets the
salt and the salted password and stores only the keys derived from them. On a SASL
listener (a super user's login when the authorizer is on), ``--command-config``
gives the connection's settings (``app/admin_connection.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from app import admin_connection
from app.security.scram import MIN_ITERATIONS, ScramMechanism
from app.spark.kafka_client import KafkaConnection
from storage.errors import raise_for_code

DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
MECHANISMS = [m.mechanism_name for m in ScramMechanism if m is not ScramMechanism.UNKNOWN]
#: random bytes of a new salt
SALT_BYTES = 32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["add", "list", "remove"])
    parser.add_argument("names", nargs="*", metavar="NAME", help="the user (add, remove) or users to list (all)")
    admin_connection.add_arguments(parser)
    parser.add_argument("--mechanism", choices=MECHANISMS, default="SCRAM-SHA-256",
                        help="the SCRAM mechanism of the credential (default SCRAM-SHA-256)")
    parser.add_argument("--iterations", type=int, default=MIN_ITERATIONS,
                        help=f"PBKDF2 iterations, 4096 to 16384 (default {MIN_ITERATIONS})")
    parser.add_argument("--password-file", type=Path, help="read the password from this file (default: stdin)")


def _password(args: argparse.Namespace) -> str:
    text = args.password_file.read_text() if args.password_file else sys.stdin.readline()
    password = text.splitlines()[0] if text else ""
    if not password:
        raise SystemExit("exactly users: the password is empty (give it on stdin or in --password-file)")
    return password


def _upsertion(name: str, mechanism: ScramMechanism, password: str, iterations: int) -> dict[str, Any]:
    """A credential as AlterUserScramCredentials carries it: salt and salted password."""
    salt = os.urandom(SALT_BYTES)
    digest = mechanism.mechanism_name.removeprefix("SCRAM-").replace("-", "").lower()
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    return {"name": name, "mechanism": int(mechanism), "iterations": iterations, "salt": salt,
            "salted_password": salted}


def _alter(connection: KafkaConnection, deletions: list[dict], upsertions: list[dict]) -> None:
    response = connection.request(ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": deletions, "upsertions": upsertions})
    for result in response.results:
        raise_for_code(result.error_code, f"{result.user}: {result.error_message or ''}")


def _list(connection: KafkaConnection, names: list[str]) -> None:
    response = connection.request(DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                  {"users": [{"name": n} for n in names] or None})
    raise_for_code(response.error_code, response.error_message or "")
    for result in response.results:
        raise_for_code(result.error_code, result.error_message or "")
        credentials = ",".join(f"{ScramMechanism(c.mechanism).mechanism_name}=iterations={c.iterations}"
                               for c in result.credential_infos)
        print(f"SCRAM credential configs for user-principal '{result.user}' are {credentials}")


def run(args: argparse.Namespace) -> int:
    """The ``exactly users`` command; 1 with one line on stderr when the broker refuses."""
    if args.action != "list" and len(args.names) != 1:
        raise SystemExit(f"exactly users: {args.action} takes one user name")
    mechanism = ScramMechanism.of(args.mechanism)
    password = _password(args) if args.action == "add" else ""

    def work(connection: KafkaConnection) -> None:
        if args.action == "add":
            _alter(connection, [], [_upsertion(args.names[0], mechanism, password, args.iterations)])
            print(f"exactly users: {args.names[0]} has a {mechanism.mechanism_name} credential")
        elif args.action == "remove":
            _alter(connection, [{"name": args.names[0], "mechanism": int(mechanism)}], [])
            print(f"exactly users: removed {args.names[0]}'s {mechanism.mechanism_name} credential")
        else:
            _list(connection, args.names)

    return admin_connection.run_command(args, "users", work)
