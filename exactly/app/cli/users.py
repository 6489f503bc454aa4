"""``exactly users``: SASL/SCRAM users of a running broker, over the Kafka protocol
(AlterUserScramCredentials, DescribeUserScramCredentials -- what Kafka's
``kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type
users`` sends)::

    exactly users add alice --mechanism SCRAM-SHA-256 --bootstrap-server 127.0.0.1:9092 < password.txt
    exactly users list --bootstrap-server 127.0.0.1:9092
    exactly users remove alice --mechanism SCRAM-SHA-256 --bootstrap-server 127.0.0.1:9092

With ``--data-dir`` instead, the command works on a stopped broker's directory (made
if missing), as Kafka's ``kafka-storage.sh format --add-scram`` does: how the first
super user gets a credential before the broker starts with the authorizer on::

    exactly users add admin --mechanism SCRAM-SHA-512 --data-dir data < admin-password.txt

The password is read from stdin (its first line) or ``--password-file``, never the
command line. As in Kafka, the client salts it and runs PBKDF2; the broker gets the
salt and the salted password and stores only the keys derived from them. On a SASL
listener (a super user's login when the authorizer is on), ``--command-config``
gives the connection's settings (``exactly/app/cli/admin_connection.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from exactly.app.cli import admin_connection
from exactly.app.security.scram import MIN_ITERATIONS, ScramMechanism, new_credential
from exactly.app.spark.kafka_client import KafkaConnection
from exactly.storage.errors import KafkaError, ResourceNotFoundError, raise_for_code

DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
MECHANISMS = [m.mechanism_name for m in ScramMechanism if m is not ScramMechanism.UNKNOWN]
#: random bytes of a new salt
SALT_BYTES = 32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["add", "list", "remove"])
    parser.add_argument("names", nargs="*", metavar="NAME", help="the user (add, remove) or users to list (all)")
    admin_connection.add_arguments(parser, required=False)
    parser.add_argument("--data-dir", type=Path,
                        help="a stopped broker's data directory to write to instead of --bootstrap-server "
                             "(as kafka-storage.sh format --add-scram: the first super user's credential)")
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


class _WireUsers:
    """The users of a running broker, over the Kafka protocol."""

    def __init__(self, connection: KafkaConnection) -> None:
        self.connection = connection

    def add(self, name: str, mechanism: ScramMechanism, password: str, iterations: int) -> None:
        self._alter([], [_upsertion(name, mechanism, password, iterations)])

    def remove(self, name: str, mechanism: ScramMechanism) -> None:
        self._alter([{"name": name, "mechanism": int(mechanism)}], [])

    def listing(self, names: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
        response = self.connection.request(DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                           {"users": [{"name": n} for n in names] or None})
        raise_for_code(response.error_code, response.error_message or "")
        for result in response.results:
            raise_for_code(result.error_code, result.error_message or "")
        return [(r.user, [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in response.results]

    def _alter(self, deletions: list[dict], upsertions: list[dict]) -> None:
        response = self.connection.request(ALTER_USER_SCRAM_CREDENTIALS, 0,
                                           {"deletions": deletions, "upsertions": upsertions})
        for result in response.results:
            raise_for_code(result.error_code, f"{result.user}: {result.error_message or ''}")


class _DirectoryUsers:
    """The users of a stopped broker's directory, through an engine opened on it."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def add(self, name: str, mechanism: ScramMechanism, password: str, iterations: int) -> None:
        record = new_credential(name, mechanism, password, iterations)
        self.engine.call(self.engine.access.alter_scram_credentials, [], [record])

    def remove(self, name: str, mechanism: ScramMechanism) -> None:
        if self.engine.access.scram_credentials.get(name, mechanism) is None:
            raise ResourceNotFoundError("Attempt to delete a user credential that does not exist")
        self.engine.call(self.engine.access.alter_scram_credentials, [(name, mechanism)], [])

    def listing(self, names: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
        found = []
        for user in names or self.engine.access.scram_credentials.users():
            credentials = self.engine.access.scram_credentials.of_user(user)
            if not credentials:
                raise ResourceNotFoundError(f"Attempt to describe a user credential that does not exist: {user}")
            found.append((user, [(c.mechanism, c.iterations) for c in credentials]))
        return found


def _act(args: argparse.Namespace, mechanism: ScramMechanism, password: str,
         users: _WireUsers | _DirectoryUsers) -> None:
    """What the command does, the same on either kind of broker."""
    if args.action == "add":
        users.add(args.names[0], mechanism, password, args.iterations)
        print(f"exactly users: {args.names[0]} has a {mechanism.mechanism_name} credential")
    elif args.action == "remove":
        users.remove(args.names[0], mechanism)
        print(f"exactly users: removed {args.names[0]}'s {mechanism.mechanism_name} credential")
    else:
        for user, credentials in users.listing(args.names):
            configs = ",".join(f"{ScramMechanism(m).mechanism_name}=iterations={i}" for m, i in credentials)
            print(f"SCRAM credential configs for user-principal '{user}' are {configs}")


def run(args: argparse.Namespace) -> int:
    """The ``exactly users`` command; 1 with one line on stderr when the broker refuses."""
    if args.action != "list" and len(args.names) != 1:
        raise SystemExit(f"exactly users: {args.action} takes one user name")
    if (args.bootstrap_server is None) == (args.data_dir is None):
        raise SystemExit("exactly users: give either --bootstrap-server (a running broker) or --data-dir (a stopped one)")
    mechanism = ScramMechanism.of(args.mechanism)
    password = _password(args) if args.action == "add" else ""
    if args.data_dir is None:
        return admin_connection.run_command(
            args, "users", lambda connection: _act(args, mechanism, password, _WireUsers(connection)))
    from exactly.app import Broker  # the broker's whole engine: only for a stopped broker's directory

    try:  # the engine refuses a directory a running broker holds
        with Broker(args.data_dir, **{"exactly.jobs.enable": False}) as broker:
            _act(args, mechanism, password, _DirectoryUsers(broker.engine))
    except (KafkaError, OSError) as e:
        print(f"exactly users: {getattr(e, 'name', type(e).__name__)}: {e}", file=sys.stderr)
        return 1
    return 0
